"""Compiled graphs published once: a lock per configuration's graphs, and a manifest written when
their compile job succeeded.

A compile job (``autotune run --compile-workers N``) compiles a configuration's graphs into the
target's own compile cache under the cache root (inductor's FX-graph and AOTAutograd caches, the
Neuron persistent cache, XLA's persistent cache where the device reads it back). Each of those
caches writes its entries atomically; what they cannot say is whether *every* graph of a
configuration is there. That is this module's manifest::

    <cache root>/compiled/<kk>/<key>.json    published: the compile job ended well (seconds, where)
    <cache root>/compiled/<kk>/<key>.lock    held (flock) by the process compiling it

The manifest is written (atomically) only after the compile job succeeded, so a compile killed
midway leaves no manifest, and its configuration is compiled again by the next job that asks.
Two jobs that ask for the same graphs take the lock in turn: the second finds the manifest and
compiles nothing. ``flock`` is released by the kernel when its holder dies, so a killed compile
worker never leaves the lock held. The cache root may be a shared file system (NFSv4 and Lustre
carry flock); an object store cannot hold the lock, so the Neuron cache's ``s3://`` URL
(``NEURON_COMPILE_CACHE_URL``) holds the artifacts while the locks and manifests stay on a path.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from autotune.atomic_file import write_atomic

#: The folder of the cache root that holds the manifests and locks.
PUBLISHED_DIR = "compiled"


class LockTimeout(Exception):
    """Another process held the lock of these graphs for longer than the caller would wait."""


class Published:
    """The manifests and locks of compiled configurations under a cache root."""

    def __init__(self, cache_root: str | Path) -> None:
        self.root = Path(cache_root) / PUBLISHED_DIR

    def _path(self, key: str, suffix: str) -> Path:
        return self.root / key[:2] / f"{key}{suffix}"

    def manifest(self, key: str) -> dict[str, Any] | None:
        """What the compile job that published ``key`` wrote, or ``None``: not published (never
        compiled, still compiling, or its compile was killed)."""
        try:
            doc = json.loads(self._path(key, ".json").read_text())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def publish(self, key: str, doc: dict[str, Any]) -> None:
        write_atomic(self._path(key, ".json"), json.dumps({**doc, "key": key, "published_at": time.time()},
                                                          sort_keys=True))

    def withdraw_all(self) -> None:
        """Forget every configuration compiled under this root (some of their graphs were pruned)."""
        for manifest in self.root.glob("*/*.json"):
            manifest.unlink(missing_ok=True)

    @contextmanager
    def lock(self, key: str, timeout_s: float, poll_s: float = 0.2) -> Iterator[float]:
        """Hold the lock of ``key``; yields the seconds spent waiting for it. Raises
        :class:`LockTimeout` after ``timeout_s`` seconds of waiting."""
        path = self._path(key, ".lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        started = time.monotonic()
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() - started > timeout_s:
                        raise LockTimeout(f"another compile of these graphs held {path} for over "
                                          f"{timeout_s:g} s") from None
                    time.sleep(poll_s)
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            yield time.monotonic() - started
        finally:
            os.close(fd)  # releases the flock
