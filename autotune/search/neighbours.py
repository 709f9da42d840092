"""The configurations one knob away from another: where a local search steps next (the surrogate's
climb to the best it predicts, ``autotune landscape surrogate`` and ``record --refine``; the by-hand
baseline of the benchmarks, ``bench/lib/by_hand.py``).

A knob's values are its choices; a change that makes a knob apply or stop applying (``cpp_simdlen``
outside eager mode) drops what no longer applies, and a change the space or its target rejects is
no neighbour.
"""

from __future__ import annotations

from typing import Any

from autotune.errors import InvalidConfigError
from autotune.space import ParamValue, SearchSpace, config_key


def knob_values(space: SearchSpace, name: str) -> list[ParamValue | None]:
    """The values a knob can take: its choices, and "unset" (the script's own) first where its
    default is ``null``."""
    p = space.parameters[name]
    return [None, *(p.choices or ())] if p.default is None else list(p.choices or ())


def with_knob(space: SearchSpace, config: dict[str, Any], name: str, value: ParamValue | None) -> dict[str, Any] | None:
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
    """The free knobs, each after those its ``when`` names."""
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
