"""The pools a study runs its trials on: what every pool offers (:class:`TrialPool`), and Ray
workers started when the first trial must run (:class:`LazyPool`).

A rerun whose trials are all answered from earlier results then never starts Ray.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

from autotune.execution.scheduler import WorkerPool, connect, plan_compile_placement, plan_placement
from autotune.records import CompileRequest, TrialRequest
from autotune.targets.base import Target

#: A finished job: its tag, its result as JSON (a :class:`~autotune.records.TrialResult`, or a
#: :class:`~autotune.records.CompileOutcome` for a compile job), or ``None`` with why the worker failed.
Finished = tuple[Hashable, "str | None", "str | None"]


class TrialPool(Protocol):
    """What the study's loop needs of the place its trials run: Ray workers (:class:`LazyPool`), a
    compile stage in front of them (:class:`autotune.execution.compile_stage.CompileAhead`) or a replay
    of a recorded landscape (:class:`autotune.landscapes.replay.ReplayPool`)."""

    @property
    def free(self) -> int:
        """How many more jobs can start now."""
        ...

    def submit(self, request: TrialRequest | CompileRequest, tag: Hashable) -> None:
        """Start ``request``; :meth:`wait` gives it back under ``tag``."""
        ...

    def wait(self, timeout: float) -> list[Finished]:
        """The jobs that finished, waiting at most ``timeout`` seconds for one."""
        ...

    def shutdown(self) -> None:
        ...


class LazyPool:
    """Ray workers for ``target``'s trials, placed when the first trial is submitted."""

    def __init__(self, target: Target, *, ray_address: str | None, workers: int | None, cores_per_trial: int,
                 ray_started: bool, processes_per_trial: int = 1, compiles: bool = False,
                 compile_slots: int = 0) -> None:
        self.target = target
        #: Compile workers instead of trial workers; a local Ray gets ``compile_slots`` places for them.
        self.compiles = compiles
        self.compile_slots = compile_slots
        self.ray_address = ray_address
        self.workers = workers
        self.cores_per_trial = cores_per_trial
        self.processes_per_trial = processes_per_trial
        self.ray_started = ray_started
        self.pool: WorkerPool | None = None
        #: What the placement decided that a user should know (set when the pool starts).
        self.notes: list[str] = []
        #: Threads per trial when parallel CPU trials share the machine's cores.
        self.threads: int | None = None

    def _start(self) -> WorkerPool:
        if self.pool is None:
            self.ray_started = connect(self.ray_address, self.compile_slots, self.notes) or self.ray_started
            if self.compiles:
                placement = plan_compile_placement(self.target, workers=self.workers)
            else:
                placement = plan_placement(self.target, workers=self.workers, cores_per_trial=self.cores_per_trial,
                                           processes_per_trial=self.processes_per_trial)
            self.notes.extend(placement.notes)
            self.threads = placement.threads_per_trial
            self.pool = WorkerPool(placement)
        return self.pool

    @property
    def free(self) -> int:
        return self.pool.free if self.pool is not None else 1

    def submit(self, request: TrialRequest | CompileRequest, tag: Hashable) -> None:
        pool = self._start()
        if self.threads:
            (request.trial if isinstance(request, CompileRequest) else request).plan.knobs.threads = self.threads
        pool.submit(request, tag)

    def wait(self, timeout: float) -> list[Finished]:
        return self.pool.wait(timeout) if self.pool is not None else []

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
        if self.ray_started:
            import ray

            ray.shutdown()
