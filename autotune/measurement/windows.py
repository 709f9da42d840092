"""Statistics of a trial's timing windows: steady-state detection and the confidence interval.

Pure functions over plain numbers, so that the trial side (which measures) and the driver side
(which compares trials) agree on them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom; beyond, the normal one.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)

#: A trial may be stopped as unable to win once it has this many steady windows...
PRUNE_MIN_WINDOWS = 3
#: ... and its interval lies wholly below the study's best less this fraction.
PRUNE_MARGIN = 0.02


def t975(df: int) -> float:
    if df < 1:
        return math.inf
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.4 / df


def mser_truncation(values: Sequence[float]) -> int:
    """How many leading values to drop as initial transient (the MSER rule, White 1997).

    Picks the cut ``d`` in the first quarter of the series minimising the squared standard error
    of the mean of ``values[d:]``, and cuts only when that at least halves the score of the whole
    series: trimming already steady windows would drop the noisiest ones and make the confidence
    interval too narrow (docs/results/noise.md#cutting-the-warm-up).
    """
    n = len(values)
    if n < 4:
        return 0

    def score(d: int) -> float:
        tail = values[d:]
        m = len(tail)
        mean = sum(tail) / m
        return sum((v - mean) ** 2 for v in tail) / (m * m)

    whole = score(0)
    best_d, best = 0, whole
    for d in range(1, n // 4 + 1):
        sc = score(d)
        if sc < best - 1e-15:
            best_d, best = d, sc
    return best_d if best < 0.5 * whole else 0


@dataclass(frozen=True)
class Window:
    """Consecutive steps timed together."""

    steps: int
    samples: float
    seconds: float
    compiles: int = 0  # graphs compiled while this window ran
    #: When it opened, on the host's monotonic clock (``time.perf_counter``): the same clock in
    #: every process of a machine, so that the windows of a trial's ranks can be aligned.
    start: float = 0.0
    #: The run's phase: a later phase trains with an optimizer of its own (the layers of a
    #: forward-forward net, one after the other), at a speed of its own.
    phase: int = 0

    @property
    def end(self) -> float:
        return self.start + self.seconds

    @property
    def rate(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class Estimate:
    throughput: float  # total samples over total time of the steady windows
    ci_low: float
    ci_high: float
    windows_used: int
    truncated: int
    #: The steady windows' samples and seconds.
    samples: float = 0.0
    seconds: float = 0.0

    @property
    def rel_half_width(self) -> float:
        if self.throughput <= 0 or math.isinf(self.ci_high):
            return math.inf
        return (self.ci_high - self.ci_low) / 2 / self.throughput


def by_phase(windows: Sequence[Window]) -> list[list[Window]]:
    """``windows`` in runs of one phase each, in order."""
    runs: list[list[Window]] = []
    for w in windows:
        if runs and runs[-1][0].phase == w.phase:
            runs[-1].append(w)
        else:
            runs.append([w])
    return runs


def without_compiles(windows: Sequence[Window]) -> list[Window]:
    """The windows in which nothing compiled, when they are most of them (in each phase).

    A one-off compile after warm-up (on XLA, the graph of an epoch's last, shorter group of steps
    under ``batches_per_execution``) is not the steady state; its window would pull the estimate
    down by the compile's seconds. When most windows compile, compiling is the steady state (a
    recompilation storm) and every window counts.
    """
    kept: list[Window] = []
    for run in by_phase(windows):
        quiet = [w for w in run if not w.compiles]
        kept.extend(quiet if 2 * len(quiet) > len(run) else run)
    return kept


def steady_windows(windows: Sequence[Window]) -> list[Window]:
    """The windows an estimate is made of: each phase's, less its initial transient."""
    kept: list[Window] = []
    for run in by_phase(windows):
        kept.extend(run[mser_truncation([w.rate for w in run]):])
    return kept


def estimate(windows: Sequence[Window]) -> Estimate | None:
    """Throughput and its 95% CI from the steady-state part of ``windows``.

    A run of several phases is one throughput, all phases' samples over all their seconds, as
    a run that goes through them all sees it; cutting a transient off the whole series instead
    would take a slower first phase for warm-up. Each phase's seconds are uncertain by that
    phase's own interval, and the interval of the whole adds those as independent errors.
    """
    runs = by_phase(windows)
    if len(runs) > 1:
        return _phased([e for e in map(estimate, runs) if e is not None])
    if not windows:
        return None
    steady = steady_windows(windows)
    d = len(windows) - len(steady)
    samples = sum(w.samples for w in steady)
    seconds = sum(w.seconds for w in steady)
    if seconds <= 0:
        return None
    throughput = samples / seconds
    if len(steady) < 2:
        return Estimate(throughput, 0.0, math.inf, len(steady), d, samples, seconds)
    sd = statistics.stdev(w.rate for w in steady)
    half = t975(len(steady) - 1) * sd / math.sqrt(len(steady))
    return Estimate(throughput, max(0.0, throughput - half), throughput + half, len(steady), d, samples, seconds)


def _phased(phases: Sequence[Estimate]) -> Estimate | None:
    samples = sum(e.samples for e in phases)
    seconds = sum(e.seconds for e in phases)
    if seconds <= 0:
        return None
    throughput = samples / seconds
    used = sum(e.windows_used for e in phases)
    truncated = sum(e.truncated for e in phases)
    known = [e.rel_half_width for e in phases if math.isfinite(e.rel_half_width)]
    if not known:
        return Estimate(throughput, 0.0, math.inf, used, truncated, samples, seconds)
    # A phase too short for an interval of its own (one window) is as uncertain as the least
    # certain phase that has one.
    rel = [e.rel_half_width if math.isfinite(e.rel_half_width) else max(known) for e in phases]
    half = throughput * math.sqrt(sum((e.seconds * r) ** 2 for e, r in zip(phases, rel))) / seconds
    return Estimate(throughput, max(0.0, throughput - half), throughput + half, used, truncated, samples, seconds)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation."""
    if not values:
        return math.nan
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def cannot_win(est: Estimate | None, bar: float | None) -> bool:
    """The sequential test that prunes a trial: enough steady windows, and the whole 95% interval
    below ``bar`` (the study's best less :data:`PRUNE_MARGIN`)."""
    return (bar is not None and est is not None and est.windows_used >= PRUNE_MIN_WINDOWS
            and est.ci_high < bar)
