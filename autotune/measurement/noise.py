"""Between-run noise: how far one run of a configuration reads from the next run of it, here.

A trial's own interval comes from the steady windows of one process. It says how well that process
was measured, not what the next process will read: a neighbour that takes a core for a few
seconds, the clock a core boosts to, where memory was placed. Only the same configuration run in
several processes says that. Those repeats give :class:`RunNoise`, a spread pooled over every
configuration measured more than once (as pyperf reports the spread across its worker processes).

A configuration's figure over its runs (:class:`Runs`) then has an interval that includes that
spread, and two configurations are told apart (:func:`ahead`) only beyond it. Figures are compared
on their logarithms: a speed's spread is relative, 1,000 samples/s varies by tens where 10,000
varies by hundreds.

Pure functions over plain numbers, like :mod:`.windows`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from autotune.measurement.windows import t975

#: The normal 97.5% quantile: a within-run interval is 1.96 standard errors either side.
_Z975 = 1.96

#: An estimate kept from earlier studies counts as at most this many degrees of freedom, so that the
#: repeats of this study (the machine as it is now: a neighbour that came, a quieter night) weigh
#: as much as history soon.
PRIOR_DF = 6


@dataclass(frozen=True)
class RunNoise:
    """The between-run spread pooled over configurations: the squared deviations of each run's log
    figure from its configuration's mean log, summed, and their degrees of freedom (runs less
    configurations). Nothing measured more than once: ``df`` 0, the spread unknown."""

    squares: float = 0.0
    df: int = 0

    @classmethod
    def of(cls, groups: Iterable[Sequence[float]]) -> RunNoise:
        """The spread of ``groups``: each the figures of one configuration's runs."""
        squares, df = 0.0, 0
        for runs in groups:
            logs = [math.log(v) for v in runs if v > 0]
            if len(logs) < 2:
                continue
            mean = statistics.fmean(logs)
            squares += sum((x - mean) ** 2 for x in logs)
            df += len(logs) - 1
        return cls(squares, df)

    def __add__(self, other: RunNoise) -> RunNoise:
        return RunNoise(self.squares + other.squares, self.df + other.df)

    def weighed_as(self, df: int) -> RunNoise:
        """The same spread counted as at most ``df`` degrees of freedom (an earlier study's)."""
        if self.df <= df:
            return self
        return RunNoise(self.squares * df / self.df, df)

    @property
    def known(self) -> bool:
        return self.df > 0

    @property
    def sigma(self) -> float | None:
        """The standard deviation of one run's log figure (``None`` while unknown)."""
        return math.sqrt(self.squares / self.df) if self.df else None

    @property
    def spread(self) -> float | None:
        """How far one run reads from its configuration's mean, 95% of the time, as a fraction
        (0.09: one run lies within +-9% of the mean)."""
        sigma = self.sigma
        return None if sigma is None else math.exp(t975(self.df) * sigma) - 1


def spread_text(spread: float) -> str:
    """``spread`` (:attr:`RunNoise.spread`, the upper side) as a reader meets it: ``±9%``, or both
    sides where they differ (``-61% to +156%``: a spread on the logarithms is wider upwards)."""
    lower = spread / (1 + spread)
    return f"±{spread:.0%}" if round(lower * 100) == round(spread * 100) else f"-{lower:.0%} to +{spread:.0%}"


#: A host whose runs vary by more than this (the standard deviation of one run's log figure: about
#: +-10% 95% of the time) is noisy: each run there measures at least :data:`NOISY_MEASURE_S`.
NOISY_SIGMA = 0.05

#: Seconds of steady windows a run measures at least on a noisy host. A neighbour that takes a
#: core for 1 to 4 s at a time splits runs of a second or two into two speeds 40% apart; over
#: 10 s a run averages over a few of its turns (bench/next_run.py --neighbour).
NOISY_MEASURE_S = 10.0


def measure_seconds(noise: RunNoise) -> float:
    """The seconds each run measures at least under ``noise``: 0 (the interval alone decides)
    unless the host is noisy."""
    sigma = noise.sigma
    return NOISY_MEASURE_S if sigma is not None and sigma > NOISY_SIGMA else 0.0


@dataclass(frozen=True)
class Figure:
    """A configuration's figure over its runs: their mean, and a 95% interval for the mean of
    more runs of it, which includes the between-run noise."""

    mean: float
    low: float
    high: float
    runs: int


