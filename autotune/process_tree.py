"""Killing a process tree so that nothing of it is left: its process group, and every descendant
seen, including those that left the group (``setsid``: a DataLoader worker, a Ray raylet)."""

from __future__ import annotations

import os
import signal
from typing import Iterable

import psutil


def kill_tree(pid: int, seen: Iterable[psutil.Process] = ()) -> None:
    """SIGKILL the process group led by ``pid``, then each process of ``seen`` and every
    descendant of ``pid`` still alive."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    doomed = list(seen)
    try:
        doomed.extend(psutil.Process(pid).children(recursive=True))
    except psutil.NoSuchProcess:
        pass
    for p in doomed:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
