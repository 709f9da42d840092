"""What a trial gives back: its measurement, what it compiled, its failure and that failure's
category (which says what a failure tells of its configuration), each rank's report, and the
trial's result as the driver reads it."""

from __future__ import annotations

import enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from autotune.records.plan import KnobRoute, TrialPlan


#: Version of the measurement protocol (warm-up detection, windows, stopping rule). Results
#: measured under another version are not comparable and are never reused. 2: a compile after
#: warm-up counts the time cap again (step_clock); 3: also a compile in an earlier window than the
#: one that reached the cap; 4: an evaluation between training steps is in no window; 5: nor is
#: loading its first batch, and a window after it opens where the loop asks for its next batch;
#: 6: a run whose later phase trains with another optimizer is measured over all its phases.
PROTOCOL_VERSION = 6

#: A trial's outcome: a measurement (``ok``) or a categorised failure.
TrialStatus = Literal["ok", "failed"]


class FailureCategory(str, enum.Enum):
    """Why a trial gave no figure. What a category says of its configuration is asked of it here
    (:attr:`configuration_fault`, :attr:`tried`, :attr:`remembered`, :attr:`convicts_level`,
    :attr:`stops_study`), never by comparing its name elsewhere."""

    invalid_config = "invalid_config"
    compile_error = "compile_error"
    device_oom = "device_oom"
    host_oom = "host_oom"
    timeout = "timeout"
    crash = "crash"
    script_error = "script_error"
    numerics = "numerics"
    #: Not a property of the configuration: the cores it was given were taken.
    device_unavailable = "device_unavailable"
    #: The ranks of a multi-process trial never all met (a rank missing, a port that cannot be used).
    rendezvous = "rendezvous"
    #: Not a property of the configuration either: the script's data is not on this machine (a data
    #: set that is not where the script reads it, a download this machine cannot make). Every
    #: configuration would fail the same way, so a study stops asking for trials.
    missing_data = "missing_data"
    #: Not a property of the configuration either: a write found no space (the cache root, the trial's
    #: folder). Every configuration would fail the same way until space is freed.
    disk_full = "disk_full"

    @classmethod
    def named(cls, name: str | None) -> FailureCategory | None:
        """The category stored as ``name`` (a trial's attribute, a landscape's line), or ``None``
        where there is none or its name is one this version does not know."""
        try:
            return cls(name) if name is not None else None
        except ValueError:
            return None

    @property
    def configuration_fault(self) -> bool:
        """The failure says something of the configuration, so a search learns from it. Busy
        devices or missing data would have failed any configuration the same way."""
        return self not in _NOT_THE_CONFIGURATIONS

    @property
    def tried(self) -> bool:
        """The configuration itself was tried: the trial is one of the search's (an outlook
        counts it). An invalid one was rejected before anything ran (and is no trial of
        ``--trials`` either); busy devices or missing data stopped it before its settings mattered."""
        return self.configuration_fault and self is not FailureCategory.invalid_config

    @property
    def remembered(self) -> bool:
        """The same configuration in the same environment would fail so again: the cache root
        keeps the result and answers the configuration from it. A timeout, a crash or a host out of
        memory may be the machine's doing (what else ran), and is measured again."""
        return self in _REMEMBERED

    @property
    def convicts_level(self) -> bool:
        """The configuration itself does not compile or run: two such failures with one level of
        a parameter convict that level. A timeout, an out-of-memory or a diverging loss may come
        from the other settings."""
        return self in _CONVICTING

    @property
    def stops_study(self) -> bool:
        """Every configuration would fail the same way: the study asks for no more trials, and the
        failed one is measured first when the study continues."""
        return self in (FailureCategory.missing_data, FailureCategory.disk_full)


_NOT_THE_CONFIGURATIONS = frozenset({FailureCategory.device_unavailable, FailureCategory.missing_data,
                                     FailureCategory.disk_full})
_REMEMBERED = frozenset({FailureCategory.compile_error, FailureCategory.device_oom, FailureCategory.numerics,
                         FailureCategory.invalid_config})
_CONVICTING = frozenset({FailureCategory.compile_error, FailureCategory.crash, FailureCategory.invalid_config})


class CompileOutcome(BaseModel):
    """What a compile job did: compiled the graphs (``result``), or found them published."""

    stage: CompileStage
    #: The compile run's own result (a failure says why it did not compile); ``None`` when the
    #: graphs were published already and nothing ran.
    result: TrialResult | None = None


class TimedWindow(BaseModel):
    """One timing window of one process, on the host's monotonic clock, so that the windows of
    the ranks of a trial can be laid side by side."""

    start: float = Field(description="When it opened, seconds on the host's monotonic clock.")
    seconds: float = Field(description="How long it lasted, seconds.")
    steps: int = Field(description="Steps it timed.")
    samples: float = Field(description="Samples those steps processed.")
    compiles: int = Field(default=0, description="Graphs compiled while it ran.")
    phase: int = Field(default=0, description="The run's phase: a later phase trains with an optimizer of its own.")


