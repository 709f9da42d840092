"""A study on a recorded landscape, driven in memory: the loop of :class:`autotune.study.loop.Study`
(the same suggestion code, the same starting points, the same early stop) without the Optuna
storage and the files a study writes, so that ``bench/search_bench.py`` compares strategies over
many seeds in seconds. Its trials are charged as :mod:`autotune.landscapes.replay` charges them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from autotune.landscapes.landscape import Landscape
from autotune.landscapes.replay import CompileCacheModel, pruned_charge
from autotune.space import config_key


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


def simulate(landscape: Landscape, sampler: Any, *, starting_points: list[dict[str, Any]] | None = None,
             max_trials: int | None = None, max_duplicates: int = 50, stop_at: float | None = None,
             min_trials: int = 0, early_stop: float | None = None) -> Trace:
    """A study on ``landscape`` driven as :class:`autotune.study.loop.Study` drives one, in memory.

    Same suggestion code (parameters asked in dependency order, ``null`` defaults offered as
    "unset"), same duplicate rule (a configuration measured before is told its earlier result and
    does not count), the same user attributes for the sampler to read; one trial at a time.
    ``starting_points`` are enqueued first, as the study enqueues its baseline and known-good
    configurations (:func:`autotune.search.configurations.starting_points`). ``stop_at``: stop once a value at least this
    high was measured and at least ``min_trials`` trials were (a benchmark needs no more).

    ``early_stop`` (a fraction; the study uses PRUNE_MARGIN) stops a measurement as soon as its
    confidence interval lies entirely below the best value so far less that fraction, as the
    harness does with the bar the study sets (``MeasurementProtocol.stop_below``): the trial is
    charged the windows it needed instead of its whole measurement (:func:`early_stop_seconds`).
    """
    import optuna

    from autotune.errors import InvalidConfigError
    from autotune.search.samplers import suggest
    from autotune.targets import get_target
    from autotune.trial_attrs import write

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = landscape.space
    target = get_target(space.target)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for params in starting_points or []:
        full = {p.name: params.get(p.name) for p in space.free_parameters if p.is_active(params)}
        study.enqueue_trial(full, skip_if_exists=False)
    cache = CompileCacheModel(landscape)
    trace = Trace()
    measured: dict[str, float | None] = {}
    limit = max_trials or landscape.size
    dups = 0
    while len(trace.steps) < limit and dups < max_duplicates and len(measured) < landscape.size:
        trial = study.ask()
        try:
            params = suggest(trial, space)
            target.check(params)
        except InvalidConfigError:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            dups += 1
            continue
        key = config_key(params)
        write(trial, config_key=key)
        if key in measured:
            write(trial, duplicate_of=-1)
            if measured[key] is None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(trial, measured[key])
            trace.duplicates += 1
            dups += 1
            continue
        dups = 0
        rec = landscape.get(params)
        best = max((v for v in measured.values() if v is not None), default=None)
        bar = best * (1 - early_stop) if early_stop is not None and best is not None else None
        charge, _ = pruned_charge(rec, cache.charge(rec), bar)
        clock = (trace.steps[-1].clock if trace.steps else 0.0) + charge.seconds
        trace.steps.append(Step(key, rec.throughput if rec.ok else None, charge.seconds, clock))
        write(trial, result=json.dumps({
            "status": rec.status, "wall_seconds": charge.seconds,
            "compile": {"compile_seconds": charge.compile_seconds}}))
        measured[key] = rec.throughput if rec.ok else None
        write(trial, counted=True)
        if not rec.ok:
            write(trial, category=rec.category)
        if rec.ok:
            study.tell(trial, rec.throughput)
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        if stop_at is not None and len(trace.steps) >= min_trials and trace.reach(stop_at) is not None:
            break
    return trace
