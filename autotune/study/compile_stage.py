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

from dataclasses import dataclass
from typing import Any

from autotune.records import CompileOutcome, CompileRequest, CompileStage, TrialRequest, TrialResult
from autotune.targets import Target


def local_compile_slots(options: Any) -> int:
    """Places for compile workers in a local Ray (a cluster's nodes declare their own)."""
    return 0 if options.ray_address else (options.compile_workers or options.compile_ahead or 0)


def compile_stage(target: Target, options: Any, baseline: dict[str, Any], pool: Any,
                  notes: list[str]) -> CompileAhead | None:
    """The study's compile stage on ``pool`` (compile workers), when its options ask for one and
    its target can hand compiled graphs to a later process (else a note says why not)."""
    if not (options.compile_workers or options.compile_ahead):
        return None
    if target.compile_ahead(target.plan(baseline, {}), options.platform) is None:
        notes.append(target.compile_job_note())
        return None
    return CompileAhead(pool, options.compile_ahead or (options.compile_workers or 1) + (options.workers or 1))


def compile_job(target: Target, request: TrialRequest, *, platform: str | None, cache_root: str,
                key_of: Any) -> tuple[CompileRequest, TrialRequest] | None:
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
    number: int
    measure: TrialRequest
    #: ``None``: a configuration its target does not compile ahead (it compiles in its trial).
    stage: CompileStage | None


class CompileAhead:
    """Compile jobs in flight, compiled configurations waiting for a trial slot, and what each
    measure job's compile stage was."""

    def __init__(self, pool: Any, ahead: int) -> None:
        self.pool = pool
        self.ahead = ahead
        #: Trial number -> its measure job, while its compile job runs.
        self.compiling: dict[int, TrialRequest] = {}
        self.ready: list[_Waiting] = []
        #: Trial number -> its compile stage, while its measure job runs.
        self.measuring: dict[int, CompileStage] = {}

    @property
    def room(self) -> bool:
        """Whether the study should ask for another configuration now."""
        return self.pool.free > 0 and len(self.compiling) + len(self.ready) < self.ahead

    def submit(self, number: int, job: CompileRequest, measure: TrialRequest) -> None:
        self.compiling[number] = measure
        self.pool.submit(job, tag=number)

    def queue(self, number: int, request: TrialRequest) -> None:
        """A configuration that is not compiled ahead: it waits in the same line for a trial slot."""
        self.ready.append(_Waiting(number, request, None))

    def poll(self, timeout: float = 0.0) -> list[tuple[int, str | None, str | None]]:
        """Compile jobs that failed, as ``(trial number, result_json, error)`` for the study to
        tell Optuna; those that compiled join the line for a trial slot."""
        failed: list[tuple[int, str | None, str | None]] = []
        for number, outcome_json, error in self.pool.wait(timeout):
            measure = self.compiling.pop(number)
            if outcome_json is None:
                failed.append((number, None, f"the compile job failed: {error}"))
                continue
            outcome = CompileOutcome.model_validate_json(outcome_json)
            if outcome.result is not None and not outcome.result.ok:
                outcome.result.compile_stage = outcome.stage
                failed.append((number, outcome.result.model_dump_json(), None))
            else:
                self.ready.append(_Waiting(number, measure, outcome.stage))
        return failed

    def start_measurements(self, trials: Any) -> None:
        """Hand compiled configurations to free trial slots, first compiled first."""
        while self.ready and trials.free:
            waiting = self.ready.pop(0)
            if waiting.stage is not None:
                self.measuring[waiting.number] = waiting.stage
            trials.submit(waiting.measure, tag=waiting.number)

    def measured(self, number: int, result_json: str | None) -> str | None:
        """A measure job's result, with its compile stage."""
        stage = self.measuring.pop(number, None)
        if stage is None or result_json is None:
            return result_json
        result = TrialResult.model_validate_json(result_json)
        result.compile_stage = stage
        return result.model_dump_json()
