"""A real daemon: ``python -m autotune.cli serve`` on a free loopback port, with its own storage,
cache and jobs directory, spoken to over real HTTP and through the real CLI.

Each test has its own ``XDG_CONFIG_HOME``: the daemons it starts make their token there, and the
CLI it runs finds it there, as a user's would in ``~/.config/autotune``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "scripts"
#: Fast trials: the tiny MLP loop, uncompiled, no DataLoader workers (a few seconds each).
FAST = ["--target", "inductor", "--set", "mode=eager", "--set", "num_workers=0"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def autotune(*args: str | Path, cwd: Path, timeout: float = 300,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture(autouse=True)
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's ``XDG_CONFIG_HOME``, where the daemon's token file goes by default."""
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home


@dataclass
class DaemonProcess:
    """One ``autotune serve``; :meth:`start` again after a kill restarts it on the same state."""

    home: Path
    port: int
    extra: list[str] = field(default_factory=list)
    #: Variables of its environment besides the test's own.
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    token: str | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def storage(self) -> str:
        return f"sqlite:///{self.home / 'state' / 'autotune.db'}"

    @property
    def log(self) -> Path:
        return self.home / f"serve-{self.starts}.log"

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "autotune.cli", "serve", "--port", str(self.port), "--storage", self.storage,
                "--cache", str(self.home / "cache"), "--jobs-dir", str(self.home / "jobs"), *self.extra]

    def start(self, timeout: float = 90) -> DaemonProcess:
        self.starts += 1
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.argv(), cwd=self.home, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env={**os.environ, **self.env})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"autotune serve exited with {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                if self.http().get("/health").status_code in (200, 401):
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        pytest.fail(f"autotune serve did not answer within {timeout} s:\n{self.log.read_text()}")

    def own_token(self) -> str | None:
        """The daemon's token: given, or the one it made in its default file."""
        from autotune.daemon.listening import default_token_file

        if self.token is None and default_token_file().exists():
            return default_token_file().read_text().strip()
        return self.token

    def http(self, token: str | None = None) -> httpx.Client:
        """A client with ``token``, else with the daemon's own."""
        token = self.own_token() if token is None else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def kill(self) -> None:
        """SIGKILL, as a crash would: no clean-up runs."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def job(self, job_id: str) -> dict:
        with self.http() as c:
            r = c.get(f"/jobs/{job_id}")
            assert r.status_code == 200, r.text
            return r.json()

    def wait_for(self, job_id: str, predicate: Callable[[dict], bool], timeout: float = 240) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = self.job(job_id)
            if predicate(info):
                return info
            time.sleep(0.5)
        log = self.home / "jobs" / job_id / "job.log"
        pytest.fail(f"job {job_id} never got there: {json.dumps(self.job(job_id))}\n"
                    f"{log.read_text() if log.exists() else ''}")

    def kill_jobs(self) -> None:
        """Stop every job process the queue knows of: they outlive the daemon by design."""
        from autotune.daemon.jobs import JobStore
        from autotune.daemon.runner import stop_process_tree
        from autotune.storage.database import sqlite_path

        database = sqlite_path(self.storage)
        if database is not None and not database.exists():  # a daemon that never started
            return
        for job in JobStore(self.storage).find():
            if job.pid:
                stop_process_tree(job.pid, grace_s=2)


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator[Callable[..., DaemonProcess]]:
    """``start_daemon(*serve_options)``: a started daemon; stopped, with its jobs, at the end."""
    started: list[DaemonProcess] = []

    def start(*extra: str, token: str | None = None) -> DaemonProcess:
        home = tmp_path / f"daemon{len(started)}"
        (home / "state").mkdir(parents=True)
        d = DaemonProcess(home=home, port=free_port(), extra=list(extra), token=token)
        started.append(d)
        return d.start()

    yield start
    for d in started:
        d.stop()
        d.kill_jobs()
