"""Killing a process tree so that nothing of it is left: its process group, and every descendant
seen, including those that left the group (``setsid``: a DataLoader worker, a Ray raylet); and a
process that dies with the one that started it."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
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


#: ``prctl``'s option that has the kernel signal a process when its parent dies (Linux).
PR_SET_PDEATHSIG = 1
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when the thread that started it ends: a trial whose
    Ray worker died, stopped or not, must not live on. Called in the child before its command
    (``preexec_fn``), it makes no Python object beyond small ints, as a forked child of a
    threaded process may. Elsewhere than on Linux it does nothing."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGKILL))
