"""The by-hand method, as a sampler: what a person tuning without a search does, to measure the
search against.

From the baseline, one knob at a time in a fixed order, every other value of that knob is tried
with the other knobs as they are; the best of them is kept if it beats the configuration so far,
and the next knob comes. After the last knob a second pass starts from the first, and so on until
a whole pass changes nothing; then there is nothing left to try, and the sampler proposes the best
again (the study answers a measured configuration for free and, after enough of those, stops).

The order is the space's parameter order (each parameter after those its ``when`` names:
:meth:`~autotune.space.SearchSpace.in_dependency_order`). In the built-in spaces that is the data
loader first (batch size, workers), then precision or the compile mode, then the compiler's
flags: the order of the published hand-tuning of a ViT on inf2.xlarge that the product brief
cites (workers, batch size, AMP, bf16, graph cut, compiler flags). A knob that does not apply to
the configuration so far (``cpp_simdlen`` in eager mode) is skipped; one that a change of an
earlier knob made apply is tried when its turn comes. "Beats" is any improvement of the measured
value: a person reads one number per try.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from optuna.samplers import BaseSampler

from autotune.errors import InvalidConfigError
from autotune.search.strategy import measured_history
from autotune.space import SearchSpace, config_key

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

#: Passes over the knobs at most (each pass that changes nothing ends the method anyway).
MAX_PASSES = 5


def knob_values(space: SearchSpace, name: str) -> list[Any]:
    """The values a knob can take: its choices, and "unset" (the script's own) first where its
    default is ``null``."""
    p = space.parameters[name]
    return [None, *(p.choices or ())] if p.default is None else list(p.choices or ())


def with_knob(space: SearchSpace, config: dict[str, Any], name: str, value: Any) -> dict[str, Any] | None:
    """``config`` with one knob set to ``value`` (parameters that no longer apply dropped), or
    None when the space or its target rejects it."""
    from autotune.targets import get_target

    chosen = {k: v for k, v in {**config, name: value}.items() if v is not None}
    active = {k: v for k, v in chosen.items() if space.parameters[k].is_active(chosen)}
    try:
        out = space.validate(active)
        get_target(space.target).check(out)
    except InvalidConfigError:
        return None
    return out


def knob_order(space: SearchSpace) -> list[str]:
    return [p.name for p in space.in_dependency_order() if p.name not in space.fixed]


def changes_of_knob(space: SearchSpace, config: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """Every valid configuration that differs from ``config`` in knob ``name`` alone (nothing when
    the knob does not apply to ``config``)."""
    if not space.parameters[name].is_active(config):
        return []
    out: list[dict[str, Any]] = []
    for value in knob_values(space, name):
        if value == config.get(name) and type(value) is type(config.get(name)):
            continue
        changed = with_knob(space, config, name, value)
        if changed is not None and changed != config and changed not in out:
            out.append(changed)
    return out


def one_knob_changes(space: SearchSpace, config: dict[str, Any]) -> list[dict[str, Any]]:
    """Every valid configuration that differs from ``config`` in one knob."""
    out: dict[str, dict[str, Any]] = {}
    for name in knob_order(space):
        for c in changes_of_knob(space, config, name):
            out.setdefault(config_key(c), c)
    return list(out.values())


def next_by_hand(space: SearchSpace, measured: dict[str, float | None], maximize: bool = True) -> dict[str, Any] | None:
    """The next configuration the by-hand method measures, given the values measured so far
    (``None``: it failed), or None when it has finished.

    The method is replayed from the baseline on ``measured``, so the answer depends on the
    results alone, not on the order the study told them in.
    """
    current = space.defaults()
    if config_key(current) not in measured:
        return current
    value = measured[config_key(current)]

    def better(v: float | None, than: float | None) -> bool:
        return v is not None and (than is None or (v > than if maximize else v < than))

    for _ in range(MAX_PASSES):
        changed = False
        for name in knob_order(space):
            best, best_value = None, value
            for candidate in changes_of_knob(space, current, name):
                key = config_key(candidate)
                if key not in measured:
                    return candidate
                if better(measured[key], best_value):
                    best, best_value = candidate, measured[key]
            if best is not None:
                current, value, changed = best, best_value, True
        if not changed:
            return None
    return None


class ByHandSampler(BaseSampler):
    """An Optuna sampler that proposes what :func:`next_by_hand` says, for a study of ``space``
    (all of whose parameters have choices), asked in the space's dependency order as the study
    asks (:func:`autotune.search.samplers.suggest`)."""

    def __init__(self, space: SearchSpace) -> None:
        for p in space.free_parameters:
            if p.choices is None:
                raise InvalidConfigError(f"the by-hand method tries each value of a knob; {p.name!r} is a range")
        self.space = space
        self._picked: dict[int, dict[str, Any]] = {}

    def infer_relative_search_space(self, study: optuna.Study, trial: optuna.trial.FrozenTrial
                                    ) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        config = self._picked.get(trial._trial_id)
        if config is None:
            config = self._picked[trial._trial_id] = self.propose(study)
        value = config.get(param_name)
        # The method tries the listed choices of each knob (knob_values): a parameter with choices
        # is asked as a categorical (autotune.search.samplers.suggest_one).
        choices = cast("optuna.distributions.CategoricalDistribution", param_distribution).choices
        return value if value in choices else choices[0]

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, state: optuna.trial.TrialState,
                    values: Sequence[float] | None) -> None:
        self._picked.pop(trial._trial_id, None)

    def propose(self, study: optuna.Study) -> dict[str, Any]:
        import optuna

        maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
        history, _ = measured_history(study)
        measured = {config_key(c): v for c, v, _ in history}
        config = next_by_hand(self.space, measured, maximize)
        if config is not None:
            return config
        done = [(c, v) for c, v, _ in history if v is not None]
        # Finished: the best again, which the study answers from its earlier measurement.
        return (max if maximize else min)(done, key=lambda cv: cv[1])[0] if done else self.space.defaults()