class Measurement(BaseModel):
    throughput: float = Field(description="Samples/s over the steady-state windows.")
    ci95_low: float = Field(description="Low end of the 95% interval of `throughput`, samples/s.")
    ci95_high: float = Field(description="High end of the 95% interval of `throughput`, samples/s.")
    step_time_median: float = Field(description=(
        "Median seconds from one step to the next: for a loop that serves one batch per call of the model, the "
        "latency a request sees."))
    step_time_p90: float = Field(description="90th percentile of those seconds.")
    step_time_p99: float | None = Field(default=None, description=(
        "99th percentile of those seconds; null in a result from before it was recorded."))
    samples_per_step: float = Field(description="Samples of one step (its batch).")
    steps_measured: int = Field(description="Steady steps the figure covers.")
    windows: int = Field(description="Timing windows the figure covers.")
    converged: bool = Field(description="Its interval reached the protocol's width before the time cap.")
    warmup_steps: int = Field(description="Steps before the steady state (compiling, warming caches).")
    warmup_seconds: float = Field(description="Seconds of those steps.")
    pruned: bool = Field(default=False, description=(
        "Stopped early, its interval wholly below the study's bar: a real measurement, only less precise."))
    phases: int = Field(default=1, description=(
        "Phases of the run the figure covers: more than one where a later phase trains with an optimizer of "
        "its own."))
    flops_per_sample: float | None = Field(default=None, description=(
        "The model's FLOPs per sample: one call of the model, forward and, where the loop trains, backward; "
        "null where they could not be counted."))
    model_device: str | None = Field(default=None, description=(
        "The device type of the model's parameters at that call (`cpu`, `cuda`, `xla`)."))
    processes: int = Field(default=1, description=(
        "Processes of the script the figure was measured over: more than one where the script ended before "
        "enough seconds were measured and ran again."))

    @property
    def ci95_half_width(self) -> float:
        return (self.ci95_high - self.ci95_low) / 2

    @property
    def rel_half_width(self) -> float:
        """The 95% interval's half-width as a fraction of the throughput."""
        return self.ci95_half_width / self.throughput if self.throughput > 0 else float("inf")

    @property
    def seconds(self) -> float:
        """The seconds of steady steps the figure was measured over."""
        return self.steps_measured * self.samples_per_step / self.throughput if self.throughput > 0 else 0.0

    @property
    def flops_per_second(self) -> float | None:
        """The model FLOP/s achieved: its FLOPs per sample at the measured samples/s."""
        return self.flops_per_sample * self.throughput if self.flops_per_sample is not None else None


class CompileStats(BaseModel):
    graphs_compiled: int = Field(default=0, description="Graphs compiled.")
    graphs_after_warmup: int = Field(default=0, description=(
        "Graphs compiled after warm-up: more than a few is a recompilation storm."))
    compile_seconds: float | None = Field(default=None, description=(
        "Seconds the compiler took, where the backend reports them."))
    cache_hits: int | None = Field(default=None, description="The backend's compile cache hits, where it counts them.")
    cache_misses: int | None = Field(default=None, description=(
        "The backend's compile cache misses, where it counts them."))

    @property
    def recompilation_storm(self) -> bool:
        return self.graphs_after_warmup > 2


class CompileStage(BaseModel):
    """The compile job that ran ahead of a measure job (``--compile-workers``)."""

    #: Wall seconds of the compile job; 0 when the graphs were published already.
    seconds: float = 0.0
    #: Of which its compiler's own time (as a trial's ``compile.compile_seconds``), where known.
    compile_seconds: float | None = None
    #: The graphs were published by an earlier job (another configuration with the same graphs,
    #: another study, another driver): this job compiled nothing.
    published_before: bool = False
    #: Seconds the job waited for another job compiling the same graphs.
    waited_seconds: float = 0.0
    #: Where it ran (node, worker).
    placement: dict[str, str] = Field(default_factory=dict)


class Failure(BaseModel):
    """Why a trial gave no figure."""

    category: FailureCategory = Field(description="Its category.")
    reason: str = Field(description="What happened, in words.")
    exit_code: int | None = Field(default=None, description="The process's exit code, where it exited.")
    signal: str | None = Field(default=None, description="The signal that ended it (`SIGKILL`), where one did.")


