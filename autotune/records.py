"""The plain records that cross process boundaries.

A trial's plan goes from the driver to the trial process as JSON, and its result comes back the
same way; nothing else is shared. Every record is a pydantic model so that both ends validate it.
A record that a user reads in an output file (best.json, a trial's report.json) describes each field
(``Field(description=...)``): docs/reference/outputs.md and best.json's JSON Schema are written from them.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

#: Version of the measurement protocol (warm-up detection, windows, stopping rule). Results
#: measured under another version are not comparable and are never reused. 2: a compile after
#: warm-up counts the time cap again (step_clock); 3: also a compile in an earlier window than the
#: one that reached the cap; 4: an evaluation between training steps is in no window; 5: nor is
#: loading its first batch, and a window after it opens where the loop asks for its next batch;
#: 6: a run whose later phase trains with another optimizer is measured over all its phases.
PROTOCOL_VERSION = 6
#: The parameter of a configuration that is its process count (torchrun's ``--nproc_per_node``).
PROCESSES_PARAM = "nproc_per_node"
#: The parameter that is the batch of one step of one process: a trial checks it against the
#: samples per step it measured where it reaches the script as a flag of the script's own.
BATCH_SIZE_PARAM = "batch_size"


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


class CompileSpec(BaseModel):
    """How the harness compiles the user's model (inductor, openxla or neuron backend)."""

    backend: str = Field(description="`torch.compile`'s backend (`inductor`, `openxla`, `eager`: no compile).")
    mode: str | None = Field(default=None, description="Its `mode` (`default`, `reduce-overhead`, `max-autotune`).")
    fullgraph: bool = Field(default=False, description="Its `fullgraph`.")
    dynamic: bool | None = Field(default=None, description="Its `dynamic`.")
    options: dict[str, Any] = Field(default_factory=dict, description="Its `options`: the backend's settings.")


class TraceSpec(BaseModel):
    """``torch_neuronx.trace`` as a trial applies it: the traced model is what serves requests, and
    the compiler settings of the plan's flags variable replace the same settings of the script's
    own ``compiler_args`` (trace reads no ``NEURON_CC_FLAGS``)."""

    cache_dir: str | None = Field(default=None, description=(
        "Where traced models are kept, keyed by model, example inputs, compiler arguments and versions, so "
        "that a second trial of the same loads it instead of compiling it again."))
    data_parallel: bool | None = Field(default=None, description=(
        "`torch_neuronx.DataParallel` over the process's NeuronCores; null keeps the script's own choice."))
    dynamic_batch: bool | None = Field(default=None, description=(
        "DataParallel's dynamic batching; null keeps the script's own choice."))


class RuntimeKnobs(BaseModel):
    """What the harness changes inside the user's process. ``None`` keeps the script's own value."""

    batch_size: int | None = Field(default=None, description="The DataLoader's batch size, of each process.")
    num_workers: int | None = Field(default=None, description="The DataLoader's worker processes.")
    batches_per_execution: int | None = Field(default=None, description=(
        "The device loader's `batches_per_execution` (torch-xla's `MpDeviceLoader`)."))
    compile: CompileSpec | None = Field(default=None, description=(
        "Compile the user's model with these options; backend `eager` undoes the script's own `torch.compile`."))
    autocast_dtype: str | None = Field(default=None, description=(
        "Run the model's forward under `torch.autocast` of this dtype (`bfloat16`)."))
    autocast_device: str | None = Field(default=None, description=(
        "The device type of that autocast (`cpu`, `cuda`, `xla`)."))
    model_dtype: str | None = Field(default=None, description=(
        "Cast the model's parameters (and its floating inputs) to this dtype."))
    lazy_device: bool = Field(default=False, description=(
        "The device executes lazily (XLA): a trial waits for it at the edges of a timing window."))
    threads: int | None = Field(default=None, description=(
        "Torch intra-op threads of a trial (parallel trials on one CPU must not oversubscribe it)."))
    trace: TraceSpec | None = Field(default=None, description=(
        "`torch_neuronx.trace` calls of the script take the configuration's compiler settings."))


