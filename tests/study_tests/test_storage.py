"""A fresh study database opened by several processes at the same moment."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from autotune.study.database import sqlite_path
from autotune.study.storage import create_schema

OPENER = """
import sys, time
from pathlib import Path
import optuna
from autotune.{module} import {call}
go = Path(sys.argv[2])
Path(sys.argv[3]).touch()
while not go.exists():
    time.sleep(0.001)
{call}("sqlite:///" + sys.argv[1])
print("opened")
"""


@pytest.mark.parametrize("module, call", [("study.storage", "rdb_storage"), ("daemon.jobs", "JobStore")])
def test_processes_creating_one_database_at_once_all_open_it(tmp_path, module, call):
    # Without the lock about one pair in three lost the race on this machine ("UNIQUE constraint
    # failed: alembic_version.version_num" or "table studies already exists"); four rounds of three
    # processes, each importing first and then released together, leave little room for luck.
    script = tmp_path / "open.py"
    script.write_text(OPENER.format(module=module, call=call))
    for round_ in range(4):
        db, go = tmp_path / f"r{round_}" / "autotune.db", tmp_path / f"go{round_}"
        ready = [tmp_path / f"ready{round_}-{i}" for i in range(3)]
        procs = [subprocess.Popen([sys.executable, str(script), str(db), str(go), str(r)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in ready]
        deadline = time.monotonic() + 120
        while not all(r.exists() for r in ready) and time.monotonic() < deadline:
            time.sleep(0.01)
        go.touch()
        outs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], [err[-800:] for _, err in outs]
        assert all(out.strip() == "opened" for out, _ in outs)
        assert list(db.parent.iterdir()) == [db]  # nothing left beside the database


def test_a_lost_race_is_retried_and_anything_else_is_not(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    calls = []

    def lose_once():
        calls.append(1)
        if len(calls) == 1:
            raise sa.exc.IntegrityError("INSERT", {}, Exception("UNIQUE constraint failed: alembic_version.version_num"))
        return "schema"

    assert create_schema(url, lose_once) == "schema" and len(calls) == 2

    def broken():
        calls.append(1)
        raise sa.exc.OperationalError("SELECT", {}, Exception("file is not a database"))

    calls.clear()
    with pytest.raises(sa.exc.OperationalError):
        create_schema(url, broken)
    assert len(calls) == 1


def test_sqlite_path():
    assert sqlite_path("sqlite:////tmp/a/b.db") == Path("/tmp/a/b.db")
    assert sqlite_path("sqlite:///rel.db") == Path("rel.db")
    assert sqlite_path("sqlite:///:memory:") is None
    assert sqlite_path("postgresql://u@h/db") is None
