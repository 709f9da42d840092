"""Creating the study database when several processes open it at once.

Optuna's ``RDBStorage`` creates its tables and writes its schema version the first time a database is
opened, without a lock: two drivers started together on a fresh SQLite file can both try, and the
loser fails with ``table studies already exists`` or ``UNIQUE constraint failed:
alembic_version.version_num``. For a local SQLite file the creation is serialized with an advisory
lock on the file's folder; for any backend, an attempt that lost that race is made again, by which
time the schema is there and opening it only reads it.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar

from autotune.errors import AutotuneError
from autotune.storage.database import connect_args, redacted, sqlite_path
from autotune.storage.database import default_storage
from autotune.storage.optuna_versions import retry_stale_trial, stale_trial_callback

if TYPE_CHECKING:
    from autotune.storage.reconnecting import ReconnectingStorage
    from autotune.storage.trial_cache import TrialCache

T = TypeVar("T")

# What a backend says when another process created the same table or version row first.
_LOST_RACE = ("already exists", "UNIQUE constraint failed", "duplicate key", "Duplicate entry")
_ATTEMPTS = 5


@contextmanager
def schema_lock(url: str) -> Iterator[None]:
    """Hold an exclusive lock while the database at ``url`` is created (SQLite files only, whose
    folder is made first).

    The lock is taken on the folder rather than on a lock file, so that nothing is left beside the
    database; ``flock`` is released when the descriptor closes, even if the process dies.
    """
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX: rely on the retry alone
        fcntl = None  # type: ignore[assignment]
    if path is None or fcntl is None:
        yield
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def create_schema(url: str, create: Callable[[], T]) -> T:
    """``create()`` (which opens the database at ``url`` and creates what is missing), under
    :func:`schema_lock`, made again if another process created the same schema first."""
    attempt = 1
    while True:
        try:
            with schema_lock(url):
                return create()
        except Exception as exc:  # SQLAlchemy's IntegrityError / OperationalError, by backend
            if attempt == _ATTEMPTS or not any(s in str(exc) for s in _LOST_RACE):
                raise
            time.sleep(0.2 * attempt)
            attempt += 1


def rdb_storage(url: str, **kwargs: Any) -> ReconnectingStorage:
    """Optuna's ``RDBStorage`` on ``url``, safe to call from several processes on a new database,
    whose calls wait for a database that restarts (:mod:`autotune.storage.reconnecting`)."""
    from autotune.storage.reconnecting import ReconnectingStorage

    engine = {"connect_args": connect_args(url), "pool_pre_ping": True, **(kwargs.pop("engine_kwargs", None) or {})}
    return create_schema(url, lambda: ReconnectingStorage(url, engine_kwargs=engine, **kwargs))


# -- the study's storage ---------------------------------------------------------------------------

#: Seconds between a driver's heartbeats for its running trials, and how long one may be missed
#: before the trial is failed and its configuration queued again.
HEARTBEAT_S = 5
GRACE_S = 20


class Heartbeats:
    """Records a heartbeat for each trial this driver holds, every :data:`HEARTBEAT_S`, from a thread
    of its own. The driver's loop can stall longer than :data:`GRACE_S` (a Ray start, a compile stage,
    a machine busy with other work); its live trials must not look like a killed driver's to another
    driver, which would fail them and queue their configurations again."""

    def __init__(self, storage: Any, interval: float = HEARTBEAT_S) -> None:
        self._storage = storage
        self._interval = interval
        self._held: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="autotune-heartbeats", daemon=True)

    def __enter__(self) -> "Heartbeats":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * self._interval)

    def hold(self, trial_id: int) -> None:
        """Beat for ``trial_id`` from now on (the first beat at once)."""
        with self._lock:
            self._held.add(trial_id)
        self._storage.record_heartbeat(trial_id)

    def release(self, trial_id: int) -> None:
        with self._lock:
            self._held.discard(trial_id)

    def _beat(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                held = sorted(self._held)
            for trial_id in held:
                try:
                    self._storage.record_heartbeat(trial_id)
                except Exception:  # a locked database now and then: the next beat is 5 s away
                    pass


#: What a trial queued again for a lost one takes of its attributes: which configuration it is and
#: where it came from. Not what the lost one's driver wrote of its measurement before it was killed
#: (``counted``, ``result``, ...): the new trial measures, or is answered, on its own.
REQUEUED_ATTRS = ("config_key", "enqueued_key", "result_key", "provenance")


class Requeue:
    """Optuna's retry callback for a trial failed for a stale heartbeat, whose new trial takes only
    :data:`REQUEUED_ATTRS` of the lost one's attributes; with ``onto`` (the driver's storage), the
    new trial is added through it, whose calls wait for a database that restarts."""

    def __init__(self, max_retry: int) -> None:
        self.retry = retry_stale_trial(max_retry)
        self.onto: Any = None

    def __call__(self, study: Any, trial: Any) -> None:
        import copy

        import optuna

        trial = copy.copy(trial)
        trial.user_attrs = {k: v for k, v in trial.user_attrs.items() if k in REQUEUED_ATTRS}
        if self.onto is not None:
            study = optuna.load_study(study_name=study.study_name, storage=self.onto)
        self.retry(study, trial)


def open_storage(url: str) -> TrialCache:
    """The study database at ``url``, its trials kept in this process (:mod:`autotune.storage.trial_cache`):
    every study opened on it shares one copy, read from the database only where it changed."""
    import optuna

    from autotune.storage.trial_cache import TrialCache

    shown = redacted(url)  # parses it: a malformed URL is an InvalidConfigError here
    try:
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # heartbeat_interval
        requeue = Requeue(max_retry=2)
        storage = TrialCache(rdb_storage(url, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S,
                                         **stale_trial_callback(requeue)))
        requeue.onto = storage
        return storage
    except Exception as exc:  # SQLAlchemy raises many types for a bad URL or a corrupt file
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, ImportError) or "Failed to import DB access module" in first:
            backend = shown.split("://", 1)[0].split("+", 1)[0]
            hint = {"postgresql": '-e ".[fleet]" (psycopg)', "mysql": "PyMySQL"}.get(backend,
                                                                                  "the driver for " + backend)
            raise AutotuneError(f"storage {shown}: its database driver is not installed; "
                                f"pip install {hint}") from None
        raise AutotuneError(f"cannot open storage {shown}: {first}") from None


def open_existing_storage(url: str) -> TrialCache:
    """:func:`open_storage` on a database that must exist already (a command that reads studies
    must not leave an empty SQLite file behind a typo)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Reading a study is no place for notes on the storage's experimental options.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    path = sqlite_path(url)
    if path is not None and not path.exists():
        raise AutotuneError(f"no study database at {path}; run autotune run first or pass --storage")
    return open_storage(url)


