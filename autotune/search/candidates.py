"""The configurations :class:`~autotune.search.strategy.AutotuneSampler` scores for a trial: every
configuration of a space of at most ``max_enumerated``; of a larger one, ``RANDOM_CANDIDATES``
random ones, the neighbours of the best measured and, with a trust region, the configurations two
knobs from the best. Either way only those with the pinned parameters at their values
(:meth:`AutotuneSampler.pin`), each once in its unset form (:meth:`AutotuneSampler.same_as_unset`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from autotune.errors import InvalidConfigError
from autotune.search.configurations import enumerate_space
from autotune.search.encoding import Encoding, MeasuredPoint
from autotune.space import config_key

#: How many random configurations of a space too large to enumerate are scored.
RANDOM_CANDIDATES = 2000


class Candidates:
    """The candidates of one sampler: ``pinned`` is its own dict of pinned parameters and
    ``unset_is`` of the values that are the same run as leaving their parameter unset, each read at
    each call; ``local_patience``: whether it keeps a trust region."""

    def __init__(self, encoding: Encoding, pinned: dict[str, Any], unset_is: dict[str, Any] | None = None, *,
                 max_enumerated: int, local_patience: int | None) -> None:
        self.encoding = encoding
        self.space = encoding.space
        self.pinned = pinned
        self.unset_is = {} if unset_is is None else unset_is
        self.max_enumerated = max_enumerated
        self.local_patience = local_patience
        self._enumerated: list[dict[str, Any]] | None = None

    def of(self, history: list[MeasuredPoint], rng: np.random.Generator, maximize: bool = True) -> list[dict[str, Any]]:
        """The candidates, given the configurations measured (``history``, as
        :func:`~autotune.search.strategy.measured_history` gives it); ``rng`` draws the random ones."""
        if self._enumerated is None:
            size = math.prod(self.encoding.sizes) if self.encoding.sizes else 1
            self._enumerated = enumerate_space(self.space) if size <= self.max_enumerated else []
        found = self._enumerated or self._sampled(history, rng, maximize)
        if self.pinned:
            found = [c for c in found if all(c.get(k) == v for k, v in self.pinned.items())]
        if not self.unset_is:
            return found
        unset = ({k: v for k, v in c.items() if self.unset_is.get(k, ...) != v} for c in found)
        return list({config_key(c): c for c in unset}.values())

    def _sampled(self, history: list[MeasuredPoint], rng: np.random.Generator, maximize: bool) -> list[dict[str, Any]]:
        """A large space: random configurations, the neighbours of the best ones measured, and with
        a trust region (``local_patience``) the configurations two knobs away from the best."""
        from autotune.targets import get_target

        target = get_target(self.space.target)
        out: dict[str, dict[str, Any]] = {}

        def add(raw: dict[str, Any]) -> None:
            raw = {**raw, **self.pinned}
            active = {k: v for k, v in {**raw, **self.space.fixed}.items()
                      if v is not None and self.space.parameters[k].is_active({**raw, **self.space.fixed})}
            try:
                config = self.space.validate(active)
                target.check(config)
            except InvalidConfigError:
                return
            out.setdefault(config_key(config), config)

        levels = self.encoding.levels
        values = {p.name: levels[p.name] if p.default is None else levels[p.name][1:] for p in self.encoding.free}
        for _ in range(RANDOM_CANDIDATES):
            add({name: vs[int(rng.integers(len(vs)))] for name, vs in values.items()})
        ranked = sorted(((c, v) for c, v, _ in history if v is not None), key=lambda h: -h[1] if maximize else h[1])[:5]
        for config, *_ in ranked:
            for name, vs in values.items():
                for level in vs:
                    add({**config, name: level})
        if self.local_patience and ranked:
            best = ranked[0][0]
            for name, vs in values.items():
                for level in vs:
                    for other, ws in values.items():
                        if other > name:
                            for second in ws:
                                add({**best, name: level, other: second})
        return list(out.values())
