"""The trust region of :class:`~autotune.search.strategy.AutotuneSampler`: the configurations it
may propose lie within a few knobs of the best measured. The radius is one knob while the best
keeps improving and grows by one for every ``patience`` trials since it last did; the study's
starting points (the baseline, the known-good configurations, an earlier study's best) are not the
search's trials, so the patience counts from the first trial the sampler chose."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from autotune.search.encoding import MeasuredPoint
from autotune.space import SearchSpace, config_key


class TrustRegion:
    """``gain``: the least rise of the best, on the model's scale (the objective's log: 0.01 is
    about 1%), that counts as improving; ``after_start``: whether the patience waits for the
    starting points to be measured."""

    def __init__(self, space: SearchSpace, patience: int, gain: float, after_start: bool = True) -> None:
        self.space = space
        self.patience = patience
        self.gain = gain
        self.after_start = after_start
        #: The configurations measured first (their keys), once known, and the earlier studies' best.
        self._starts: set[str] | None = None
        self._warm_starts: set[str] = set()

    def start_with(self, starts: Sequence[dict[str, Any]]) -> None:
        """Earlier studies' best configurations, which the study measures first too."""
        self._warm_starts |= {config_key(c) for c in starts}
        self._starts = None

    def near(self, X: np.ndarray, ys: list[float | None], Xc: np.ndarray, history: list[MeasuredPoint]) -> np.ndarray:
        """1 for the candidates ``Xc`` within the region around the best of the configurations
        measured (``X``, with ``ys`` their values on the model's scale, higher better; ``None``
        where they failed), 0 elsewhere: those that differ from the best in at most the radius."""
        best, improved, top = -1, -1, -np.inf
        for i, y in enumerate(ys):
            if y is None:
                continue
            if y > top:
                if y > top + self.gain:
                    improved = i
                best, top = i, y
        started = self._started(history) if self.after_start else 0
        improved = max(improved, min(started, len(ys)) - 1)
        radius = 1 + (len(ys) - 1 - improved) // self.patience
        return ((Xc != X[best]).sum(axis=1) <= radius).astype(float)

    def _started(self, history: list[MeasuredPoint]) -> int:
        """How many of the configurations measured are the study's starting points."""
        from autotune.search.configurations import starting_points

        if self._starts is None:
            self._starts = {config_key(c) for c in starting_points(self.space)} | self._warm_starts
        return sum(config_key(c) in self._starts for c, *_ in history)
