"""The persistent job queue: one SQLAlchemy table in the same database as the Optuna studies.

A job row outlives the daemon: a restarted daemon finds its queued jobs still queued and its
running jobs with the host and process id that run them, and the heartbeat that their process
writes while it lives (see :mod:`autotune.daemon.runner`). Every state change is one conditional
``UPDATE`` (``... WHERE state = 'queued'``), so a cancel and a start that race cannot both win.

One daemon per database: a daemon holds the row of ``autotune_daemon`` (:class:`DaemonLease`),
with its host, pid and a heartbeat, while it runs. A host is named by
:func:`autotune.machine.host.host_identity`, not by its host name alone, which two containers can share
without seeing each other's processes. A second daemon on the same database refuses
to start while the first lives (a process on this host, or a heartbeat less than
``LEASE_STALE_S`` old from another), so that no two daemons start, adopt or resume the same jobs.

A database that restarts is waited for (:mod:`autotune.storage.reconnecting`): the queue's calls
pause until it answers again, and the lease's heartbeat tries again at its next beat.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import psutil
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from autotune.daemon.messages import EXIT_CANCELLED, JobSpec, JobState
from autotune.errors import AutotuneError
from autotune.machine.host import host_identity
from autotune.storage.database import connect_args, engine_url, redacted
from autotune.storage.reconnecting import Outages, waits_for_database
from autotune.storage.optuna_storage import create_schema

if TYPE_CHECKING:
    from sqlalchemy.engine.interfaces import DBAPIConnection
    from sqlalchemy.pool import ConnectionPoolEntry

_metadata = sa.MetaData()

#: Seconds between two heartbeats of a daemon's hold on its database, and of a job's process;
#: how old the last may be before its daemon, or its job, counts as gone (clocks of two hosts
#: may differ by a few seconds).
LEASE_BEAT_S, LEASE_STALE_S = 5.0, 30.0
JOB_BEAT_S, JOB_STALE_S = 10.0, 60.0

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
    sa.Column("heartbeat_at", sa.Float, nullable=True),  # written by the job's process while it lives
)

#: One row while a daemon uses the database: which one, and when it last showed it lives.
daemon_table = sa.Table(
    "autotune_daemon", _metadata,
    sa.Column("id", sa.String(16), primary_key=True),
    sa.Column("host", sa.String(256), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("pid_started", sa.Float, nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("heartbeat_at", sa.Float, nullable=False),
)
_LEASE_ID = "daemon"


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
    heartbeat_at: float | None = None

    @classmethod
    def from_row(cls, row: sa.Row) -> JobRecord:
        m = dict(row._mapping)
        m["state"] = JobState(m["state"])
        m["spec"] = JobSpec.model_validate_json(m["spec"])
        m["cancel_requested"] = bool(m["cancel_requested"])
        return cls(**m)


class JobStore:
    """The job table of the database at ``url`` (created when missing)."""

    def __init__(self, url: str) -> None:
        self.url = url
        #: Its calls wait for a database that restarts (:mod:`autotune.storage.reconnecting`).
        self.outages = Outages(url)
        try:
            self.engine = sa.create_engine(engine_url(url), future=True, pool_pre_ping=True,
                                           connect_args=connect_args(url))
            if self.engine.dialect.name == "sqlite":
                event.listen(self.engine, "connect", _sqlite_pragmas)
            create_schema(url, self._create_schema)
            # Close the connection that created the schema: a process that exits without closing
            # its SQLite connections leaves the WAL files beside the database.
            self.engine.dispose()
        except ModuleNotFoundError as exc:
            raise AutotuneError(f"storage {self.redacted_url}: the database driver is not installed "
                                f"({exc.name}); install it, e.g. pip install -e \".[fleet]\"") from None
        except SQLAlchemyError as exc:
            first = str(exc).strip().splitlines()[0][:200]
            raise AutotuneError(f"cannot open the job queue in {self.redacted_url}: {first}") from None

    def _create_schema(self) -> None:
        _metadata.create_all(self.engine)
        # A queue made before jobs had heartbeats gets the column (create_all adds tables only).
        if "heartbeat_at" not in {c["name"] for c in sa.inspect(self.engine).get_columns(jobs_table.name)}:
            with self.engine.begin() as c:
                c.execute(sa.text(f"ALTER TABLE {jobs_table.name} ADD COLUMN heartbeat_at FLOAT"))

    @property
    def redacted_url(self) -> str:
        return redacted(self.url)

    # -- reading -------------------------------------------------------------------------------
    @waits_for_database
    def get(self, job_id: str) -> JobRecord | None:
        with self.engine.connect() as c:
            row = c.execute(sa.select(jobs_table).where(jobs_table.c.id == job_id)).first()
        return JobRecord.from_row(row) if row is not None else None

    @waits_for_database
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

    @waits_for_database
    def counts(self) -> dict[str, int]:
        q = sa.select(jobs_table.c.state, sa.func.count()).group_by(jobs_table.c.state)
        with self.engine.connect() as c:
            return {state: n for state, n in c.execute(q)}

    @waits_for_database
    def active_for_study(self, study: str) -> JobRecord | None:
        """A queued or running job of ``study``, if any (an ensure joins it instead of starting another)."""
        q = (sa.select(jobs_table).where(jobs_table.c.study == study)
             .where(jobs_table.c.state.in_([JobState.queued.value, JobState.running.value]))
             .order_by(jobs_table.c.created_at))
        with self.engine.connect() as c:
            row = c.execute(q).first()
        return JobRecord.from_row(row) if row is not None else None

    # -- changing ------------------------------------------------------------------------------
    @waits_for_database
    def add(self, job: JobRecord) -> None:
        values = {**job.__dict__, "state": job.state.value, "spec": job.spec.model_dump_json()}
        with self.engine.begin() as c:
            c.execute(jobs_table.insert().values(**values))

    @waits_for_database
    def _update(self, job_id: str, only_from: list[JobState] | None, **values: object) -> bool:
        q = jobs_table.update().where(jobs_table.c.id == job_id)
        if only_from:
            q = q.where(jobs_table.c.state.in_([s.value for s in only_from]))
        state = values.get("state")
        if isinstance(state, JobState):
            values["state"] = state.value
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
                            host=host_identity(), pid=None, pid_started=None, heartbeat_at=None)

    def set_process(self, job_id: str, pid: int, pid_started: float) -> None:
        self._update(job_id, [JobState.running], pid=pid, pid_started=pid_started, heartbeat_at=time.time())

    @waits_for_database
    def beat(self, job_id: str) -> bool:
        """The job's process lives (it calls this every ``JOB_BEAT_S``). True when it must stop
        itself: it was cancelled, and the daemon that holds the database is on another host,
        where it cannot signal this process."""
        self._update(job_id, [JobState.running], heartbeat_at=time.time())
        with self.engine.connect() as c:
            cancel = c.execute(sa.select(jobs_table.c.cancel_requested).where(jobs_table.c.id == job_id)).scalar()
            holder = c.execute(sa.select(daemon_table.c.host).where(daemon_table.c.id == _LEASE_ID)).scalar()
        return bool(cancel) and holder is not None and holder != host_identity()

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


def same_process(pid: int | None, started: float | None) -> bool:
    """Whether process ``pid`` of this host lives and is the one that started at ``started``
    (pids are reused)."""
    if pid is None or started is None:
        return False
    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - started) < 1.0 and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class DaemonRunning(AutotuneError):
    """Another daemon lives on the same database."""


class DaemonLease:
    """This daemon's hold on its database (see the module docstring): taken at start, renewed
    every ``LEASE_BEAT_S`` by a thread, given up at a clean stop."""

    def __init__(self, store: JobStore, url: str) -> None:
        self.store = store
        self.host = host_identity()
        self.pid = psutil.Process().pid
        self.me = {"id": _LEASE_ID, "host": self.host, "pid": self.pid,
                   "pid_started": psutil.Process().create_time(), "url": url}
        self._stop = threading.Event()

    def _mine(self) -> sa.ColumnElement[bool]:
        t = daemon_table.c
        return (t.id == _LEASE_ID) & (t.host == self.host) & (t.pid == self.pid)

    def acquire(self) -> None:
        """Hold the database, or a :class:`DaemonRunning` naming the daemon that does."""
        now = time.time()
        t = daemon_table.c
        try:
            with self.store.engine.begin() as c:
                holder = c.execute(sa.select(daemon_table).where(t.id == _LEASE_ID)).first()
                if holder is None:
                    c.execute(daemon_table.insert().values(**self.me, started_at=now, heartbeat_at=now))
                    return
                if self._lives(holder, now):
                    raise self._refusal(holder, now)
                # Only if it is still the holder just read: of two daemons taking over, one wins.
                taken = c.execute(daemon_table.update()
                                  .where((t.id == _LEASE_ID) & (t.pid == holder.pid) & (t.host == holder.host)
                                         & (t.heartbeat_at == holder.heartbeat_at))
                                  .values(**self.me, started_at=now, heartbeat_at=now)).rowcount
                if taken != 1:
                    raise DaemonRunning("another autotune serve took this database at the same moment; "
                                        "one daemon per database")
        except IntegrityError:
            raise DaemonRunning("another autotune serve took this database at the same moment; "
                                "one daemon per database") from None

    def _lives(self, holder: sa.Row, now: float) -> bool:
        if holder.host == self.host:  # a process here is seen directly, whatever its heartbeat says
            return same_process(holder.pid, holder.pid_started)
        return now - holder.heartbeat_at < LEASE_STALE_S

    def _refusal(self, holder: sa.Row, now: float) -> DaemonRunning:
        lapse = "" if holder.host == self.host else (
            f"; if it was killed, its hold lapses {LEASE_STALE_S:g} s after it was last seen")
        return DaemonRunning(f"another autotune serve ({holder.url}, pid {holder.pid} on {holder.host}, last seen "
                             f"{max(0.0, now - holder.heartbeat_at):.0f} s ago) uses the database "
                             f"{self.store.redacted_url}: stop it first, or give this one another --storage{lapse}")

    def renew(self) -> bool:
        """Whether this daemon still holds the database (then its heartbeat is now)."""
        with self.store.engine.begin() as c:
            return c.execute(daemon_table.update().where(self._mine()).values(heartbeat_at=time.time())).rowcount == 1

    def keep(self, on_lost: Callable[[str], None]) -> None:
        """Renew in a thread until :meth:`release`; ``on_lost(why)`` when the hold is gone (another
        daemon took it after this one stalled past ``LEASE_STALE_S``)."""
        def loop() -> None:
            while not self._stop.wait(LEASE_BEAT_S):
                try:
                    held = self.renew()
                except SQLAlchemyError:  # a database hiccup: the next beat tries again
                    continue
                if not held:
                    on_lost("another autotune serve took over its database")
                    return

        threading.Thread(target=loop, name="autotune-daemon-lease", daemon=True).start()

    def release(self) -> None:
        self._stop.set()
        try:
            with self.store.engine.begin() as c:
                c.execute(daemon_table.delete().where(self._mine()))
        except SQLAlchemyError:  # it lapses by itself
            pass


def _sqlite_pragmas(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    """Several processes write the database at once (the daemon, and each job's Optuna driver):
    wait for a lock instead of failing, and let readers proceed while one writes (WAL). WAL needs
    a local disk; a database shared over a network is PostgreSQL's job."""
    cur = dbapi_connection.cursor()
    cur.execute("PRAGMA busy_timeout = 30000")
    cur.execute("PRAGMA journal_mode = WAL")
    cur.close()
