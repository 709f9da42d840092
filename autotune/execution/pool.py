"""What every pool a study runs its trials on offers (:class:`TrialPool`), and what it gives back
of a job it finished (:class:`Finished`): Ray workers (:mod:`.ray_pools`), a compile stage in front
of them (:mod:`.compile_stage`), a replay of a recorded landscape."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Protocol

from autotune.records import CompileOutcome, CompileRequest, TrialRequest, TrialResult

@dataclass(frozen=True)
class Finished:
    """A job a pool finished: its tag, and what it gave (a trial's :class:`TrialResult`, a compile
    job's :class:`CompileOutcome`), or why its worker gave nothing (``error``)."""

    tag: Hashable
    result: TrialResult | None = None
    compiled: CompileOutcome | None = None
    error: str | None = None


class TrialPool(Protocol):
    """What the study's loop needs of the place its trials run: Ray workers (:class:`LazyPool`), a
    compile stage in front of them (:class:`autotune.execution.compile_stage.CompileAhead`) or a replay
    of a recorded landscape (:class:`autotune.landscapes.replay.ReplayPool`)."""

    @property
    def free(self) -> int:
        """How many more jobs can start now."""
        ...

    def submit(self, request: TrialRequest | CompileRequest, tag: Hashable) -> None:
        """Start ``request``; :meth:`wait` gives it back under ``tag``."""
        ...

    def wait(self, timeout: float) -> list[Finished]:
        """The jobs that finished, waiting at most ``timeout`` seconds for one."""
        ...

    def shutdown(self) -> None:
        ...


