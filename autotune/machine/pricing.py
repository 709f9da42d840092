"""What an instance costs, and what a million samples cost on it.

Users choose between instance types on price-performance (AWS's own tables give, per model, the
throughput and the cost per 1M samples at the instance's hourly price). A cost is only as good as
its price, prices change, and many users pay reserved or spot rates: so every price here says
where it came from: the catalogue shipped with autotune (``instances.yaml``: on-demand, one region,
one date), a prices file of the user's, or ``--price-per-hour``.

The arithmetic is AWS's: cost per 1M samples = 1e6 / (samples per second) x (price per hour) / 3600,
where the samples per second are the whole instance's: a trial that held C of the instance's N
devices (NeuronCores, or GPUs: the catalogue's device column) is scaled by the N // C such trials
the instance runs side by side.

The catalogue also holds each accelerator's peak (dense bf16): a model's FLOP/s over the peak of
the devices its trial held is its model FLOPs utilisation. Where no peak is known (a CPU), it says
so instead of a figure.
"""

from __future__ import annotations

import datetime
import functools
import math
import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotune.errors import PricingError, UnknownInstanceTypeError

FLAG_SOURCE = "--price-per-hour"


#: The catalogue's device kinds, named as the Ray resource of the targets that hold them
#: (:attr:`autotune.targets.base.Target.device_resource`).
NEURON_CORES, GPU = "neuron_cores", "GPU"


class Instance(BaseModel):
    """One row of the catalogue: an EC2 instance type with Neuron devices or GPUs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    #: What a trial holds of it: NeuronCores or GPUs.
    device: Literal["neuron_cores", "GPU"]
    #: How many: the NeuronCores a process sees at the default configuration (logical ones on trn2,
    #: LNC=2), or the GPUs.
    devices: int = Field(ge=1)
    #: Physical NeuronCores, where they differ from ``devices``.
    physical_neuron_cores: int | None = Field(None, ge=1)
    vcpus: int = Field(ge=1)
    memory_gib: float = Field(gt=0)
    device_memory_gib: float = Field(gt=0)
    #: On-demand price in US dollars per hour; ``None`` where there is no public one.
    usd_per_hour: float | None = Field(None, gt=0, allow_inf_nan=False)
    #: Its accelerator chips: how many, and which (a name of the catalogue's ``chips``, or a GPU's
    #: description in its ``gpus``).
    chips: int = Field(ge=1)
    chip: str


class Chip(BaseModel):
    """A Neuron chip and its peak."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    bf16_tflops: float = Field(gt=0)


class Gpu(BaseModel):
    """A GPU model, found by a pattern of the name its driver gives, and its peak."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: str
    description: str
    bf16_tflops: float = Field(gt=0)


class PriceBasis(BaseModel):
    """Where and when the catalogue's prices were taken."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    region: str
    kind: str
    date: datetime.date


