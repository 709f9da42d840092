"""What a study measures before its sampler proposes anything: the baseline, the earlier studies'
best configurations (``--warm-start``, ``--warm``), then the space's known-good configurations
whose knobs no earlier best already moved; and what the earlier studies' results teach the sampler."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune.search.configurations import starting_points
from autotune.space import SearchSpace, config_key
from autotune.study.warm_start import WarmStart, after_baseline, describe, read_warm_start
from autotune.storage.attrs import StudyAttrs, TrialAttrs, trial_attrs, write

if TYPE_CHECKING:
    import optuna


def warm_start(storage: optuna.storages.BaseStorage, names: list[str], study: optuna.Study, space: SearchSpace,
               check: Callable[[dict[str, Any]], Any], notes: list[str]) -> WarmStart:
    """Read the earlier studies ``names``; their results become the sampler's prior."""
    warm = read_warm_start(storage, names, space, check)
    prior = getattr(study.sampler, "warm", None)  # autotune's sampler; Optuna's have none
    if prior is not None:
        prior(warm.results, starts=warm.bests)
    note = describe(warm)
    if note:
        notes.append(note)
    write(study, warm_start=warm.studies)
    return warm


def enqueue_starting_points(study: optuna.Study, space: SearchSpace, baseline: dict[str, Any],
                            warm: WarmStart, given: list[dict[str, Any]] | None = None) -> None:
    """Baseline first, then the earlier studies' best configurations, then the known-good
    configurations that move a knob no earlier best moved, each once per study (or the configurations ``given`` instead)."""
    if StudyAttrs.of(study).baseline_key is None:
        write(study, baseline_key=config_key(baseline))
    queued = {TrialAttrs.of(t).enqueued_key for t in study.get_trials(deepcopy=False)}
    points = given if given is not None else after_baseline(starting_points(space), warm.bests)
    for config in points:
        key = config_key(config)
        if key not in queued:
            queued.add(key)
            full = {p.name: config.get(p.name) for p in space.free_parameters if p.is_active(config)}
            study.enqueue_trial(full, user_attrs=trial_attrs(enqueued_key=key), skip_if_exists=False)
