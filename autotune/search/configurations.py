"""The configurations of a space: every one of them, and the key each is known by.

The strategy enumerates a small space to choose among the configurations not measured yet; a
recorded landscape is the same enumeration, each configuration measured once.
"""

from __future__ import annotations

from typing import Any

from autotune.errors import InvalidConfigError, SpaceError
from autotune.space import Parameter, SearchSpace, config_key


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


def _values(p: Parameter) -> list[Any]:
    values = list(p.choices or ())
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
