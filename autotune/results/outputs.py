"""The files a study leaves for the next step of a pipeline: best.json, best.env, trials.csv."""

from __future__ import annotations

import csv
import io
import json
import shlex
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field, GetJsonSchemaHandler, computed_field
from pydantic.json_schema import JsonSchemaValue

from autotune.atomic_file import write_atomic
from autotune.errors import AutotuneError
from autotune.objectives import speedup
from autotune.machine.pricing import Cost, Utilisation
from autotune.provenance import Provenance
from autotune.records import APPLY_ENV, ApplySpec, CompileStage, RuntimeKnobs
from autotune.harness.apply import HOOK_DIR

if TYPE_CHECKING:
    from pydantic_core import CoreSchema


#: The version of best.json's layout: 2 gives one figure per configuration (the mean over its
#: runs) under every name, and each run's own figure only in ``runs`` (docs/reference/outputs.md).
SCHEMA_VERSION = 2
#: The file, in the package, of best.json's JSON Schema (:func:`best_schema`).
SCHEMA_FILE = "schemas/best.schema.json"

#: The unit of an objective's figure, in each description of one.
UNITS = ("samples/s for throughput, ms for a latency, US dollars per 1e6 samples for cost, bytes for "
         "peak_memory, a script's metric in its own unit")


