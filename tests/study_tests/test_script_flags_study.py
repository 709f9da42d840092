"""A study whose batch size is a flag of the script's own (``arg: --batch_size`` in its space): every
trial runs the script with its value, and the best configuration comes back as the command line a
training job runs (best.json's ``script_args``, best.env's ``AUTOTUNE_SCRIPT_ARGS``)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from autotune.execution.pool import Finished
from autotune.records import MeasurementProtocol, TrialRequest, TrialResult
from autotune.space import config_key
from autotune.study.study import Study
from autotune.study.options import StudyOptions, StudyResult
from autotune.workers.launcher import TrialLimits, run_trial

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

SPACE = """
target: inductor
parameters:
  batch_size:
    type: int
    choices: [16, 64]
    default: 16
    arg: --batch_size
  mode:
    type: categorical
    choices: [eager]
    default: eager
"""


class InProcessPool:
    """Runs each trial at once through the launcher, as one Ray worker would, without Ray: busy
    until its result is collected."""

    def __init__(self, _study: Any) -> None:
        self.finished: list[Finished] = []
        self.results: list[TrialResult] = []

    @property
    def free(self) -> int:
        return 0 if self.finished else 1

    def submit(self, request: TrialRequest, tag: Any) -> None:
        result = run_trial(request.plan, request.script, request.args, trial_dir=request.trial_dir, cwd=request.cwd,
                           limits=TrialLimits(timeout_s=request.timeout_s), protocol=request.protocol,
                           seed=request.seed)
        self.results.append(result)
        self.finished.append(Finished(tag, result=result))

    def wait(self, timeout: float) -> list[Finished]:
        out, self.finished = self.finished, []
        return out

    def shutdown(self) -> None:
        pass


def tune_on(pool: InProcessPool, script: str | Path, *args: str, **options: Any) -> StudyResult:
    """:func:`autotune.tune` with its trials run on ``pool``."""
    return Study(StudyOptions.checked(script=script, args=list(args), **options), pools=lambda study: pool).run()


def test_each_trial_runs_the_script_with_its_batch_size_and_the_best_is_a_command_line(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(SPACE)
    pool = InProcessPool(None)

    result = tune_on(pool, SCRIPTS / "sliced_batches.py", "--batch_size", "8", "--epochs", "1000", trials=2,
                  target="inductor", space="space.yaml", sampler="random", seed=0, 
                  protocol=MeasurementProtocol(max_measure_seconds=1.0, max_measure_steps=400))
    ran = pool.results
    assert sorted(r.plan.params["batch_size"] for r in ran) == [16, 64], [r.failure for r in ran]
    for r in ran:
        batch = r.plan.params["batch_size"]
        assert r.ok and r.measurement is not None and r.measurement.samples_per_step == batch
        assert r.script_args == ["--batch_size", str(batch), "--epochs", "1000"]
        assert r.plan.knobs.batch_size is None and r.warnings == []
    # The configuration is the same whichever way its batch size is applied.
    assert {config_key(r.plan.params) for r in ran} == {config_key({"batch_size": b, "mode": "eager"})
                                                          for b in (16, 64)}
    best = result.best
    assert best is not None
    expected = ["--batch_size", str(best.params["batch_size"]), "--epochs", "1000"]
    assert best.script_args == expected
    out = Path(result.out_dir)
    assert json.loads((out / "best.json").read_text())["script_args"] == expected
    assert f"export AUTOTUNE_SCRIPT_ARGS={shlex.quote(shlex.join(expected))}" in (out / "best.env").read_text()


IDLE_SPACE = """
target: inductor
parameters:
  batch_size: {type: int, choices: [16, 64]}
  num_workers: {type: int, choices: [0, 2]}
  mode: {type: categorical, choices: [eager], default: eager}
