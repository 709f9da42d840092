"""The Ray actor that runs trials, one at a time, through the process launcher.

Each actor holds its share of the machine for the whole study: for Neuron targets,
``cores_per_trial`` NeuronCores through Ray's ``neuron_cores`` resource, which makes Ray set
``NEURON_RT_VISIBLE_CORES`` for the actor; the trial process inherits it. Ray gives the cores as a
list (``"2,3"``); the Neuron runtime documents a range (``"2-3"``), so the worker rewrites it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

from autotune.errors import AutotuneError

VISIBLE_CORES = "NEURON_RT_VISIBLE_CORES"


@dataclass(frozen=True)
class NeuronCoreSlot:
    """A contiguous range of NeuronCores held by one worker."""

    first: int
    last: int

    @classmethod
    def parse(cls, text: str) -> NeuronCoreSlot:
        """``"2,3"`` (Ray), ``"2-3"`` (range) or ``"2"``; the cores must be contiguous."""
        ids: list[int] = []
        for part in text.replace(" ", "").split(","):
            if not part:
                continue
            lo, _, hi = part.partition("-")
            ids.extend(range(int(lo), int(hi or lo) + 1))
        ids = sorted(set(ids))
        if not ids:
            raise AutotuneError(f"{VISIBLE_CORES}={text!r} names no NeuronCore")
        if ids != list(range(ids[0], ids[-1] + 1)):
            raise AutotuneError(f"{VISIBLE_CORES}={text!r} is not a contiguous range of NeuronCores")
        return cls(ids[0], ids[-1])

    @property
    def range(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"

    @property
    def count(self) -> int:
        return self.last - self.first + 1


class TrialWorker:
    """Runs trials for the driver. Used as a Ray actor (see :func:`worker_class`)."""

    def __init__(self, worker_id: int) -> None:
        self.worker_id = worker_id
        self.placement: dict[str, str] = {"node": socket.gethostname(), "worker": str(worker_id)}
        cores = os.environ.get(VISIBLE_CORES)
        if cores:
            slot = NeuronCoreSlot.parse(cores)
            os.environ[VISIBLE_CORES] = slot.range
            self.placement[VISIBLE_CORES] = slot.range

    def info(self) -> dict[str, str]:
        return dict(self.placement)

    def run(self, request_json: str) -> str:
        """Run one trial: a :class:`TrialRequest` in, a :class:`TrialResult` out, both as JSON so
        that any Ray version carries them."""
        from autotune.records import TrialRequest
        from autotune.workers.launcher import TrialLimits, run_trial

        request = TrialRequest.model_validate_json(request_json)
        result = run_trial(
            request.plan, request.script, request.args, trial_dir=request.trial_dir, cwd=request.cwd,
            limits=TrialLimits(timeout_s=request.timeout_s, memory_bytes=request.memory_bytes),
            protocol=request.protocol, seed=request.seed,
        )
        result.placement = dict(self.placement)
        return result.model_dump_json()


def worker_class(*, neuron_cores: int = 0, num_cpus: float = 1.0) -> Any:
    """The Ray actor class holding ``neuron_cores`` NeuronCores (none for CPU targets)."""
    import ray

    resources = {"neuron_cores": neuron_cores} if neuron_cores else None
    # max_restarts=0: a dead worker is replaced by the driver, which also retries its trial once.
    return ray.remote(num_cpus=num_cpus, resources=resources, max_restarts=0)(TrialWorker)
