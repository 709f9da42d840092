"""The configurations of a space: every one of them, a fixed sample of a large one, and the key
each is known by.

The strategy enumerates a small space to choose among the configurations not measured yet; a
recorded landscape is the same enumeration, each configuration measured once, or for a space too
large to enumerate (the built-in ones hold millions) a seeded space-filling sample of it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterator

from autotune.errors import InvalidConfigError, SpaceError
from autotune.space import Parameter, ParamValue, SearchSpace, config_key

if TYPE_CHECKING:
    import numpy as np


def enumerate_space(space: SearchSpace) -> list[dict[str, Any]]:
    """Every canonical configuration of an all-categorical ``space``, in file order.

    A parameter whose default is ``null`` also takes the value "unset" (the script's own), first,
    as the study's sampler offers it. Parameters whose ``when`` does not hold are left out.
    Configurations the space or its target rejects are left out too (the study never runs them).
    """
    order = space.in_dependency_order()
    for p in order:
        if p.choices is None and p.name not in space.fixed:
            raise SpaceError(f"{space.source}: parameter {p.name!r} is a range; a landscape needs every "
                             "parameter to have 'choices'")
    from autotune.targets import get_target

    target = get_target(space.target)
    configs: list[dict[str, Any]] = []
    seen: set[str] = set()

    def walk(i: int, chosen: dict[str, Any]) -> None:
        if i == len(order):
            active = {k: v for k, v in chosen.items() if space.parameters[k].is_active(chosen)}
            try:
                config = space.validate(active)
                target.check(config)
            except InvalidConfigError:
                return
            key = config_key(config)
            if key not in seen:
                seen.add(key)
                configs.append(config)
            return
        p = order[i]
        if p.name in space.fixed:
            walk(i + 1, {**chosen, p.name: space.fixed[p.name]})
            return
        if not p.is_active(chosen):
            walk(i + 1, chosen)
            return
        for value in _values(p):
            walk(i + 1, {**chosen, p.name: value} if value is not None else chosen)

    walk(0, {})
    return configs


def grid_size(space: SearchSpace) -> int:
    """How many configurations the grid of ``space`` has at most: the product of each free
    parameter's values ("unset" included), before ``when`` conditions and the target's check
    remove some. A range counts as one value (it cannot be enumerated)."""
    return math.prod(len(_values(p)) if p.choices is not None else 1 for p in space.free_parameters)


#: Points of the Sobol sequence drawn at a time (a power of two keeps the sequence balanced).
_SOBOL_BLOCK = 256
#: Points in a row that give nothing new before a sample stops short of its size.
_MAX_MISSES = 16 * _SOBOL_BLOCK


def sample_space(space: SearchSpace, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` distinct valid configurations of an all-categorical ``space``, the same for the same
    seed: the baseline and the space's known-good configurations first (:func:`starting_points`),
    then points of a scrambled Sobol sequence, each coordinate picking one of its parameter's
    values ("unset" included where the default is ``null``).

    A Sobol sequence fills the space evenly (every value of every parameter about equally often,
    and pairs of values too, more evenly than independent draws); it is a sequence, so a larger
    ``n`` with the same seed begins with the configurations of a smaller one, and a recording
    can be extended. Parameters whose ``when`` does not hold are dropped, and configurations the
    space or its target rejects, or that repeat one drawn earlier, are skipped (the study never
    runs them). A space whose grid is no larger than ``n`` gives every configuration; fewer than
    ``n`` come back only when the space has fewer.
    """
    from autotune.targets import get_target

    order = space.in_dependency_order()
    free = [p for p in order if p.name not in space.fixed]
    for p in free:
        if p.choices is None:
            raise SpaceError(f"{space.source}: parameter {p.name!r} is a range; a landscape needs every "
                             "parameter to have 'choices'")
    target = get_target(space.target)
    configs: list[dict[str, Any]] = []
    seen: set[str] = set()
    for config in starting_points(space):
        if len(configs) < n and config_key(config) not in seen:
            seen.add(config_key(config))
            configs.append(config)
    if grid_size(space) <= n:
        return configs + [c for c in enumerate_space(space) if config_key(c) not in seen]
    misses = 0  # in a row: a space of fewer than n valid configurations runs out
    for point in _sobol(len(free), seed):
        if len(configs) >= n or misses > _MAX_MISSES:
            break
        chosen: dict[str, Any] = dict(space.fixed)
        for p, u in zip(free, point):
            if p.is_active(chosen):
                values = _values(p)
                value = values[min(int(u * len(values)), len(values) - 1)]
                if value is not None:
                    chosen[p.name] = value
        try:
            config = space.validate({k: v for k, v in chosen.items() if space.parameters[k].is_active(chosen)})
            target.check(config)
        except InvalidConfigError:
            misses += 1
            continue
        key = config_key(config)
        if key in seen:
            misses += 1
            continue
        misses = 0
        seen.add(key)
        configs.append(config)
    return configs


def _sobol(d: int, seed: int) -> Iterator[np.ndarray]:
    from scipy.stats import qmc

    engine = qmc.Sobol(max(d, 1), scramble=True, rng=seed)
    while True:
        yield from engine.random(_SOBOL_BLOCK)


def _values(p: Parameter) -> list[ParamValue | None]:
    values: list[ParamValue | None] = list(p.choices or ())
    return [None, *values] if p.default is None else values


def starting_points(space: SearchSpace, known_good: bool = True) -> list[dict[str, Any]]:
    """What a study measures first, in canonical form and each once: the baseline (every parameter
    at its default), then (``known_good``) the space's known-good configurations that the user's
    ``--set`` leaves possible."""
    baseline = space.defaults()
    points: list[dict[str, Any]] = []
    for params in [baseline, *(space.known_good if known_good else [])]:
        try:
            config = space.validate({**baseline, **params, **space.fixed})
        except InvalidConfigError:
            continue
        if config not in points:
            points.append(config)
    return points
