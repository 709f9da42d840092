"""A study whose batch size is a flag of the script's own (``arg: --batch_size`` in its space): every
trial runs the script with its value, and the best configuration comes back as the command line a
training job runs (best.json's ``script_args``, best.env's ``AUTOTUNE_SCRIPT_ARGS``)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from autotune import tune
from autotune.records import MeasurementProtocol, TrialRequest, TrialResult
from autotune.space import config_key
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
    """Runs each trial at once through the launcher, as a Ray worker would, without Ray."""

    def __init__(self, _study: Any) -> None:
        self.finished: list[tuple[Any, str | None, str | None]] = []
        self.results: list[TrialResult] = []

    @property
    def free(self) -> int:
        return 1

    def submit(self, request: TrialRequest, tag: Any) -> None:
        result = run_trial(request.plan, request.script, request.args, trial_dir=request.trial_dir, cwd=request.cwd,
                           limits=TrialLimits(timeout_s=request.timeout_s), protocol=request.protocol,
                           seed=request.seed)
        self.results.append(result)
        self.finished.append((tag, result.model_dump_json(), None))

    def wait(self, timeout: float) -> list[tuple[Any, str | None, str | None]]:
        out, self.finished = self.finished, []
        return out

    def shutdown(self) -> None:
        pass


def test_each_trial_runs_the_script_with_its_batch_size_and_the_best_is_a_command_line(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(SPACE)
    pools: list[InProcessPool] = []

    def pool(study: Any) -> InProcessPool:
        pools.append(InProcessPool(study))
        return pools[-1]

    result = tune(SCRIPTS / "sliced_batches.py", "--batch_size", "8", "--epochs", "1000", trials=2,
                  target="inductor", space="space.yaml", sampler="random", seed=0, pool_factory=pool,
                  protocol=MeasurementProtocol(max_measure_seconds=1.0, max_measure_steps=400))
    ran = pools[0].results
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
