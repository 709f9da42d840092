"""What a driver spends per trial on a large study: each finished trial taken into the study's
figures once, the figures the same as read afresh from the database, and the outputs written
again at a pace that leaves the driver to its trials."""

from __future__ import annotations

import time

import optuna
import pytest

from autotune.objectives import objective
from autotune.records import Measurement, TrialPlan, TrialResult
from autotune.results import best, standings, summaries
from autotune.study import outcome
from autotune.study.options import StudyOptions, StudyProgress
from autotune.study.tell import TrialRecorder
from autotune.storage.optuna_storage import open_storage
from autotune.storage.attrs import TrialAttrs, trial_attrs, write

BASE = '{"mode": "default"}'


def result(throughput: float, losses: list[float]) -> str:
    return TrialResult(status="ok", plan=TrialPlan(target="inductor", params={}), losses=losses,
                       measurement=Measurement(throughput=throughput, ci95_low=throughput * 0.97,
                                               ci95_high=throughput * 1.03, step_time_median=0.01,
                                               step_time_p90=0.012, samples_per_step=1, steps_measured=100,
                                               windows=5, converged=True, warmup_steps=3,
                                               warmup_seconds=1.0)).model_dump_json()


def add(study: optuna.Study, key: str, throughput: float, losses: list[float] | None = None, **attrs) -> None:
    study.add_trial(optuna.trial.create_trial(
        params={}, distributions={}, values=[throughput],
        user_attrs=trial_attrs(config_key=key, result=result(throughput, losses or [1.0, 1.0]), counted=True,
                               **attrs)))


def figures(study: optuna.Study) -> tuple:
    """What the driver, the reports and ``autotune best`` read of a study."""
    found = best.best_config(study, "s")
    return ([(s.trial.number, s.runs, s.flaky) for s in standings.standings(study)],
            standings.trial_counts(study, exclude=set()), standings.baseline_value(study),
            [t.model_dump() for t in summaries.study_summaries(study)], found.model_dump() if found else None)


def test_a_study_read_as_its_trials_finish_says_what_it_says_read_afresh(tmp_path) -> None:
    """The baseline finishing after trials it judges, a re-measurement, a duplicate, a running trial:
    the driver's figures, taken in as trials finish, are those of the study opened afresh."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    study = optuna.create_study(storage=open_storage(url), study_name="s", direction="maximize")
    write(study, baseline_key=BASE, numerics_guard=True, objectives=["throughput"])
    baseline = study.ask()
    write(baseline, config_key=BASE)

    def afresh() -> tuple:
        return figures(optuna.load_study(study_name="s", storage=open_storage(url)))

    add(study, '{"mode": "a"}', 110.0)
    add(study, '{"mode": "diverged"}', 300.0, losses=[9.0, 9.0])  # best until the baseline's losses are known
    assert figures(study) == afresh()
    assert best.best_config(study, "s").trial == 2
    write(baseline, result=result(100.0, [1.0, 1.0]), counted=True)
    study.tell(baseline, [100.0])
    add(study, '{"mode": "a"}', 120.0, confirms=1, again="race")
    add(study, '{"mode": "a"}', 110.0, duplicate_of=1)
    study.ask()  # running
    assert figures(study) == afresh()
    assert best.best_config(study, "s").trial == 1
    assert standings.trial_counts(study, exclude=set()) == (5, 1)


def test_a_figure_asked_again_reads_only_the_trials_finished_since(tmp_path, monkeypatch) -> None:
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'db.sqlite'}"), study_name="s",
                                direction="maximize")
    write(study, baseline_key=BASE, numerics_guard=True, objectives=["throughput"])
    add(study, BASE, 100.0)
    for n in range(60):
        add(study, f'{{"mode": "m{n}"}}', 100.0 + n)
    progress = StudyProgress("s", "inductor", 100)
    outcome.update_progress(progress, study, running=0)
    reads = []
    of = TrialAttrs.of.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(TrialAttrs, "of", classmethod(lambda cls, t: reads.append(t.number) or of(cls, t)))
    for _ in range(3):
        outcome.update_progress(progress, study, running=0)
        standings.trial_counts(study, exclude=set())
    add(study, '{"mode": "new"}', 500.0)
    outcome.update_progress(progress, study, running=0)
    assert progress.best_value == 500.0 and progress.done == 62
    assert set(reads) <= {0, 61}, reads  # the new trial, and the baseline's runs looked up


def test_the_outputs_are_written_again_at_a_pace_and_every_trial_is_in_the_database(tmp_path) -> None:
    """Writing the outputs takes 0.3 s here: five trials told one after the other do not write them
    five times; the study database holds all five, from which the same command writes them whole.
    Once ten times that has passed, the next trial writes them."""
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'db.sqlite'}"), study_name="s",
                                direction="maximize")
    written = []
    recorder = TrialRecorder(study, StudyOptions.checked(script=__file__), None, StudyProgress("s", "inductor", 5),
                             {}, [], on_told=lambda: written.append(time.sleep(0.3)),
                             objectives=[objective("throughput")], constraints=[], usd_per_sample_second=None)
    for n in range(5):
        trial = study.ask()
        write(trial, config_key=f'{{"mode": "m{n}"}}')
        recorder.tell(trial, TrialResult.model_validate_json(result(100.0 + n, [])), None)
    assert 1 <= len(written) < 5
    assert [t.value for t in study.get_trials()] == pytest.approx([100.0, 101.0, 102.0, 103.0, 104.0])
    before = len(written)
    time.sleep(3.1)
    trial = study.ask()
    recorder.tell(trial, TrialResult.model_validate_json(result(90.0, [])), None)
    assert len(written) == before + 1
