"""A study on a recorded landscape, in memory: :class:`autotune.study.study.Study` itself (the same
ask-tell loop, suggestion code, duplicate rule, early stop and pruning) on Optuna's in-memory
storage, its trials answered by :class:`autotune.landscapes.replay.ReplayPool`, writing nothing, so
that ``bench/search_bench.py`` and ``bench/surrogate_bench.py`` compare strategies over many seeds
in seconds. Its trials are charged as :mod:`autotune.landscapes.replay` charges them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from autotune.landscapes.landscape import Landscape
from autotune.landscapes.replay import ReplayedTrial, ReplayPool, script_path
from autotune.measurement.noise import RunNoise, Runs
from autotune.results.ranking import Standing, ranked

if TYPE_CHECKING:
    import optuna


@dataclass
class Step:
    """One measured trial of a simulated study."""

    key: str
    value: float | None  # the recorded throughput; None for a failed configuration
    seconds: float  # its simulated cost
    clock: float  # simulated time when it finished
    #: What the run read: ``value``, or a draw around it in a noisy replay.
    figure: float | None = None


@dataclass
class Trace:
    steps: list[Step] = field(default_factory=list)
    duplicates: int = 0  # proposals answered from an earlier result (no cost, not counted)

    def chosen(self, n: int | None = None) -> float | None:
        """The recorded throughput of the configuration the study would report as its best after
        ``n`` steps (all by default), by the study's rule over what its runs read (:func:`_chosen`).
        Under noise that need not be the best configuration measured: a lucky draw picks a slower one."""
        return _chosen(self.steps[:n])

    def reach(self, threshold: float) -> tuple[int, float] | None:
        """Steps and simulated seconds until the configuration the study would report is at or
        above ``threshold`` (without noise: until such a configuration was measured)."""
        for i, s in enumerate(self.steps, 1):
            value = _chosen(self.steps[:i])
            if value is not None and value >= threshold:
                return i, s.clock
        return None


def _chosen(steps: list[Step]) -> float | None:
    """The recorded throughput of the configuration the study reports over ``steps``: the study's
    own rule (:func:`autotune.repeats.racing.standing`), by the mean of what its runs read, each drawn
    toward the others' by as much as its runs are uncertain (one run of a noisy host counts for less)."""
    runs: dict[str, list[float]] = {}
    values: dict[str, float] = {}
    first: dict[str, int] = {}
    for i, s in enumerate(steps):
        if s.value is not None and s.figure is not None:
            runs.setdefault(s.key, []).append(s.figure)
            values[s.key] = s.value
            first.setdefault(s.key, i)
    if not runs:
        return None
    measured = [Standing(SimpleNamespace(number=first[k]), Runs(tuple(v)), False) for k, v in runs.items()]
    best = ranked(measured, RunNoise.of(v for v in runs.values() if len(v) > 1), maximize=True)[0]
    return values[next(k for k in runs if first[k] == best.trial.number)]


def simulate(landscape: Landscape, sampler: optuna.samplers.BaseSampler, *,
             starting_points: list[dict[str, Any]] | None = None, max_trials: int | None = None,
             stop_at: float | None = None, min_trials: int = 0, early_stop: float | None = None,
             race: float = 0.0, noise_seed: int | None = None) -> Trace:
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

    ``noise_seed``: each run is drawn with the landscape's between-run noise
    (:class:`~autotune.landscapes.replay.ReplayPool`); ``stop_at`` and :meth:`Trace.reach` then ask
    of the configuration the study would report, not of the best one it measured.
    """
    import optuna

    from autotune.measurement.windows import PRUNE_MARGIN
    from autotune.study.study import Study
    from autotune.study.options import StudyOptions
    from autotune.storage.attrs import TrialAttrs

    if early_stop not in (None, PRUNE_MARGIN):
        raise ValueError(f"the study prunes at {PRUNE_MARGIN:.0%} of the best or not at all, not at {early_stop}")

    def enough(trials: list[ReplayedTrial]) -> bool:
        if stop_at is None or len(trials) < min_trials:
            return False
        value = _chosen([_step(t) for t in trials])
        return value is not None and value >= stop_at

    pool = ReplayPool(landscape, noise_seed=noise_seed, enough=enough)
    options = StudyOptions(script=script_path(landscape), args=list(landscape.header.get("args", [])),
                           target=landscape.target, trials=max_trials or landscape.size,
                           prune=early_stop is not None, race=race)
    study = Study(options, pools=lambda _: pool, in_memory=optuna.storages.InMemoryStorage(),
                  space=landscape.space, sampler=sampler, starting_points=starting_points or [])
    study.run()
    trace = Trace(steps=[_step(t) for t in pool.trials])
    trace.duplicates = sum(TrialAttrs.of(t).duplicate_of is not None for t in study.study.get_trials(deepcopy=False))
    return trace


def _step(t: ReplayedTrial) -> Step:
    return Step(t.key, t.record.throughput if t.record.ok else None, t.charge.seconds, t.finished, t.figure)
