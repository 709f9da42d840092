"""The pools a study runs its trials on when no pool factory is given: Ray workers that each hold a
trial slot, and, where the options ask for one, a compile stage in front of them on compile workers
of their own (:mod:`.compile_stage`)."""

from __future__ import annotations

from typing import Any

from autotune.execution.pool import LazyPool, TrialPool
from autotune.execution.compile_stage import Split, compile_stage, local_compile_slots
from autotune.config import RunConfig
from autotune.targets import Target


class RayPools:
    """``pool`` takes the study's configurations; ``trials``, its trial slots, measure again (the
    same pool, but for a compile stage in front of them). The pools' notes join ``notes`` once
    :meth:`done` (after ``pool`` is shut down)."""

    def __init__(self, target: Target, options: RunConfig, baseline: dict[str, Any], processes: int,
                 split: Split, notes: list[str], *, ray_started: bool) -> None:
        slots = local_compile_slots(options)
        self.trials = LazyPool(target, ray_address=options.ray_address, workers=options.workers,
                               cores_per_trial=options.cores_per_trial, processes_per_trial=processes,
                               ray_started=ray_started, compile_slots=slots)
        self.compilers = LazyPool(target, ray_address=options.ray_address, workers=options.compile_workers or None,
                                  cores_per_trial=1, ray_started=False, compiles=True, compile_slots=slots)
        self.pool: TrialPool = compile_stage(target, options, baseline, self.trials, self.compilers, split, notes)
        self.notes = notes

    def done(self) -> None:
        if self.pool is self.trials:  # no compile stage shut its compile workers down with the trials
            self.compilers.shutdown()
        self.notes.extend(self.trials.notes + self.compilers.notes)
