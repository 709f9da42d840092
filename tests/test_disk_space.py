"""A full filesystem, for real (a tmpfs of 1 MiB): a file written whole or not at all stays as it
was, and a full folder is told apart from a failure of another kind."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.atomic_file import write_atomic
from autotune.disk_space import full, no_space_reason, out_of_space
from bench.fleet_faults import fill, mount_refused


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    refused = mount_refused()
    if refused:
        pytest.skip(f"no tmpfs can be mounted here ({refused}): the test needs root, as CI runs")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True, capture_output=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=False, capture_output=True)


def test_a_file_rewritten_on_a_full_disk_stays_whole(small_disk: Path) -> None:
    best = small_disk / "out" / "best.json"
    write_atomic(best, json.dumps({"value": 1.0}))
    assert not full(small_disk / "out")
    fill(small_disk / "filler")
    assert full(small_disk / "out") and full(small_disk / "out" / "trials" / "0003"), "a folder not made yet too"
    with pytest.raises(OSError) as raised:
        write_atomic(best, json.dumps({"value": 2.0, "pad": "x" * 100_000}))
    assert out_of_space(raised.value)
    assert json.loads(best.read_text()) == {"value": 1.0}, "the old copy, whole"
    assert [p.name for p in best.parent.iterdir()] == ["best.json"], "no half-written copy beside it"
    reason = no_space_reason(best)
    assert reason.startswith(f"no space left on the filesystem of {best} ({small_disk}, 0 MiB free)"), reason
    (small_disk / "filler").unlink()
    assert not full(small_disk / "out")
    write_atomic(best, json.dumps({"value": 2.0}))
    assert json.loads(best.read_text()) == {"value": 2.0}


def test_a_failure_of_another_kind_is_no_full_disk(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(OSError) as raised:
        write_atomic(tmp_path / "a-file" / "below-it.json", "{}")  # its folder is a file
    assert not out_of_space(raised.value) and not full(tmp_path)
