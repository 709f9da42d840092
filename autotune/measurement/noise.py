"""Between-run noise: how far one run of a configuration reads from the next run of it, here.

A trial's own interval comes from the steady windows of one process. It says how well that process
was measured, not what the next process will read: a neighbour that takes a core for a few
seconds, the clock a core boosts to, where memory was placed. Only the same configuration run in
several processes says that. Those repeats give :class:`RunNoise`, a spread pooled over every
configuration measured more than once (as pyperf reports the spread across its worker processes).

A run's spread shrinks as it measures longer (it averages over a neighbour's turns), up to a
point. So the spread is kept for a run of :data:`RUN_SECONDS`: a run of ``s`` seconds counts as
``min(1, s / RUN_SECONDS)`` of one (:meth:`Runs.weights`), in the spread measured from it and in
the interval of a mean it is part of. A configuration's figure over its runs (:class:`Runs`) then
has an interval that includes that spread, and two configurations are told apart (:func:`ahead`)
only beyond it. Figures are compared on their logarithms: a speed's spread is relative, 1,000
samples/s varies by tens where 10,000 varies by hundreds.

Pure functions over plain numbers, like :mod:`.windows`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from autotune.measurement.windows import t975

#: The normal 97.5% quantile: a within-run interval is 1.96 standard errors either side.
Z975 = 1.96

#: An estimate kept from earlier studies counts as at most this many degrees of freedom, so that the
#: repeats of this study (the machine as it is now: a neighbour that came, a quieter night) weigh
#: as much as history soon.
PRIOR_DF = 6

#: Fewer degrees of freedom than this give no interval and no percentage: two runs of one
#: configuration give one, and a t of 12.7 (an interval of x100 where a neighbour slowed one run).
MIN_DF = 2

#: The length of run the between-run spread is kept for, in seconds of steady steps, and what a
#: decisive run measures at least: the runs of the figures a study reports (its best and its
#: baseline), and every run on a noisy host. A neighbour that takes a core for 1 to 4 s at a
#: time splits runs of a second or two into two speeds; over 10 s a run averages over a few of its
#: turns (docs/results/noise.md).
RUN_SECONDS = 10.0

#: A host whose runs of :data:`RUN_SECONDS` vary by more than this (the standard deviation of one
#: run's log figure: about +-10% 95% of the time) is noisy: each run there measures at least
#: :data:`RUN_SECONDS`.
NOISY_SIGMA = 0.05


@dataclass(frozen=True)
class Runs:
    """What the runs of one configuration read: each run's figure, each run's own 95% interval as
    a relative half-width (``None`` where the run gave none), and the seconds of steady steps each
    run measured (``None`` where unknown)."""

    values: tuple[float, ...]
    within: tuple[float | None, ...] = field(default=())
    seconds: tuple[float | None, ...] = field(default=())
    #: A figure that is a price over a rate (a cost per sample): its mean is the rate's mean
    #: turned over, as all the runs' seconds over all their samples.
    turned: bool = False

    @property
    def n(self) -> int:
        return len(self.values)

    def run_seconds(self) -> tuple[float | None, ...]:
        """Each run's seconds of steady steps (``None`` where unknown)."""
        return self.seconds if len(self.seconds) == self.n else (None,) * self.n

    def _within(self) -> tuple[float | None, ...]:
        return self.within if len(self.within) == self.n else (None,) * self.n

    def weights(self) -> list[float]:
        """How much of one run of :data:`RUN_SECONDS` each run counts for: its seconds over
        those, at most 1 (a run of unknown length counts whole)."""
        return [1.0 if s is None else max(min(1.0, s / RUN_SECONDS), 1e-3) for s in self.run_seconds()]

    def _shares(self) -> list[float]:
        """Each run's share of :attr:`mean`: its seconds over all the runs' where every run's are
        known, else an equal share."""
        seconds = self.run_seconds()
        if all(s is not None and s > 0 for s in seconds) and self.n > 1:
            total = sum(s for s in seconds if s is not None)
            return [s / total for s in seconds if s is not None]
        return [1 / self.n] * self.n

    @property
    def mean(self) -> float:
        """The mean over the runs, each weighed by the seconds it measured where every run's are
        known: for a throughput, all their samples over all their seconds, as the processes of one
        run are added up (:mod:`autotune.workers.run_parts`). A run of 3 s counts for a third of
        one of 9 s."""
        if self.n == 1:
            return self.values[0]  # v x s / s can be one unit in the last place off v
        if self.turned:
            return 1 / sum(w / v for v, w in zip(self.values, self._shares()))
        return sum(v * w for v, w in zip(self.values, self._shares()))

    def plus(self, value: float, within: float | None = None, seconds: float | None = None) -> Runs:
        """These runs and one more."""
        return Runs(self.values + (value,), self._within() + (within,), self.run_seconds() + (seconds,), self.turned)

    def run_variances(self, noise: RunNoise) -> tuple[list[float], float]:
        """The variance of each run's log figure, and the 97.5% quantile that goes with them: the
        between-run spread for a run of its length, or the run's own interval where that is wider
        (a run measured poorly is less certain than the repeats the spread was measured on)."""
        sigma = noise.sigma
        out, t = [], Z975
        for w, u in zip(self._within(), self.weights()):
            own = within_variance(w)
            between = sigma ** 2 / u if sigma is not None else None
            if between is not None and (own is None or between >= own):
                out.append(between)
                t = t975(noise.df)
            else:
                out.append(own if own is not None else math.inf)
        return out, t

    def log_variance(self, noise: RunNoise) -> tuple[float, float]:
        """The variance of the log of :attr:`mean`, and its 97.5% quantile."""
        variances, t = self.run_variances(noise)
        return sum(s * s * v for s, v in zip(self._shares(), variances)), t

    def figure(self, noise: RunNoise) -> Figure:
        """The mean over the runs, with the interval of :class:`Figure`."""
        variance, t = self.log_variance(noise)
        mean = self.mean
        if not math.isfinite(variance):
            return Figure(mean, None, None, self.n)
        half = t * math.sqrt(variance)
        return Figure(mean, mean * math.exp(-half), mean * math.exp(half), self.n)