class _SchemaOf:
    """A mapping whose JSON Schema is ``model``'s: the value stays the dict it was given (a study
    stored by an older version keeps its keys), while the schema and the reference name each key."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.model = model

    def __get_pydantic_json_schema__(self, _schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return handler(self.model.__pydantic_core_schema__)


class RunFigure(BaseModel):
    """One run of a configuration: its first trial, or a re-measurement of it."""

    trial: int = Field(description="The trial that measured it.")
    value: float = Field(description=f"The preferred objective's value this run measured ({UNITS}).")
    throughput: float | None = Field(default=None, description="Samples/s this run measured.")
    ci95_low: float | None = Field(default=None, description=(
        "Low end of the 95% interval of this run's throughput, samples/s: how well the run was measured "
        "(its processes added up), not where the next run reads."))
    ci95_high: float | None = Field(default=None, description="High end of that interval, samples/s.")
    seconds: float | None = Field(default=None, description=(
        "Seconds of steady steps it measured; null where the harness did not time them."))
    again: str | None = Field(default=None, description=(
        "Why it was measured again: `noise`, `race`, `final` or `confirm`; null for the configuration's first trial."))
    pruned: bool = Field(default=False, description=(
        "Stopped once clearly behind the study's best: a rough figure, with no interval of its own."))
    values: dict[str, float] = Field(default_factory=dict, description=(
        f"Every objective's value this run measured, by name ({UNITS})."))


class TrialSummary(BaseModel):
    """One trial of a study, with its configuration's figure: a row of trials.csv."""

    number: int = Field(description="The trial's number in the study, from 0.")
    state: str = Field(description="Optuna's state of the trial: COMPLETE, FAIL, PRUNED, RUNNING or WAITING.")
    params: dict[str, Any] = Field(description="The configuration's parameters, by name.")
    value: float | None = Field(default=None, description=(
        "The configuration's figure: the preferred objective's mean over every run of it, the same in each of "
        f"its trials ({UNITS}); this trial's own run is `run`."))
    values: dict[str, float] = Field(default_factory=dict, description=(
        f"Every objective's mean over the configuration's runs, by name ({UNITS})."))
    runs: int = Field(default=0, description="How many runs `value` is the mean of.")
    run: RunFigure | None = Field(default=None, description=(
        "What this trial itself measured; null where it measured nothing (a failure, a duplicate)."))
    violated: list[str] = Field(default_factory=list, description=(
        "The `--constraint` bounds its result breaks: measured, but never the best."))
    idle: list[str] = Field(default_factory=list, description=(
        "The parameters it set that never reached the script: it measured the script's own value of each "
        "(another configuration's figure), so it is never the best."))
    throughput: float | None = Field(default=None, description="The configuration's samples/s: the mean over its runs.")
    ci95_low: float | None = Field(default=None, description="Low end of the 95% interval of `throughput`, samples/s.")
    ci95_high: float | None = Field(default=None, description=(
        "High end of the 95% interval of `throughput`, samples/s."))
    usd_per_million_samples: float | None = Field(default=None, description=(
        "US dollars per 1e6 samples at `throughput` on the study's instance; null where no price is known."))
    flops_per_sample: float | None = Field(default=None, description=(
        "The model's FLOPs per sample (forward, and backward where it trains); null where not counted."))
    flops_per_second: float | None = Field(default=None, description=(
        "FLOP/s at `throughput`: FLOPs per sample times it."))
    mfu: float | None = Field(default=None, description=(
        "Model FLOPs utilisation, a fraction: `flops_per_second` over the peak of the devices a trial held; "
        "null where no peak is known (a CPU)."))
    pruned: bool = Field(default=False, description=(
        "Measured until clearly behind the study's best, then stopped: a wider interval."))
    category: str | None = Field(default=None, description=(
        "Why it gave no figure: a failure category (`compile_error`, `crash`, ...); null where it measured."))
    reason: str | None = Field(default=None, description="That failure, in words.")
    log_tail: str | None = Field(default=None, description="The end of a failed trial's log.")
    wall_seconds: float | None = Field(default=None, description="Seconds the trial took, wall clock.")
    compile_seconds: float | None = Field(default=None, description=(
        "Seconds its compiler took, where the backend reports them."))
    duplicate_of: int | None = Field(default=None, description=(
        "The earlier trial of the same configuration that answered this one."))
    confirms: int | None = Field(default=None, description=(
        "A re-measurement (no trial of `--trials`): the trial whose configuration it measures again."))
    again: str | None = Field(default=None, description=(
        "Why a re-measurement measured it again: `noise`, `race`, `final` or `confirm`."))
    value_ci95_low: float | None = Field(default=None, description=(
        "Low end of the 95% interval of `value`, in its unit: where the mean of more runs would lie, "
        "the between-run noise included."))
    value_ci95_high: float | None = Field(default=None, description="High end of that interval, in `value`'s unit.")
    cached: bool = Field(default=False, description="Answered from a result remembered in the cache root.")
    cache_hits: int | None = Field(default=None, description="The compiler cache's own hits, where it counts them.")
    cache_misses: int | None = Field(default=None, description="The compiler cache's own misses, where it counts them.")
    compile_stage_seconds: float | None = Field(default=None, description=(
        "With `--compile-workers`: wall seconds of its compile job (0 when its graphs were published already)."))
    measure_compile_seconds: float | None = Field(default=None, description=(
        "With `--compile-workers`: the compile seconds its measure job still paid."))
    compile_stage: CompileStage | None = Field(default=None, description=(
        "With `--compile-workers`: the compile job itself."))
    env: dict[str, str] = Field(default_factory=dict, description="The env vars it ran with.")
    placement: dict[str, str] = Field(default_factory=dict, description=(
        "Where it ran: host, Ray node id, worker, the devices it held."))
    started_at: float | None = Field(default=None, description="When it started, seconds since the epoch.")
    ended_at: float | None = Field(default=None, description="When it ended, seconds since the epoch.")
    numerics_violated: bool = Field(default=False, description=(
        "Its first losses left the baseline's: measured, but never the best."))
    losses: list[float] = Field(default_factory=list, description="Its first losses.")

    def interval(self) -> tuple[float | None, float | None]:
        """The 95% interval of ``value`` a reader is shown."""
        return self.value_ci95_low, self.value_ci95_high


