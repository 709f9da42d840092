"""What a study optimises and what it must respect: objectives and constraints, by name.

An objective names a figure of a trial's result with the direction that is better:
throughput (samples/s), cost ($ per 1M samples at the instance's price), latency percentiles
(ms from one step to the next: for a loop that serves a batch per call of the model, the latency
a request sees), the trial's peak host memory, or a metric the script reports with
``autotune.report()``. A constraint bounds one of them (``latency_p99<=50``,
``peak_memory<=12GiB``, ``throughput>=200``); a configuration that violates it is infeasible, and
Optuna's constrained samplers learn where that is.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

from autotune.errors import InvalidConfigError
from autotune.records import TrialResult
from autotune.units import parse_size


@dataclass(frozen=True)
class Objective:
    name: str
    direction: str  # maximize or minimize
    unit: str
    #: The figure from a trial's result; cost needs the price of a sample-second.
    read: Callable[[TrialResult, float | None], float | None]

    @property
    def maximize(self) -> bool:
        return self.direction == "maximize"

    def format(self, value: float) -> str:
        if self.unit == "bytes":
            return f"{value / 1024 ** 3:,.2f} GiB"
        if self.unit == "$/1M samples":
            return f"${value:,.4f} per 1M samples"
        if self.unit:
            return f"{value:,.{3 if self.unit == 'ms' else 1}f} {self.unit}"
        return f"{value:,.6g} {self.name}"


def _throughput(result: TrialResult, _: float | None) -> float | None:
    return result.measurement.throughput if result.measurement else None


def _cost(result: TrialResult, usd_per_sample_second: float | None) -> float | None:
    """$ per 1M samples: what a second of the instance costs, per sample it processes each second."""
    throughput = _throughput(result, None)
    if usd_per_sample_second is None or not throughput:
        return None
    return 1e6 * usd_per_sample_second / throughput


def _latency(attr: str) -> Callable[[TrialResult, float | None], float | None]:
    def read(result: TrialResult, _: float | None) -> float | None:
        seconds = getattr(result.measurement, attr, None) if result.measurement else None
        return seconds * 1e3 if seconds is not None and math.isfinite(seconds) else None
    return read


def _peak_memory(result: TrialResult, _: float | None) -> float | None:
    return float(result.peak_host_memory_bytes) if result.peak_host_memory_bytes is not None else None


#: The objectives autotune measures itself; any other name is a metric the script reports.
BUILT_IN: dict[str, Objective] = {o.name: o for o in (
    Objective("throughput", "maximize", "samples/s", _throughput),
    Objective("cost", "minimize", "$/1M samples", _cost),
    Objective("latency_p50", "minimize", "ms", _latency("step_time_median")),
    Objective("latency_p90", "minimize", "ms", _latency("step_time_p90")),
    Objective("latency_p99", "minimize", "ms", _latency("step_time_p99")),
    Objective("peak_memory", "minimize", "bytes", _peak_memory),
)}

def speedup(value: float | None, baseline: float | None, maximize: bool = True) -> float | None:
    """How many times better than the baseline: value over baseline, or the inverse when less is better."""
    if not value or not baseline:
        return None
    return value / baseline if maximize else baseline / value


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def objective(name: str, direction: str = "maximize") -> Objective:
    """The objective called ``name``; ``direction`` is used only for a metric the script reports."""
    if name in BUILT_IN:
        return BUILT_IN[name]
    if not _NAME.match(name):
        raise InvalidConfigError(f"unknown objective {name!r}; choose one of {', '.join(BUILT_IN)}, or the name "
                                 "of a metric the script reports with autotune.report()")
    return Objective(name, direction, "", lambda result, _: result.metrics.get(name))


_CONSTRAINT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(<=|>=|<|>)\s*(.+?)\s*$")
_DURATION = re.compile(r"^([0-9.eE+-]+)\s*(ms|s)?$")


@dataclass(frozen=True)
class Constraint:
    """``name <= bound`` or ``name >= bound``, the bound in the objective's unit."""

    name: str
    upper: bool  # <=: the figure must stay at or below the bound
    bound: float
    text: str

    @classmethod
    def parse(cls, text: str) -> Constraint:
        m = _CONSTRAINT.match(text)
        if not m:
            raise InvalidConfigError(f"--constraint {text!r}: expected NAME<=VALUE or NAME>=VALUE, "
                                     "e.g. latency_p99<=50 or throughput>=200")
        name, op, raw = m.groups()
        unit = objective(name).unit
        try:
            if unit == "bytes":
                bound = float(parse_size(raw))
            elif unit == "ms":
                d = _DURATION.match(raw)
                if not d:
                    raise ValueError(raw)
                bound = float(d.group(1)) * (1e3 if d.group(2) == "s" else 1.0)
            else:
                bound = float(raw.removeprefix("$"))
        except (ValueError, InvalidConfigError):
            raise InvalidConfigError(f"--constraint {text!r}: {raw!r} is not a number"
                                     + (" of ms" if unit == "ms" else " of bytes (e.g. 12GiB)" if unit == "bytes"
                                        else "")) from None
        if not math.isfinite(bound):
            raise InvalidConfigError(f"--constraint {text!r}: the bound must be a finite number")
        return cls(name, op.startswith("<"), bound, text.strip())

    def violation(self, value: float | None) -> float:
        """Optuna's convention: above 0 violates, by how much relative to the bound; a figure the
        trial did not give violates."""
        if value is None or not math.isfinite(value):
            return 1.0
        excess = value - self.bound if self.upper else self.bound - value
        return excess / max(abs(self.bound), 1e-12)
