"""Pruning, in one place: the bar below which a trial stops measuring, and whether a result that
stopped there answers its configuration later; and, beside it, the seconds a run measures at least
on a noisy host (:func:`measuring`), the other rule of when a trial stops.

The harness applies the bar (:func:`autotune.measurement.windows.cannot_win`); a replay charges a
trial for the windows the bar left it (:func:`autotune.landscapes.replay.pruned_charge`). Neither
decides it: the study does, here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.measurement.noise import RUN_SECONDS, RunNoise, margin, measure_seconds
from autotune.measurement.windows import PRUNE_MARGIN
from autotune.objectives import Constraint, Objective
from autotune.records import MeasurementProtocol, TrialResult
from autotune.results.ranking import ranked
from autotune.results.standings import noise_of, standings

if TYPE_CHECKING:
    import optuna


def stop_below(study: optuna.Study, *, prune: bool, objectives: list[Objective],
               constraints: list[Constraint]) -> float | None:
    """The bar below which a trial stops measuring, when throughput is the one objective and the
    study prunes: the best so far (the mean over its runs) less the between-run noise that one run
    of a challenger may still be behind by and not be behind beyond it
    (:func:`autotune.measurement.noise.margin`; at least PRUNE_MARGIN): a trial under it cannot
    win even a race. And the bound of a ``throughput>=X`` constraint (a trial certainly below it
    is infeasible). Only throughput, which the harness times itself, can stop a trial early."""
    bars = [c.bound for c in constraints if c.name == "throughput" and not c.upper]
    if prune and [o.name for o in objectives] == ["throughput"]:
        measured = standings(study)
        noise = noise_of(study, measured)
        order = ranked(measured, noise, maximize=True)
        if order and order[0].runs.mean:
            # Where no noise was measured (``--race 0``), a run's own interval is all there is,
            # and the harness's test weighs the trial's own already.
            behind = margin(order[0].runs, noise) if noise.known else None
            bars.append(order[0].runs.mean * (1 - max(PRUNE_MARGIN, behind or 0.0)))
    return max(bars) if bars else None


def trial_protocol(protocol: MeasurementProtocol, study: optuna.Study, *, prune: bool,
                   objectives: list[Objective], constraints: list[Constraint]) -> MeasurementProtocol:
    """``protocol`` with the bar of :func:`stop_below`."""
    bar = stop_below(study, prune=prune, objectives=objectives, constraints=constraints)
    return protocol if bar is None else protocol.model_copy(update={"stop_below": bar})


def under_noise(protocol: MeasurementProtocol, noise: RunNoise) -> MeasurementProtocol:
    """``protocol`` with the seconds each run measures at least under ``noise``
    (:func:`autotune.measurement.noise.measure_seconds`), and ``noise`` itself, which a run made of
    several processes weighs their spread with; ``protocol`` itself where it asks as many seconds
    and ``noise`` is unknown."""
    update: dict[str, float | int] = {}
    seconds = measure_seconds(noise)
    if seconds > protocol.min_measure_seconds:
        update["min_measure_seconds"] = seconds
    if noise.known:
        update.update(noise_squares=noise.squares, noise_df=noise.df)
    return protocol.model_copy(update=update) if update else protocol


def measuring(protocol: MeasurementProtocol, study: optuna.Study) -> MeasurementProtocol:
    """:func:`under_noise` of the study's between-run noise: what a new trial measures."""
    return under_noise(protocol, noise_of(study))


def decisive_seconds(noise: RunNoise) -> float:
    """The seconds a decisive run measures at least: a re-measurement, and the best's and the
    baseline's runs before a study ends (:mod:`.racing`)."""
    return RUN_SECONDS


def measuring_again(protocol: MeasurementProtocol, study: optuna.Study) -> MeasurementProtocol:
    """What a re-measurement measures: :func:`measuring`, and at least :func:`decisive_seconds`."""
    noise = noise_of(study)
    measured = under_noise(protocol, noise)
    seconds = decisive_seconds(noise)
    if seconds > measured.min_measure_seconds:
        measured = measured.model_copy(update={"min_measure_seconds": seconds})
    return measured


def answers(remembered: TrialResult, *, prune: bool) -> bool:
    """Whether a remembered result answers its configuration: one that a run which pruned stopped
    early answers only a study that prunes too (``--no-prune`` measures it whole)."""
    return prune or remembered.measurement is None or not remembered.measurement.pruned
