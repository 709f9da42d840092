"""What a trial applies: its plan (the env vars, compiler flags and runtime knobs of one
configuration, and how each parameter reaches the script), and what a production run applies the
same way (:class:`ApplySpec`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


#: The parameter of a configuration that is its process count (torchrun's ``--nproc_per_node``).
PROCESSES_PARAM = "nproc_per_node"
#: The parameter of a configuration that is its node count (torchrun's ``--nnodes``): present only
#: where a trial spans several nodes, so that the keys of one-node configurations stay as they were.
NODES_PARAM = "nnodes"


#: The parameter that is the batch of one step of one process: a trial checks it against the
#: samples per step it measured where it reaches the script as a flag of the script's own.
BATCH_SIZE_PARAM = "batch_size"


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
    def of(cls, param: str, flag: str, value: object) -> ScriptFlag:
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
    #: Nodes of the trial: above 1, ``nproc_per_node`` ranks on each of them, one torchrun per node.
    nnodes: int = Field(default=1, ge=1)
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

    def model_post_init(self, _context: object) -> None:
        if self.params.get(PROCESSES_PARAM) is not None and self.nproc_per_node == 1:
            self.nproc_per_node = int(self.params[PROCESSES_PARAM])
        if self.params.get(NODES_PARAM) is not None and self.nnodes == 1:
            self.nnodes = int(self.params[NODES_PARAM])

    @property
    def launch(self) -> str | None:
        """How a training job starts the script as it was measured, where it is not plain ``python``:
        through torchrun when the configuration names a process count, even one (a script written
        for torchrun needs its env vars), or spans several nodes."""
        if self.nnodes > 1:
            return f"torchrun --nnodes={self.nnodes} --nproc_per_node={self.nproc_per_node}"
        if self.nproc_per_node > 1 or PROCESSES_PARAM in self.params:
            return f"torchrun --nproc_per_node={self.nproc_per_node}"
        return None

    @property
    def world_size(self) -> int:
        """Ranks of the trial, over all its nodes."""
        return self.nnodes * self.nproc_per_node

    @property
    def compiler_flags(self) -> str | None:
        return self.env.get(self.flags_env) if self.flags_env else None


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
    nproc_per_node: int = Field(default=1, description="The job's processes, on each node.")
    nnodes: int = Field(default=1, description="The job's nodes.")
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
                   nproc_per_node=plan.nproc_per_node, nnodes=plan.nnodes, launch=plan.launch, speedup=speedup)


#: The env var that holds an :class:`ApplySpec` as JSON in every process of a production run.
APPLY_ENV = "AUTOTUNE_APPLY"
