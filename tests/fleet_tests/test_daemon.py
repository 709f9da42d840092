"""``autotune serve`` with its job queue and its studies on PostgreSQL, across a restart."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest

from daemon_tests.conftest import FAST, SCRIPTS, DaemonProcess, autotune, free_port
from bench.lib.postgres import POSTGRES_PASSWORD

pytestmark = pytest.mark.slow


@dataclass
class PostgresDaemon(DaemonProcess):
    database: str = ""

    @property
    def storage(self) -> str:
        return self.database


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
