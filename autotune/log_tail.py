"""The end of a log file, read without reading the whole file (trial logs can be large)."""

from __future__ import annotations

import os
from pathlib import Path


def log_tail(path: str | Path, *, lines: int | None = None, max_bytes: int = 64 * 1024) -> str:
    """The last ``max_bytes`` of the file at ``path`` as text, cut to its last ``lines`` lines if
    given; ``""`` when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - max_bytes))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:]) if lines is not None else text
