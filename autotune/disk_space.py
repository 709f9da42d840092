"""A write that found no space: telling it from other failures, and saying where.

The cache root and a trial's folder fill up (compiled graphs are large: a Neuron compile cache grows
to tens of GB). A write there that fails for lack of space fails whatever configuration was running,
so it is the machine's fault, not the configuration's: the trial side and the study ask here
whether an error, or a folder, is out of space, and say which filesystem to free.
"""

from __future__ import annotations

import errno
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

#: No space left on the device, or over a disk quota.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
#: What a probe writes: one block, synced, as a trial's smallest write would need.
_PROBE_BYTES = 4096


def out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that found no space."""
    return isinstance(exc, OSError) and exc.errno in NO_SPACE


@contextmanager
def on_no_space(path: str | Path, then: Callable[[Path], None]) -> Iterator[None]:
    """Writes to ``path``; one that finds no space is ``then(path)`` instead of an error."""
    try:
        yield
    except OSError as exc:
        if not out_of_space(exc):
            raise
        then(Path(path))


def full(folder: str | Path) -> bool:
    """Whether a small write in ``folder`` (or the nearest folder above it that exists) fails
    now for lack of space. Asked of a trial that ended without its report: its log may hold
    nothing of why, since the log could not be written either."""
    probe = _existing(Path(folder)) / f".autotune-space-probe.{os.getpid()}"
    try:
        with open(probe, "wb") as fh:
            fh.write(b"\0" * _PROBE_BYTES)
            fh.flush()
            os.fsync(fh.fileno())  # a filesystem that allocates late says so here
    except OSError as exc:
        return out_of_space(exc)
    finally:
        probe.unlink(missing_ok=True)
    return False


def no_space_reason(path: str | Path) -> str:
    """Why a write to ``path`` failed, and the fix, in one line."""
    existing = _existing(Path(path))
    mount = existing
    while not os.path.ismount(mount) and mount.parent != mount:
        mount = mount.parent
    try:
        free = f", {shutil.disk_usage(existing).free / 2 ** 20:,.0f} MiB free"
    except OSError:
        free = ""
    return (f"no space left on the filesystem of {path} ({mount}{free}): free some, then run the same "
            "command again")


def _existing(path: Path) -> Path:
    path = path.absolute()
    while not path.is_dir() and path.parent != path:
        path = path.parent
    return path