class Catalogue(BaseModel):
    """``instances.yaml``, validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prices: PriceBasis
    instances: list[Instance]
    chips: list[Chip]
    gpus: list[Gpu]

    @model_validator(mode="after")
    def _names_are_unique(self) -> Catalogue:
        names = [row.name for row in self.instances]
        if len(set(names)) != len(names):
            raise ValueError("an instance type is listed twice")
        known = {NEURON_CORES: {c.name for c in self.chips}, GPU: {g.description for g in self.gpus}}
        unknown = {row.chip for row in self.instances if row.chip not in known[row.device]}
        if unknown:
            raise ValueError(f"instances name chips the catalogue does not list: {sorted(unknown)}")
        return self

    @property
    def source(self) -> str:
        """How a price from the catalogue is credited, e.g. ``catalogue: us-east-1 on-demand, 2026-11-23``."""
        return f"catalogue: {self.prices.region} {self.prices.kind}, {self.prices.date.isoformat()}"


class Price(BaseModel):
    """An hourly price and where it came from."""

    #: US dollars per hour.
    per_hour: float = Field(gt=0, allow_inf_nan=False)
    #: ``catalogue: us-east-1 on-demand, 2026-11-23``, ``--price-per-hour`` or ``prices file /path``.
    source: str


class Cost(BaseModel):
    """A cost figure with everything it was computed from, as ``best.json`` and the tables show it."""

    instance_type: str | None = Field(description=(
        "The instance the price is for; null where it is not known (a price given by flag still applies)."))
    per_hour: float = Field(description="The price, US dollars per hour.")
    source: str = Field(description=(
        "Where the price came from: `catalogue: us-east-1 on-demand, 2026-11-23`, `--price-per-hour` or "
        "`prices file /path`."))
    trial_samples_per_second: float = Field(description="What one trial measured, samples/s.")
    instance_samples_per_second: float = Field(description=(
        "The whole instance's samples/s: the trial's times the trials that fit side by side."))
    trials_side_by_side: int = Field(description="The trials the instance runs side by side, each on its devices.")
    instances_per_trial: int = Field(default=1, description=(
        "The instances one trial spans (`--nnodes`): its samples/s are theirs together."))
    usd_per_million_samples: float = Field(description=(
        "US dollars per 1e6 samples at `instance_samples_per_second` and `per_hour`."))

    @classmethod
    def of(cls, trial_samples_per_second: float, price: Price, *, instance_type: str | None,
           devices_per_trial: int | None, nodes: int = 1) -> Cost:
        """The cost of samples measured by a trial that held ``devices_per_trial`` devices (``None``:
        the target holds none, as on CPU) on each of ``nodes`` instances of ``instance_type``, at ``price``."""
        sps, side_by_side = instance_rate(trial_samples_per_second, instance_type=instance_type,
                                          devices_per_trial=devices_per_trial, nodes=nodes)
        return cls(instance_type=instance_type, per_hour=price.per_hour, source=price.source,
                   trial_samples_per_second=trial_samples_per_second, instance_samples_per_second=sps,
                   trials_side_by_side=side_by_side, instances_per_trial=nodes,
                   usd_per_million_samples=cost_per_million_samples(sps, price))


@functools.cache
def catalogue() -> Catalogue:
    """The catalogue shipped with the package (read once per process)."""
    text = resources.files("autotune.machine").joinpath("instances.yaml").read_text()
    return Catalogue.model_validate(yaml.safe_load(text))


def instance_info(instance_type: str) -> Instance | None:
    """The catalogue's row for ``instance_type``; ``None`` for a type it does not list."""
    return next((row for row in catalogue().instances if row.name == instance_type), None)


