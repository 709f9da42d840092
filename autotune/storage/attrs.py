"""What autotune keeps on each Optuna trial and study (Optuna's user attributes): every key once,
with its type, and a reader and a writer that use them.

They live in the Optuna database, where other drivers, the daemon, the sampler and later versions
read them: the names are a storage format and stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial


class WithUserAttrs(Protocol):
    """A study as Optuna hands it out: running (``optuna.Study``) or listed (its frozen summary)."""

    @property
    def user_attrs(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class TrialAttrs:
    """The attributes of one trial, as the study writes them."""

    #: The configuration's canonical key (JSON of its parameters).
    config_key: str | None = None
    #: The trial's :class:`~autotune.records.TrialResult`, as JSON.
    result: str | None = None
    #: Why it gave no value: a failure category (``compile_error``, ``crash``, ...), and in words.
    category: str | None = None
    reason: str | None = None
    #: The earlier trial of the same configuration that answered this one.
    duplicate_of: int | None = None
    #: It counts towards ``--trials``: a measurement, or a result remembered from an earlier one.
    #: Written before the trial is told; a trial failed for lost between the two (its driver killed
    #: there, its heartbeats stale) does not count (:meth:`of`).
    counted: bool = False
    #: A re-measurement: the number of the trial it measures again, and why it was measured again
    #: (``noise``: the between-run noise early in the study; ``race``: the incumbent raced against
    #: a challenger; ``confirm``: ``--confirm``; ``None`` in a study from before racing).
    confirms: int | None = None
    again: str | None = None
    #: The env vars the trial ran with, and where it was measured (the driver's
    #: :func:`autotune.provenance.provenance`; the worker's host is in its result's placement).
    env: dict[str, str] | None = None
    provenance: dict[str, Any] | None = None
    #: The key of its result in the cache root, and whether the result came from there.
    result_key: str | None = None
    cached: bool = False
    #: The key of a configuration the study enqueued (the baseline, a known-good one).
    enqueued_key: str | None = None
    #: Numerics guard: how far the first losses are from the baseline's (``"inf"`` when infinitely
    #: far), and the constraint value Optuna learns (above 0: violated).
    loss_deviation: float | str | None = None
    numerics_constraint: float | None = None
    #: The study's constraints (``--constraint``) this trial's result breaks: never the best.
    violated: list[str] | None = None
    #: Each constraint's value (above 0: broken), kept here under an Optuna older than 5.0, whose
    #: trials do not hold them (:mod:`autotune.storage.optuna_versions`).
    constraints: dict[str, float] | None = None
    #: The parameters it set that never reached the script (no DataLoader for a batch size): it
    #: measured the script's own value of each, under another name, so it is never the best.
    idle: list[str] | None = None

    @classmethod
    def of(cls, trial: FrozenTrial | optuna.Trial) -> TrialAttrs:
        """The attributes of an Optuna trial (frozen or running)."""
        attrs = trial.user_attrs
        kept = cls(**{name: attrs[name] for name in _TRIAL if name in attrs})
        if kept.counted and _lost(trial, kept):
            return replace(kept, counted=False)
        return kept


@dataclass(frozen=True)
class StudyAttrs:
    """The attributes of a study, written when it is created (and the guard's at every run)."""

    target: str | None = None
    metric: str | None = None
    script: str | None = None
    args: list[str] | None = None
    #: What its trials measured: the script's contents and :func:`autotune.cache.environment_key`
    #: (with ``args``); a run that differs in one measures a study of its own.
    script_sha256: str | None = None
    environment_key: str | None = None
    space: str | None = None
    #: The key of the baseline configuration (every parameter at its default).
    baseline_key: str | None = None
    #: Where the study measures (:func:`autotune.provenance.provenance`).
    provenance: dict[str, Any] | None = None
    loss_tolerance: float | None = None
    numerics_guard: bool | None = None
    #: What the study optimises, in the order of Optuna's values (``metric`` is the first), the
    #: constraints a configuration must keep, and the objective that picks the best of a front.
    objectives: list[str] | None = None
    constraints: list[str] | None = None
    prefer: str | None = None
    #: What an hour of the instance cost at the last run (:class:`autotune.machine.pricing.Price`, as a dict),
    #: the devices each trial held on each of its nodes (``None``: the target holds none), and its
    #: nodes (``None``: one): what cost figures use.
    price: dict[str, Any] | None = None
    devices_per_trial: int | None = None
    nodes_per_trial: int | None = None
    #: What the study had spent at the end of the last run, and its caps
    #: (:class:`autotune.study.budget.Spend`, as a dict).
    spend: dict[str, Any] | None = None
    #: The earlier studies the last run started from (:mod:`autotune.study.warm_start`).
    warm_start: list[str] | None = None
    #: The between-run noise that earlier studies measured here (:class:`autotune.measurement.noise.RunNoise`
    #: as ``[squares, df]``), read from the cache root when the study started.
    noise_prior: list[float] | None = None

    @classmethod
    def of(cls, study: WithUserAttrs) -> StudyAttrs:
        attrs = study.user_attrs
        return cls(**{name: attrs[name] for name in _STUDY if name in attrs})


def counts(trial: FrozenTrial) -> bool:
    """Whether a finished trial counts towards ``--trials`` (:attr:`TrialAttrs.counted`); a
    running one does not yet."""
    return trial.state.is_finished() and TrialAttrs.of(trial).counted


def _lost(trial: FrozenTrial | optuna.Trial, attrs: TrialAttrs) -> bool:
    """Failed with ``counted`` written but never told: every failure a driver tells has its
    category written first, so one without a category was failed by another driver, for lost."""
    state = getattr(trial, "state", None)  # a running ``optuna.Trial`` has none
    return state is not None and state.name == "FAIL" and attrs.category is None


_TRIAL = frozenset(f.name for f in fields(TrialAttrs))
_STUDY = frozenset(f.name for f in fields(StudyAttrs))


def write(trial_or_study: optuna.Trial | optuna.Study, **values: object) -> None:
    """Set attributes of a running Optuna trial, or of a study; a name autotune does not keep is
    an error (a typo would otherwise be a new attribute that nothing reads)."""
    known = _STUDY if hasattr(trial_or_study, "study_name") else _TRIAL
    unknown = sorted(set(values) - known)
    if unknown:
        raise KeyError(f"not an attribute autotune keeps: {', '.join(unknown)}")
    for name, value in values.items():
        trial_or_study.set_user_attr(name, value)


def trial_attrs(**values: object) -> dict[str, Any]:
    """The ``user_attrs`` of a trial made whole (``optuna.trial.create_trial``), checked as :func:`write` does."""
    unknown = sorted(set(values) - _TRIAL)
    if unknown:
        raise KeyError(f"not an attribute autotune keeps: {', '.join(unknown)}")
    return values