@dataclass(frozen=True)
class RunNoise:
    """The between-run spread pooled over configurations, for a run of :data:`RUN_SECONDS`: the
    squared deviations of each run's log figure from its configuration's mean log, each weighed
    by how much of such a run it counts for (:meth:`Runs.weights`), summed, and their degrees of
    freedom (runs less configurations). Nothing measured more than once: ``df`` 0, the spread
    unknown."""

    squares: float = 0.0
    df: int = 0

    @classmethod
    def of(cls, groups: Iterable[Runs | Sequence[float]]) -> RunNoise:
        """The spread of ``groups``: each the runs of one configuration (plain figures: runs of
        unknown length)."""
        squares, df = 0.0, 0
        for group in groups:
            runs = group if isinstance(group, Runs) else Runs(tuple(group))
            kept = [(math.log(v), u) for v, u in zip(runs.values, runs.weights()) if v > 0]
            if len(kept) < 2:
                continue
            mean = sum(x * u for x, u in kept) / sum(u for _, u in kept)
            squares += sum(u * (x - mean) ** 2 for x, u in kept)
            df += len(kept) - 1
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
        """Whether enough runs were measured again to give an interval (:data:`MIN_DF`)."""
        return self.df >= MIN_DF

    @property
    def sigma(self) -> float | None:
        """The standard deviation of the log figure of one run of :data:`RUN_SECONDS` (``None``
        while unknown)."""
        return math.sqrt(self.squares / self.df) if self.known else None

    @property
    def spread(self) -> float | None:
        """How far one run of :data:`RUN_SECONDS` reads from its configuration's mean, 95% of the
        time, as a fraction (0.09: one run lies within +-9% of the mean)."""
        sigma = self.sigma
        return None if sigma is None else math.exp(t975(self.df) * sigma) - 1

    @property
    def noisy(self) -> bool:
        """Whether runs vary here by more than :data:`NOISY_SIGMA`."""
        return self.sigma is not None and self.sigma > NOISY_SIGMA


def spread_text(spread: float) -> str:
    """``spread`` (:attr:`RunNoise.spread`, the upper side) as a reader meets it: ``±9%``, or both
    sides where they differ (``-21% to +27%``: a spread on the logarithms is wider upwards), or a
    factor where it is that wide (``within a factor of 2.4``)."""
    if spread >= 1:
        return f"within a factor of {1 + spread:.1f}"
    lower = spread / (1 + spread)
    return f"within ±{spread:.0%}" if round(lower * 100) == round(spread * 100) \
        else f"within -{lower:.0%} to +{spread:.0%}"


def log_sigma(low: float | None, high: float | None) -> float:
    """The standard deviation, on the logarithms, that a 95% interval ``[low, high]`` implies (0
    without one)."""
    if not low or not high or low <= 0 or high <= low:
        return 0.0
    return math.log(high / low) / (2 * Z975)


def interval_of(value: float, sigma: float) -> tuple[float, float]:
    """The 95% interval of ``value`` whose logarithm varies by ``sigma``."""
    return value * math.exp(-Z975 * sigma), value * math.exp(Z975 * sigma)


def relative_half_width(value: float | None, low: float | None, high: float | None) -> float | None:
    """Half a 95% interval's width as a fraction of its value (``None`` without one)."""
    if not value or low is None or high is None:
        return None
    return (high - low) / 2 / value


