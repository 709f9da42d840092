"""GPUs as a target's devices: which targets hold them and how many, how a worker's GPUs reach its
trials, and what an out-of-memory on a GPU that was not the trial's alone says of its configuration.

Placement on a Ray cluster that declares GPUs is tested in ``tests/fleet_tests/test_gpus.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autotune.cache import open_cache
from autotune.errors import InvalidConfigError
from autotune.execution.scheduler import plan_placement
from autotune.machine.host import nvidia_gpus
from autotune.records import Failure, FailureCategory, TrialPlan, TrialResult
from autotune.targets import get_target
from autotune.targets.gpus import VISIBLE_DEVICES, cuda_gpus
from autotune.targets.inductor import InductorTarget


@pytest.mark.skipif(nvidia_gpus() > 0, reason="a machine with a GPU")
def test_inductor_on_a_machine_without_cuda_holds_no_device() -> None:
    target = InductorTarget()
    assert (target.device_resource, target.devices_per_trial()) == (None, 0)
    assert cuda_gpus({}) == 0 and cuda_gpus({VISIBLE_DEVICES: "0,1"}) == 0, "no driver lists a GPU"


def test_gpus_per_trial_makes_inductor_hold_gpus_and_other_targets_refuse_it() -> None:
    held = get_target("inductor", 2)
    assert (held.device_resource, held.devices_per_trial(cores_per_trial=1, processes=4)) == ("GPU", 2), \
        "a trial's GPUs, whatever its processes: every rank sees all of them"
    assert get_target("inductor", 0).device_resource is None, "0: the trials share the host"
    assert get_target("neuron").device_resource == "neuron_cores"
    with pytest.raises(InvalidConfigError, match=r"--gpus-per-trial 1: the neuron target's trials hold NeuronCores "
                                                 r"\(--cores-per-trial\), not GPUs"):
        get_target("neuron", 1)
    with pytest.raises(InvalidConfigError, match="the xla target's trials hold no GPUs"):
        get_target("xla", 1)


def test_a_worker_gives_its_trials_the_gpus_ray_placed_it_on() -> None:
    environ = {VISIBLE_DEVICES: "7"}  # what the user exported
    assert get_target("inductor", 2).claim_devices(environ, ["2", "3"]) == {VISIBLE_DEVICES: "2,3"}
    assert environ[VISIBLE_DEVICES] == "2,3"
    assert get_target("inductor", 0).claim_devices(environ, []) == {}, "no placement: nothing claimed"


def test_gpus_are_placed_one_trial_per_share_of_each_nodes_gpus() -> None:
    nodes = [{"CPU": 8.0, "GPU": 4.0}, {"CPU": 8.0, "GPU": 2.0}]
    placement = plan_placement(get_target("inductor", 2), workers=None, cores_per_trial=1, nodes=nodes)
    assert (placement.workers, placement.device_resource, placement.devices_per_worker) == (3, "GPU", 2)
    assert placement.cpus_per_worker == 0 and placement.per_node == 2
    capped = plan_placement(get_target("inductor", 1), workers=9, cores_per_trial=1, nodes=nodes)
    assert capped.workers == 6 and "hold only 6 trials of 1 GPUs" in capped.notes[0]
    none = plan_placement(get_target("inductor", 1), workers=2, cores_per_trial=1, nodes=[{"CPU": 8.0}])
    assert none.device_resource is None and "declares no GPU" in none.notes[0]


def _oom(placement: dict[str, str]) -> TrialResult:
    return TrialResult(status="failed", plan=TrialPlan(target="inductor", params={"batch_size": 512}),
                       placement=placement,
                       failure=Failure(category=FailureCategory.device_oom, reason="out of GPU memory"))


def test_an_out_of_memory_on_a_shared_gpu_is_not_the_configurations_for_good(tmp_path: Path) -> None:
    """Before, every device_oom was remembered: a trial crowded onto GPU 0 by its neighbours failed
    its configuration in every later study."""
    cache = open_cache(tmp_path)
    assert not cache.put_result("aa" * 32, _oom({"node": "n1", "worker": "1"})), "no placement of its own"
    assert cache.get_result("aa" * 32) is None
    assert cache.put_result("bb" * 32, _oom({"node": "n1", "worker": "1", VISIBLE_DEVICES: "1"})), \
        "its own GPU: the configuration's"


@pytest.mark.parametrize("args, said", [
    (["--gpus-per-trial", "-1"], "--gpus-per-trial '-1': Input should be greater than or equal to 0"),
    (["--gpus-per-trial", "two"], "--gpus-per-trial 'two': Input should be a valid integer"),
    (["--target", "neuron", "--gpus-per-trial", "1"], "the neuron target's trials hold NeuronCores"),
])
def test_a_bad_gpus_per_trial_is_one_line_and_exit_2(tmp_path: Path, args: list[str], said: str) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('never run')\n")
    done = subprocess.run([sys.executable, "-m", "autotune.cli", "run", str(script), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
