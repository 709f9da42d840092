"""The NeuronCores each rank of a multi-process Neuron trial sees, by contract: what autotune puts
in a rank's environment, passed through torch-xla's own remapping under torchrun
(``torch_xla._internal.neuron_utils.remap_visible_cores``, the code a real rank runs)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

from autotune.errors import AutotuneError, InvalidConfigError
from autotune.targets.neuron import NeuronTarget
from autotune.targets.neuron.cores import ROOT_COMM_ID, VISIBLE_CORES



def _neuron_utils() -> ModuleType:
    """torch-xla's remapping module, loaded from its file: it needs only ``os`` and ``logging``,
    and importing the package would start torch-xla (seconds)."""
    spec = importlib.util.find_spec("torch_xla")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("torch-xla is not installed", allow_module_level=True)
    path = Path(list(spec.submodule_search_locations)[0]) / "_internal" / "neuron_utils.py"
    module_spec = importlib.util.spec_from_file_location("torch_xla_neuron_utils", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


neuron_utils = _neuron_utils()


def cores_seen(worker_cores: str, nproc: int, port: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The cores each local rank of a trial ends up with, on a worker Ray gave ``worker_cores``."""
    environ = {VISIBLE_CORES: worker_cores}
    target = NeuronTarget()
    target.claim_devices(environ)  # Ray's list ("2,3") as the range the runtime documents
    seen = []
    for local_rank, env in enumerate(target.rank_envs(environ, nproc, port)):
        with monkeypatch.context() as mp:
            for key, value in {**environ, **env}.items():
                mp.setenv(key, value)
            if nproc > 1:  # torch-xla remaps only under torchrun
                neuron_utils.remap_visible_cores(local_rank, nproc)
            seen.append(os.environ[VISIBLE_CORES])
    return seen


@pytest.mark.parametrize("nproc, worker, expected", [
    (1, "3", ["3"]),
    (2, "2,3", ["2", "3"]),
    (4, "4,5,6,7", ["4", "5", "6", "7"]),
])
def test_each_rank_sees_its_own_core(nproc: int, worker: str, expected: list[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert cores_seen(worker, nproc, 40001, monkeypatch) == expected


def test_two_trials_side_by_side_share_no_core_and_no_port(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two workers of one node, each holding two cores for a trial of two processes.
    first, second = cores_seen("0,1", 2, 40001, monkeypatch), cores_seen("2,3", 2, 40002, monkeypatch)
    assert first + second == ["0", "1", "2", "3"]
    ports = {NeuronTarget().rank_envs({VISIBLE_CORES: c}, 2, p)[0][ROOT_COMM_ID] for c, p in (("0-1", 40001),
                                                                                                ("2-3", 40002))}
    assert ports == {"localhost:40001", "localhost:40002"}


def test_a_rank_of_several_cores_is_refused_before_anything_starts() -> None:
    with pytest.raises(InvalidConfigError, match="--cores-per-trial 1"):
        NeuronTarget().check_processes(2, 2)
    with pytest.raises(AutotuneError, match="one each"):
        NeuronTarget().rank_envs({VISIBLE_CORES: "0-3"}, 2, 40001)