def read_prices(path: Path) -> dict[str, float]:
    """A user's prices file: a YAML (or JSON) mapping of instance type to US dollars per hour."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise PricingError(f"prices file {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise PricingError(f"prices file {path}: not UTF-8 text (byte {exc.start}); save it as UTF-8 YAML or JSON") \
            from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise PricingError(f"prices file {path}{where}: not YAML or JSON; write one "
                           "'instance_type: dollars_per_hour' per line") from None
    if not isinstance(data, dict) or not data:
        raise PricingError(f"prices file {path}: expected a mapping such as 'inf2.xlarge: 0.76' "
                           "(instance type to US dollars per hour)")
    prices: dict[str, float] = {}
    for name, value in data.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise PricingError(f"prices file {path}: {name}: {value!r} is not a price; give a positive "
                               "number of US dollars per hour")
        prices[str(name)] = float(value)
    return prices


def file_price(instance_type: str | None, prices_file: Path) -> Price | None:
    """The prices file's price for ``instance_type`` (``None`` where it lists none); a file that
    cannot be read, or holds something other than prices, is refused."""
    listed = read_prices(prices_file)
    if instance_type is None or instance_type not in listed:
        return None
    return Price(per_hour=listed[instance_type], source=f"prices file {Path(prices_file).resolve()}")


def resolve_price(instance_type: str | None, *, price_per_hour: float | None = None,
                  prices_file: Path | None = None) -> Price | None:
    """The price of an hour on ``instance_type``: ``price_per_hour`` if given, else the prices file's
    entry, else the catalogue's; ``None`` when none of them has one (an unknown instance, or
    trn2.48xlarge). A prices file is read (and a bad one refused) even when the flag wins."""
    listed = file_price(instance_type, prices_file) if prices_file is not None else None
    if price_per_hour is not None:
        return Price(per_hour=price_per_hour, source=FLAG_SOURCE)
    if instance_type is None:
        return None
    if listed is not None:
        return listed
    row = instance_info(instance_type)
    if row is not None and row.usd_per_hour is not None:
        return Price(per_hour=row.usd_per_hour, source=catalogue().source)
    return None


def check_instance_type(instance_type: str | None, *, price_per_hour: float | None = None,
                        prices_file: Path | None = None) -> Price | None:
    """:func:`resolve_price` for an instance type the user named: one that neither the catalogue
    lists nor a price is given for is refused (a typo would otherwise silently cost nothing)."""
    price = resolve_price(instance_type, price_per_hour=price_per_hour, prices_file=prices_file)
    if instance_type is not None and price is None and instance_info(instance_type) is None:
        known = ", ".join(row.name for row in catalogue().instances)
        raise UnknownInstanceTypeError(f"--instance-type {instance_type!r}: not in autotune's catalogue ({known}); "
                                       "give its price with --price-per-hour or --prices FILE")
    return price


def instance_throughput(trial_samples_per_second: float, *, devices_per_trial: int,
                        instance_devices: int | None, nodes: int = 1) -> tuple[float, int]:
    """The instance's samples/s and the number of trials it runs side by side.

    ``instance_devices`` is ``None`` when the instance is unknown or the target holds no devices
    (a CPU trial, or one that shared the host's GPUs): the trial then stands for the whole
    instance. A trial that needs more devices than the instance has still counts once. A trial of
    ``nodes`` instances holds ``devices_per_trial`` on each: each instance makes that share of its
    samples.
    """
    if devices_per_trial < 1:
        raise ValueError(f"devices_per_trial must be at least 1, not {devices_per_trial}")
    side_by_side = max(1, instance_devices // devices_per_trial) if instance_devices else 1
    return trial_samples_per_second * side_by_side / nodes, side_by_side


def instance_rate(trial_samples_per_second: float, *, instance_type: str | None,
                  devices_per_trial: int | None, nodes: int = 1) -> tuple[float, int]:
    """:func:`instance_throughput` on the catalogue's ``instance_type`` for a trial that held
    ``devices_per_trial`` devices (``None``: the target holds none) on each of ``nodes`` instances."""
    row = instance_info(instance_type) if instance_type else None
    return instance_throughput(trial_samples_per_second, devices_per_trial=devices_per_trial or 1,
                               instance_devices=row.devices if row is not None and devices_per_trial else None,
                               nodes=nodes)


def cost_per_million_samples(instance_samples_per_second: float, price: Price) -> float:
    """US dollars per 1e6 samples: 1e6 / samples-per-second x price-per-hour / 3600."""
    if not instance_samples_per_second > 0 or not math.isfinite(instance_samples_per_second):
        raise ValueError(f"a cost needs a positive throughput, not {instance_samples_per_second!r} samples/s")
    return 1e6 / instance_samples_per_second * price.per_hour / 3600


def trial_rate(price: Price | None, *, instance_type: str | None, devices_per_trial: int | None,
               nodes: int = 1) -> float:
    """What a second of one trial's share of the instances costs: the price per second over the
    trials an instance runs side by side, times the instances a trial spans ($ per sample-second
    once divided by samples/s). Without a price, a :class:`PricingError` that says how to give one."""
    if price is None:
        raise PricingError("--objective cost needs the instance's price: give --instance-type (one the catalogue "
                           "prices), --price-per-hour or --prices")
    _, side_by_side = instance_rate(1.0, instance_type=instance_type, devices_per_trial=devices_per_trial)
    return price.per_hour / 3600 / side_by_side * nodes


class Utilisation(BaseModel):
    """How far a measured configuration is from the hardware: the model's FLOPs per sample, the
    FLOP/s its throughput makes of them, and that over the peak of the devices its trial held."""

    flops_per_sample: float = Field(description="The model's FLOPs per sample: forward, and backward where it trains.")
    flops_per_second: float = Field(description="FLOP/s: FLOPs per sample times the samples/s measured.")
    peak_flops_per_second: float | None = Field(default=None, description=(
        "The dense bf16 peak of the devices the trial held, FLOP/s; null where no peak is known."))
    peak_source: str = Field(description="Where the peak came from, or why there is none.")
    mfu: float | None = Field(default=None, description=(
        "Model FLOPs utilisation, a fraction: `flops_per_second` over `peak_flops_per_second`."))


def utilisation(flops_per_sample: float | None, samples_per_second: float | None, provenance: dict[str, Any],
                *, devices_per_trial: int | None, processes: int = 1, nodes: int = 1,
                model_device: str | None = None) -> Utilisation | None:
    """The utilisation of a trial that measured ``samples_per_second`` of a model of
    ``flops_per_sample`` where ``provenance`` says (:func:`autotune.provenance.provenance`); it held
    ``devices_per_trial`` NeuronCores or GPUs (``None``: none; on a GPU, then ``processes``
    processes, one GPU each) on each of ``nodes`` nodes;
    ``model_device``: the device type its model was on (``cpu``: no accelerator's peak applies).
    ``None`` where the FLOPs were not counted."""
    if not flops_per_sample or not samples_per_second:
        return None
    achieved = flops_per_sample * samples_per_second
    peak, source = device_peak(provenance, devices_per_trial=devices_per_trial, processes=processes,
                               model_device=model_device)
    if peak is not None and nodes > 1:
        peak, source = peak * nodes, f"{source}; x {nodes} nodes"
    return Utilisation(flops_per_sample=flops_per_sample, flops_per_second=achieved, peak_flops_per_second=peak,
                       peak_source=source, mfu=achieved / peak if peak else None)


def device_peak(provenance: dict[str, Any], *, devices_per_trial: int | None, processes: int = 1,
                model_device: str | None = None) -> tuple[float | None, str]:
    """The dense bf16 peak FLOP/s of the devices a trial held, and where it came from; or ``None``
    and why no peak is known."""
    instance = provenance.get("instance_type")
    host = str(provenance.get("host_device") or "")
    if model_device == "cpu":
        cpu = host.partition(":")[2] or host
        return None, f"no peak is known for a CPU ({cpu}), where the model ran: no utilisation"
    device = str(provenance.get("device") or "")
    kind, _, name = device.partition(":")
    gpu = name if kind == "cuda" else host.partition(":")[2] if name.upper() in ("CUDA", "GPU") else None
    if gpu is not None:
        row_gpu = next((g for g in catalogue().gpus if re.search(g.pattern, gpu)), None)
        if row_gpu is None:
            return None, f"no peak is known for the GPU {gpu}: no utilisation"
        # The GPUs the trial held; a trial that held none ran one on each of its processes.
        gpus = devices_per_trial or processes
        return gpus * row_gpu.bf16_tflops * 1e12, (
            f"catalogue: {row_gpu.description}, {row_gpu.bf16_tflops:g} bf16 TFLOPS (dense)"
            + (f" x {gpus} {'GPUs' if devices_per_trial else 'processes'}" if gpus > 1 else ""))
    if devices_per_trial:
        row = instance_info(instance) if instance else None
        if row is None or row.device != NEURON_CORES:
            return None, (f"no peak is known for instance type {instance}" if instance else
                          "the instance type is not known (--instance-type names it): no peak")
        chip = next(c for c in catalogue().chips if c.name == row.chip)
        per_core = chip.bf16_tflops * 1e12 * row.chips / row.devices
        return devices_per_trial * per_core, (
            f"catalogue: {chip.description}, {chip.bf16_tflops:g} bf16 TFLOPS over {row.devices // row.chips} "
            f"NeuronCores; {devices_per_trial} NeuronCore{'s' if devices_per_trial > 1 else ''} of {instance}")
    return None, f"no peak is known for a CPU ({host.partition(':')[2] or device}): no utilisation"
