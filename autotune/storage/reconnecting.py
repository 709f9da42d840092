"""A database that restarts (an upgrade, a fail-over) under running studies: every call waits for it.

A call that finds the database unreachable (SQLAlchemy's ``OperationalError``: the connection
refused, or closed by a server going down) is made again, after a pause that grows to
:data:`MAX_PAUSE_S`, until the database answers or :data:`PATIENCE_S` have passed; then an
:class:`~autotune.errors.AutotuneError` says so. Each call is one transaction, which the dropped
connection rolled back, so making it again does it once. The engines check a pooled connection
before using it (``pool_pre_ping``), so the connections a restart closed are replaced, not used.
The first call that finds the database gone says so on stderr, and the first that gets through
afterwards says after how long.

While the database was unreachable, no driver's heartbeat reached it: a driver that is back judges
no trial stale (another driver's, or its own) until a grace period after it got through, so that
no running trial is failed, and its configuration measured again, because of the outage
(:meth:`autotune.storage.trial_cache.TrialCache.fail_stale`).
"""

from __future__ import annotations

import functools
import math
import sys
import threading
import time
from typing import Any, Callable, TypeVar

from optuna.storages import RDBStorage

from autotune.errors import AutotuneError
from autotune.storage.database import engine_url, redacted

T = TypeVar("T")

#: How long a call waits for a database that does not answer before the command fails.
PATIENCE_S = 300.0
#: The longest pause between two tries.
MAX_PAUSE_S = 5.0


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it: Optuna wraps SQLAlchemy's errors) says the database
    could not be reached, rather than that the call was wrong."""
    from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (OperationalError, InterfaceError, DisconnectionError)) or \
                (isinstance(seen, DBAPIError) and seen.connection_invalidated):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class Outages:
    """The times the database at ``url`` did not answer this process, and the calls that wait
    for it (from any thread)."""

    def __init__(self, url: str, patience_s: float = PATIENCE_S) -> None:
        self.shown = redacted(url)
        self.patience_s = patience_s
        #: When the current outage began (``time.monotonic()``); ``None`` while the database answers.
        self.since: float | None = None
        #: When the last outage ended.
        self.back_at = -math.inf
        #: Outages seen, and the longest one's length in seconds.
        self.count = 0
        self.longest_s = 0.0
        self._lock = threading.Lock()

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``, made again while the database is unreachable."""
        pause = 0.5
        while True:
            try:
                value = fn(*args, **kwargs)
            except Exception as exc:
                if not unreachable(exc):
                    raise
                waited = self._down(exc)
                if waited > self.patience_s:
                    raise AutotuneError(f"the database {self.shown} has not answered for {waited:.0f} s "
                                        f"({_first_line(exc)}); run the same command again once it does") from None
                time.sleep(pause)
                pause = min(2 * pause, MAX_PAUSE_S)
                continue
            if self.since is not None:
                self._up()
            return value

    def recently_down(self, within_s: float) -> bool:
        """Whether the database is unreachable now, or was less than ``within_s`` ago."""
        return self.since is not None or time.monotonic() - self.back_at < within_s

    def note(self) -> str | None:
        """What the study says of the outages it waited out, if any."""
        if not self.count:
            return None
        times = "once" if self.count == 1 else f"{self.count} times"
        return (f"the database {self.shown} did not answer {times} (for {self.longest_s:.0f} s at the longest); "
                "the study waited for it and went on")

    def _down(self, exc: BaseException) -> float:
        with self._lock:
            now = time.monotonic()
            if self.since is None:
                self.since = now
                self.count += 1
                _say(f"the database {self.shown} does not answer ({_first_line(exc)}); waiting for it, "
                     f"up to {self.patience_s:.0f} s")
            return now - self.since

    def _up(self) -> None:
        with self._lock:
            if self.since is None:
                return
            self.back_at = time.monotonic()
            lasted = self.back_at - self.since
            self.since = None
            self.longest_s = max(self.longest_s, lasted)
        _say(f"the database {self.shown} answers again, after {lasted:.0f} s")


def waited_out(storage: Any) -> list[str]:
    """What a study says of the outages its storage waited out (none for one kept in memory)."""
    outages = getattr(storage, "outages", None)
    note = outages.note() if isinstance(outages, Outages) else None
    return [note] if note else []


def waits_for_database(method: Callable[..., T]) -> Callable[..., T]:
    """A method of an object with ``outages`` (:class:`Outages`), made again while its database
    is unreachable."""
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> T:
        return self.outages.call(method, self, *args, **kwargs)

    return call


class ReconnectingStorage(RDBStorage):
    """Optuna's ``RDBStorage`` on ``url`` whose calls wait for a database that restarts.

    Optuna fills ``{SCHEMA_VERSION}`` into the URL with ``str.format``: braces that belong to the
    URL (a path, a password) are doubled so that they stay as they are.
    """

    def __init__(self, url: str, **kwargs: Any) -> None:
        self.outages = Outages(url)
        super().__init__(engine_url(url).replace("{", "{{").replace("}", "}}"), **kwargs)


#: The public calls of ``RDBStorage``, each a transaction of its own: every call that the driver's
#: storage (:class:`autotune.storage.trial_cache.TrialCache`) makes. The driver opens no study on a
#: ``ReconnectingStorage`` itself (Optuna would wrap it in a cache of its own, which makes other
#: calls), but for Optuna's stale-trial check, which is made again whole.
_CALLS = ("create_new_study", "delete_study", "set_study_user_attr", "set_study_system_attr",
          "get_study_id_from_name", "get_study_name_from_id", "get_study_directions", "get_study_user_attrs",
          "get_study_system_attrs", "get_trial_user_attrs", "get_trial_system_attrs", "get_all_studies",
          "create_new_trial", "set_trial_param", "get_trial_param", "set_trial_state_values",
          "set_trial_intermediate_value", "set_trial_user_attr", "set_trial_system_attr",
          "get_trial_id_from_study_id_trial_number", "get_trial", "get_all_trials", "record_heartbeat")
for _name in _CALLS:
    setattr(ReconnectingStorage, _name, waits_for_database(getattr(RDBStorage, _name)))


def _first_line(exc: BaseException) -> str:
    cause = exc
    while cause.__cause__ is not None:  # Optuna's message says nothing of the database
        cause = cause.__cause__
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0][:200]}" if text else type(cause).__name__


def _say(line: str) -> None:
    print(f"autotune: {line}", file=sys.stderr, flush=True)