class Noise(BaseModel):
    """How far one run of a configuration reads from the next on the study's machine
    (:class:`autotune.measurement.noise.RunNoise`)."""

    spread: float | None = Field(default=None, description=(
        "A fraction: one run of `run_seconds` lies within +-spread of its configuration's mean, 95% of the "
        "time; null while too few runs were measured again to say (then `seen` says what they read)."))
    run_seconds: float = Field(default=10.0, description=(
        "Seconds of steady steps of the run `spread` is for: a shorter run varies more."))
    seen: str | None = Field(default=None, description=(
        "Where `spread` is null: what the runs measured again read, in words."))
    repeats: int = Field(description="The study's runs of configurations it measured more than once.")
    df: int = Field(description=(
        "Degrees of freedom of the estimate: those runs' and, weighed as a few, earlier studies' here."))
    earlier_df: int = Field(default=0, description="Of `df`, what earlier studies on this machine gave.")


class FrontPoint(BaseModel):
    """A configuration of a multi-objective study's Pareto front."""

    trial: int = Field(description="The configuration's trial.")
    params: dict[str, Any] = Field(description="Its parameters, by name.")
    values: dict[str, float] = Field(description=f"Every objective's mean over its runs, by name ({UNITS}).")


class BestConfig(BaseModel):
    """The tuned configuration, in the form a training job uses directly."""

    schema_version: int = Field(default=SCHEMA_VERSION, json_schema_extra={"const": SCHEMA_VERSION}, description=(
        "The layout of this file: 2, one figure per configuration (the mean over its runs) under every name."))
    study: str = Field(description="The study's name.")
    trial: int = Field(description="The configuration's first trial.")
    target: str = Field(description="The target it was tuned for: `neuron`, `xla` or `inductor`.")
    params: dict[str, Any] = Field(description="The configuration's parameters, by name.")
    env: dict[str, str] = Field(description="The configuration's env vars (best.env exports them).")
    flags_env: str | None = Field(default=None, description=(
        "The env var that carries the compiler flags (`NEURON_CC_FLAGS`, `XLA_FLAGS`); null where none does."))
    compiler_flags: str | None = Field(default=None, description="The compiler flags: that variable's value.")
    knobs: Annotated[dict[str, Any], _SchemaOf(RuntimeKnobs)] = Field(default_factory=dict, description=(
        "The runtime knobs the trial set, those it left unset out; a production run applies `apply.knobs`, "
        "which leaves out what only served the measurement (`threads`, `lazy_device`, `trace.cache_dir`)."))
    launch: str | None = Field(default=None, description=(
        "How the job starts the script, as it was measured (`torchrun --nproc_per_node=2`); null: plain "
        "`python`, one process."))
    nproc_per_node: int = Field(default=1, description=(
        "Processes of the job on each node, each with the configuration's batch size."))
    nnodes: int = Field(default=1, description=(
        "Nodes of the job, each running `nproc_per_node` processes (torchrun's `--nnodes`)."))
    script_args: list[str] | None = Field(default=None, description=(
        "The script's arguments with its tuned flags, where some parameter is a flag of the script's own "
        "(`--arg`); null: the script runs with the arguments it was tuned with."))
    metric: str = Field(default="throughput", description=(
        "The objective of `value`: `throughput`, another objective's name, or a metric the script reports."))
    value: float = Field(description=(
        f"The configuration's figure: the mean of `metric` over its runs ({UNITS}), each run weighed by its "
        "seconds of steady steps where every run's are known."))
    value_ci95_low: float | None = Field(default=None, description=(
        "Low end of the 95% interval of `value`, in its unit: where the mean of more runs would lie, the "
        "between-run noise (`noise`) included."))
    value_ci95_high: float | None = Field(default=None, description="High end of that interval, in `value`'s unit.")
    throughput: float | None = Field(default=None, description=(
        "The configuration's samples/s, the same mean over its runs (`value` where `metric` is throughput)."))
    ci95_low: float | None = Field(default=None, description="Low end of the 95% interval of `throughput`, samples/s.")
    ci95_high: float | None = Field(default=None, description=(
        "High end of the 95% interval of `throughput`, samples/s."))
    runs: list[RunFigure] = Field(default_factory=list, description=(
        "Each run of the configuration, the first trial's first: what that run alone measured."))
    noise: Noise | None = Field(default=None, description=(
        "How far one run reads from the next on the study's machine; null while no configuration was "
        "measured twice."))
    baseline_value: float | None = Field(default=None, description=(
        "The baseline's figure: the same mean over its runs, in `value`'s unit."))
    baseline_runs: list[RunFigure] = Field(default_factory=list, description="Each run of the baseline.")
    speedup: float | None = Field(default=None, description=(
        "`value` over `baseline_value` (the inverse where less is better): times the baseline."))
    objectives: dict[str, float] = Field(default_factory=dict, description=(
        f"Every objective's mean over the configuration's runs, by name ({UNITS})."))
    constraints: list[str] = Field(default_factory=list, description=(
        "The study's `--constraint` bounds, which every best keeps."))
    front: list[FrontPoint] = Field(default_factory=list, description=(
        "A multi-objective study's Pareto front (empty for one objective); this configuration is its point "
        "best in `metric`."))
    provenance: Annotated[dict[str, Any], _SchemaOf(Provenance)] = Field(default_factory=dict, description=(
        "Where it was measured: versions, device, instance type, script."))
    cost: Cost | None = Field(default=None, description=(
        "What 1e6 samples cost at `throughput`, with the price used and where it came from; null where no "
        "price is known."))
    utilisation: Utilisation | None = Field(default=None, description=(
        "The model's FLOPs per sample, the FLOP/s at `throughput`, and their share of the devices' peak; null "
        "where the FLOPs could not be counted."))
    apply: ApplySpec | None = Field(default=None, description=(
        "What a production run applies (`source best.env`, `autotune exec`): every knob as the trial applied "
        "it, in each Python process of the job."))
    space: str | None = Field(default=None, description="The study's search space: a file or a built-in name.")
    baseline_params: dict[str, Any] | None = Field(default=None, description=(
        "The baseline's parameters: what `autotune verify` measures the best against again."))

    @computed_field(
        description="The batch of one step of the whole job: `batch_size` (each process's) times `nproc_per_node` "
                    "times `nnodes`; null where the configuration sets no batch size.")
    @property
    def global_batch_size(self) -> int | None:
        batch = self.params.get("batch_size")
        return batch * self.nproc_per_node * self.nnodes if isinstance(batch, int) else None

    def variables(self) -> dict[str, str]:
        """The env vars of a production run, but ``PYTHONPATH``: the configuration's own, then those
        of :data:`ENV_VARIABLES` that it needs."""
        out = {k: str(v) for k, v in self.env.items()}
        if self.apply is not None:
            out[APPLY_ENV] = self.apply.model_dump_json(exclude_defaults=True)
        out["AUTOTUNE_PARAMS"] = json.dumps(self.params, sort_keys=True)
        for name, value in self.params.items():
            out[f"AUTOTUNE_{name.upper()}"] = _shell_value(value)
        if self.script_args is not None:
            out["AUTOTUNE_SCRIPT_ARGS"] = shlex.join(self.script_args)
        if self.launch:
            out["AUTOTUNE_LAUNCH"] = self.launch
            out["AUTOTUNE_NPROC_PER_NODE"] = str(self.nproc_per_node)
        return out

    @staticmethod
    def hook_path() -> str:
        """The folder put first on ``PYTHONPATH``: its ``sitecustomize`` applies the configuration."""
        return str(HOOK_DIR)

    def env_lines(self) -> list[str]:
        """``export`` lines of :meth:`variables`, and the hook's folder first on ``PYTHONPATH``
        where there is a configuration to apply."""
        lines = [f"export {k}={shlex.quote(v)}" for k, v in self.variables().items()]
        if self.apply is not None:
            lines.append(f"export PYTHONPATH={shlex.quote(self.hook_path())}${{PYTHONPATH:+:$PYTHONPATH}}")
        return lines

    def env_file(self) -> str:
        head = (f"# autotune: best configuration of study {self.study} (trial {self.trial}, target {self.target})"
                + (f", {self.speedup:.2f}x the baseline" if self.speedup else ""))
        return "\n".join([head, *self.env_lines()]) + "\n"


