"""The driver's copy of its studies' trials: a read of the study's trials does not read the
whole trial table again, however many studies the driver opens on the database, and sees what
other drivers wrote, in number order."""

from __future__ import annotations

from collections import Counter

import optuna
import pytest
from sqlalchemy import event

from autotune.storage.optuna_storage import open_storage, open_study

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


class Statements:
    """The statements an engine sends, by table read: whole (every trial of the study) or part (the
    trials not finished, or some by id)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.reads: Counter[str] = Counter()

    def __enter__(self) -> Statements:
        event.listen(self.engine, "before_cursor_execute", self._count)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._count)

    def _count(self, _conn, _cursor, statement: str, *_args) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM trials" in statement \
                and "WHERE trials.study_id" in statement:
            limited = any(part in statement for part in ("trials.trial_id IN", "trials.trial_id >", "trials.state IN"))
            self.reads["part" if limited else "whole"] += 1


def _finished(n: int) -> list[optuna.trial.FrozenTrial]:
    dist = optuna.distributions.IntDistribution(0, 10_000)
    return [optuna.trial.create_trial(value=float(i), params={"x": i}, distributions={"x": dist}) for i in range(n)]


def test_a_study_opened_again_in_the_driver_reads_no_trial_it_has_seen_finished(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'db'}"
    storage = open_storage(url)
    study, _ = open_study(storage, "s", ["maximize"], None, fresh=False)
    study.add_trials(_finished(300))
    assert len(study.get_trials(deepcopy=False)) == 300
    # The study again, as the driver opens it a second time (a study of its own after a change of
    # the script), and as the reports and the warm start load it: the trials are there already.
    with Statements(storage.engine) as seen:
        again = optuna.load_study(study_name="s", storage=storage)
        trials = again.get_trials(deepcopy=False)
        again.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    assert [t.number for t in trials] == list(range(300))
    assert seen.reads["whole"] == 0, f"the whole trial table was read again: {dict(seen.reads)}"


def test_trials_of_another_driver_appear_in_number_order_around_this_ones(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'db'}"
    mine, theirs = open_storage(url), open_storage(url)
    study, _ = open_study(mine, "s", ["maximize"], None, fresh=False)
    other = optuna.load_study(study_name="s", storage=theirs)
    study.add_trials(_finished(3))
    assert len(study.get_trials(deepcopy=False)) == 3
    held = [other.ask(), other.ask()]  # numbers 3 and 4, which this driver has not read
    own = study.ask()  # number 5: created here, before this driver reads 3 and 4
    assert own.number == 5
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    assert [t.number for t in running] == [3, 4, 5]
    for t in held:
        other.tell(t, 1.0)
    study.tell(own, 9.0)
    trials = study.get_trials(deepcopy=False)
    assert [t.number for t in trials] == list(range(6))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials), "another driver's tell is seen"
    assert study.best_trial.number == 5


def test_a_budget_check_reads_no_finished_trial_twice(tmp_path, monkeypatch) -> None:
    from autotune.storage import claims
    from autotune.storage.attrs import TrialAttrs, write

    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'db'}"))
    study.add_trials([optuna.trial.create_trial(value=1.0, user_attrs={"counted": i % 2 == 0}) for i in range(200)])
    running = study.ask()
    write(running, counted=False)
    assert not claims.trials_filled(study, running.number, 101), "100 of the 200 count"
    assert claims.trials_filled(study, running.number + 1, 101), "with the running one, 101"

    read: list[int] = []
    of = TrialAttrs.of
    monkeypatch.setattr(TrialAttrs, "of", classmethod(lambda cls, t: read.append(t.number) or of(t)))
    assert claims.trials_filled(study, running.number + 1, 101)
    assert read == [running.number], f"read again: {sorted(set(read) - {running.number})[:5]}..."
    study.tell(running, state=optuna.trial.TrialState.FAIL)  # not counted: room again
    assert not claims.trials_filled(study, running.number + 1, 101)
