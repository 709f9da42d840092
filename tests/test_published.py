"""Compiled graphs published once: the manifest and the lock of a configuration's graphs."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from autotune.published import LockTimeout, Published

KEY = "ab" + "0" * 62


def _hold(root: str, ready: str, seconds: float) -> None:
    with Published(root).lock(KEY, timeout_s=5):
        Path(ready).touch()
        time.sleep(seconds)


def _holder(tmp_path: Path, seconds: float) -> multiprocessing.Process:
    ready = tmp_path / "ready"
    proc = multiprocessing.get_context("fork").Process(target=_hold, args=(str(tmp_path), str(ready), seconds))
    proc.start()
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc


def test_a_manifest_is_there_only_once_published(tmp_path):
    published = Published(tmp_path)
    assert published.manifest(KEY) is None
    published.publish(KEY, {"seconds": 12.5})
    doc = published.manifest(KEY)
    assert doc["seconds"] == 12.5 and doc["key"] == KEY and doc["published_at"] > 0
    assert (tmp_path / "compiled" / "ab" / f"{KEY}.json").is_file()
    assert not list((tmp_path / "compiled" / "ab").glob(".*.tmp")), "written through a temporary file"
    published.withdraw_all()
    assert published.manifest(KEY) is None


def test_a_half_written_manifest_is_not_trusted(tmp_path):
    path = tmp_path / "compiled" / "ab" / f"{KEY}.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"seconds": 1')
    assert Published(tmp_path).manifest(KEY) is None


def test_the_lock_is_held_by_one_process_at_a_time(tmp_path):
    holder = _holder(tmp_path, seconds=1.5)
    started = time.monotonic()
    with Published(tmp_path).lock(KEY, timeout_s=10) as waited:
        assert waited > 0.5 and time.monotonic() - started >= waited
    holder.join()


def test_waiting_too_long_for_the_lock_is_an_error(tmp_path):
    holder = _holder(tmp_path, seconds=3)
    with pytest.raises(LockTimeout, match="held .* for over 0.5 s"):
        with Published(tmp_path).lock(KEY, timeout_s=0.5):
            pass
    holder.join()


def test_a_killed_holder_leaves_the_lock_free_and_nothing_published(tmp_path):
    holder = _holder(tmp_path, seconds=60)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join()
    with Published(tmp_path).lock(KEY, timeout_s=2) as waited:
        assert waited < 1
    assert Published(tmp_path).manifest(KEY) is None
