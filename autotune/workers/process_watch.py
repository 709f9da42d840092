"""A trial's process tree as the launcher watches it: every process it started and their memory
(:class:`WatchedTree`), and the trial stopped while a measurement runs on its node (:class:`TrialPause`)."""

from __future__ import annotations

import math
import os
import signal
import time
from typing import Callable

import psutil

from autotune.process_tree import kill_tree

#: Seconds between two readings of the tree's proportional memory (PSS, a costlier read than RSS).
PSS_EVERY_S = 2.0


class TrialPause:
    """Stops and continues a trial's processes as ``wanted`` says; counts the time stopped."""

    def __init__(self, tree: WatchedTree, wanted: Callable[[], bool] | None, cap_s: float = math.inf) -> None:
        self.tree = tree
        self.wanted = wanted
        #: Seconds it may be stopped in all; past them it runs on whatever ``wanted`` says.
        self.cap_s = cap_s
        self.since: float | None = None
        self.total = 0.0

    def poll(self) -> float:
        """Seconds the trial has been stopped so far."""
        if self.wanted is not None:
            wanted = self.stopped() < self.cap_s and self.wanted()
            if wanted and self.since is None:
                self._signal(signal.SIGSTOP)
                self.since = time.monotonic()
            elif not wanted:
                self.release()
        return self.stopped()

    def stopped(self) -> float:
        return self.total + (time.monotonic() - self.since if self.since is not None else 0.0)

    def release(self) -> None:
        if self.since is not None:
            self._signal(signal.SIGCONT)
            self.total += time.monotonic() - self.since
            self.since = None

    def _signal(self, sig: signal.Signals) -> None:
        """To the process group, and to each process of the tree outside it: torchrun starts each
        rank in a session of its own."""
        try:
            os.killpg(self.tree.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for p in self.tree.alive():
            try:
                p.send_signal(sig)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass


class WatchedTree:
    """The trial's process tree, remembered as it grows so that a kill misses no descendant."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.known: dict[int, psutil.Process] = {}
        self._pss = 0
        self._pss_at = -1e9
        try:
            self.known[pid] = psutil.Process(pid)
        except psutil.NoSuchProcess:
            pass

    def alive(self) -> list[psutil.Process]:
        """The tree's processes alive now, each descendant seen so far among them."""
        root = self.known.get(self.pid)
        if root is not None:
            try:
                for child in root.children(recursive=True):
                    self.known.setdefault(child.pid, child)
            except psutil.NoSuchProcess:
                pass
        alive = []
        for p in list(self.known.values()):
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        return alive

    def memory(self, limit: int) -> int:
        """Host memory of the whole tree, cheap enough to poll ten times a second.

        RSS alone counts the pages that forked DataLoader workers share with their parent once per
        process, while PSS, which counts them once, costs a page-table walk too slow to poll ten
        times a second (docs/results/trial.md#host-memory-of-a-trial).
        So: RSS for a single process; for a tree, PSS every few seconds and whenever the RSS
        sum crosses the limit, so that no trial is killed on the inflated figure.
        """
        procs = self.alive()
        rss = 0
        for p in procs:
            try:
                rss += p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        if len(procs) <= 1:
            return rss
        now = time.monotonic()
        if rss > limit or now - self._pss_at > PSS_EVERY_S:
            self._pss, self._pss_at = self._sum_pss(procs), now
        return min(rss, self._pss) if self._pss else rss

    @staticmethod
    def _sum_pss(procs: list[psutil.Process]) -> int:
        total = 0
        for p in procs:
            try:
                total += p.memory_full_info().pss
            except (psutil.NoSuchProcess, psutil.AccessDenied, AttributeError):
                pass
        return total

    def kill(self) -> None:
        kill_tree(self.pid, self.alive())
