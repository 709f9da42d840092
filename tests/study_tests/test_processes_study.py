"""The process count as a knob of a study (``--set nproc_per_node=1,2``): both counts are measured
through torchrun, and the outputs say how to start the best one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune import tune
from autotune.errors import AutotuneError
from autotune.records import MeasurementProtocol

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

ONE_POINT_SPACE = """
target: inductor
parameters:
  batch_size:
    type: int
    choices: [16]
    default: 16
  mode:
    type: categorical
    choices: [eager]
    default: eager
"""


def test_the_process_count_is_searched_and_the_best_says_how_to_launch(ray_cluster, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text(ONE_POINT_SPACE)
    result = tune(SCRIPTS / "ranks_train.py", "--mode", "gloo", "--steps", "100000", trials=2, target="inductor",
                  space=str(space), sets={"nproc_per_node": "1,2"}, seed=0, workers=1,
                  protocol=MeasurementProtocol(max_measure_seconds=2.0, max_measure_steps=400))
    ran = [t for t in result.trials if t.duplicate_of is None and t.state == "COMPLETE"]
    assert sorted(t.params["nproc_per_node"] for t in ran) == [1, 2], [t.reason for t in result.trials]
    best = result.best
    assert best is not None and best.launch == f"torchrun --nproc_per_node={best.params['nproc_per_node']}"
    assert best.global_batch_size == 16 * best.params["nproc_per_node"]
    saved = json.loads((Path(result.out_dir) / "best.json").read_text())
    assert saved["launch"] == best.launch and saved["global_batch_size"] == best.global_batch_size
    assert f"export AUTOTUNE_LAUNCH='{best.launch}'" in (Path(result.out_dir) / "best.env").read_text()


def test_a_trial_larger_than_a_node_is_refused_before_it_starts(ray_cluster) -> None:
    from autotune.execution.scheduler import plan_placement
    from autotune.targets import get_target

    neuron = get_target("neuron")
    with pytest.raises(AutotuneError, match="largest node has 8"):
        plan_placement(neuron, workers=None, cores_per_trial=1, processes_per_trial=16)
    placement = plan_placement(neuron, workers=None, cores_per_trial=1, processes_per_trial=2)
    assert (placement.devices_per_worker, placement.workers) == (2, 4)  # 8 declared NeuronCores
    with pytest.raises(AutotuneError, match="CPUs of the largest node"):
        plan_placement(get_target("inductor"), workers=None, cores_per_trial=1, processes_per_trial=10_000)
