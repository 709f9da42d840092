"""The compile stage of a study (``--compile-workers``, ``--compile-ahead``): configurations are
compiled on compile workers ahead of their measurement, so that the trial slots (NeuronCores,
GPUs, the CPU measurement slot) only measure.

The study asks Optuna for a configuration as soon as a compile worker is free and fewer than
``ahead`` configurations are compiling or compiled and waiting; the sampler knows those as
running trials. A compiled configuration waits in line for a trial slot, first compiled first
measured. A configuration whose compile fails is told to Optuna as that failure and never takes a
trial slot. Two configurations with the same graphs are compiled once: the compile worker holds a
lock per graphs and publishes them when done (:mod:`autotune.published`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.execution.pool import Finished, TrialPool
from autotune.records import CompileRequest, CompileStage, TrialRequest
from autotune.targets import Target

if TYPE_CHECKING:
    from autotune.config import RunConfig

#: A trial's request as its compile job and its measure job; ``None`` where it is not compiled ahead.
Split = Callable[[TrialRequest], "tuple[CompileRequest, TrialRequest] | None"]


def local_compile_slots(options: RunConfig) -> int:
    """Places for compile workers in a local Ray (a cluster's nodes declare their own)."""
    return 0 if options.ray_address else (options.compile_workers or options.compile_ahead or 0)


def compile_stage(target: Target, options: RunConfig, baseline: dict[str, Any], trials: TrialPool,
                  compilers: TrialPool, split: Split, notes: list[str]) -> TrialPool:
    """The study's trial slots behind a compile stage on ``compilers``, when its options ask for
    one and its target can hand compiled graphs to a later process (else a note says why not, and
    the trial slots compile as they measure)."""
    if not (options.compile_workers or options.compile_ahead):
        return trials
    if target.compile_ahead(target.plan(baseline, {}), options.platform) is None:
        notes.append(target.compile_job_note())
        return trials
    ahead = options.compile_ahead or (options.compile_workers or 1) + (options.workers or 1)
    return CompileAhead(trials, compilers, ahead, split)


def compile_job(target: Target, request: TrialRequest, *, platform: str | None, cache_root: str,
                key_of: Callable[[dict[str, str]], str]) -> tuple[CompileRequest, TrialRequest] | None:
    """``request`` split into its compile job and its measure job; ``None`` for a configuration
    that its target does not compile ahead (it compiles in its trial, as without a compile stage).
    ``key_of(env)`` names the graphs that the measure job's env vars compile."""
    split = target.compile_ahead(request.plan, platform)
    if split is None:
        return None
    job_plan, measure_plan = split
    measure = request.model_copy(update={"plan": measure_plan})
    job = request.model_copy(update={
        "plan": job_plan, "trial_dir": f"{request.trial_dir}-compile",
        "protocol": request.protocol.model_copy(update={"compile_only": True, "stop_below": None})})
    # A trial that measures on the host's CPUs stops the compile jobs on its node while it measures.
    return CompileRequest(trial=job, artifact_key=key_of(measure_plan.env), cache_root=cache_root,
                          pause_while_measuring=target.device_resource is None), measure


@dataclass
class _Waiting:
    tag: Hashable
    measure: TrialRequest
    #: ``None``: a configuration its target does not compile ahead (it compiles in its trial).
    stage: CompileStage | None


class CompileAhead:
    """The trial slots behind compile workers, as one :class:`~autotune.execution.pool.TrialPool`:
    a trial submitted here compiles on ``compilers`` first, then waits in line for one of
    ``trials``; a compile that fails comes back from :meth:`wait` as the trial's result."""

    def __init__(self, trials: TrialPool, compilers: TrialPool, ahead: int, split: Split) -> None:
        self.trials = trials
        self.compilers = compilers
        self.ahead = ahead
        self.split = split
        #: Tag -> its measure job, while its compile job runs.
        self.compiling: dict[Hashable, TrialRequest] = {}
        self.ready: list[_Waiting] = []
        #: Tag -> its compile stage, while its measure job runs.
        self.measuring: dict[Hashable, CompileStage] = {}

    @property
    def free(self) -> int:
        """How many more configurations the study should hand over now: while a compile worker
        is free and fewer than ``ahead`` are compiling or compiled and waiting."""
        return max(0, min(self.compilers.free, self.ahead - len(self.compiling) - len(self.ready)))

    def submit(self, request: TrialRequest | CompileRequest, tag: Hashable) -> None:
        if isinstance(request, CompileRequest):
            raise TypeError("a compile stage is handed trials, and makes their compile jobs itself")
        split = self.split(request)
        if split is None:  # not compiled ahead: it waits in the same line for a trial slot
            self.ready.append(_Waiting(tag, request, None))
            return
        job, measure = split
        self.compiling[tag] = measure
        self.compilers.submit(job, tag=tag)

    def wait(self, timeout: float) -> list[Finished]:
        """Compile jobs that failed, then the measure jobs that finished (each with its compile stage)."""
        done = self._compiled()
        self._start_measurements()
        for job in self.trials.wait(timeout):
            stage = self.measuring.pop(job.tag, None)
            if stage is not None and job.result is not None:
                job.result.compile_stage = stage
            done.append(job)
        return done

    def shutdown(self) -> None:
        self.trials.shutdown()
        self.compilers.shutdown()

    def _compiled(self) -> list[Finished]:
        """Compile jobs that failed, as the trial's outcome; those that compiled join the line for a trial slot."""
        failed: list[Finished] = []
        for job in self.compilers.wait(0.0):
            measure = self.compiling.pop(job.tag)
            outcome = job.compiled
            if outcome is None:
                failed.append(Finished(job.tag, error=f"the compile job failed: {job.error}"))
            elif outcome.result is not None and not outcome.result.ok:
                outcome.result.compile_stage = outcome.stage
                failed.append(Finished(job.tag, result=outcome.result))
            else:
                self.ready.append(_Waiting(job.tag, measure, outcome.stage))
        return failed

    def _start_measurements(self) -> None:
        """Hand compiled configurations to free trial slots, first compiled first."""
        while self.ready and self.trials.free:
            waiting = self.ready.pop(0)
            if waiting.stage is not None:
                self.measuring[waiting.tag] = waiting.stage
            self.trials.submit(waiting.measure, tag=waiting.tag)
