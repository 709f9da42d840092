"""The by-hand method, as a sampler: what a person tuning without a search does, to measure the
search against.

From the baseline, one knob at a time in a fixed order, every other value of that knob is tried
with the other knobs as they are; the best of them is kept if it beats the configuration so far,
and the next knob comes. After the last knob a second pass starts from the first, and so on until
a whole pass changes nothing; then there is nothing left to try, and the sampler proposes the best
again (the study answers a measured configuration for free and, after enough of those, stops).

The order is the space's parameter order (each parameter after those its ``when`` names:
:func:`autotune.search.neighbours.knob_order`). In the built-in spaces that is the data
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
from autotune.search.neighbours import changes_of_knob, knob_order
from autotune.search.strategy import measured_history
from autotune.space import SearchSpace, config_key

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

#: Passes over the knobs at most (each pass that changes nothing ends the method anyway).
MAX_PASSES = 5


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
        self._picked: dict[tuple[str, int], dict[str, Any]] = {}

    def infer_relative_search_space(self, study: optuna.Study, trial: optuna.trial.FrozenTrial
                                    ) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        config = self._picked.get((study.study_name, trial.number))
        if config is None:
            config = self._picked[(study.study_name, trial.number)] = self.propose(study)
        value = config.get(param_name)
        # The method tries the listed choices of each knob (knob_values): a parameter with choices
        # is asked as a categorical (autotune.search.samplers.suggest_one).
        choices = cast("optuna.distributions.CategoricalDistribution", param_distribution).choices
        return value if value in choices else choices[0]

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, state: optuna.trial.TrialState,
                    values: Sequence[float] | None) -> None:
        self._picked.pop((study.study_name, trial.number), None)

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
