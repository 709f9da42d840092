"""A search space as :class:`~autotune.search.strategy.AutotuneSampler`'s models see it: each free
parameter a list of levels, "unset" (``None``) first, and a configuration a row of level indices,
with the distances between the levels of each parameter and the positions of ordered ones."""

from __future__ import annotations

from typing import Any

import numpy as np

from autotune.space import Parameter, ParamValue, SearchSpace

#: A configuration measured, as :func:`~autotune.search.strategy.measured_history` gives it: the
#: configuration, its value (``None`` where it failed) and its costs by name.
MeasuredPoint = tuple[dict[str, Any], float | None, dict[str, float]]


class Encoding:
    """``space``'s free parameters (those ``--set`` does not hold) as levels; with ``ordinal``,
    numbers are ordered (:func:`_distance_table`)."""

    def __init__(self, space: SearchSpace, ordinal: bool = True) -> None:
        self.space = space
        self.free: list[Parameter] = [p for p in space.parameters.values() if p.name not in space.fixed]
        self.levels = {p.name: _levels(p) for p in self.free}
        self.sizes = [len(self.levels[p.name]) for p in self.free]
        self.distances = [_distance_table(self.levels[p.name], ordinal) for p in self.free]
        self.positions = [_positions(self.levels[p.name]) for p in self.free]

    def encode(self, configs: list[dict[str, Any]]) -> np.ndarray:
        X = np.zeros((len(configs), len(self.free)), dtype=int)
        for i, c in enumerate(configs):
            for j, p in enumerate(self.free):
                X[i, j] = _level_index(self.levels[p.name], c.get(p.name))
        return X

    def of_this_space(self, config: dict[str, Any]) -> dict[str, Any] | None:
        """``config`` as a configuration of this space's free parameters; ``None`` where it is not one."""
        out = {}
        for name, value in config.items():
            if name in self.space.fixed:
                if self.space.fixed[name] != value:
                    return None
            elif name in self.levels:
                if _level_index(self.levels[name], value) == 0 and value is not None:
                    return None
                out[name] = value
            elif value is not None:
                return None
        return out


def _levels(p: Parameter) -> list[ParamValue | None]:
    """A parameter's values; ``None`` (unset, or inactive under its ``when``) is a level of its own."""
    return [None, *(p.choices or ())]


def _distance_table(levels: list[ParamValue | None], ordinal: bool) -> np.ndarray:
    """Distances between a parameter's levels. Numbers (not booleans) are ordered when there are
    at least three: a batch size of 32 is nearer 64 than 8 is. "Unset" is 1 away from everything."""
    n = len(levels)
    table = 1.0 - np.eye(n)
    numbers = [v for v in levels[1:] if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if ordinal and len(numbers) == n - 1 >= 3:
        ranks = np.argsort(np.argsort(numbers)) / (len(numbers) - 1)
        table[1:, 1:] = np.abs(ranks[:, None] - ranks[None, :])
    return table


def _positions(levels: list[ParamValue | None]) -> np.ndarray | None:
    """Centred ranks (-0.5 .. 0.5) of an ordered parameter's values ("unset": 0); None if unordered."""
    numbers = [v for v in levels[1:] if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) != len(levels) - 1 or len(numbers) < 3:
        return None
    ranks = np.argsort(np.argsort(numbers)) / (len(numbers) - 1) - 0.5
    return np.concatenate([[0.0], ranks])


def _level_index(levels: list[ParamValue | None], value: object) -> int:
    for i, level in enumerate(levels):
        if level is value or (level == value and type(level) is type(value)):
            return i
    return 0
