"""The samplers a study can use, by the name ``--sampler`` takes (:data:`autotune.config.SAMPLERS`)."""

from __future__ import annotations

from typing import Any

from autotune.space import SearchSpace


def make_sampler(name: str, space: SearchSpace, seed: int | None) -> Any:
    """The Optuna sampler called ``name`` for a study of ``space``."""
    import optuna

    if name == "tpe":
        return optuna.samplers.TPESampler(multivariate=True, group=True, constant_liar=True, seed=seed,
                                          n_startup_trials=5)
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