#: best.env's variables beside the configuration's own (``env``), and what each holds.
ENV_VARIABLES = {
    APPLY_ENV: "The configuration as JSON (`apply` of best.json), for the hook on `PYTHONPATH` that applies every "
               "knob in each Python process of the job.",
    "AUTOTUNE_PARAMS": "The parameters as a JSON object, as `autotune.params()` reads them.",
    "AUTOTUNE_<KNOB>": "One per parameter, named by it upper-cased (`AUTOTUNE_BATCH_SIZE`): its value, a bool as 1 "
                       "or 0, for a script that reads its own settings.",
    "AUTOTUNE_SCRIPT_ARGS": "Where some parameter is a flag of the script's own: the script's arguments with it, "
                            "as shell words.",
    "AUTOTUNE_LAUNCH": "Where the job was measured through torchrun: how to start it (`torchrun --nproc_per_node=2`), "
                       "since the batch size is each process's.",
    "AUTOTUNE_NPROC_PER_NODE": "With `AUTOTUNE_LAUNCH`: the job's processes.",
    "PYTHONPATH": "The hook's folder, before the caller's path: its `sitecustomize` applies the configuration.",
}


def _shell_value(v: object) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


CSV_FIELDS = ["number", "state", "value", "value_ci95_low", "value_ci95_high", "runs", "throughput", "ci95_low",
              "ci95_high", "usd_per_million_samples", "flops_per_sample", "flops_per_second", "mfu", "pruned",
              "speedup", "category", "reason", "numerics_violated", "violated", "wall_seconds", "compile_seconds",
              "duplicate_of", "confirms", "again", "values", "params"]
