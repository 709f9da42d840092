"""The configuration of a tuning run: every option once, with its default, its help and its checks.

:class:`JobConfig` holds what a user chooses about a run; :class:`RunConfig` adds what names this
machine's resources (storage, cache, Ray, output folder), which a daemon keeps for itself. From
them derive the ``autotune run``, ``submit`` and ``ensure`` options (:mod:`autotune.cli.options`),
the Python API (``autotune.tune``, :class:`autotune.study.options.StudyOptions`), the daemon's job
body (:class:`autotune.daemon.messages.RunOptions`) and a job's command line (:meth:`JobConfig.argv`).
A default written anywhere else is a second definition; ``tests/test_config.py`` checks there is none.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from autotune.errors import InvalidConfigError
from autotune.objectives import Constraint, objective
from autotune.space.parameters import check_flag
from autotune.targets import TARGETS

SAMPLERS = ("autotune", "tpe", "random", "qmc")
DIRECTIONS = ("maximize", "minimize")
_PARAMETER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INSTANCE_TYPE = re.compile(r"^[a-z0-9-]+\.[a-z0-9-]+$")

C = TypeVar("C", bound="JobConfig")


class JobConfig(BaseModel):
    """What a user chooses about a tuning run. The field's description is its ``--help`` text."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    #: The short flag of an option, where it has one.
    SHORT: ClassVar[dict[str, str]] = {"trials": "-n", "target": "-t", "sets": "-s"}
    #: The name of an option's value in ``--help``, where the type's is not clear enough.
    METAVAR: ClassVar[dict[str, str]] = {"confirm": "K", "race": "FRACTION", "objective": "NAME", "constraint": "NAME<=VALUE",
                                         "prefer": "NAME", "price_per_hour": "USD",
                                         "budget_usd": "USD", "budget_hours": "HOURS",
                                         "warm_start": "STUDY", "gpus_per_trial": "G"}
    #: Options the command line passes on as text for the model to parse: ``--price-per-hour cheap``
    #: is then the one-line error that names the option, as ``--price-per-hour -1`` is, and not
    #: click's usage box.
    PARSED_BY_MODEL: ClassVar[frozenset[str]] = frozenset({"price_per_hour", "gpus_per_trial", "race"})

    trials: int = Field(default=20, ge=1, description="Measured trials the study should hold (a rerun continues up "
                                                "to this number).")
    target: str = Field(default="auto", description="auto, " + ", ".join(TARGETS) + ".")
    space: str | None = Field(default=None, description="Search space: a YAML file or a built-in name (xla, inductor, "
                                                "neuron-trn1, neuron-inf2, neuron-trn2).")
    platform: str | None = Field(default=None, description="Neuron platform: trn1, trn1n, inf2, trn2.")
    sets: dict[str, Any] = Field(default_factory=dict, description="Fix a parameter, KEY=VALUE; repeatable.")
    arg: list[str] = Field(default_factory=list, description=(
        "Give a parameter to the script as a flag of its own, PARAM=FLAG (batch_size=--batch_size): each "
        "trial runs the script with FLAG VALUE (a value its arguments already hold is replaced; a bool "
        "parameter is the flag alone when true, no flag when false) instead of applying it the target's "
        "way; repeatable."))
    env: list[str] = Field(default_factory=list, description=(
        "An env var each trial runs with, KEY=VALUE, over the caller's environment; repeatable. The "
        "variables a target reads (PJRT_DEVICE, XLA_FLAGS, NEURON_CC_FLAGS, CUDA_VISIBLE_DEVICES) are the "
        "caller's already: a trial's compiler flags are added to the caller's, and they key its result."))
    workers: int | None = Field(default=None, ge=1, description="Trials at once (default: 1 on a small CPU machine; "
                                                        "NeuronCores / --cores-per-trial for Neuron, GPUs / "
                                                        "--gpus-per-trial on CUDA).")
    cores_per_trial: int = Field(default=1, ge=1, description="NeuronCores each trial holds.")
    gpus_per_trial: int | None = Field(default=None, ge=0, description="GPUs each trial holds, through Ray; it sees only "
                                                               "those (CUDA_VISIBLE_DEVICES). Default: 1 where the "
                                                               "target runs on CUDA (inductor on a machine with a "
                                                               "GPU), else 0.")
    nproc_per_node: int = Field(default=1, ge=1, description="Processes of each trial, as torchrun's --nproc_per_node: "
                                                     "above 1 the script runs through torchrun, the batch "
                                                     "size applies to each process.")
    nnodes: int = Field(default=1, ge=1, description="Nodes of each trial, as torchrun's --nnodes: above 1 each trial "
                                             "holds a share of as many Ray nodes (one each), runs "
                                             "--nproc-per-node processes on every one of them, and its figure is "
                                             "the sum over all of them.")
    compile_workers: int = Field(default=0, ge=0, description="Compile processes that compile configurations ahead of "
                                                      "their measurement, so that trials only measure (0: each "
                                                      "trial compiles its own). On a Ray cluster: compile workers "
                                                      "on the nodes that declare the compile_slots resource.")
    compile_ahead: int | None = Field(default=None, ge=1, description="Configurations compiling or compiled ahead of the "
                                                             "measurements at most (default with a compile stage: "
                                                             "compile workers + trials at once); alone, on a Ray "
                                                             "cluster, it turns the compile stage on with every "
                                                             "compile_slots the cluster declares.")
    study: str | None = Field(default=None, description="Study name (default: <script>-<target>).")
    trial_timeout: float = Field(default=1800.0, gt=0, description="Hard timeout of each trial, seconds.")
    timeout: float | None = Field(default=None, gt=0, description="Stop starting trials after this many seconds.")
    sampler: str = Field(default="autotune", description="autotune (expected improvement from a Gaussian process over "
                                                 "whole configurations; bench/search_bench.py), tpe "
                                                 "(multivariate, constant liar), random or qmc.")
    seed: int | None = Field(default=None, description="Seed of the sampler and of the trials.")
    metric: str = Field(default="throughput", description="What to optimise: throughput, or a metric the script "
                                                  "reports with autotune.report().")
    direction: str = Field(default="maximize", description="maximize or minimize the metric.")
    objective: list[str] = Field(default_factory=list, description=(
        "What to optimise, its direction implied: throughput (samples/s), cost ($ per 1M samples; needs a "
        "price), latency_p50, latency_p90, latency_p99 (ms), peak_memory, or a metric the script reports "
        "(--direction applies to it). Repeat it for a multi-objective study: the result is the Pareto front. "
        "Default: --metric."))
    constraint: list[str] = Field(default_factory=list, description=(
        "A bound a configuration must keep, e.g. latency_p99<=50 (ms), throughput>=200, peak_memory<=12GiB; "
        "repeatable. A configuration that breaks one is never the best."))
    prefer: str | None = Field(default=None, description="With several --objective: the objective whose best point of "
                                                  "the Pareto front goes to best.env (default: the first).")
    memory_limit: str | None = Field(default=None, description="Host-memory limit per trial, e.g. 8GiB.")
    fresh: bool = Field(default=False, description="Measure again: ignore remembered results and start the study "
                                           "anew (the old one is kept under another name).")
    retry_failed: bool = Field(default=False, description="Compile again configurations whose compile failed before.")
    # Batch size and cast move the mean of the first losses a little (within 0.2 of the baseline's);
    # divergence moves it a lot.
    loss_tolerance: float = Field(default=0.2, gt=0, description="Numerics guard: how far (relative) the mean of a "
                                                         "trial's first losses may leave the baseline's.")
    numerics_guard: bool = Field(default=True, description="Never report a configuration whose losses diverge as best.")
    prune: bool = Field(default=True, description="Stop measuring a trial once its 95% interval is wholly more than "
                                          "2% behind the best so far.")
    race: float = Field(default=0.1, ge=0, le=10, description=(
        "Re-measurements the study may spend, as a fraction of --trials: a challenger within the between-run "
        "noise of the best (or a best measured once) is measured again, alternating with it, until one is ahead "
        "beyond the noise; the first configuration is measured in 2-3 processes to learn that noise. 0 turns "
        "both off."))
    confirm: int = Field(default=0, ge=0, le=1000, description="Measure the best K configurations once more at the "
                                                       "end, unpruned, and pick the best on the mean of each "
                                                       "one's measurements (one lucky measurement does not win).")
    instance_type: str | None = Field(default=None, description="EC2 instance type the study measures on, e.g. inf2.xlarge "
                                                        "(default: the EC2 metadata service's answer); it picks "
                                                        "the price of the cost figures.")
    price_per_hour: float | None = Field(default=None, description="US dollars per hour of this instance, instead of the "
                                                           "catalogue's on-demand price (a reserved or spot rate).")
    prices: Path | None = Field(default=None, description="YAML or JSON file of 'instance_type: US dollars per hour' that "
                                                  "overrides the catalogue's on-demand prices.")
    warm_start: list[str] = Field(default_factory=list, description=(
        "An earlier study (of this storage, the same objective) to start from: its best configuration is "
        "measured right after the baseline and its results inform the sampler, never counted as this "
        "study's; repeatable."))
    warm: bool = Field(default=True, description="Warm-start also from the other studies of the same script (by file "
                                         "name) and target in this storage (--no-warm: only --warm-start's).")
    budget_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False, description=(
        "Stop asking for trials once the next would take the study's spend past this many US dollars: the "
        "machine time of its trials and compiles at the instance's price (needs --instance-type or "
        "--price-per-hour); what runs finishes."))
    budget_hours: float | None = Field(default=None, gt=0, allow_inf_nan=False, description=(
        "As --budget-usd, in instance-hours: the trials' and compiles' wall time, each at its share of the "
        "instance."))

    @field_validator("target", "sampler", "direction")
    @classmethod
    def _one_of(cls, value: str, info: ValidationInfo) -> str:
        allowed = {"target": ("auto", *TARGETS), "sampler": SAMPLERS, "direction": DIRECTIONS}[str(info.field_name)]
        if value not in allowed:
            raise ValueError(f"unknown {info.field_name} {value!r}; choose one of {', '.join(allowed)}")
        return value

    @field_validator("objective")
    @classmethod
    def _known_objectives(cls, names: list[str]) -> list[str]:
        for name in names:
            objective(name)
        if len(set(names)) != len(names):
            raise ValueError("an objective is named twice")
        return names

    @field_validator("constraint")
    @classmethod
    def _well_formed(cls, constraints: list[str]) -> list[str]:
        for text in constraints:
            Constraint.parse(text)
        return constraints

    @model_validator(mode="after")
    def _preferred_is_an_objective(self) -> JobConfig:
        if self.prefer is not None and self.prefer not in self.objectives():
            raise ValueError(f"--prefer {self.prefer!r} is not one of the objectives "
                             f"({', '.join(self.objectives())})")
        return self

    def objectives(self) -> list[str]:
        """The study's objectives: ``--objective``, else ``--metric``."""
        return list(self.objective) or [self.metric]
    @field_validator("instance_type")
    @classmethod
    def _is_an_instance_type(cls, value: str | None) -> str | None:
        if value is not None and not _INSTANCE_TYPE.match(value):
            raise ValueError("not an EC2 instance type; write it as EC2 does, e.g. inf2.xlarge")
        return value

    @field_validator("price_per_hour")
    @classmethod
    def _is_a_price(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value < math.inf:
            raise ValueError("a price is a positive number of US dollars per hour")
        return value

    @field_validator("arg")
    @classmethod
    def _parameter_flags(cls, items: list[str]) -> list[str]:
        names = []
        for item in items:
            name, flag = cls._split_arg(item)
            try:
                check_flag(name, flag)
            except InvalidConfigError as exc:
                raise ValueError(str(exc)) from None
            names.append(name)
        if len(set(names)) != len(names):
            raise ValueError("a parameter is given two flags")
        return items

    @staticmethod
    def _split_arg(item: str) -> tuple[str, str]:
        name, sep, flag = item.partition("=")
        if not sep or not _PARAMETER_NAME.match(name.strip()):
            raise ValueError(f"{item!r}: expected PARAM=FLAG, for example batch_size=--batch_size")
        return name.strip(), flag.strip()

    def script_flags(self) -> dict[str, str]:
        """``--arg`` as parameter -> flag of the script."""
        return dict(self._split_arg(item) for item in self.arg)

    @field_validator("env")
    @classmethod
    def _env_assignments(cls, items: list[str]) -> list[str]:
        for item in items:
            name, sep, _ = item.partition("=")
            if not sep or not _ENV_NAME.match(name):
                raise ValueError(f"{item!r}: expected NAME=VALUE, for example PJRT_DEVICE=CUDA")
        return items

    def trial_env(self) -> dict[str, str]:
        """``--env`` as a dict (the last of a name given twice wins)."""
        return {name: value for name, _, value in (item.partition("=") for item in self.env)}

    @field_validator("sets")
    @classmethod
    def _keys_are_names(cls, sets: dict[str, Any]) -> dict[str, Any]:
        for key in sets:
            if not _PARAMETER_NAME.match(key):
                raise ValueError(f"{key!r}: a parameter name is letters, digits, _ and .")
        return sets

    @classmethod
    def checked(cls: type[C], **values: Any) -> C:
        """The configuration of ``values``; a bad one is an :class:`InvalidConfigError` naming the option."""
        try:
            return cls(**values)
        except ValidationError as exc:
            raise InvalidConfigError(describe(exc)) from None

    def argv(self, *, skip: tuple[str, ...] = ()) -> list[str]:
        """The ``autotune run`` options that give this configuration: those that differ from the
        default, one argv element each (``--key=value``, so that no value reads as an option)."""
        out: list[str] = []
        for name, field in type(self).model_fields.items():
            value = getattr(self, name)
            if name in skip or name not in RunConfig.model_fields or \
                    value == field.get_default(call_default_factory=True):
                continue
            flag = option_flag(name)
            if name == "sets":
                out += [f"{flag}={k}={v}" for k, v in value.items()]
            elif isinstance(value, list):
                out += [f"{flag}={v}" for v in value]
            elif isinstance(value, bool):
                out.append(flag if value else f"--no-{flag[2:]}")
            else:
                # 15 significant digits: a price such as 1.967861 comes back as it was given
                out.append(f"{flag}={value:.15g}" if isinstance(value, float) else f"{flag}={value}")
        return out

    def job_config(self) -> JobConfig:
        """The options a daemon's job may carry: this configuration without this machine's resources."""
        return JobConfig(**{name: getattr(self, name) for name in JobConfig.model_fields})


class RunConfig(JobConfig):
    """A run on this machine: a :class:`JobConfig` and the resources it uses here."""

    ray_address: str | None = Field(default=None, description="Join this Ray cluster instead of starting a local Ray.")
    storage: str | None = Field(default=None, description="Optuna storage URL (default: sqlite under .autotune/; "
                                                  "postgresql://... for a fleet).")
    out: Path | None = Field(default=None, description="Where best.json, best.env and trials.csv go "
                                               "(default: .autotune/<study>/).")
    cache: Path | None = Field(default=None, description="Cache root for compiled artifacts and measured results "
                                                 "(default: ~/.cache/autotune; share it across a fleet).")


def option_flag(name: str) -> str:
    """``trial_timeout`` -> ``--trial-timeout``; ``sets`` -> ``--set``."""
    return "--set" if name == "sets" else f"--{name.replace('_', '-')}"


def describe(exc: ValidationError) -> str:
    """The first problem of a validation error, as one line that names the option."""
    error = exc.errors()[0]
    name = str(error["loc"][0]) if error["loc"] else ""
    message = error["msg"].removeprefix("Value error, ")
    if name and "input" in error and not isinstance(error["input"], dict):
        return f"{option_flag(name)} {error['input']!r}: {message}"
    return f"{option_flag(name)}: {message}" if name else message