#: What the harness changes in the script for each runtime knob, and what a script that gives it
#: nothing to change did not do (``None``: it always can).
_MODEL = "called no module with parameters (the model)"
INTERCEPTIONS: dict[str, tuple[str, str | None]] = {
    # A DataLoader given a batch_sampler of its own batches its data itself: no batch_size to set.
    "batch_size": ("the DataLoader's batch_size", "made no DataLoader (or batches with a batch_sampler of its own)"),
    "num_workers": ("the DataLoader's num_workers", "made no DataLoader"),
    "batches_per_execution": ("the device loader's batches_per_execution", "made no ParallelLoader or MpDeviceLoader"),
    "compile": ("torch.compile of the model", _MODEL),
    "autocast_dtype": ("autocast around the model's forward", _MODEL),
    "autocast_device": ("autocast around the model's forward", _MODEL),
    "model_dtype": ("the model's parameters cast", _MODEL),
    "lazy_device": ("timing windows that wait for a lazy device", None),
    "threads": ("torch's intra-op threads", None),
    # Every plan of Neuron's XLA path has it, and a training loop there never traces: nothing is
    # missing where it finds no trace().
    "trace": ("DataParallel and dynamic batching of the traced model", None),
}
#: The runtime knobs whose value is the library's own default: set to it, a knob changes nothing,
#: so a script that gives it nothing to act on (a loop that moves its batches to the device itself,
#: with no ``MpDeviceLoader``) still ran the configuration it names.
NEUTRAL_KNOB_VALUES: dict[str, Any] = {"batches_per_execution": 1}


class ScriptFlag(BaseModel):
    """A parameter given to the script as a flag of its own command line (``--batch_size 128``).

    A bool parameter is a switch, as argparse's ``store_true`` reads one: the flag alone when
    true, no flag when false.
    """

    param: str = Field(description="The parameter.")
    flag: str = Field(description="The script's flag (`--batch_size`).")
    value: str | None = Field(default=None, description="The text after the flag; null for a switch.")
    present: bool = Field(default=True, description="False: a switch that is off, taken out of the script's arguments.")

    @classmethod
    def of(cls, param: str, flag: str, value: Any) -> ScriptFlag:
        if isinstance(value, bool):
            return cls(param=param, flag=flag, present=value)
        return cls(param=param, flag=flag, value=str(value))

    def describe(self) -> str:
        """``--batch_size 128``, ``--amp``, ``without --amp``."""
        if not self.present:
            return f"without {self.flag}"
        return self.flag if self.value is None else f"{self.flag} {self.value}"

    def apply(self, args: list[str]) -> list[str]:
        """``args`` with this flag: where they hold it already (``--batch_size 32``,
        ``--batch_size=32``, ``-b32``) its value is replaced in the form they wrote it, else it is
        added at their end. What follows a ``--`` is the script's positional arguments, left as it is."""
        end = args.index("--") if "--" in args else len(args)
        head, tail = list(args[:end]), list(args[end:])
        alone = [self.flag] if self.value is None else [self.flag, self.value]
        attached = len(self.flag) == 2 and self.flag[1] != "-" and self.value is not None  # -b32
        out: list[str] = []
        found = False
        i = 0
        while i < len(head):
            token = head[i]
            i += 1
            if token == self.flag:
                if self.value is not None and i < len(head):
                    i += 1  # its old value
                written = alone
            elif token.startswith(self.flag + "="):
                written = [self.flag if self.value is None else f"{self.flag}={self.value}"]
            elif attached and token.startswith(self.flag):
                written = [f"{self.flag}{self.value}"]
            else:
                out.append(token)
                continue
            found = True
            if self.present:
                out += written
        if not found and self.present:
            out += alone
        return out + tail


class KnobRoute(BaseModel):
    """One way a parameter reaches the script."""

    kind: Literal["env var", "compiler flag", "script argument", "interception", "launch", "target"] = Field(
        description="How it reaches the script.")
    detail: str = Field(description=(
        "What it sets: the env var, the flag as given, what the harness changes, the launch command."))
    knobs: list[str] = Field(default_factory=list, description=(
        "For an interception, the runtime knobs it sets, by their names in `knobs`."))


