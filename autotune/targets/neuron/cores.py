"""NeuronCores a worker holds: Ray sets ``NEURON_RT_VISIBLE_CORES`` for an actor that asks for the
``neuron_cores`` resource, as a list (``"2,3"``); the Neuron runtime documents a range (``"2-3"``).
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import AutotuneError

VISIBLE_CORES = "NEURON_RT_VISIBLE_CORES"


@dataclass(frozen=True)
class NeuronCoreSlot:
    """A contiguous range of NeuronCores held by one worker."""

    first: int
    last: int

    @classmethod
    def parse(cls, text: str) -> NeuronCoreSlot:
        """``"2,3"`` (Ray), ``"2-3"`` (range) or ``"2"``; the cores must be contiguous."""
        ids: list[int] = []
        for part in text.replace(" ", "").split(","):
            if not part:
                continue
            lo, _, hi = part.partition("-")
            ids.extend(range(int(lo), int(hi or lo) + 1))
        ids = sorted(set(ids))
        if not ids:
            raise AutotuneError(f"{VISIBLE_CORES}={text!r} names no NeuronCore")
        if ids != list(range(ids[0], ids[-1] + 1)):
            raise AutotuneError(f"{VISIBLE_CORES}={text!r} is not a contiguous range of NeuronCores")
        return cls(ids[0], ids[-1])

    @property
    def range(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"

    @property
    def count(self) -> int:
        return self.last - self.first + 1
