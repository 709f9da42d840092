"""A fresh study database opened by several processes at the same moment."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from autotune.storage.database import sqlite_path
from autotune.storage.optuna_storage import create_schema

OPENER = """
import sys, time
from pathlib import Path
import optuna
from autotune.{module} import {call}
folder, me, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for round_ in range(rounds):
    go = folder / f"go{{round_}}"
    (folder / f"ready{{round_}}-{{me}}").touch()
    while not go.exists():
        time.sleep(0.001)
    {call}("sqlite:///" + str(folder / f"r{{round_}}" / "autotune.db"))
    print("opened", flush=True)
"""


@pytest.mark.parametrize("module, call", [("storage.optuna_storage", "rdb_storage"), ("daemon.jobs", "JobStore")])
def test_processes_creating_one_database_at_once_all_open_it(tmp_path, module, call):
    # Without the lock about one pair in three lost the race on this machine ("UNIQUE constraint
    # failed: alembic_version.version_num" or "table studies already exists"); four rounds of three
    # processes, each round released together on a fresh database once all three have imported and
    # finished the round before, leave little room for luck.
    script = tmp_path / "open.py"
    script.write_text(OPENER.format(module=module, call=call))
    # The same three processes every round: one import each (a second or two here), not one a round.
    rounds = 4
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path), str(i), str(rounds)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    try:
        for round_ in range(rounds):
            ready = [tmp_path / f"ready{round_}-{i}" for i in range(3)]
            deadline = time.monotonic() + 120
            while not all(r.exists() for r in ready) and time.monotonic() < deadline:
                if any(p.poll() is not None for p in procs):
                    break  # one failed its round: its error is read below
                time.sleep(0.01)
            (tmp_path / f"go{round_}").touch()
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0, 0], [err[-800:] for _, err in outs]
    assert all(out.split() == ["opened"] * rounds for out, _ in outs), outs
    for round_ in range(rounds):
        db = tmp_path / f"r{round_}" / "autotune.db"
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


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # heartbeat_interval
def test_a_held_trial_stays_alive_while_its_driver_is_stalled_and_goes_stale_once_released(tmp_path):
    # The driver's loop can stall for longer than the grace period (a Ray start, a compile stage, a
    # busy machine); another driver must not fail the trial it holds meanwhile.
    import optuna

    from autotune.storage.optuna_storage import Heartbeats

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp_path}/hb.db"
    storage = optuna.storages.RDBStorage(url, heartbeat_interval=1, grace_period=2)
    study = optuna.create_study(study_name="s", storage=storage)
    other = optuna.load_study(study_name="s", storage=optuna.storages.RDBStorage(url, heartbeat_interval=1,
                                                                                   grace_period=2))
    held, dropped = study.ask(), study.ask()
    with Heartbeats(storage, interval=0.5) as beats:
        beats.hold(held._trial_id)
        beats.hold(dropped._trial_id)
        beats.release(dropped._trial_id)
        time.sleep(4)  # no beat from the loop itself: it is stalled
        optuna.storages.fail_stale_trials(other)
        states = {t.number: t.state for t in other.get_trials(deepcopy=False)}
        assert states[held.number] == optuna.trial.TrialState.RUNNING
        assert states[dropped.number] == optuna.trial.TrialState.FAIL
    time.sleep(4)  # the driver has ended: its trial goes stale like a killed driver's
    optuna.storages.fail_stale_trials(other)
    assert other.trials[held.number].state == optuna.trial.TrialState.FAIL



def test_a_driver_that_opens_the_study_while_another_creates_it_is_not_refused(tmp_path, monkeypatch):
    # Two drivers started together on one study: the second opens it between two of the first's
    # writes of what the study is. Before the target was written last, a driver that came in after
    # the target and before the objectives took the study for one that optimises something else.
    import optuna

    from autotune.study.study import Study
    from autotune.study.options import StudyOptions
    from autotune.storage.optuna_storage import open_storage

    scripts = Path(__file__).resolve().parents[1] / "scripts"

    def opens(url: str) -> None:
        """A driver opens the study, as its run() does first."""
        study = Study(StudyOptions.checked(script=scripts / "tiny_train.py", target="inductor", study="shared",
                                           out=str(tmp_path / "out"), storage=url))
        study._open_study(open_storage(url))

    original = optuna.study.Study.set_user_attr
    written: list[str] = []
    monkeypatch.setattr(optuna.study.Study, "set_user_attr",
                        lambda self, key, value: (original(self, key, value), written.append(key)))
    opens(f"sqlite:///{tmp_path / 'alone.db'}")
    assert {"target", "objectives", "metric"} <= set(written)

    for position, key in enumerate(list(written)):
        url, count = f"sqlite:///{tmp_path / f'{position}.db'}", iter(range(len(written)))

        def then_another_opens(self, key, value, url=url, count=count):
            original(self, key, value)
            if next(count, None) == position:
                opens(url)  # raises if it takes the study for another one

        monkeypatch.setattr(optuna.study.Study, "set_user_attr", then_another_opens)
        opens(url)
        assert optuna.load_study(study_name="shared", storage=url).user_attrs["objectives"] == ["throughput"], key
