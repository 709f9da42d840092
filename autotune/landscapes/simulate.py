"""A study on a recorded landscape, in memory: :class:`autotune.study.loop.Study` itself (the same
ask-tell loop, suggestion code, duplicate rule, early stop and pruning) on Optuna's in-memory
storage, its trials answered by :class:`autotune.landscapes.replay.ReplayPool`, writing nothing, so
that ``bench/search_bench.py`` and ``bench/surrogate_bench.py`` compare strategies over many seeds
in seconds. Its trials are charged as :mod:`autotune.landscapes.replay` charges them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.landscapes.landscape import Landscape
from autotune.landscapes.replay import ReplayedTrial, ReplayPool, script_path

if TYPE_CHECKING:
    import optuna


@dataclass
class Step:
    """One measured trial of a simulated study."""

    key: str
    value: float | None  # the recorded throughput; None for a failed configuration
    seconds: float  # its simulated cost
    clock: float  # simulated time when it finished


@dataclass
class Trace:
    steps: list[Step] = field(default_factory=list)
    duplicates: int = 0  # proposals answered from an earlier result (no cost, not counted)

    def reach(self, threshold: float) -> tuple[int, float] | None:
        """Trials and simulated seconds until a configuration at or above ``threshold`` was measured."""
        for i, s in enumerate(self.steps, 1):
            if s.value is not None and s.value >= threshold:
                return i, s.clock
        return None


def simulate(landscape: Landscape, sampler: optuna.samplers.BaseSampler, *,
             starting_points: list[dict[str, Any]] | None = None, max_trials: int | None = None,
             stop_at: float | None = None, min_trials: int = 0, early_stop: float | None = None,
             race: float = 0.0) -> Trace:
    """A study of ``sampler`` on ``landscape``, one trial at a time, as ``autotune run`` drives one.

    ``starting_points`` are measured first, in place of the baseline and the space's known-good
    configurations (:func:`autotune.search.configurations.starting_points` gives those). The study
    ends after ``max_trials`` measured trials (the landscape's size by default), when its sampler
    only proposes configurations measured already, or, with ``stop_at``, once a value at least this
    high was measured and at least ``min_trials`` trials were (a benchmark needs no more).

    ``early_stop``: the study prunes (``--prune``, the default of ``autotune run``): a trial stops
    measuring once it cannot come within this fraction of the best so far, which must be the
    study's own :data:`~autotune.measurement.windows.PRUNE_MARGIN`; ``None`` measures each whole.

    ``race``: the study's ``--race`` (re-measurements, as a fraction of the trials; each is a step
    of the trace). 0 by default: a noiseless replay answers a repeat with the same figure.
    """
    import optuna

    from autotune.measurement.windows import PRUNE_MARGIN
    from autotune.study.loop import Study
    from autotune.study.options import StudyOptions
    from autotune.trial_attrs import TrialAttrs

    if early_stop not in (None, PRUNE_MARGIN):
        raise ValueError(f"the study prunes at {PRUNE_MARGIN:.0%} of the best or not at all, not at {early_stop}")

    def enough(trials: list[ReplayedTrial]) -> bool:
        return stop_at is not None and len(trials) >= min_trials and any(
            t.record.ok and t.record.throughput is not None and t.record.throughput >= stop_at for t in trials)

    pool = ReplayPool(landscape, enough=enough)
    options = StudyOptions(script=script_path(landscape), args=list(landscape.header.get("args", [])),
                           target=landscape.target, trials=max_trials or landscape.size,
                           prune=early_stop is not None, race=race)
    study = Study(options, pools=lambda _: pool, in_memory=optuna.storages.InMemoryStorage(),
                  space=landscape.space, sampler=sampler, starting_points=starting_points or [])
    study.run()
    trace = Trace(steps=[Step(t.key, t.record.throughput if t.record.ok else None, t.charge.seconds, t.finished)
                         for t in pool.trials])
    trace.duplicates = sum(TrialAttrs.of(t).duplicate_of is not None for t in study.study.get_trials(deepcopy=False))
    return trace
