"""Repeats inside the study's one loop: the between-run noise measured early, and the incumbent
raced against a challenger that it cannot yet be told apart from.

A trial's interval says how well one process was measured; the next process of the same
configuration may read far lower on a shared host. So the study measures one configuration (the
better of the first two: the baseline and the first known-good) in more processes early, which
gives the between-run noise here
(:class:`~autotune.measurement.noise.RunNoise`, with what earlier studies on this machine measured
as a prior). From then on a configuration's runs count for as much as the noise leaves them
(:func:`standing`: one run on a noisy host says less than five), and a
challenger that appears to beat the incumbent by less than the noise is measured again, alternating with
the incumbent, until one is ahead beyond the noise, a configuration has had ``RACE_RUNS`` runs, or
the study's budget of re-measurements is spent (as SMAC's intensification and irace's racing do).
A leader measured once is raced too, or measured again before the study ends where it is ahead
beyond the noise: its one run may be the luckiest draw among configurations of one speed, and the
best a study reports is a mean over runs.

Every re-measurement measures at least :data:`~autotune.measurement.noise.RUN_SECONDS` of steady
steps, on a quiet host too: the runs a study reports are measured as long as the noisiest host
asks, and the noise is measured on runs of that length. Before the study ends, the best and the
baseline (the two figures of the headline speedup) are measured once more where neither has such
a run yet (``final``).

A re-measurement reuses the configuration's compiled graphs (the compile cache), never counts
towards ``--trials``, and the sampler does not learn from it (:meth:`TrialRecorder.tell_confirmation`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.measurement.noise import RUN_SECONDS, RunNoise, ahead
from autotune.results.ranking import Standing, key, ranked
from autotune.storage.attrs import TrialAttrs

if TYPE_CHECKING:
    import optuna

#: Runs of one configuration after which a race that has not told two apart ends: they are of one
#: speed within the noise, and the budget is kept for later challengers.
RACE_RUNS = 5

#: Re-measurements a study keeps for the best it ends with, where that was measured once: the last
#: of its budget, and up to two past it where the one measured again falls behind another measured
#: once (a lucky run on a noisy host), so that the best a study reports is a mean over runs.
FINAL_RUNS = 3

#: A study of fewer trials measures nothing again: it has hardly a challenger to race, and its
#: intervals still include the noise that earlier studies here measured.
RACE_MIN_TRIALS = 4

#: Why a configuration is measured again: the noise early in the study, a race, the best's or the
#: baseline's run of :data:`~autotune.measurement.noise.RUN_SECONDS` before the study ends,
#: ``--confirm``.
NOISE, RACE, FINAL, CONFIRM = "noise", "race", "final", "confirm"


@dataclass(frozen=True)
class Repeat:
    """A configuration to measure again now: its first trial, and why (:data:`NOISE`, :data:`RACE`)."""

    trial: optuna.trial.FrozenTrial
    why: str


class Racing:
    """Which configuration the study measures again next, if any.

    ``budget``: the re-measurements races may take (a fraction of ``--trials``; 0 turns racing
    and the early noise runs off), the last of them kept for the best the study ends with;
    ``kept``: the noise measured here before (:func:`prior`); ``confirm``: how many of the best
    configurations are measured once more before the study ends (``--confirm``).
    """

    def __init__(self, budget: int, kept: RunNoise, baseline_key: str | None = None, confirm: int = 0) -> None:
        self.budget = budget
        self.kept = kept
        self.baseline_key = baseline_key
        self.confirm = confirm
        #: The two configurations being raced (their keys), and the one measured last.
        self.pair: tuple[str, str] | None = None
        self.last: str | None = None
        #: The configurations ``--confirm`` measures again, chosen once, when the study ends.
        self.confirming: list[str] | None = None

    @staticmethod
    def of(fraction: float, trials: int, kept: RunNoise, baseline_key: str | None = None,
           confirm: int = 0) -> Racing:
        return Racing(math.ceil(fraction * trials) if fraction > 0 and trials >= RACE_MIN_TRIALS else 0, kept,
                      baseline_key, confirm)

    def next(self, measured: list[Standing], spent: int, busy: set[str], *, maximize: bool,
             finishing: bool = False, decisive: float = RUN_SECONDS, ran: bool = True) -> Repeat | None:
        """The repeat to run now. ``measured``: the study's configurations (:func:`standing`'s
        input); ``spent``: race repeats run or running; ``busy``: the keys measured now (a
        configuration is not measured twice at once); ``finishing``: the study asks for no more
        trials; ``decisive``: the seconds the best's and the baseline's runs measure at least;
        ``ran``: this run of the study measured a trial (one that measured none, a study run again
        once it holds its trials, measures nothing for the best and the baseline)."""
        # A study answered wholly from remembered results runs nothing: the next run of a study
        # measures nothing, as before.
        if (self.budget <= 0 and not self.confirm) or all(TrialAttrs.of(s.trial).cached for s in measured):
            return None
        own = RunNoise.of(s.runs for s in measured)
        # One configuration in more processes: 3 runs where nothing is known of this machine, 2
        # where an earlier study measured it (this study's own repeat updates it). Once two
        # configurations are measured (the baseline and the first known-good), the better of
        # them: usually the quicker run of the two, and the one a race needs runs of next.
        wanted = 3 if not self.kept.known else 2
        if self.budget > 0 and own.df < wanted - 1:
            sign = -1.0 if maximize else 1.0
            usable = [s for s in measured if not s.flaky]
            begun = [s for s in usable if s.runs.n >= 2]
            if begun:
                pick = begun[0]
            elif len(usable) >= 2 or (finishing and usable):
                pick = min(usable, key=lambda s: (sign * s.runs.mean, s.trial.number))
            else:
                return None
            if pick.runs.n < wanted:
                return None if key(pick) in busy else Repeat(pick.trial, NOISE)
        noise = own + self.kept
        order = ranked(measured, noise, maximize=maximize)
        if finishing:
            return self._confirm(order, busy, ran) or self._final(order, spent, busy, decisive if ran else 0.0)
        if spent >= self.budget - 1 or len(order) < 2 or order[0].flaky:
            return None
        by_key = {key(s): s for s in order}
        if self.pair is not None and all(k in by_key for k in self.pair):
            a, b = (by_key[k] for k in self.pair)
            if ahead(a.runs, b.runs, noise, maximize=maximize) == 0 and min(a.runs.n, b.runs.n) < RACE_RUNS:
                return self._measure(a, b, busy)
        self.pair = None
        leader = order[0]
        sign = 1.0 if maximize else -1.0
        if leader.runs.n == 1:
            # It leads, its one run allowed for, and that run may still be luck: measured again
            # against the next placed while the two cannot be told apart.
            runner = next((s for s in order[1:] if not s.flaky), None)
        else:
            # A challenger: the best placed of those whose runs read higher than the leader's (one
            # run's luck allowed for placed it below).
            runner = next((s for s in order[1:] if not s.flaky and sign * s.runs.mean > sign * leader.runs.mean), None)
        if runner is None or ahead(leader.runs, runner.runs, noise, maximize=maximize) != 0 \
                or min(leader.runs.n, runner.runs.n) >= RACE_RUNS:
            return None
        self.pair = (key(runner), key(leader))
        return self._measure(leader, runner, busy) if leader.runs.n == 1 else self._measure(runner, leader, busy)

    def _final(self, order: list[Standing], spent: int, busy: set[str], decisive: float) -> Repeat | None:
        """Before the study ends: the best measured once is raced once more (a few more where
        measuring it again hands the lead to another measured once), kept from the race budget;
        then the best and the baseline each get a run of ``decisive`` seconds where they have none."""
        if self.budget <= 0 or not order or order[0].flaky:
            return None
        best = order[0]
        if best.runs.n == 1 and len(order) > 1 and spent < self.budget + FINAL_RUNS - 1:
            return Repeat(best.trial, RACE) if key(best) not in busy else None
        baseline = next((s for s in order if key(s) == self.baseline_key), None)
        for s in (best, baseline):
            if s is not None and not measured_long(s, decisive) and key(s) not in busy:
                return Repeat(s.trial, FINAL)
        return None

    def _confirm(self, order: list[Standing], busy: set[str], ran: bool) -> Repeat | None:
        """``--confirm``: the best configurations as the study ends, each measured once more (at
        most once a study: a study run again once it holds its trials measures nothing)."""
        if not self.confirm or not ran:
            return None
        if self.confirming is None:
            self.confirming = [key(s) for s in order if not s.flaky][:self.confirm]
        by_key = {key(s): s for s in order}
        for k in self.confirming:
            s = by_key.get(k)
            if s is not None and not confirmed(s) and k not in busy:
                return Repeat(s.trial, CONFIRM)
        return None

    def unconfirmed(self, measured: list[Standing]) -> list[optuna.trial.FrozenTrial]:
        """The first trials of the configurations ``--confirm`` chose that were not measured again."""
        chosen = set(self.confirming or [])
        return [s.trial for s in measured if key(s) in chosen and not confirmed(s)]

    def _measure(self, a: Standing, b: Standing, busy: set[str]) -> Repeat | None:
        """Of a race's two, the one with fewer runs; on a tie the one not measured last."""
        one = a if a.runs.n < b.runs.n or (a.runs.n == b.runs.n and self.last != key(a)) else b
        if key(one) in busy:
            return None
        self.last = key(one)
        return Repeat(one.trial, RACE)


def measured_long(s: Standing, seconds: float) -> bool:
    """Whether a run of ``s`` measured ``seconds`` or more (a run of unknown length counts), or it
    was measured again to that end already (a script that ends sooner runs once)."""
    return seconds <= 0 or any(t is None or t >= seconds for t in s.runs.run_seconds()) \
        or any(f.again == FINAL for f in s.figures)


def confirmed(s: Standing) -> bool:
    """Whether ``--confirm`` measured ``s`` again."""
    return any(f.again == CONFIRM for f in s.figures)
