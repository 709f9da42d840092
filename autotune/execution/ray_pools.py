"""The pools a study runs its trials on when no pool factory is given: Ray workers that each hold a
trial slot, started when the first trial must run (:class:`LazyPool`: a rerun answered wholly from
earlier results never starts Ray), and, where the options ask for one, a compile stage in front of
them on compile workers of their own (:mod:`.compile_stage`)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from autotune.execution.pool import Finished, TrialPool
from autotune.execution.scheduler import connect, plan_compile_placement, plan_placement
from autotune.execution.worker_pool import WorkerPool
from autotune.records import CompileRequest, TrialRequest
from autotune.execution.compile_stage import Split, compile_stage, local_compile_slots
from autotune.config import RunConfig
from autotune.targets import Target


class LazyPool:
    """Ray workers for ``target``'s trials, placed when the first trial is submitted."""

    def __init__(self, target: Target, *, ray_address: str | None, workers: int | None, cores_per_trial: int,
                 ray_started: bool, processes_per_trial: int = 1, nodes_per_trial: int = 1, compiles: bool = False,
                 compile_slots: int = 0) -> None:
        self.target = target
        #: Compile workers instead of trial workers; a local Ray gets ``compile_slots`` places for them.
        self.compiles = compiles
        self.compile_slots = compile_slots
        self.ray_address = ray_address
        self.workers = workers
        self.cores_per_trial = cores_per_trial
        self.processes_per_trial = processes_per_trial
        self.nodes_per_trial = nodes_per_trial
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
                                           processes_per_trial=self.processes_per_trial,
                                           nodes_per_trial=self.nodes_per_trial)
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


class RayPools:
    """``pool`` takes the study's configurations; ``trials``, its trial slots, measure again (the
    same pool, but for a compile stage in front of them). The pools' notes join ``notes`` once
    :meth:`done` (after ``pool`` is shut down)."""

    def __init__(self, target: Target, options: RunConfig, baseline: dict[str, Any], processes: int,
                 split: Split, notes: list[str], *, ray_started: bool, nodes: int = 1) -> None:
        slots = local_compile_slots(options)
        self.trials = LazyPool(target, ray_address=options.ray_address, workers=options.workers,
                               cores_per_trial=options.cores_per_trial, processes_per_trial=processes,
                               nodes_per_trial=nodes, ray_started=ray_started, compile_slots=slots)
        self.compilers = LazyPool(target, ray_address=options.ray_address, workers=options.compile_workers or None,
                                  cores_per_trial=1, ray_started=False, compiles=True, compile_slots=slots)
        self.pool: TrialPool = compile_stage(target, options, baseline, self.trials, self.compilers, split, notes)
        self.notes = notes

    def done(self) -> None:
        if self.pool is self.trials:  # no compile stage shut its compile workers down with the trials
            self.compilers.shutdown()
        self.notes.extend(self.trials.notes + self.compilers.notes)
