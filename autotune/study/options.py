"""What a study is given and what it gives back: its options (a run configuration and what only a
Python caller chooses), its progress as it runs, and its result."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from autotune.config import RunConfig
from autotune.records import MeasurementProtocol
from autotune.objectives import speedup
from autotune.study.budget import Spend
from autotune.storage.database import ShownURL
from autotune.results.outlook import SearchOutlook
from autotune.results.outputs import BestConfig, TrialSummary

EXIT_OK, EXIT_BAD_INPUT, EXIT_ALL_FAILED = 0, 2, 3


def default_study_name(script: Path, target: str, nproc_per_node: int = 1, nnodes: int = 1) -> str:
    """``train-xla``; ``train-xla-np2`` for two processes a trial, whose results are not those of one;
    ``train-xla-np2-nodes4`` for two processes on each of four nodes."""
    return (f"{script.stem}-{target}" + (f"-np{nproc_per_node}" if nproc_per_node > 1 else "")
            + (f"-nodes{nnodes}" if nnodes > 1 else ""))


class StudyResult(BaseModel):
    """What :func:`tune` returns and ``autotune run --json`` prints."""

    study: str
    storage: ShownURL
    target: str
    out_dir: str
    #: What the values are: ``throughput`` (samples/s) or a metric the script reports.
    metric: str = "throughput"
    #: Whether more of ``metric`` is better.
    maximize: bool = True
    best: BestConfig | None = None
    baseline_value: float | None = None
    trials: list[TrialSummary] = Field(default_factory=list)
    failures_by_category: dict[str, int] = Field(default_factory=dict)
    ran: int = 0  # trials measured by this invocation
    reused: int = 0  # configurations answered from earlier results
    #: Re-measurements this invocation ran (the noise, races, ``--confirm``): not trials.
    measured_again: int = 0
    #: With a compile stage: the share of the measure jobs' graph lookups the compile cache answered.
    cache_hit_rate: float | None = None
    notes: list[str] = Field(default_factory=list)
    #: What the study found and whether a longer one would likely find more, from its own trials.
    outlook: SearchOutlook | None = None
    #: The machine time (and dollars, with a price) the study's trials and compiles took, and its caps.
    spend: Spend | None = None
    exit_code: int = EXIT_OK


class StudyOptions(RunConfig):
    """A study of ``script``: the run's configuration (:class:`autotune.config.RunConfig`), and what
    only a caller in Python chooses."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: str | Path
    args: list[str] = Field(default_factory=list)
    protocol: MeasurementProtocol = Field(default_factory=MeasurementProtocol)
    #: Called after each finished trial (progress displays).
    on_update: Callable[..., None] | None = None


@dataclass(frozen=True)
class FinishedTrial:
    """One trial as it ended, for a progress line: what ran, what it gave, how it ended."""

    number: int
    #: The parameters that differ from the baseline's (empty for the baseline itself).
    changed: dict[str, Any]
    value: float | None
    #: ``ok``, ``pruned``, ``diverged`` or ``failed (<category>)``, with ``, remembered`` when the
    #: result came from the cache and ``, measured again`` for a re-measurement; or ``same as trial N``.
    status: str


@dataclass
class StudyProgress:
    study: str
    target: str
    wanted: int
    done: int = 0
    running: int = 0
    failed: int = 0
    reused: int = 0
    best_value: float | None = None
    best_params: dict[str, Any] | None = None
    baseline_value: float | None = None
    metric: str = "throughput"
    maximize: bool = True
    last: str = ""
    #: Every trial finished by this driver, in the order they ended.
    finished: list[FinishedTrial] = field(default_factory=list)
    #: When this driver started (``time.monotonic``).
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    @property
    def remaining_s(self) -> float | None:
        return seconds_left(self.elapsed_s, len(self.finished), self.wanted - self.done)

    @property
    def speedup(self) -> float | None:
        return speedup(self.best_value, self.baseline_value, self.maximize)


def seconds_left(elapsed_s: float, finished: int, left: int) -> float | None:
    """An estimate of the time a study still needs, at its pace so far: the seconds per trial
    finished, times the trials left. None before a trial has finished (no pace yet)."""
    if left <= 0:
        return 0.0
    if finished <= 0:
        return None
    return elapsed_s / finished * left
