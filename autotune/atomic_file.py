"""Writing a file so that no reader ever sees it half-written, and a crash right after leaves it whole.

Used on both sides of a trial (the harness's report, the study's outputs, the cache's results, a
job's exit code): a killed process must never leave a file that a later one trusts.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in its folder, synced, then renamed over
    ``path``; the folder is synced too, so that the rename itself survives a crash."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk, say: ``path`` stays as it was, and no half-written copy stays beside it
        tmp.unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
