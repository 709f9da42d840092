"""Pruning, in one place: the bar below which a trial stops measuring, and whether a result that
stopped there answers its configuration later.

The harness applies the bar (:func:`autotune.measurement.windows.cannot_win`); a replay charges a
trial for the windows the bar left it (:func:`autotune.landscapes.replay.pruned_charge`). Neither
decides it: the study does, here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.measurement.windows import PRUNE_MARGIN
from autotune.objectives import Constraint, Objective
from autotune.records import MeasurementProtocol, TrialResult
from autotune.study.results import _best

if TYPE_CHECKING:
    import optuna


def stop_below(study: optuna.Study, *, prune: bool, objectives: list[Objective],
               constraints: list[Constraint]) -> float | None:
    """The bar below which a trial stops measuring: the best throughput so far less PRUNE_MARGIN,
    when throughput is the one objective and the study prunes, and the bound of a ``throughput>=X``
    constraint (a trial certainly below it is infeasible). Only throughput, which the harness times
    itself, can stop a trial early."""
    bars = [c.bound for c in constraints if c.name == "throughput" and not c.upper]
    if prune and [o.name for o in objectives] == ["throughput"]:
        best = _best(study)
        if best is not None and best[1]:
            bars.append(best[1] * (1 - PRUNE_MARGIN))
    return max(bars) if bars else None


def trial_protocol(protocol: MeasurementProtocol, study: optuna.Study, *, prune: bool,
                   objectives: list[Objective], constraints: list[Constraint]) -> MeasurementProtocol:
    """``protocol`` with the bar of :func:`stop_below`."""
    bar = stop_below(study, prune=prune, objectives=objectives, constraints=constraints)
    return protocol if bar is None else protocol.model_copy(update={"stop_below": bar})


def answers(remembered: TrialResult, *, prune: bool) -> bool:
    """Whether a remembered result answers its configuration: one that a run which pruned stopped
    early answers only a study that prunes too (``--no-prune`` measures it whole)."""
    return prune or remembered.measurement is None or not remembered.measurement.pruned