@dataclass(frozen=True)
class Runs:
    """What the runs of one configuration read: each run's figure, each run's own 95% interval as
    a relative half-width (``None`` where the run gave none), and the seconds of steady steps each
    run measured (``None`` where unknown)."""

    values: tuple[float, ...]
    within: tuple[float | None, ...] = field(default=())
    seconds: tuple[float | None, ...] = field(default=())

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        """The mean over the runs, each weighed by the seconds it measured where every run's are
        known: for a throughput, all their samples over all their seconds, as the processes of one
        run are added up (:mod:`autotune.workers.pooling`). A run of 3 s measured before the study
        knew its host was noisy counts for a third of one of 10 s measured after."""
        if self.n == 1:
            return self.values[0]  # v x s / s can be one unit in the last place off v
        weights = [s for s in self.seconds if s is not None and s > 0]
        if len(weights) == self.n and self.n:
            return sum(v * s for v, s in zip(self.values, weights)) / sum(weights)
        return statistics.fmean(self.values)

    def _log_mean(self) -> float:
        return statistics.fmean(math.log(v) for v in self.values)

    def _variance(self, noise: RunNoise) -> tuple[float, float]:
        """The variance of one run's log figure and the 97.5% quantile that goes with it: the
        between-run spread, or the runs' own intervals where those are wider (a short run is less
        certain than the repeats the spread was measured on)."""
        known = [w for w in self.within if w is not None and math.isfinite(w)]
        # On the logarithms the run's interval is widened to its longer side, so that it still
        # holds the run's own interval whole.
        within = statistics.fmean((-math.log1p(-min(w, 0.99)) / _Z975) ** 2 for w in known) if known else None
        between = noise.sigma ** 2 if noise.sigma is not None else None
        if between is not None and (within is None or between >= within):
            return between, t975(noise.df)
        if within is not None:
            return within, _Z975
        return math.inf, math.inf

    def figure(self, noise: RunNoise) -> Figure:
        """The mean over the runs, with the interval of :class:`Figure`."""
        variance, t = self._variance(noise)
        mean = self.mean
        if not math.isfinite(variance):
            return Figure(mean, 0.0, math.inf, self.n)
        half = t * math.sqrt(variance / self.n)
        return Figure(mean, mean * math.exp(-half), mean * math.exp(half), self.n)

    def plus(self, value: float, within: float | None = None, seconds: float | None = None) -> Runs:
        """These runs and one more."""
        return Runs(self.values + (value,), self._within() + (within,), self.run_seconds() + (seconds,))

    def _within(self) -> tuple[float | None, ...]:
        return self.within if len(self.within) == self.n else (None,) * self.n

    def run_seconds(self) -> tuple[float | None, ...]:
        """Each run's seconds of steady steps (``None`` where unknown)."""
        return self.seconds if len(self.seconds) == self.n else (None,) * self.n


def ahead(a: Runs, b: Runs, noise: RunNoise, *, maximize: bool = True) -> int:
    """1 where ``a`` is ahead of ``b`` beyond the noise, -1 where ``b`` is ahead of ``a``, 0 where
    the runs cannot tell them apart (Welch's comparison of the mean logs, each run's variance from
    :meth:`Runs.figure`'s rule)."""
    va, ta = a._variance(noise)
    vb, tb = b._variance(noise)
    if not (math.isfinite(va) and math.isfinite(vb)):
        return 0
    d = a._log_mean() - b._log_mean()
    half = max(ta, tb) * math.sqrt(va / a.n + vb / b.n)
    if abs(d) <= half:
        return 0
    return (1 if d > 0 else -1) * (1 if maximize else -1)


def shrunk(configurations: Sequence[Runs], noise: RunNoise) -> list[float]:
    """What each configuration's mean log figure says of its speed, once its luck is allowed for:
    the mean log drawn toward the mean over the configurations by as much as its runs are
    uncertain (empirical Bayes, as Efron and Morris shrink batting averages).

    Among many configurations measured once, the highest read is the luckiest draw as much as the
    fastest configuration: the more a configuration's runs vary (one run of it, on a noisy host)
    against how far the configurations lie apart, the less of its distance from the others is its
    own. Each mean log ``m`` becomes ``mu + w * (m - mu)``, with ``w = tau2 / (tau2 + v / n)``:
    ``v / n`` the variance of the mean of its ``n`` runs (:meth:`Runs.figure`'s rule), ``tau2``
    the variance of the configurations' own speeds (the spread of their mean logs less what the
    noise adds to it), ``mu`` the mean of the mean logs. A quiet host (``v`` small against
    ``tau2``) leaves each mean as it is; where the configurations lie no further apart than the
    noise (``tau2`` 0), each is ``mu``: nothing tells them apart. Without a known spread (no run
    measured again, no run's own interval) the mean logs are returned as they are."""
    logs = [r._log_mean() for r in configurations]
    variances = [r._variance(noise)[0] / r.n for r in configurations]
    if len(logs) < 2 or not all(math.isfinite(v) for v in variances):
        return logs
    mu = statistics.fmean(logs)
    tau2 = max(statistics.variance(logs) - statistics.fmean(variances), 0.0)
    return [mu + tau2 / (tau2 + v) * (m - mu) if tau2 > 0 else mu for m, v in zip(logs, variances)]


def margin(leader: Runs, noise: RunNoise) -> float | None:
    """How far below ``leader``'s mean (a fraction) one run of a challenger may read and still
    not be behind it beyond the noise: the bar under which a measurement cannot win. ``None``
    while the noise and the leader's own intervals are unknown."""
    variance, t = leader._variance(noise)
    if not math.isfinite(variance):
        return None
    return 1 - math.exp(-t * math.sqrt(variance / leader.n + variance))
