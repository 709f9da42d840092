"""The files a study leaves for the next step of a pipeline: best.json, best.env, trials.csv."""

from __future__ import annotations

import csv
import io
import json
import shlex
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, computed_field

from autotune.atomic_file import write_atomic
from autotune.errors import AutotuneError
from autotune.objectives import speedup
from autotune.machine.pricing import Cost, Utilisation
from autotune.records import APPLY_ENV, ApplySpec, CompileStage
from autotune.harness.apply import HOOK_DIR


#: The version of best.json's layout: 2 gives one figure per configuration (the mean over its
#: runs) under every name, and each run's own figure only in ``runs`` (docs/reference/outputs.md).
SCHEMA_VERSION = 2


class RunFigure(BaseModel):
    """One run of a configuration: its first trial, or a re-measurement of it."""

    #: The trial that measured it.
    trial: int
    #: The preferred objective's value this run measured.
    value: float
    #: Samples per second this run measured, and the 95% interval of that one process (or of the
    #: processes of one run, added up): how well the run was measured, not where the next run reads.
    throughput: float | None = None
    ci95_low: float | None = None
    ci95_high: float | None = None
    #: Seconds of steady steps it measured (``None`` where the harness did not time it).
    seconds: float | None = None
    #: Why it was measured again (``noise``, ``race``, ``final``, ``confirm``); ``None`` for the
    #: configuration's first trial.
    again: str | None = None
    #: Stopped once clearly behind the study's best: a rough figure, with no interval of its own.
    pruned: bool = False
    #: Every objective's value this run measured, by name.
    values: dict[str, float] = Field(default_factory=dict)


class TrialSummary(BaseModel):
    number: int
    state: str  # COMPLETE, FAIL, RUNNING, WAITING, PRUNED
    params: dict[str, Any]
    #: The figure of this trial's configuration: the preferred objective's mean over every run of
    #: it (``--prefer``; the only objective of a single-objective study), the same in each of its
    #: trials; this trial's own run is ``run``.
    value: float | None = None
    #: Every objective's mean over the configuration's runs, by name.
    values: dict[str, float] = Field(default_factory=dict)
    #: How many runs ``value`` is the mean of.
    runs: int = 0
    #: What this trial itself measured (``None`` where it measured nothing: a failure, a duplicate).
    run: RunFigure | None = None
    #: The ``--constraint`` bounds its result breaks: measured, but never the best.
    violated: list[str] = Field(default_factory=list)
    #: The parameters it set that never reached the script: it measured the script's own value of
    #: each (its figure is another configuration's), so it is never the best.
    idle: list[str] = Field(default_factory=list)
    #: The configuration's samples per second (the mean over its runs) and its 95% interval.
    throughput: float | None = None
    ci95_low: float | None = None
    ci95_high: float | None = None
    #: US dollars per 1e6 samples at ``throughput`` on the study's instance, where its price is
    #: known (see ``BestConfig.cost``).
    usd_per_million_samples: float | None = None
    #: The model's FLOPs per sample, the FLOP/s at ``throughput``, and their share of the devices'
    #: peak where one is known (see ``BestConfig.utilisation``).
    flops_per_sample: float | None = None
    flops_per_second: float | None = None
    mfu: float | None = None
    #: Measured until clearly behind the study's best, then stopped: a wider interval.
    pruned: bool = False
    category: str | None = None
    reason: str | None = None
    log_tail: str | None = None
    wall_seconds: float | None = None
    compile_seconds: float | None = None
    duplicate_of: int | None = None
    #: A re-measurement of this trial's configuration (not counted as a trial), and why it was
    #: measured again: ``noise``, ``race`` or ``confirm`` (:mod:`autotune.repeats.racing`).
    confirms: int | None = None
    again: str | None = None
    #: The 95% interval of ``value``: where the mean of more runs of the configuration would lie,
    #: the between-run noise measured here included.
    value_ci95_low: float | None = None
    value_ci95_high: float | None = None
    cached: bool = False  # answered from a result remembered in the cache root
    cache_hits: int | None = None  # the compiler cache's own counters, where it exposes them
    cache_misses: int | None = None
    #: With a compile stage (``--compile-workers``): the wall seconds of its compile job (0 when
    #: its graphs were published already), and the compile time its measure job still paid.
    compile_stage_seconds: float | None = None
    measure_compile_seconds: float | None = None
    #: The compile job itself: its compiler's time, whether the graphs were published before, where it ran.
    compile_stage: CompileStage | None = None
    env: dict[str, str] = Field(default_factory=dict)
    #: Where it ran: host, Ray node id, worker, the devices it held (``TrialResult.placement``).
    placement: dict[str, str] = Field(default_factory=dict)
    started_at: float | None = None
    ended_at: float | None = None
    #: The first losses left the baseline's: measured, but never the best.
    numerics_violated: bool = False
    losses: list[float] = Field(default_factory=list)


    def interval(self) -> tuple[float | None, float | None]:
        """The 95% interval of ``value`` a reader is shown."""
        return self.value_ci95_low, self.value_ci95_high


class Noise(BaseModel):
    """How far one run of a configuration reads from the next on the study's machine
    (:class:`autotune.measurement.noise.RunNoise`)."""

    #: One run of ``run_seconds`` lies within +-``spread`` (a fraction) of its configuration's
    #: mean, 95% of the time; ``None`` while too few runs were measured again to say (then
    #: ``seen`` says what they read).
    spread: float | None = None
    #: The length of run ``spread`` is for, in seconds of steady steps: a shorter run varies more.
    run_seconds: float = 10.0
    #: Where ``spread`` is unknown: what the runs measured again read, in words.
    seen: str | None = None
    #: The study's runs of configurations it measured more than once, and the degrees of freedom
    #: of the estimate: those runs' and, weighed as a few, earlier studies' here.
    repeats: int
    df: int
    #: Of ``df``, what earlier studies here gave.
    earlier_df: int = 0


