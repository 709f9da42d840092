"""What a study makes of a trial's result: its objectives' values in the study's order, how far it
is from each constraint and from the baseline's first losses (the numerics guard), or why it gave
no value. What it finds of a trial is written on the trial (its constraints, which a constrained
sampler reads, and its losses' distance), before :mod:`.record`, the one place that tells Optuna,
tells the value.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from autotune.objectives import Constraint, Objective, objective
from autotune.records import FailureCategory, TrialResult
from autotune.measurement.numerics import constraint_value, loss_deviation
from autotune.study.options import StudyOptions
from autotune.results.standings import _baseline_losses
from autotune.storage.attrs import StudyAttrs, TrialAttrs, write
from autotune.storage.optuna_versions import tell_constraints

if TYPE_CHECKING:
    import optuna


class Verdict:
    """What one study makes of its trials' results."""

    def __init__(self, study: optuna.Study, options: StudyOptions, objectives: list[Objective],
                 constraints: list[Constraint], usd_per_sample_second: float | None) -> None:
        self.study = study
        self.options = options
        self.objectives = objectives
        self.constraints = constraints
        self.usd_per_sample_second = usd_per_sample_second

    def values(self, result: TrialResult) -> list[float] | None:
        """The objectives' values of a result, in the study's order; None if one is missing."""
        values = [o.read(result, self.usd_per_sample_second) for o in self.objectives]
        known = [v for v in values if v is not None]
        return known if len(known) == len(values) else None

    def failure(self, result: TrialResult) -> tuple[str, str]:
        """The category and reason of a trial that gave no value."""
        failure = result.failure
        if failure is not None:
            return failure.category.value, failure.reason
        missing = [o for o in self.objectives if o.read(result, self.usd_per_sample_second) is None]
        if missing and missing[0].unit == "":
            return FailureCategory.script_error.value, f"the script reported no {missing[0].name!r}"
        what = missing[0].name if missing else "value"
        return FailureCategory.script_error.value, f"the trial gave no {what}: no step was measured"

    def judge_constraints(self, trial: optuna.Trial, result: TrialResult) -> list[str]:
        """Tell Optuna how far the result is from each constraint (above 0: broken); the broken ones."""
        violated = []
        for c in self.constraints:
            amount = c.violation(objective(c.name, self.options.direction).read(result, self.usd_per_sample_second))
            tell_constraints(trial, {c.text: amount})
            if amount > 0:
                violated.append(c.text)
        if violated:
            write(trial, violated=violated)
        return violated

    def guard_numerics(self, trial: optuna.Trial, result: TrialResult) -> None:
        """Record how far this trial's first losses are from the baseline's (a constraint)."""
        if not self.options.numerics_guard or not result.losses:
            return
        if TrialAttrs.of(trial).config_key == StudyAttrs.of(self.study).baseline_key:
            deviation: float | None = 0.0
        else:
            base = _baseline_losses(self.study)
            deviation = loss_deviation(result.losses, base) if base else None
        if deviation is not None:
            write(trial, loss_deviation=deviation if math.isfinite(deviation) else "inf")
            value = constraint_value(deviation, self.options.loss_tolerance)
            write(trial, numerics_constraint=value)
            tell_constraints(trial, {"numerics": value})  # constrained sampling steers away from it

