"""What a stored study says: its measured configurations ranked, the best and the baseline, the
numerics guard's verdict, and a summary of every trial. Read by the study as it runs, and by
``autotune best``, ``show``, the daemon and ``ensure`` afterwards."""

from __future__ import annotations

from typing import Any

from autotune.config import JobConfig
from autotune.records import TrialResult
from autotune.study.numerics import loss_deviation
from autotune.study.outputs import BestConfig, TrialSummary
from autotune.trial_attrs import StudyAttrs, TrialAttrs


def _baseline_losses(study: Any) -> list[float]:
    key = StudyAttrs.of(study).baseline_key
    for t in study.get_trials(deepcopy=False):
        if TrialAttrs.of(t).config_key == key and TrialAttrs.of(t).result is not None and t.state.name == "COMPLETE":
            return TrialResult.model_validate_json(TrialAttrs.of(t).result).losses
    return []


def numerics_violated(study: Any, trial: Any, base: list[float] | None = None) -> bool:
    """Whether ``trial``'s first losses left the baseline's by more than the study's tolerance.

    Decided from the stored losses, so that a trial told before its baseline finished is judged
    all the same.
    """
    if StudyAttrs.of(study).numerics_guard is False or TrialAttrs.of(trial).result is None:
        return False
    if TrialAttrs.of(trial).config_key == StudyAttrs.of(study).baseline_key:
        return False
    base = _baseline_losses(study) if base is None else base
    losses = TrialResult.model_validate_json(TrialAttrs.of(trial).result).losses
    deviation = loss_deviation(losses, base) if base else None
    tolerance = StudyAttrs.of(study).loss_tolerance
    if tolerance is None:
        tolerance = JobConfig.model_fields["loss_tolerance"].default
    return deviation is not None and deviation > tolerance


def _trial_env(result: TrialResult) -> dict[str, str]:
    """The env a trial ran with: its plan's, and the NeuronCores its placement gave it."""
    return {**result.plan.env, **{k: v for k, v in result.placement.items() if k.startswith("NEURON_")}}


def _sign(study: Any) -> float:
    """-1 when the study maximises (so that sorting ascending puts the best first), else 1."""
    import optuna

    return -1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1.0


def _measured(study: Any) -> list[tuple[Any, list[float], bool]]:
    """Each configuration measured successfully: its first trial, the values of all its
    measurements (re-measurements included; one whose losses left the baseline's counts for
    nothing), and whether a re-measurement of it failed."""
    import optuna

    base = _baseline_losses(study)
    first: dict[str, Any] = {}
    values: dict[str, list[float]] = {}
    flaky: set[str] = set()
    for t in study.get_trials(deepcopy=False):
        if TrialAttrs.of(t).duplicate_of is not None or not t.state.is_finished():
            continue
        key = TrialAttrs.of(t).config_key or f"#{t.number}"
        again = TrialAttrs.of(t).confirms is not None
        if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None \
                and not numerics_violated(study, t, base):
            values.setdefault(key, []).append(t.value)
            if not again:
                first.setdefault(key, t)
        elif again:
            flaky.add(key)
    return [(t, values[key], key in flaky) for key, t in first.items()]


def _ranked(study: Any) -> list[tuple[Any, list[float], bool]]:
    """:func:`_measured`, best first: the configurations measured more than once (the finalists
    of ``confirm``) by the mean of their measurements, then the others by their one measurement,
    then those that failed when measured again. A configuration measured once is not compared
    with the finalists' means: its one value is as lucky as theirs were before they were
    measured again."""
    sign = _sign(study)
    return sorted(_measured(study), key=lambda m: (m[2], len(m[1]) < 2, sign * sum(m[1]) / len(m[1]),
                                                   m[0].number))


def _ranked_configurations(study: Any) -> list[Any]:
    """The first trial of each configuration measured, best first by that first measurement."""
    sign = _sign(study)
    return [t for t, _, _ in sorted(_measured(study), key=lambda m: (sign * m[0].value, m[0].number))]


def _best(study: Any) -> tuple[Any, float, list[float]] | None:
    """The best configuration's first trial, the mean of its measurements, and the measurements."""
    ranked = _ranked(study)
    if not ranked:
        return None
    t, values, _ = ranked[0]
    return t, sum(values) / len(values), values


def baseline_value(study: Any) -> float | None:
    """The measured value of the baseline configuration, if it completed."""
    import optuna

    key = StudyAttrs.of(study).baseline_key
    for t in study.get_trials(deepcopy=False, states=[optuna.trial.TrialState.COMPLETE]):
        if TrialAttrs.of(t).config_key == key and TrialAttrs.of(t).duplicate_of is None:
            return t.value
    return None


def best_config(study: Any, name: str, prov: dict[str, Any] | None = None) -> BestConfig | None:
    import optuna

    found = _best(study)
    if found is None:
        return None
    t, value, values = found
    attrs, stored = TrialAttrs.of(t), StudyAttrs.of(study)
    result = TrialResult.model_validate_json(attrs.result) if attrs.result is not None else None
    base = baseline_value(study)
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    speedup = None
    if base and value:
        speedup = value / base if maximize else base / value
    plan = result.plan if result else None
    m = result.measurement if result else None
    return BestConfig(
        study=name, trial=t.number, target=stored.target or "",
        params=dict(plan.params) if plan else dict(t.params),
        env=dict(attrs.env or (plan.env if plan else {})),
        flags_env=plan.flags_env if plan else None,
        compiler_flags=plan.compiler_flags if plan else None,
        knobs={k: v for k, v in (plan.knobs.model_dump() if plan else {}).items() if v not in (None, False)},
        metric=stored.metric or "throughput", value=value, measurements=values,
        throughput=m.throughput if m else None, ci95_low=m.ci95_low if m else None,
        ci95_high=m.ci95_high if m else None, baseline_value=base, speedup=speedup,
        provenance=prov or stored.provenance or {},
    )


def study_summaries(study: Any) -> list[TrialSummary]:
    out = []
    base = _baseline_losses(study)
    for t in study.get_trials(deepcopy=False):
        attrs = TrialAttrs.of(t)
        result = TrialResult.model_validate_json(attrs.result) if attrs.result is not None else None
        m = result.measurement if result else None
        out.append(TrialSummary(
            number=t.number, state=t.state.name,
            params=dict(result.plan.params) if result else {k: v for k, v in t.params.items() if v is not None},
            value=t.value if t.state.name == "COMPLETE" else None,
            throughput=m.throughput if m else None,
            ci95_low=m.ci95_low if m else None, ci95_high=m.ci95_high if m else None,
            pruned=bool(m and m.pruned),
            category=attrs.category, reason=attrs.reason,
            log_tail=result.log_tail if result and not result.ok else None,
            wall_seconds=result.wall_seconds if result else None,
            compile_seconds=result.compile.compile_seconds if result else None,
            duplicate_of=attrs.duplicate_of, confirms=attrs.confirms, env=attrs.env or {}, cached=attrs.cached,
            cache_hits=result.compile.cache_hits if result else None,
            cache_misses=result.compile.cache_misses if result else None,
            placement=result.placement if result else {},
            started_at=result.started_at if result else None, ended_at=result.ended_at if result else None,
            numerics_violated=t.state.name == "COMPLETE" and numerics_violated(study, t, base),
            losses=result.losses[:5] if result else [],
        ))
    return out
