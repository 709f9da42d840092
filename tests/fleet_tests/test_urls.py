"""Storage URLs as SQLAlchemy reads them, on a real PostgreSQL server and a SQLite file."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa

from autotune.errors import InvalidConfigError
from autotune.storage.database import CONNECT_TIMEOUT_S, engine_url, redacted, sqlite_path
from autotune.storage.optuna_storage import load_study, open_storage

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
    # A URL SQLAlchemy cannot read (a port that is no number) still hides its password, even one
    # with an unencoded @, and so does a password in the query.
    assert redacted("postgresql://u:se@cret@h:port/db") == "postgresql://u:***@h:port/db"
    with pytest.raises(InvalidConfigError) as refused:
        engine_url("postgresql://u:se@cret@h:port/db")
    assert "cret" not in str(refused.value) and "u:***@h:port" in str(refused.value)
    assert redacted("postgresql://h/db?sslmode=require&password=secret") == \
        "postgresql://h/db?sslmode=require&password=***"


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


EAGER = "target: inductor\nparameters:\n  mode: {type: categorical, choices: [eager], default: eager}\n"


def test_no_output_or_file_of_a_postgresql_study_shows_its_password(postgres_url, tmp_path) -> None:
    from bench.lib.postgres import POSTGRES_PASSWORD

    secrets = (POSTGRES_PASSWORD, urllib.parse.quote(POSTGRES_PASSWORD, safe=""), "rd{1}", "rd%7B1%7D")
    (tmp_path / "space.yaml").write_text(EAGER)
    base = ["--storage", postgres_url]
    shown: list[str] = []

    def cli(*args: str, code: int = 0) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == code, (args, proc.returncode, proc.stderr[-3000:])
        shown.extend([proc.stdout, proc.stderr])
        return proc

    ran = json.loads(cli("run", TINY, "--target", "inductor", "--space", "space.yaml", "--trials", "1", "--study", "s",
                         "--cache", "cache", "--out", "out", "--json", *base).stdout)
    assert ran["storage"].startswith("postgresql") and ":***@127.0.0.1" in ran["storage"], ran["storage"]
    cli("show", "s", *base, "--json")
    cli("best", "s", *base)
    cli("compare", "s", *base, "--json")
    cli("compare", "s", *base, "--csv")
    cli("compare", f"{postgres_url}#s")
    cli("report", "s", *base, "--out", "report")
    cli("best", "nowhere", *base, code=2)
    cli("run", TINY, "--target", "inductor", "--storage", postgres_url.replace("@127.0.0.1:", "@127.0.0.1:port"),
        code=2)
    dashboard = subprocess.Popen([sys.executable, "-m", "autotune.cli", "dashboard", *base, "--port", "0",
                                  "--no-notes"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        shown.append(dashboard.stdout.readline())
        assert shown[-1].startswith("optuna-dashboard: http://127.0.0.1:"), shown[-1]
    finally:
        dashboard.terminate()
        shown.append(dashboard.communicate(timeout=30)[1])
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) > 5, files
    for secret in secrets:
        for text in shown:
            assert secret not in text, (secret, text[-2000:])
        for path in files:
            assert secret.encode() not in path.read_bytes(), (secret, path)
