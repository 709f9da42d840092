"""What a report shows, read once from the stored study.

Every figure and table of the report is drawn from a :class:`StudyReport`, and its trials are the
very :class:`~autotune.results.outputs.TrialSummary` records that ``autotune show --json`` prints:
the report cannot show a number that the stored trials do not hold.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from autotune.results.outputs import BestConfig, TrialSummary
from autotune.results.standings import baseline_value, pareto_front
from autotune.results.best import best_config
from autotune.results.summaries import study_summaries
from autotune.storage.attrs import StudyAttrs

if TYPE_CHECKING:
    import optuna


class StudyReport(BaseModel):
    """A stored study as the report shows it."""

    study: str
    target: str | None = None
    metric: str = "throughput"
    #: ``maximize`` or ``minimize``, one per objective.
    directions: list[str]
    script: str | None = None
    trials: list[TrialSummary]
    baseline_value: float | None = None
    best: BestConfig | None = None
    #: Optuna's parameter importances (its default evaluator; with several objectives, towards the
    #: Pareto front), most important first; empty when they cannot be computed, and
    #: :attr:`importance_note` says why.
    importances: dict[str, float] = Field(default_factory=dict)
    importance_note: str | None = None
    #: The numbers of the trials on the Pareto front (several objectives only).
    pareto_front: list[int] = Field(default_factory=list)
    provenance: dict[str, Any] = Field(default_factory=dict)
    generated_at: float = Field(default_factory=time.time)

    @property
    def maximize(self) -> bool:
        return self.directions[0] == "maximize"

    def measured(self) -> list[TrialSummary]:
        """Trials with a value of their own (not a copy of an earlier trial's), in number order."""
        return [t for t in self.trials if t.value is not None and t.duplicate_of is None]

    def failed(self) -> list[TrialSummary]:
        """Failed trials that ran (not a copy of an earlier failure), in number order."""
        return [t for t in self.trials if t.state == "FAIL" and t.duplicate_of is None]

    def best_so_far(self) -> list[tuple[int, float]]:
        """(trial number, best value up to it) at each measured trial that may be the best (its
        losses stayed with the baseline's)."""
        out: list[tuple[int, float]] = []
        best: float | None = None
        for t in self.measured():
            if t.numerics_violated or t.value is None:
                continue
            if best is None or (t.value > best if self.maximize else t.value < best):
                best = t.value
            out.append((t.number, best))
        return out

    def failures_by_category(self) -> dict[str, list[TrialSummary]]:
        by: dict[str, list[TrialSummary]] = {}
        for t in self.failed():
            by.setdefault(t.category or "unknown", []).append(t)
        return dict(sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0])))

    def parameters(self) -> list[str]:
        """Every parameter any trial set, in the order the space lists them (first seen)."""
        names: dict[str, None] = {}
        for t in self.trials:
            names.update(dict.fromkeys(t.params))
        return list(names)

    def trial_seconds(self) -> tuple[float, float]:
        """Wall and compile seconds of every trial that ran (copies and remembered results excluded)."""
        ran = [t for t in self.trials if t.duplicate_of is None and not t.cached]
        return (sum(t.wall_seconds or 0.0 for t in ran), sum(t.compile_seconds or 0.0 for t in ran))


def study_report(study: optuna.Study, name: str) -> StudyReport:
    """The report of an Optuna study that autotune stored (:func:`autotune.storage.optuna_storage.load_study`)."""
    attrs = StudyAttrs.of(study)
    directions = [d.name.lower() for d in study.directions]
    trials = study_summaries(study)
    importances, note = _importances(study)
    front = sorted(t.number for t, _ in pareto_front(study)) if len(directions) > 1 else []
    best = best_config(study, name) if len(directions) == 1 else None
    return StudyReport(study=name, target=attrs.target, metric=attrs.metric or "throughput", directions=directions,
                       script=attrs.script, trials=trials,
                       baseline_value=baseline_value(study) if len(directions) == 1 else None, best=best,
                       importances=importances, importance_note=note, pareto_front=front,
                       provenance=attrs.provenance or {})


def _importances(study: optuna.Study) -> tuple[dict[str, float], str | None]:
    """Optuna's own importances (its default evaluator, PED-ANOVA), or why there are none."""
    import optuna

    complete = study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.COMPLETE])
    if len({tuple(sorted(t.params.items(), key=lambda kv: kv[0])) for t in complete}) < 2:
        return {}, "fewer than two configurations measured: no importance to tell"
    try:
        # PED-ANOVA (Optuna's default) reads the directions itself, and with several objectives
        # asks which levels reach the Pareto front.
        found = optuna.importance.get_param_importances(study)
    except (ValueError, RuntimeError) as exc:  # e.g. every measured trial shares one value per parameter
        return {}, f"Optuna could not evaluate them: {exc}"
    if not found:
        return {}, "no parameter varied among the measured trials"
    return {k: float(v) for k, v in found.items()}, None
