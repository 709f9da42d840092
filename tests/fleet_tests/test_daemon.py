"""``autotune serve`` with its job queue and its studies on PostgreSQL, across a restart; its
password on no process's command line."""

from __future__ import annotations

import secrets
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest

from autotune.daemon.jobs import JobStore
from bench.lib.postgres import POSTGRES_PASSWORD, ThrowawayPostgres
from daemon_tests.conftest import FAST, SCRIPTS, DaemonProcess, autotune, free_port

pytestmark = pytest.mark.slow


@dataclass
class PostgresDaemon(DaemonProcess):
    database: str = ""

    @property
    def storage(self) -> str:
        return self.database


@dataclass
class StorageInEnvironment(PostgresDaemon):
    """A daemon given its storage through ``AUTOTUNE_STORAGE``, as a user keeps a password off its
    command line."""

    def argv(self) -> list[str]:
        argv = super().argv()
        at = argv.index("--storage")
        return argv[:at] + argv[at + 2:]


def test_the_daemon_keeps_its_queue_and_studies_on_postgresql(postgres_url: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the daemon's token, and the CLI's
    daemon = PostgresDaemon(home=tmp_path, port=free_port(), database=postgres_url)
    try:
        daemon.start()
        done = autotune("submit", SCRIPTS / "tiny_train.py", "--server", daemon.url, "--trials", "2", *FAST, "--wait",
                        cwd=tmp_path, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
        assert done.returncode == 0 and "succeeded" in done.stderr, done.stdout[-1500:] + done.stderr[-1500:]
        job_id = done.stdout.strip()
        with daemon.http() as client:
            assert "***@127.0.0.1" in client.get("/health").json()["storage"], "the password is not shown"
        files = [p for p in tmp_path.rglob("*") if p.is_file()]
        assert any(p.name == "result.json" for p in files), files
        for secret in (POSTGRES_PASSWORD, urllib.parse.quote(POSTGRES_PASSWORD, safe="")):
            assert not [p for p in files if secret.encode() in p.read_bytes()], "no file of the job holds the password"
        daemon.stop()
        daemon.start()  # the queue and the study live in the database, not in the daemon
        info = daemon.job(job_id)
        assert info["state"] == "succeeded" and info["done"] == 2, info
    finally:
        daemon.stop()


def test_no_process_shows_the_storage_password(postgres: ThrowawayPostgres, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """While a daemon's job runs a trial, no process of the machine has the storage's password on
    its command line, nor in its environment but the daemon's own (where its user put it)."""
    # A role of its own: another test's processes on this machine may show the session's password.
    password = f"j0b:p@ss/{secrets.token_hex(8)}%?#{{}}"
    role, database = f"tuner_{secrets.token_hex(4)}", f"secret_{secrets.token_hex(4)}"
    postgres.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
    postgres.execute(f"CREATE DATABASE {database} OWNER {role}")
    url = f"postgresql://{role}:{urllib.parse.quote(password, safe='')}@127.0.0.1:{postgres.port}/{database}"
    forms = [password.encode(), urllib.parse.quote(password, safe="").encode()]
    gate = tmp_path / "gate"  # the trial waits there until the processes are read
    gate.mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("AUTOTUNE_TEST_GATE", str(gate))
    daemon = StorageInEnvironment(home=tmp_path, port=free_port(), database=url, env={"AUTOTUNE_STORAGE": url})
    try:
        daemon.start()
        submitted = autotune("submit", SCRIPTS / "gated_train.py", "--server", daemon.url, "--trials", "1", *FAST,
                             cwd=tmp_path, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip()
        deadline = time.monotonic() + 180
        while not (held := list(gate.glob("waiting-*"))):
            assert daemon.job(job_id)["state"] not in ("failed", "succeeded"), daemon.job(job_id)
            assert time.monotonic() < deadline, "the job's trial never started"
            time.sleep(0.2)
        trial = int(held[0].name.removeprefix("waiting-"))
        job = JobStore(url).get(job_id)
        assert job is not None and job.pid is not None

        shown, read = [], set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            for part in ("cmdline", "environ"):
                if part == "environ" and daemon.proc is not None and int(entry.name) == daemon.proc.pid:
                    continue
                try:  # a process that ended meanwhile; another user's environment, unreadable to us as to others
                    text = (entry / part).read_bytes()
                except OSError:
                    continue
                read.add(int(entry.name))
                if any(form in text for form in forms):
                    shown.append(f"{entry.name} {part}: {(entry / 'cmdline').read_bytes()[:300]!r}")
        assert {job.pid, trial} <= read, "the job's process and its trial were among those read"
        assert shown == [], "no process but the daemon holds the password"

        (gate / "open").touch()
        info = daemon.wait_for(job_id, lambda j: j["state"] in ("succeeded", "failed"))
        assert info["state"] == "succeeded" and info["done"] == 1, info
        log = (tmp_path / "jobs" / job_id / "job.log").read_bytes()
        assert b"--storage=postgresql+psycopg://" in log or b"--storage=postgresql://" in log
        assert not any(form in log for form in forms)
    finally:
        daemon.stop()
        daemon.kill_jobs()