def load_study(name: str, storage: str | None = None) -> Any:
    """The study ``name`` in the database at ``storage`` (the default one when ``None``)."""
    import optuna

    url = storage or default_storage()
    st = open_existing_storage(url)
    try:
        return stored_study(st, name)
    except KeyError:
        names = ", ".join(s.study_name for s in optuna.get_all_study_summaries(st, include_best_trial=False)) \
            or "none"
        raise AutotuneError(f"no study named {name!r} in {redacted(url)}; studies there: {names}") from None


def stored_study(storage: Any, name: str) -> Any:
    """The study ``name`` in ``storage`` (Optuna's ``KeyError`` where there is none), sharing the
    copy of its trials with every other study object of that name on ``storage``."""
    import optuna

    from autotune.storage.trial_cache import opened

    return opened(optuna.load_study(study_name=name, storage=storage), storage)


def open_study(storage: Any, name: str, directions: list[str], sampler: Any, *, fresh: bool) -> tuple[Any, list[str]]:
    """The Optuna study ``name`` in ``storage``, created when new; with ``fresh`` an existing one is
    first kept under ``<name>@<time>``. Returns the study and what its user should be told."""
    import optuna

    from autotune.storage.trial_cache import opened

    notes = [_archive(storage, name)] if fresh else []
    for _ in range(3):
        try:
            study = optuna.create_study(storage=storage, study_name=name, sampler=sampler, load_if_exists=True,
                                        directions=[optuna.study.StudyDirection[d.upper()] for d in directions])
            return opened(study, storage), [n for n in notes if n]
        except optuna.exceptions.DuplicatedStudyError:
            continue  # another driver created it between our look and our insert: load it
        except ValueError as exc:
            raise AutotuneError(f"study {name!r}: {exc}") from None
    raise AutotuneError(f"study {name!r}: other drivers kept creating it while this one opened it; run again")


def _archive(storage: Any, name: str) -> str | None:
    """``--fresh``: keep the old study's trials under ``<name>@<time>``, so that the name starts anew."""
    import optuna

    names = {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    if name not in names:
        return None
    archived = f"{name}@{time.strftime('%Y%m%d-%H%M%S')}"
    optuna.copy_study(from_study_name=name, from_storage=storage, to_storage=storage, to_study_name=archived)
    optuna.delete_study(study_name=name, storage=storage)
    return f"--fresh: the earlier trials of {name} are kept as study {archived}"
