"""The persistent job queue: one SQLAlchemy table in the same database as the Optuna studies.

A job row outlives the daemon: a restarted daemon finds its queued jobs still queued and its
running jobs with the process id that runs them (see :mod:`autotune.daemon.runner`). Every state
change is one conditional ``UPDATE`` (``... WHERE state = 'queued'``), so a cancel and a start
that race cannot both win.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from autotune.daemon.records import EXIT_CANCELLED, JobSpec, JobState
from autotune.errors import AutotuneError
from autotune.study.database import connect_args, engine_url, redacted
from autotune.study.storage import create_schema

_metadata = sa.MetaData()

#: Prefixed so that it can never meet one of Optuna's tables in the shared database.
jobs_table = sa.Table(
    "autotune_jobs", _metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False, index=True),
    sa.Column("study", sa.String(256), nullable=False, index=True),
    sa.Column("spec", sa.Text, nullable=False),
    sa.Column("directory", sa.Text, nullable=False),
    sa.Column("ensure_key", sa.String(64), nullable=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("started_at", sa.Float, nullable=True),
    sa.Column("ended_at", sa.Float, nullable=True),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("message", sa.Text, nullable=True),
    sa.Column("host", sa.String(256), nullable=True),
    sa.Column("pid", sa.Integer, nullable=True),
    sa.Column("pid_started", sa.Float, nullable=True),  # the process's create time: pids are reused
    sa.Column("workers", sa.Integer, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False, default=0),
    sa.Column("cancel_requested", sa.Boolean, nullable=False, default=False),
)


@dataclass
class JobRecord:
    id: str
    state: JobState
    study: str
    spec: JobSpec
    directory: str
    created_at: float
    ensure_key: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    message: str | None = None
    host: str | None = None
    pid: int | None = None
    pid_started: float | None = None
    workers: int | None = None
    attempts: int = 0
    cancel_requested: bool = False

    @classmethod
    def from_row(cls, row: Any) -> JobRecord:
        m = dict(row._mapping)
        m["state"] = JobState(m["state"])
        m["spec"] = JobSpec.model_validate_json(m["spec"])
        m["cancel_requested"] = bool(m["cancel_requested"])
        return cls(**m)


class JobStore:
    """The job table of the database at ``url`` (created when missing)."""

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self.engine = sa.create_engine(engine_url(url), future=True, pool_pre_ping=True,
                                           connect_args=connect_args(url))
            if self.engine.dialect.name == "sqlite":
                sa.event.listen(self.engine, "connect", _sqlite_pragmas)
            create_schema(url, lambda: _metadata.create_all(self.engine))
            # Close the connection that created the schema: a process that exits without closing
            # its SQLite connections leaves the WAL files beside the database.
            self.engine.dispose()
        except ModuleNotFoundError as exc:
            raise AutotuneError(f"storage {self.redacted_url}: the database driver is not installed "
                                f"({exc.name}); install it, e.g. pip install -e \".[fleet]\"") from None
        except sa.exc.SQLAlchemyError as exc:
            first = str(exc).strip().splitlines()[0][:200]
            raise AutotuneError(f"cannot open the job queue in {self.redacted_url}: {first}") from None

    @property
    def redacted_url(self) -> str:
        return redacted(self.url)

    # -- reading -------------------------------------------------------------------------------
    def get(self, job_id: str) -> JobRecord | None:
        with self.engine.connect() as c:
            row = c.execute(sa.select(jobs_table).where(jobs_table.c.id == job_id)).first()
        return JobRecord.from_row(row) if row is not None else None

    def find(self, states: list[JobState] | None = None, limit: int | None = None,
             newest_first: bool = False) -> list[JobRecord]:
        q = sa.select(jobs_table)
        if states:
            q = q.where(jobs_table.c.state.in_([s.value for s in states]))
        order = jobs_table.c.created_at.desc() if newest_first else jobs_table.c.created_at
        q = q.order_by(order, jobs_table.c.id)
        if limit:
            q = q.limit(limit)
        with self.engine.connect() as c:
            return [JobRecord.from_row(r) for r in c.execute(q)]

    def counts(self) -> dict[str, int]:
        q = sa.select(jobs_table.c.state, sa.func.count()).group_by(jobs_table.c.state)
        with self.engine.connect() as c:
            return {state: n for state, n in c.execute(q)}

    def active_for_study(self, study: str) -> JobRecord | None:
        """A queued or running job of ``study``, if any (an ensure joins it instead of starting another)."""
        q = (sa.select(jobs_table).where(jobs_table.c.study == study)
             .where(jobs_table.c.state.in_([JobState.queued.value, JobState.running.value]))
             .order_by(jobs_table.c.created_at))
        with self.engine.connect() as c:
            row = c.execute(q).first()
        return JobRecord.from_row(row) if row is not None else None

    # -- changing ------------------------------------------------------------------------------
    def add(self, job: JobRecord) -> None:
        values = {**job.__dict__, "state": job.state.value, "spec": job.spec.model_dump_json()}
        with self.engine.begin() as c:
            c.execute(jobs_table.insert().values(**values))

    def _update(self, job_id: str, only_from: list[JobState] | None, **values: Any) -> bool:
        q = jobs_table.update().where(jobs_table.c.id == job_id)
        if only_from:
            q = q.where(jobs_table.c.state.in_([s.value for s in only_from]))
        if isinstance(values.get("state"), JobState):
            values["state"] = values["state"].value
        with self.engine.begin() as c:
            return c.execute(q.values(**values)).rowcount == 1

    def claim(self, job_id: str, workers: int) -> bool:
        """queued -> running, before its process starts (a crash in between leaves it running
        without a pid, which the next daemon start treats as a process that died)."""
        job = self.get(job_id)
        if job is None:
            return False
        return self._update(job_id, [JobState.queued], state=JobState.running, workers=workers,
                            attempts=job.attempts + 1, started_at=job.started_at or time.time(),
                            host=socket.gethostname(), pid=None, pid_started=None)

    def set_process(self, job_id: str, pid: int, pid_started: float) -> None:
        self._update(job_id, [JobState.running], pid=pid, pid_started=pid_started)

    def finish(self, job_id: str, state: JobState, exit_code: int | None, message: str | None) -> bool:
        return self._update(job_id, [JobState.queued, JobState.running], state=state, exit_code=exit_code,
                            message=message, ended_at=time.time(), pid=None, pid_started=None)

    def requeue(self, job_id: str, message: str) -> bool:
        """running -> queued: its process is gone; the next start resumes its study."""
        return self._update(job_id, [JobState.running], state=JobState.queued, message=message,
                            pid=None, pid_started=None)

    def request_cancel(self, job_id: str) -> JobRecord | None:
        """A queued job is cancelled at once; a running one is marked, and the runner stops it."""
        self.finish_if_queued(job_id)
        self._update(job_id, [JobState.running], cancel_requested=True)
        return self.get(job_id)

    def finish_if_queued(self, job_id: str) -> bool:
        return self._update(job_id, [JobState.queued], state=JobState.cancelled, exit_code=EXIT_CANCELLED,
                            message="cancelled before it started", ended_at=time.time(), cancel_requested=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """Several processes write the database at once (the daemon, and each job's Optuna driver):
    wait for a lock instead of failing, and let readers proceed while one writes (WAL). WAL needs
    a local disk; a database shared over a network is PostgreSQL's job."""
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA busy_timeout = 30000")
    cur.execute("PRAGMA journal_mode = WAL")
    cur.close()
