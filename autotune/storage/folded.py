"""What a study's finished trials add up to, each trial taken in once.

The study's figures (the configurations measured and their runs, the baseline) are asked for
several times per trial: the pruning bar at each dispatch, the racing at each free slot, the
progress line, the outputs. Read from every trial each time, they cost a driver more per trial the
more trials the study holds. A finished trial never changes (Optuna refuses any write to it), so
:class:`Folded` takes in each one once, in the order the study's copy of its trials
(:mod:`.trial_cache`) saw them finish, and is kept with that copy: every study object opened on the
driver's storage shares them, and a storage opened afresh (``autotune best``, the daemon) folds its
trials once on its first question.

What the sums depend on besides the trials (the study's objectives, its baseline and the
numerics guard's tolerance, the noise earlier studies measured) is read at each look; where it
changed, or a baseline's losses appear that trials folded before were judged without, everything
is folded again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from autotune.storage.attrs import StudyAttrs
from autotune.storage.trial_cache import StudyTrials, trials_of

if TYPE_CHECKING:
    import optuna

T = TypeVar("T")


@dataclass
class Group:
    """One configuration's runs: its first trial (not a re-measurement), what each run measured
    (``autotune.results.outputs.RunFigure``, in trial order), and whether a re-measurement of it
    failed."""

    first: Any = None  # optuna.trial.FrozenTrial
    runs: list[Any] = field(default_factory=list)
    flaky: bool = False
    #: Its :class:`autotune.repeats.racing.Standing`, made again only after it changed, and its
    #: figures (``autotune.results.standings.Headline``) with the standing and the noise they were made with.
    standing: Any = None
    head: Any = None


@dataclass(frozen=True)
class Context:
    """What the sums are judged with, read from the study at each look: the index of the objective
    that ranks, whether it is maximised and timed by the harness, and the study's attributes that
    judge a trial (the baseline, the numerics guard, the noise measured before)."""

    index: int
    maximize: bool
    timed: bool
    baseline_key: str | None
    numerics_guard: bool | None
    loss_tolerance: float | None
    noise_prior: tuple[float, ...] | None
    #: What a trial's summary reads of the study: the objectives' names, the price, the devices
    #: each trial held and where the study measures.
    objectives: tuple[str, ...]
    price: dict[str, Any] | None
    devices_per_trial: int | None
    provenance: dict[str, Any] | None
    #: All of them, as read (the ones above are what a change of is looked for).
    attrs: StudyAttrs = field(compare=False)


class Folded:
    """The finished trials of one study, folded in once each (see the module's docstring); what
    each trial adds is :mod:`autotune.results.standings`' to say."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset(None)

    def reset(self, context: Context | None) -> None:
        """Start the sums again, judged with ``context``."""
        self.context = context
        #: How many of the study's finished trials (:attr:`StudyTrials.finished`) are folded in.
        self.taken = self._end = 0
        #: Bumped whenever a trial is folded in: what is derived from the sums is kept for one version.
        self.version = 0
        self.groups: dict[str, Group] = {}
        #: The first complete trial of the baseline configuration that holds a result, whose losses
        #: the numerics guard judges the others by, and the first complete one that is not a duplicate.
        self.base_losses_trial: Any = None
        self.base_losses: list[float] = []
        self.baseline: Any = None
        #: Each finished trial's summary (``autotune.results.standings._Summary``).
        self.summaries: dict[int, Any] = {}
        self._derived: dict[str, tuple[int, Any]] = {}

    def derived(self, name: str, compute: Callable[[], T]) -> T:
        """``compute()``, kept until the next trial is folded in (or the context changes)."""
        kept = self._derived.get(name)
        if kept is not None and kept[0] == self.version:
            return kept[1]
        value = compute()
        self._derived[name] = (self.version, value)
        return value

    def newly_finished(self, trials: StudyTrials) -> list[optuna.trial.FrozenTrial]:
        """The finished trials of ``trials`` not folded in yet, in number order; :meth:`mark` them once folded."""
        new = trials.finished[self.taken:]
        self._end = self.taken + len(new)
        return sorted(new, key=lambda t: t.number)

    def mark(self) -> None:
        """The trials :meth:`newly_finished` gave are folded in."""
        if self._end > self.taken:
            self.taken = self._end
            self.version += 1


def folded_of(study: optuna.Study) -> tuple[StudyTrials, Folded]:
    """The copy of ``study``'s trials, and the sums kept with it (new and empty the first time)."""
    trials = trials_of(study)
    return trials, trials.kept("folded", Folded)
