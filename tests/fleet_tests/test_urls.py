"""Storage URLs as SQLAlchemy reads them, on a real PostgreSQL server and a SQLite file."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from autotune.errors import InvalidConfigError
from autotune.study.database import CONNECT_TIMEOUT_S, engine_url, redacted, sqlite_path
from autotune.study.storage import load_study, open_storage

TINY = str(Path(__file__).resolve().parents[1] / "scripts" / "tiny_train.py")


def test_urls_are_parsed_by_sqlalchemy() -> None:
    assert sqlite_path("sqlite:////tmp/a{1}/b.db") == Path("/tmp/a{1}/b.db")
    assert sqlite_path("sqlite:///rel.db") == Path("rel.db")
    assert sqlite_path("sqlite:///:memory:") is None
    assert sqlite_path("postgresql://u@h/db") is None
    # The fleet extra brings psycopg 3, not SQLAlchemy's default psycopg2.
    assert engine_url("postgresql://u:p%40ss@h:5433/db?sslmode=require") == \
        "postgresql+psycopg://u:p%40ss@h:5433/db?sslmode=require"
    assert redacted("postgresql://u:p%40ss@h/db") == "postgresql+psycopg://u:***@h/db"
    with pytest.raises(InvalidConfigError, match="not a database URL"):
        engine_url("autotune.db")


def test_a_study_on_postgresql_with_a_password_of_special_characters_and_a_query(postgres_url) -> None:
    # The session's server password is p@ss:w/rd{1}%?# (percent-encoded in the URL).
    url = f"{postgres_url}?application_name=autotune%7Btest%7D"
    optuna.create_study(study_name="s", storage=open_storage(url)).add_trial(optuna.trial.create_trial(value=1.0))
    assert load_study("s", url).best_value == 1.0


def test_a_sqlite_file_under_braces(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'a{1}' / 'autotune.db'}"
    optuna.create_study(study_name="s", storage=open_storage(url))
    assert (tmp_path / "a{1}" / "autotune.db").exists()
    assert load_study("s", url).study_name == "s"


def _run(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - started


def test_a_server_that_never_answers_is_a_short_error_within_seconds(tmp_path) -> None:
    with socket.socket() as silent:  # accepts connections (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        proc, seconds = _run("best", "s", "--storage", f"postgresql://u:secret@127.0.0.1:{port}/db")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) <= 2 and "cannot open storage" in proc.stderr and "secret" not in proc.stderr, proc.stderr
    assert CONNECT_TIMEOUT_S <= seconds < CONNECT_TIMEOUT_S + 15, seconds


def test_a_wrong_password_is_a_short_error(postgres_url) -> None:
    url = sa.engine.make_url(postgres_url).set(password="wrong").render_as_string(hide_password=False)
    proc, _ = _run("best", "s", "--storage", url)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) <= 2, proc.stderr
    assert "password authentication failed" in proc.stderr, proc.stderr