class FrontPoint(BaseModel):
    """A configuration of a multi-objective study's Pareto front."""

    trial: int
    params: dict[str, Any]
    values: dict[str, float]


class BestConfig(BaseModel):
    """The tuned configuration, in the form a training job uses directly."""

    #: The layout of this file (:data:`SCHEMA_VERSION`).
    schema_version: int = SCHEMA_VERSION
    study: str
    trial: int
    target: str
    params: dict[str, Any]
    env: dict[str, str]
    flags_env: str | None = None
    compiler_flags: str | None = None
    knobs: dict[str, Any] = Field(default_factory=dict)
    #: How the job starts the script, as it was measured (``torchrun --nproc_per_node=2``); ``None``:
    #: plain ``python``, one process.
    launch: str | None = None
    nproc_per_node: int = 1
    #: The script's arguments with its tuned flags, where some parameter is a flag of the script's
    #: own (``--arg``); ``None``: the script runs with the arguments it was tuned with.
    script_args: list[str] | None = None
    metric: str = "throughput"
    #: The configuration's figure: the mean of ``metric`` over its runs (each in ``runs``), each
    #: run weighed by its seconds of steady steps where every run's are known (all the runs'
    #: samples over all their seconds), and a 95% interval for it that includes the between-run
    #: noise (``noise``): where the mean of more runs of it would lie.
    value: float
    value_ci95_low: float | None = None
    value_ci95_high: float | None = None
    #: The configuration's samples per second, the same mean over its runs, and its 95% interval
    #: (``value`` and its interval where ``metric`` is throughput).
    throughput: float | None = None
    ci95_low: float | None = None
    ci95_high: float | None = None
    #: Each run of the configuration, the first trial's first: what that run alone measured.
    runs: list[RunFigure] = Field(default_factory=list)
    noise: Noise | None = None
    #: The baseline's figure (the same mean over its runs), and each of its runs.
    baseline_value: float | None = None
    baseline_runs: list[RunFigure] = Field(default_factory=list)
    #: ``value`` over ``baseline_value`` (the inverse where less is better).
    speedup: float | None = None
    #: Every objective's mean over the configuration's runs, and the constraints every best keeps.
    objectives: dict[str, float] = Field(default_factory=dict)
    constraints: list[str] = Field(default_factory=list)
    #: A multi-objective study's Pareto front; this configuration is its point best in ``metric``.
    front: list[FrontPoint] = Field(default_factory=list)
    provenance: dict[str, Any] = Field(default_factory=dict)
    #: What a million samples cost at ``throughput``, with the price used and where it came from;
    #: ``None`` where no price is known.
    cost: Cost | None = None
    #: The model's FLOPs per sample, the FLOP/s achieved at ``throughput``, and the model FLOPs
    #: utilisation against the devices' peak, with where that peak came from (or why none is
    #: known: a CPU); ``None`` where the FLOPs could not be counted.
    utilisation: Utilisation | None = None
    #: What a production run applies (``source best.env``, ``autotune exec``): every knob as the
    #: trial applied it, by the hook of :mod:`autotune.harness.apply`.
    apply: ApplySpec | None = None
    #: The study's search space (a file or a built-in name) and its baseline configuration: what
    #: ``autotune verify`` measures the best against again.
    space: str | None = None
    baseline_params: dict[str, Any] | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def global_batch_size(self) -> int | None:
        """The batch of one step of the whole job: the per-process batch size times the processes."""
        batch = self.params.get("batch_size")
        return batch * self.nproc_per_node if isinstance(batch, int) else None

    def variables(self) -> dict[str, str]:
        """The env vars of a production run, but ``PYTHONPATH``: the configuration's own, the
        configuration for the hook that applies every other knob in each Python process
        (:data:`~autotune.records.APPLY_ENV`), the parameters as JSON for ``autotune.params()``, and
        one ``AUTOTUNE_<KNOB>`` per parameter for scripts that read their own settings; where
        parameters are flags of the script, its arguments with them (``AUTOTUNE_SCRIPT_ARGS``,
        shell words); for a job of several processes, how to start it (``AUTOTUNE_LAUNCH``), since
        the batch size is each process's."""
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


def _shell_value(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


CSV_FIELDS = ["number", "state", "value", "value_ci95_low", "value_ci95_high", "runs", "throughput", "ci95_low",
              "ci95_high", "usd_per_million_samples", "flops_per_sample", "flops_per_second", "mfu", "pruned",
              "speedup", "category", "reason", "numerics_violated", "violated", "wall_seconds", "compile_seconds",
              "duplicate_of", "confirms", "again", "values", "params"]
#: The trial's own run (``TrialSummary.run``), after the configuration's figures.
RUN_FIELDS = ["value", "throughput", "ci95_low", "ci95_high", "seconds"]


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


def write_outputs(out: Path, best: BestConfig | None, trials: list[TrialSummary], baseline: float | None,
                  maximize: bool = True) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "trials.csv", trials_csv(trials, baseline, maximize))
    if best is not None:
        write_atomic(out / "best.json", best.model_dump_json(indent=2) + "\n")
        write_atomic(out / "best.env", best.env_file())