class TrialPlan(BaseModel):
    """One configuration as applied: the canonical parameters and what they turn into."""

    target: str
    params: dict[str, Any]
    env: dict[str, str] = Field(default_factory=dict)
    #: Name of the env var that carries the compiler flags (``NEURON_CC_FLAGS``, ``XLA_FLAGS``), if any.
    flags_env: str | None = None
    knobs: RuntimeKnobs = Field(default_factory=RuntimeKnobs)
    notes: list[str] = Field(default_factory=list)
    #: Processes of the trial: above 1 it is started through torch's elastic launcher (torchrun),
    #: one rank per process, on one node; the knobs (batch size included) apply to each rank.
    nproc_per_node: int = Field(default=1, ge=1)
    #: A command the trial's command line runs under (a compile job on Neuron runs under
    #: ``neuron_parallel_compile``); empty for a plain trial.
    wrapper: list[str] = Field(default_factory=list)
    #: Parameters given to the script as flags of its own; the launcher runs it with
    #: :meth:`script_args`.
    script_flags: list[ScriptFlag] = Field(default_factory=list)
    #: How each parameter reaches the script, as the driver planned it; an empty list: its value is
    #: the script's own, nothing to apply. A plan made without them has none.
    routes: dict[str, list[KnobRoute]] = Field(default_factory=dict)

    def script_args(self, args: list[str]) -> list[str]:
        """The script's arguments as this plan runs it: ``args`` with its :attr:`script_flags`."""
        out = list(args)
        for flag in self.script_flags:
            out = flag.apply(out)
        return out

    def model_post_init(self, _context: Any) -> None:
        if self.params.get(PROCESSES_PARAM) is not None and self.nproc_per_node == 1:
            self.nproc_per_node = int(self.params[PROCESSES_PARAM])

    @property
    def launch(self) -> str | None:
        """How a training job starts the script as it was measured, where it is not plain ``python``:
        through torchrun when the configuration names a process count, even one (a script written
        for torchrun needs its env vars)."""
        if self.nproc_per_node > 1 or PROCESSES_PARAM in self.params:
            return f"torchrun --nproc_per_node={self.nproc_per_node}"
        return None

    @property
    def compiler_flags(self) -> str | None:
        return self.env.get(self.flags_env) if self.flags_env else None


class MeasurementProtocol(BaseModel):
    """When a trial's estimate is good enough to stop the user's loop."""

    version: int = PROTOCOL_VERSION
    #: Stop once the 95% CI half-width is under this fraction of the mean.
    rel_ci: float = 0.02
    min_windows: int = 5
    #: A window lasts at least this long, so that timer and sync overheads stay negligible.
    min_window_seconds: float = 0.25
    max_measure_steps: int = 1000
    max_measure_seconds: float = 30.0
    #: Measure at least this many seconds of steady windows, however soon the interval is narrow:
    #: on a host whose runs vary from one to the next (a neighbour that takes a core for a few
    #: seconds at a time), a run that short reads whichever second it fell in. Set by the study
    #: from the between-run noise measured here (:func:`autotune.measurement.noise.measure_seconds`).
    min_measure_seconds: float = 0.0
    #: The between-run spread measured here so far (:class:`autotune.measurement.noise.RunNoise`: the
    #: squared deviations of runs' log figures from their configuration's mean, and their degrees of
    #: freedom). A run made of several processes (:mod:`autotune.workers.run_parts`) weighs its
    #: processes' spread with it, not on their own one or two degrees of freedom. Set by the study.
    noise_squares: float = 0.0
    noise_df: int = 0
    #: Warm-up ends after this many consecutive steps without a new compile.
    quiet_steps: int = 2
    #: Losses recorded from the first training steps.
    losses_recorded: int = 10
    #: Let the script run to its end instead of stopping it once the estimate has converged.
    run_to_end: bool = False
    #: Stop measuring once the 95% interval's upper end is below this throughput (samples/s):
    #: the trial cannot come near the study's best. Set per trial by the study; None: never.
    stop_below: float | None = None
    #: A compile job: run the script until its warm-up has compiled every graph, then stop
    #: without measuring (the graphs are in the target's compile cache for the measure job).
    compile_only: bool = False


class TrialRequest(BaseModel):
    """One trial as the driver hands it to a worker: what crosses the Ray boundary (as JSON)."""

    plan: TrialPlan
    script: str
    args: list[str] = Field(default_factory=list)
    #: The working directory of the trial process (the driver's, so relative paths mean the same).
    cwd: str | None = None
    trial_dir: str
    #: Hard timeout of the trial process tree, seconds.
    timeout_s: float
    #: Host-memory limit of the trial's process tree; ``None``: 80% of the worker's machine.
    memory_bytes: int | None = None
    protocol: MeasurementProtocol = Field(default_factory=MeasurementProtocol)
    seed: int = 0


