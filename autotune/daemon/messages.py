"""What crosses the daemon's HTTP API: a job's specification, its state, an ensure's answer.

Every string a client sends that ends up on a job's command line is validated here (choices,
patterns), and the daemon passes each as one argv element of its own; no shell is involved.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from autotune.config import JobConfig
from autotune.study.options import seconds_left
from autotune.results.outputs import BestConfig

#: Study names, job ids: plain tokens (they appear in URLs and log lines).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$"


class JobState(str, Enum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"

    @property
    def final(self) -> bool:
        return self in (JobState.succeeded, JobState.failed, JobState.cancelled)


#: The exit code of a cancelled job: that of an interrupted ``autotune run``.
EXIT_CANCELLED = 130


class RunOptions(JobConfig):
    """A job's options: a :class:`~autotune.config.JobConfig` (storage, cache, Ray address and the
    output directory are the daemon's; ``workers`` is a cap on the job's fair share), whose strings
    are held to the forms that may appear on a job's command line."""

    #: A search-space file travels as its text; ``space`` then names none.
    space_yaml: str | None = Field(default=None, max_length=1_000_000)

    @field_validator("space")
    @classmethod
    def _builtin_space(cls, space: str | None) -> str | None:
        return _matching(space, r"^[a-z0-9][a-z0-9-]{0,63}$", "a built-in space name (a file travels as space_yaml)")

    @field_validator("platform")
    @classmethod
    def _platform(cls, platform: str | None) -> str | None:
        return _matching(platform, r"^[a-z0-9]{1,16}$", "a platform name such as trn1")

    @field_validator("study")
    @classmethod
    def _study(cls, study: str | None) -> str | None:
        return _matching(study, NAME_PATTERN, "letters, digits and ._@+- (128 at most)")

    @field_validator("metric")
    @classmethod
    def _metric(cls, metric: str) -> str:
        _matching(metric, r"^[A-Za-z_][A-Za-z0-9_.]{0,63}$", "a metric name")
        return metric

    @field_validator("memory_limit")
    @classmethod
    def _memory(cls, memory_limit: str | None) -> str | None:
        return _matching(memory_limit, r"^[0-9.eE+]+\s*[KMGTkmgt]?i?[Bb]?$", "a size such as 8GiB")

    @field_validator("sets")
    @classmethod
    def _values_are_text(cls, sets: dict[str, Any]) -> dict[str, str]:
        return {k: str(v) for k, v in sets.items()}


def _matching(value: str | None, pattern: str, what: str) -> str | None:
    if value is not None and not re.match(pattern, value):
        raise ValueError(f"must be {what}")
    return value


class JobSpec(BaseModel):
    """A job as a client submits it."""

    #: Relative to the snapshot's root when ``upload`` is given; else an absolute path on storage
    #: that the daemon and every Ray node see (a shared file system).
    script: str = Field(min_length=1, max_length=4096)
    args: list[str] = Field(default_factory=list)
    #: The id ``POST /uploads`` returned for the job's snapshot; ``None`` for shared storage.
    upload: str | None = Field(default=None, pattern=r"^[0-9a-f]{32}$")
    run: RunOptions = Field(default_factory=RunOptions)


class JobInfo(BaseModel):
    """A job as the daemon reports it: its state, and its study's progress from the storage."""

    id: str
    state: JobState
    study: str
    script: str
    trials: int
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    message: str | None = None
    workers: int | None = None
    attempts: int = 0
    cancel_requested: bool = False
    #: From the study in the storage: measured trials, trials in flight, failed ones, best so far.
    done: int = 0
    running: int = 0
    failed: int = 0
    metric: str = "throughput"
    best_value: float | None = None
    baseline_value: float | None = None
    speedup: float | None = None
    #: Trials this job measured itself (``None`` until it ends).
    ran: int | None = None

    def elapsed_s(self, now: float) -> float | None:
        """Seconds it has run (until it ended); None before it started."""
        return None if self.started_at is None else (self.ended_at or now) - self.started_at

    def remaining_s(self, now: float) -> float | None:
        """An estimate of the seconds it still needs at its pace so far; None when there is none
        yet (not started, or no trial done) or no more (it ended)."""
        elapsed = self.elapsed_s(now)
        if elapsed is None or self.state.final:
            return None
        return seconds_left(elapsed, self.done, self.trials - self.done)


class UploadInfo(BaseModel):
    upload: str
    bytes: int
    files: int


class EnsureReply(BaseModel):
    """``stored``: the best configuration was already in the storage (nothing ran); ``job``: a
    tuning job (new, or one already tuning the same model) to wait for."""

    source: Literal["stored", "job"]
    study: str
    best: BestConfig | None = None
    job: JobInfo | None = None


class DaemonHealth(BaseModel):
    status: Literal["ok"] = "ok"
    version: str
    storage: str
    slots: int
    max_concurrent_jobs: int
    max_upload_bytes: int
    jobs: dict[str, int] = Field(default_factory=dict)
