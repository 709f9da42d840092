"""How the ranks of a multi-process trial agree on the step they all end at: a ``stop`` file in
the folder the ranks of a node share (:class:`RankStop`), or, for a trial that spans several nodes,
a key in the store of torchrun's rendezvous on node 0, which every rank reaches (:class:`StoreStop`).
"""

from __future__ import annotations

import datetime
import math
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any


class RankStop:
    """The ``stop`` file through which the ranks of one trial agree on the step they all end at.

    A rank whose estimate is good enough names a step two ahead of its own: ranks in lockstep are
    at most one step apart, so every rank sees the file before it passes that step. Each rank's
    clock looks for the file at every step boundary (a ``stat``, microseconds).
    """

    #: Steps between the request and the stop.
    AHEAD = 2

    def __init__(self, ranks_dir: str | None) -> None:
        self.path = Path(ranks_dir) / "stop" if ranks_dir else None
        self.at: int | None = None

    @property
    def shared(self) -> bool:
        """Whether this process is one of several measured ranks (only those coordinate)."""
        return self.path is not None

    def due(self, step: int) -> bool:
        if self.at is None and self.path is not None and self.path.exists():
            try:
                self.at = int(self.path.read_text())
            except ValueError:  # being written: read at the next step
                return False
        return self.at is not None and step >= self.at

    def request(self, step: int) -> None:
        """Ask every rank to stop ``AHEAD`` steps from ``step``, unless one asked already."""
        assert self.path is not None
        if self.path.exists():
            return
        tmp = self.path.with_name(f"stop.{os.getpid()}")
        tmp.write_text(str(step + self.AHEAD))
        try:
            os.link(tmp, self.path)  # atomic, and fails if another rank was first
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)


class StoreStop(RankStop):
    """The stop of a trial that spans several nodes, which share no folder: a key in the store that
    torchrun's agent on node 0 serves at ``MASTER_ADDR:MASTER_PORT`` for the trial's ranks.

    The first rank to ask sets the key (``compare_set``: one value wins); a thread of each rank
    waits for it, so that a step costs no round trip to node 0, and a rank asks for a step far
    enough ahead (at least :attr:`LEAD_S`, at the steps' pace so far) that every rank has heard of it
    by then."""

    KEY = "autotune/stop"
    #: Seconds from a request to the step it names, at least: a waiting rank hears of a key within
    #: a round trip to node 0.
    LEAD_S = 0.5

    def __init__(self, host: str, port: int) -> None:
        super().__init__(None)
        self.at: int | None = None  # set once the ranks agree where to stop
        self.address = host, port
        self.heard: int | None = None
        #: The latest step boundaries seen, and when: the steps' pace.
        self._seen: deque[tuple[int, float]] = deque(maxlen=20)
        threading.Thread(target=self._listen, name="autotune-rank-stop", daemon=True).start()

    @property
    def shared(self) -> bool:
        return True

    def _client(self, wait_s: float) -> Any:
        from torch.distributed import TCPStore  # pyright: ignore[reportPrivateImportUsage]  (documented public)

        host, port = self.address
        return TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=wait_s))

    def _listen(self) -> None:
        """Wait for the key, on a client of its own (a store's client makes one call at a time)."""
        store = None
        while self.heard is None:
            try:
                store = store or self._client(60.0)
                store.wait([self.KEY])
                self.heard = int(store.get(self.KEY))
            except Exception:  # not set within the wait, or node 0's store is gone with its trial
                store = None
                time.sleep(0.5)

    def due(self, step: int) -> bool:
        self._seen.append((step, time.monotonic()))
        if self.at is None and self.heard is not None:
            self.at = self.heard
        return self.at is not None and step >= self.at

    def request(self, step: int) -> None:
        if self.at is not None:
            return
        ahead = self.AHEAD
        (first, since), (last, now) = self._seen[0], self._seen[-1]
        if last > first:
            ahead += math.ceil(self.LEAD_S * (last - first) / max(now - since, 1e-9))
        try:
            self.at = int(self._client(10.0).compare_set(self.KEY, "", str(step + ahead)))
        except Exception:  # node 0's store is gone: the trial is ending without this rank's say
            pass
