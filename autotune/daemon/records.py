"""What crosses the daemon's HTTP API: a job's specification, its state, an ensure's answer.

Every string a client sends that ends up on a job's command line is validated here (choices,
patterns), and the daemon passes each as one argv element of its own; no shell is involved.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from autotune.study.outputs import BestConfig

#: Study names, job ids: plain tokens (they appear in URLs and log lines).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$"
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


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


class RunOptions(BaseModel):
    """The options of ``autotune run`` that a client chooses. Storage, cache, Ray address and the
    output directory are the daemon's; ``workers`` is a cap on the job's fair share."""

    trials: int = Field(20, ge=1)
    target: Literal["auto", "neuron", "xla", "inductor"] = "auto"
    #: A built-in search space by name; a space file travels as its text in ``space_yaml``.
    space: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")
    space_yaml: str | None = Field(None, max_length=1_000_000)
    platform: str | None = Field(None, pattern=r"^[a-z0-9]{1,16}$")
    sets: dict[str, str] = Field(default_factory=dict)
    workers: int | None = Field(None, ge=1)
    cores_per_trial: int = Field(1, ge=1)
    study: str | None = Field(None, pattern=NAME_PATTERN)
    trial_timeout: float = Field(1800.0, gt=0)
    timeout: float | None = Field(None, gt=0)
    sampler: Literal["autotune", "tpe", "random", "qmc"] = "autotune"
    seed: int | None = None
    metric: str = Field("throughput", pattern=r"^[A-Za-z_][A-Za-z0-9_.]{0,63}$")
    direction: Literal["maximize", "minimize"] = "maximize"
    memory_limit: str | None = Field(None, pattern=r"^[0-9.eE+]+\s*[KMGTkmgt]?i?[Bb]?$")
    fresh: bool = False
    retry_failed: bool = False
    loss_tolerance: float = Field(0.2, gt=0)
    numerics_guard: bool = True
    prune: bool = True
    confirm: int = Field(0, ge=0, le=1000)

    @field_validator("sets")
    @classmethod
    def _keys_are_names(cls, sets: dict[str, str]) -> dict[str, str]:
        for key in sets:
            if not _KEY.match(key):
                raise ValueError(f"--set {key!r}: a parameter name is letters, digits, _ and .")
        return sets


class JobSpec(BaseModel):
    """A job as a client submits it."""

    #: Relative to the snapshot's root when ``upload`` is given; else an absolute path on storage
    #: that the daemon and every Ray node see (a shared file system).
    script: str = Field(min_length=1, max_length=4096)
    args: list[str] = Field(default_factory=list)
    #: The id ``POST /uploads`` returned for the job's snapshot; ``None`` for shared storage.
    upload: str | None = Field(None, pattern=r"^[0-9a-f]{32}$")
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
