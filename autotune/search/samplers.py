"""The samplers a study can use, by the name ``--sampler`` takes (:data:`autotune.config.SAMPLERS`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.space import Parameter, ParamValue, SearchSpace

if TYPE_CHECKING:
    import optuna


def make_sampler(name: str, space: SearchSpace, seed: int | None) -> optuna.samplers.BaseSampler:
    """The Optuna sampler called ``name`` for a study of ``space``."""
    import optuna

    if name == "tpe":
        from autotune.storage.optuna_versions import constrained

        return optuna.samplers.TPESampler(multivariate=True, group=True, constant_liar=True, seed=seed,
                                          n_startup_trials=5, **constrained())
    if name == "autotune":
        # The default: expected improvement over the configurations not measured yet, times the
        # chance each runs (strategy.py; bench/search_bench.py).
        from autotune.search.strategy import AutotuneSampler

        return AutotuneSampler(space, seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "qmc":
        return optuna.samplers.QMCSampler(seed=seed)
    raise AssertionError(f"RunConfig admits sampler {name!r}, which no branch builds")


def suggest(trial: optuna.Trial, space: SearchSpace) -> dict[str, Any]:
    """Ask Optuna's ``trial`` for each free parameter of ``space`` that is active given those
    chosen before it (dependency order); returns the canonical configuration."""
    chosen: dict[str, Any] = dict(space.fixed)
    for p in space.in_dependency_order():
        if p.name in space.fixed or not p.is_active(chosen):
            continue
        chosen[p.name] = suggest_one(trial, p)
    active = {k: v for k, v in chosen.items() if space.parameters[k].is_active(chosen)}
    return space.validate(active)


def suggest_one(trial: optuna.Trial, p: Parameter) -> ParamValue | None:
    """One parameter's value from Optuna; ``None`` (the script's own) is a choice where the
    parameter's default is unset."""
    if p.choices is not None:
        choices = list(p.choices)
        if p.default is None:
            choices = [None, *choices]
        return trial.suggest_categorical(p.name, choices)
    low, high = p.bounds
    if p.type == "int":
        return trial.suggest_int(p.name, int(low), int(high), step=int(p.step or 1), log=p.log)
    return trial.suggest_float(p.name, low, high, step=p.step, log=p.log)
