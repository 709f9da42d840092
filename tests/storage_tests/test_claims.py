"""Claims: one trial measures a configuration, whichever driver asks first; a claim passes on only
from a trial that cannot measure it any more."""

from __future__ import annotations

import hashlib
import time

import optuna
import pytest

from autotune.storage.claims import Claims, claims_table, trials_filled
from autotune.storage.optuna_storage import Requeue, open_storage, rdb_storage
from autotune.storage.optuna_versions import stale_trial_callback
from autotune.storage.attrs import TrialAttrs, write


def _running(study, key: str):
    trial = study.ask()
    write(trial, config_key=key)
    return trial


def test_a_configuration_is_measured_by_the_trial_that_claimed_it_first(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'db'}"
    storage = open_storage(url)
    study = optuna.create_study(study_name="s", storage=storage)
    claims = Claims(storage, study, url)
    first, second = _running(study, "A"), _running(study, "A")
    assert claims.holder("A", first.number) is None, "the first claim wins"
    assert claims.holder("A", second.number).number == first.number, "the second is told who measures it"
    assert claims.holder("A", first.number) is None, "claiming again is harmless"

    study.tell(first, state=optuna.trial.TrialState.FAIL)  # its driver was killed: never counted
    retry = _running(study, "A")
    assert claims.holder("A", retry.number) is None, "the claim passes to the trial that runs it again"
    assert claims.holder("A", second.number).number == retry.number

    stale = _running(study, "B")  # a claim on "C" by a trial that measures something else: stale
    assert claims.holder("B", stale.number) is None
    other = _running(study, "C")
    with claims.engine.begin() as c:
        c.execute(claims_table.insert().values(study_id=claims.study_id, trial_number=stale.number,
                                               config_digest=hashlib.sha256(b"C").hexdigest()))
    assert claims.holder("C", other.number) is None


def test_trials_beyond_the_budget_are_not_run(tmp_path) -> None:
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'db'}"))
    trials = [_running(study, str(i)) for i in range(3)]
    assert not trials_filled(study, trials[1].number, 2)
    assert trials_filled(study, trials[2].number, 2), "two running before it fill a budget of two"
    study.tell(trials[0], state=optuna.trial.TrialState.FAIL)  # not counted: room again
    assert not trials_filled(study, trials[2].number, 2)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # heartbeat_interval
def test_a_trial_killed_after_writing_its_result_and_before_telling_it_is_measured_again(tmp_path) -> None:
    # A driver writes ``counted`` and the result, then tells Optuna; killed between the two, its
    # trial stays running until another driver fails it for lost and queues it again.
    url = f"sqlite:///{tmp_path / 'db'}"
    storage = rdb_storage(url, heartbeat_interval=1, grace_period=1,
                          **stale_trial_callback(Requeue(max_retry=2)))
    study = optuna.create_study(study_name="s", storage=storage)
    claims = Claims(storage, study, url)
    lost = _running(study, "A")
    assert claims.holder("A", lost.number) is None
    write(lost, result_key="k", counted=True, result="{}")
    storage.record_heartbeat(lost._trial_id)
    time.sleep(2.5)
    optuna.storages.fail_stale_trials(study)

    frozen = study.trials[lost.number]
    assert frozen.state == optuna.trial.TrialState.FAIL and frozen.user_attrs["counted"]
    assert not TrialAttrs.of(frozen).counted, "never told: it does not count"
    assert not trials_filled(study, lost.number + 1, 1), "nor fill the budget"
    queued = study.trials[-1]
    assert queued.state == optuna.trial.TrialState.WAITING
    assert queued.user_attrs == {"config_key": "A", "result_key": "k"}, "the lost one's measurement is not copied"
    retry = study.ask()
    assert retry.number == queued.number
    assert claims.holder("A", retry.number) is None, "the claim passes to the trial that measures it again"

    # A failure its driver told (its category written before) counts as it did.
    told = _running(study, "B")
    write(told, counted=True, category="crash", reason="the worker failed")
    study.tell(told, state=optuna.trial.TrialState.FAIL)
    assert TrialAttrs.of(study.trials[told.number]).counted