class CompileRequest(BaseModel):
    """A compile job (``--compile-workers``) as the driver hands it to a compile worker."""

    trial: TrialRequest
    #: Names the configuration's graphs in the cache root's manifests and locks
    #: (:mod:`autotune.published`): the same for every configuration that compiles the same graphs.
    artifact_key: str
    cache_root: str
    #: Stop compiling while a measurement runs on this node (trials that measure on the host's CPUs).
    pause_while_measuring: bool = False


class CompileOutcome(BaseModel):
    """What a compile job did: compiled the graphs (``result``), or found them published."""

    stage: CompileStage
    #: The compile run's own result (a failure says why it did not compile); ``None`` when the
    #: graphs were published already and nothing ran.
    result: TrialResult | None = None


class TrialSpec(BaseModel):
    """Everything the trial process needs, written by the launcher and read by the harness."""

    plan: TrialPlan
    script: str
    args: list[str] = Field(default_factory=list)
    cwd: str
    result_path: str
    protocol: MeasurementProtocol = Field(default_factory=MeasurementProtocol)
    seed: int = 0
    #: Env vars of each local rank of a multi-process trial, set before the script starts (the
    #: NeuronCores a rank sees), keyed by ``LOCAL_RANK``.
    rank_env: dict[str, dict[str, str]] = Field(default_factory=dict)
    #: The folder where every process of a multi-process trial writes its own report, and whose
    #: ``stop`` file tells every rank to end the measurement at one step.
    ranks_dir: str | None = None
    #: How long ``torch.distributed.init_process_group`` may wait for the other ranks: a rank that
    #: never comes is then a failure of its own category, not a hang until the trial's timeout.
    rendezvous_timeout_s: float | None = None


class ApplySpec(BaseModel):
    """A tuned configuration as a production run applies it (``source best.env``, ``autotune
    exec``): what a trial of it applied, without measuring anything, in every Python process of
    the job (the hook on ``PYTHONPATH`` reads it from :data:`APPLY_ENV`).

    Nothing of the machine that tuned it: no trial paths, placement or thread limits."""

    study: str = Field(description="The study.")
    trial: int = Field(description="The configuration's first trial.")
    target: str = Field(description="The target it was tuned for.")
    script: str = Field(description=(
        "The file name of the study's script: a process running a script of that name gets `script_flags`."))
    env: dict[str, str] = Field(default_factory=dict, description=(
        "The configuration's env vars (best.env exports them too), watched for a script that replaces them."))
    flags_env: str | None = Field(default=None, description="The env var of the compiler flags, where there is one.")
    knobs: RuntimeKnobs = Field(default_factory=RuntimeKnobs, description=(
        "What the configuration changes inside each Python process of the job."))
    script_flags: list[ScriptFlag] = Field(default_factory=list, description=(
        "The parameters given to the script as flags of its own."))
    routes: dict[str, list[KnobRoute]] = Field(default_factory=dict, description=(
        "How each parameter reaches the script, by parameter; an empty list: its value is the script's own."))
    params: dict[str, Any] = Field(default_factory=dict, description="The configuration's parameters.")
    nproc_per_node: int = Field(default=1, description="The job's processes.")
    launch: str | None = Field(default=None, description=(
        "How the job starts the script (`torchrun --nproc_per_node=2`)."))
    speedup: float | None = Field(default=None, description="The configuration's speedup over the baseline, times.")

    @classmethod
    def of(cls, plan: TrialPlan, *, study: str, trial: int, script: str, env: dict[str, str],
           speedup: float | None = None) -> ApplySpec:
        """What of ``plan`` a production run applies; ``env``: its env vars without the tuning
        machine's. The knobs that only serve a measurement (the trial's threads, waiting for a lazy
        device at a window's edge, the trials' cache of traced models) stay out."""
        trace = plan.knobs.trace.model_copy(update={"cache_dir": None}) if plan.knobs.trace else None
        knobs = plan.knobs.model_copy(update={"threads": None, "lazy_device": False, "trace": trace})
        return cls(study=study, trial=trial, target=plan.target, script=script, env=env,
                   flags_env=plan.flags_env if plan.flags_env in env else None, knobs=knobs,
                   script_flags=plan.script_flags, routes=plan.routes, params=plan.params,
                   nproc_per_node=plan.nproc_per_node, launch=plan.launch, speedup=speedup)


#: The env var that holds an :class:`ApplySpec` as JSON in every process of a production run.
APPLY_ENV = "AUTOTUNE_APPLY"


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

    status: str  # "ok" or "failed"
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

    @computed_field  # type: ignore[prop-decorator]
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