def within_variance(w: float | None) -> float | None:
    """The variance on the logarithms of a run whose own 95% interval is +-``w`` (a fraction),
    widened to its longer side so that it still holds that interval whole."""
    if w is None or not math.isfinite(w):
        return None
    return (-math.log1p(-min(w, 0.99)) / Z975) ** 2


def measure_seconds(noise: RunNoise) -> float:
    """The seconds each run measures at least under ``noise``: 0 (the interval alone decides)
    unless the host is noisy."""
    return RUN_SECONDS if noise.noisy else 0.0


@dataclass(frozen=True)
class Figure:
    """A configuration's figure over its runs: their mean, and a 95% interval for the mean of
    more runs of it, which includes the between-run noise (``None`` where nothing says how far
    it may be)."""

    mean: float
    low: float | None
    high: float | None
    runs: int


def ratio(a: Runs, b: Runs, noise: RunNoise, *, maximize: bool = True) -> Figure:
    """``a``'s mean over ``b``'s (the inverse where less is better: how many times better ``a``
    is), with a 95% interval from each mean's variance (:meth:`Runs.log_variance`) on the
    logarithms: Welch's comparison, the larger of the two quantiles."""
    va, ta = a.log_variance(noise)
    vb, tb = b.log_variance(noise)
    r = a.mean / b.mean if maximize else b.mean / a.mean
    if not (math.isfinite(va) and math.isfinite(vb)):
        return Figure(r, None, None, min(a.n, b.n))
    half = max(ta, tb) * math.sqrt(va + vb)
    return Figure(r, r * math.exp(-half), r * math.exp(half), min(a.n, b.n))


def ahead(a: Runs, b: Runs, noise: RunNoise, *, maximize: bool = True, floor: float = 0.0) -> int:
    """1 where ``a`` is ahead of ``b`` beyond the noise, -1 where ``b`` is ahead of ``a``, 0 where
    the runs cannot tell them apart (:func:`ratio`'s interval holds 1) or they are less than
    ``floor`` (a fraction) apart."""
    r = ratio(a, b, noise, maximize=maximize)
    if r.low is None or r.high is None or r.low <= 1 <= r.high or abs(math.log(r.mean)) <= math.log1p(floor):
        return 0
    return 1 if r.mean > 1 else -1


def shrunk(configurations: Sequence[Runs], noise: RunNoise) -> list[float]:
    """What each configuration's mean says of its speed (on the logarithms), once its luck is
    allowed for: the log of its mean drawn toward the mean over the configurations by as much as
    its runs are uncertain (empirical Bayes, as Efron and Morris shrink batting averages).

    Among many configurations measured once, the highest read is the luckiest draw as much as the
    fastest configuration. Each log mean ``m`` becomes ``mu + w * (m - mu)``, with
    ``w = tau2 / (tau2 + v)``: ``v`` the variance of ``m`` (:meth:`Runs.log_variance`), ``tau2``
    the variance of the configurations' own speeds (the spread of their log means less what the
    noise adds to it), ``mu`` the mean of the log means. A quiet host leaves each mean as it is;
    where the configurations lie no further apart than the noise, each is ``mu``. Without a known
    spread the log means are returned as they are."""
    logs = [math.log(r.mean) for r in configurations]
    variances = [r.log_variance(noise)[0] for r in configurations]
    if len(logs) < 2 or not all(math.isfinite(v) for v in variances):
        return logs
    mu = statistics.fmean(logs)
    tau2 = max(statistics.variance(logs) - statistics.fmean(variances), 0.0)
    return [mu + tau2 / (tau2 + v) * (m - mu) if tau2 > 0 else mu for m, v in zip(logs, variances)]


def margin(leader: Runs, noise: RunNoise) -> float | None:
    """How far below ``leader``'s mean (a fraction) one run of a challenger, of
    :data:`RUN_SECONDS` or more, may read and still not be behind it beyond the noise: the bar
    under which a measurement cannot win. ``None`` while the noise and the leader's own intervals
    are unknown."""
    variance, t = leader.log_variance(noise)
    one = noise.sigma ** 2 if noise.sigma is not None else statistics.fmean(leader.run_variances(noise)[0])
    if not math.isfinite(variance + one):
        return None
    return 1 - math.exp(-t * math.sqrt(variance + one))


def seen_text(values: Sequence[float], unit: str = "") -> str:
    """What runs read, where they are too few for a spread: ``one run read 1,320.0`` or
    ``two runs read 1,320.0 and 3,825.0``."""
    figures = [f"{v:,.1f}{unit}" for v in values]
    if len(figures) == 1:
        return f"one run read {figures[0]}"
    words = {2: "two", 3: "three", 4: "four"}.get(len(figures), str(len(figures)))
    return f"{words} runs read {', '.join(figures[:-1])} and {figures[-1]}"