class HarnessReport(BaseModel):
    """What the harness inside the trial process writes; the launcher completes it."""

    # A NaN loss is the evidence of a numerics failure: it must survive the trip through JSON.
    model_config = ConfigDict(ser_json_inf_nan="constants")

    finished: bool = Field(default=False, description="The script ran to its end or was stopped after converging.")
    stopped_early: bool = Field(default=False, description="Stopped once measured, before the script's end.")
    steps_seen: int = Field(default=0, description="Steps of the script seen, warm-up included.")
    measurement: Measurement | None = Field(default=None, description="What it measured; null where nothing.")
    compile: CompileStats = Field(default_factory=CompileStats, description="What was compiled.")
    losses: list[float] = Field(default_factory=list, description="The losses of the first training steps.")
    metrics: dict[str, float] = Field(default_factory=dict, description=(
        "The script's own figures, by name (`autotune.report()`), each in its own unit."))
    error: str | None = Field(default=None, description="`ExceptionType: message` of what ended the script.")
    failure: Failure | None = Field(default=None, description="Why it gave no figure, where it gave none.")
    exit_code: int | None = Field(default=None, description=(
        "The code of the script's own `sys.exit()` with an error code; a failure only when nothing was "
        "measured before it."))
    rank: int | None = Field(default=None, description=(
        "The rank of a multi-process trial that wrote it (`RANK`, or the spawn order); null for one process."))
    pid: int | None = Field(default=None, description="The process id.")
    windows: list[TimedWindow] = Field(default_factory=list, description=(
        "The steady-state windows behind `measurement`, for combining the ranks of a trial."))
    knobs_applied: dict[str, bool] = Field(default_factory=dict, description=(
        "Each runtime knob that needs something of the script, and whether it was found (a DataLoader for "
        "the batch size, the model for a cast)."))
    script_loader: dict[str, list[int]] = Field(default_factory=dict, description=(
        "What the script itself gave its DataLoaders for `batch_size` and `num_workers` before the "
        "configuration replaced it: each distinct value."))
    env_overrides: dict[str, str] = Field(default_factory=dict, description=(
        "The configuration's env vars that the script replaced or removed itself, each with where (`train.py:12`)."))
    notes: list[str] = Field(default_factory=list, description=(
        "What a reader should know of how the configuration was applied."))


class KnobEffect(BaseModel):
    """How one parameter of a trial reached the script, and whether the trial shows that it acted."""

    param: str
    value: Any
    routes: list[KnobRoute] = Field(default_factory=list)
    #: ``True``: the trial shows it acted; ``False``: it never reached what it changes (a warning);
    #: ``None``: applied, with no sign either way (an env var, a flag whose meaning is the script's).
    took_effect: bool | None = None
    #: What showed it, or what was missing.
    detail: str = ""


class RankResult(BaseModel):
    """What one rank of a multi-process trial measured on its own."""

    rank: int
    pid: int | None = None
    steps_seen: int = 0
    measurement: Measurement | None = None
    compile: CompileStats = Field(default_factory=CompileStats)
    failure: Failure | None = None


class TrialResult(BaseModel):
    """The outcome of one trial: a measurement or a categorised failure, never an exception."""

    model_config = ConfigDict(ser_json_inf_nan="constants")

    status: TrialStatus
    plan: TrialPlan
    #: The arguments the script ran with: the caller's, with the plan's script flags.
    script_args: list[str] = Field(default_factory=list)
    measurement: Measurement | None = None
    compile: CompileStats = Field(default_factory=CompileStats)
    losses: list[float] = Field(default_factory=list)
    metrics: dict[str, float] = Field(default_factory=dict)
    failure: Failure | None = None
    peak_host_memory_bytes: int | None = None
    wall_seconds: float = 0.0
    stopped_early: bool = False
    log_path: str | None = None
    log_tail: str = ""
    protocol_version: int = PROTOCOL_VERSION
    #: Where it ran: node, worker and the NeuronCores it held (``NEURON_RT_VISIBLE_CORES``).
    placement: dict[str, str] = Field(default_factory=dict)
    started_at: float | None = None  # epoch seconds
    ended_at: float | None = None
    #: Each rank's own figures, for a trial of several processes (its ``measurement`` is their sum).
    ranks: list[RankResult] = Field(default_factory=list)
    #: The compile job that compiled its graphs ahead of it; ``None``: it compiled them itself.
    compile_stage: CompileStage | None = None
    #: What a reader of a successful result should know (the script exited with an error code
    #: after it was measured).
    notes: list[str] = Field(default_factory=list)
    #: How each parameter reached the script and whether it took effect.
    knobs: list[KnobEffect] = Field(default_factory=list)
    #: What the script itself gave its DataLoaders (:attr:`HarnessReport.script_loader`).
    script_loader: dict[str, list[int]] = Field(default_factory=dict)

    @property
    def script_loader_values(self) -> dict[str, int]:
        """Each loader knob the script gave every one of its DataLoaders one value of, that value."""
        return {name: values[0] for name, values in self.script_loader.items() if len(values) == 1}

    @computed_field
    @property
    def warnings(self) -> list[str]:
        """The parameters that never reached what they change: the trial measured the script's own."""
        return [f"{k.param}={k.value}: {k.detail}" for k in self.knobs if k.took_effect is False]

    @property
    def idle_knobs(self) -> list[KnobEffect]:
        """The parameters this trial shows never reach the script, where the script ran: one that
        failed may have failed before it made what a knob acts on (its DataLoader), which says nothing."""
        return [k for k in self.knobs if k.took_effect is False] if self.ok else []

    @property
    def ok(self) -> bool:
        return self.status == "ok"


CompileOutcome.model_rebuild()
