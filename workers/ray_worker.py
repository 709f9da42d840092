"""The Ray actor that runs trials, one at a time, through the process launcher.

Each actor holds its share of the machine for the whole study: for a target whose trials hold
devices, ``cores_per_trial`` of them through a Ray resource (Neuron: ``neuron_cores``, for which
Ray sets ``NEURON_RT_VISIBLE_CORES``). The target puts that env var in the form its runtime reads
(:meth:`autotune.targets.base.Target.claim_devices`); the trial process inherits it.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from autotune.targets import get_target


class TrialWorker:
    """Runs trials of one target for the driver. Used as a Ray actor (see :func:`worker_class`)."""

    def __init__(self, worker_id: int, target: str) -> None:
        import ray

        self.worker_id = worker_id
        # Several Ray nodes can share a host name (or a machine): the node id tells them apart.
        self.placement: dict[str, str] = {"node": socket.gethostname(),
                                          "ray_node": ray.get_runtime_context().get_node_id(),
                                          "worker": str(worker_id), **get_target(target).claim_devices(os.environ)}

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


def worker_class(*, resources: dict[str, float] | None = None, num_cpus: float = 1.0) -> Any:
    """The Ray actor class holding ``resources`` (``{"neuron_cores": 2}``; none for CPU targets)."""
    import ray

    # max_restarts=0: a dead worker is replaced by the driver, which also retries its trial once.
    return ray.remote(num_cpus=num_cpus, resources=resources, max_restarts=0)(TrialWorker)