"""


def test_knobs_a_trial_shows_never_reached_the_script_are_not_searched_any_more(tmp_path, monkeypatch) -> None:
    # sliced_batches.py has no DataLoader: the harness's batch size and worker count have nothing
    # to act on. Searched anyway, their values would be the script's own run under other names,
    # and the study's "best" among them noise.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(IDLE_SPACE)
    pool = InProcessPool(None)

    # --race 0: the runs counted below are the trials the sampler asked for, none measured again.
    result = tune_on(pool, SCRIPTS / "sliced_batches.py", "--epochs", "1000", trials=5, target="inductor",
                  space="space.yaml", seed=0, race=0,
                  protocol=MeasurementProtocol(max_measure_seconds=1.0, max_measure_steps=400))
    ran = pool.results
    idle = [{k.param for k in r.knobs if k.took_effect is False} for r in ran]
    assert set().union(*idle) == {"batch_size", "num_workers"}, [r.warnings for r in ran]
    for i, r in enumerate(ran):
        shown_before = set().union(*idle[:i])
        assert not shown_before & set(r.plan.params), f"trial {i} set {r.plan.params} after {shown_before} showed idle"
    assert len(ran) <= 3, "the baseline, then trials until each knob showed it never acts; then nothing is left"
    for name in ("batch_size", "num_workers"):
        assert sum(n.startswith(f"{name} never reached the script") for n in result.notes) == 1, result.notes
    assert any("space is exhausted" in n for n in result.notes), result.notes
    assert result.outlook.verdict == "exhausted", result.outlook
    assert result.best.trial == 0, "a trial whose knobs never acted measured the baseline: never the best"


LOADER_SPACE = """
target: inductor
parameters:
  batch_size: {type: int, choices: [16, 32]}
  num_workers: {type: int, choices: [0, 1]}
  mode: {type: categorical, choices: [eager], default: eager}
"""


def test_the_scripts_own_loader_values_are_measured_once(tmp_path, monkeypatch) -> None:
    # tiny_train.py gives its DataLoader batch_size 32 and no workers unless told otherwise: a
    # configuration that sets them so is its baseline's run under another name. Of the 9 ways to
    # name the two knobs, 4 are different runs.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(LOADER_SPACE)
    pool = InProcessPool(None)

    result = tune_on(pool, SCRIPTS / "tiny_train.py", "--steps", "100000", trials=9, target="inductor",
                     space="space.yaml", seed=0, race=0,
                     protocol=MeasurementProtocol(max_measure_seconds=1.0, max_measure_steps=400))
    ran = pool.results
    assert ran[0].plan.params == {"mode": "eager"} and ran[0].script_loader == {"batch_size": [32], "num_workers": [0]}
    for r in ran[1:]:
        assert r.ok, r.failure
        assert r.plan.params.get("batch_size") != 32 and r.plan.params.get("num_workers") != 0, r.plan.params
    assert len({config_key(r.plan.params) for r in ran}) == len(ran) == 4, [r.plan.params for r in ran]
    shown = [n for n in result.notes if "the script's own DataLoader" in n]
    assert shown == ["trial 0 shows the script's own DataLoader batch_size 32 and num_workers 0: a configuration "
                     "that sets them so is the same run as one that leaves them unset, and is measured once"]
    assert result.outlook.verdict == "exhausted", result.outlook


def test_only_a_trial_that_ran_shows_a_knob_never_reaches_the_script(tmp_path) -> None:
    # A script that failed may have failed before it made its DataLoader: that says nothing of
    # whether the batch size reaches it.
    import optuna

    from autotune.records import Failure, FailureCategory, KnobEffect, TrialPlan
    from autotune.search.strategy import AutotuneSampler
    from autotune.study.study import Study
    from autotune.study.options import StudyOptions

    (tmp_path / "space.yaml").write_text(IDLE_SPACE)
    study = Study(StudyOptions.checked(script=SCRIPTS / "sliced_batches.py", target="inductor",
                                       space=str(tmp_path / "space.yaml"), out=str(tmp_path / "out"),
                                       storage=f"sqlite:///{tmp_path / 'db.sqlite'}"))
    study._opened = (optuna.create_study(sampler=AutotuneSampler(study.space)), None)  # as run() opens it
    plan = TrialPlan(target="inductor", params={"batch_size": 16, "mode": "eager"})
    idle = [KnobEffect(param="batch_size", value=16, took_effect=False, detail="the script made no DataLoader")]
    failed = TrialResult(status="failed", plan=plan, knobs=idle,
                         failure=Failure(category=FailureCategory.crash, reason="died at start"))
    study._learn_from(1, failed)
    assert "batch_size" in study.space.parameters and not study.notes
    study._learn_from(2, TrialResult(status="ok", plan=plan, knobs=idle))
    assert "batch_size" not in study.space.parameters
    assert study.study.sampler.pinned == {"batch_size": None}
    assert study.notes == ["batch_size never reached the script (trial 2: the script made no DataLoader); the rest "
                           "of the study keeps the script's own value"]