#: The trial's own run (``TrialSummary.run``), after the configuration's figures.
RUN_FIELDS = ["value", "throughput", "ci95_low", "ci95_high", "seconds"]
#: trials.csv's columns that are no field of :class:`TrialSummary`, and what each holds.
CSV_COMPUTED = {"speedup": "The configuration's figure over the baseline's (the inverse where less is better): "
                           "times the baseline."}


def trials_csv(trials: list[TrialSummary], baseline: float | None, maximize: bool = True) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS + [f"run_{f}" for f in RUN_FIELDS])
    w.writeheader()
    for t in trials:
        row = t.model_dump(include=set(CSV_FIELDS))
        if t.run is not None:
            row.update({f"run_{f}": getattr(t.run, f) for f in RUN_FIELDS})
        ratio = speedup(t.value, baseline, maximize)
        row["speedup"] = f"{ratio:.4f}" if ratio is not None else ""
        row["params"] = json.dumps(t.params, sort_keys=True)
        row["values"] = json.dumps(t.values, sort_keys=True)
        row["violated"] = "; ".join(t.violated)
        w.writerow(row)
    return buf.getvalue()


def check_writable(directory: Path) -> Path:
    """A clear error now if ``directory`` could not be created and written later.

    Creates no directory: a file with a unique name is written and removed in the nearest
    directory that exists (permissions alone do not tell: /proc, read-only mounts). Two drivers
    starting together must not remove directories from under each other.
    """
    existing = directory.absolute()
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise AutotuneError(f"cannot write to {directory}: {existing} is not a directory; choose another")
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".autotune-write-test."):
            pass
    except OSError as exc:
        raise AutotuneError(f"cannot write to {directory}: {exc.strerror or exc}; choose another directory") from None
    return directory


def best_schema() -> dict[str, Any]:
    """best.json's JSON Schema, as :data:`SCHEMA_FILE` ships it: the file as written, computed
    keys included."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            **BestConfig.model_json_schema(mode="serialization")}


def write_outputs(out: Path, best: BestConfig | None, trials: list[TrialSummary], baseline: float | None,
                  maximize: bool = True) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "trials.csv", trials_csv(trials, baseline, maximize))
    if best is not None:
        write_atomic(out / "best.json", best.model_dump_json(indent=2) + "\n")
        write_atomic(out / "best.env", best.env_file())
