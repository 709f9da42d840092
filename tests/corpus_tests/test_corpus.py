"""Public example scripts, run as published, under ``autotune trial`` (the corpus: ``tests/corpus/``).

Each script runs in a working directory made for it (its files, its data made by
``tests/corpus/make_data.py``, nothing downloaded), through the CLI as a user types it, under its
target's baseline configuration, with arguments that keep it short. It must be measured: status
ok, and each step as many samples as the script's batch size.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from corpus import Entry, entries, read_trial

#: Measuring time after warm-up: enough for the minimum of five windows, short for a suite.
MAX_SECONDS = 2.0
TIMEOUT_S = 240.0


def git_blob_id(path: Path) -> str:
    """What ``git hash-object`` prints for the file: its id as a git object."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_every_script_is_kept_as_published_with_its_source_and_licence() -> None:
    assert len(entries()) >= 8
    for e in entries():
        source = (e.folder / "SOURCE.md").read_text()
        for field in ("repository", "path", "commit", "licence", "copyright"):
            assert f"- {field}: " in source, f"{e.name}/SOURCE.md has no {field}"
        published = {p.name for p in e.folder.iterdir()} - {"SOURCE.md", "corpus.toml", "__pycache__"}
        assert e.script in published and "LICENSE" in published, e.name
        assert set(e.blobs) == published, f"{e.name}: files without a recorded blob, or blobs without a file"
        for name, blob in e.blobs.items():
            assert git_blob_id(e.folder / name) == blob, f"{e.name}/{name} is not the published file"


@pytest.mark.slow
@pytest.mark.parametrize("entry", [pytest.param(e, id=e.name) for e in entries()])
def test_autotune_trial_measures_the_script(entry: Entry, tmp_path: Path) -> None:
    cwd = entry.prepare(tmp_path)
    command = entry.trial_command(tmp_path / "trial", max_seconds=MAX_SECONDS, timeout=TIMEOUT_S)
    proc = subprocess.run(command, cwd=cwd, env=entry.run_env(), capture_output=True, text=True,
                          timeout=TIMEOUT_S + 60)
    result = read_trial(proc.stdout)
    assert result is not None, f"exit {proc.returncode}, no result: {proc.stderr[-2000:]}"
    assert result.status == "ok", f"{result.failure}\n{result.log_tail[-2000:]}"
    assert result.measurement is not None
    assert result.measurement.samples_per_step == pytest.approx(entry.batch_size * entry.processes)
    # What the script gave its DataLoaders itself: where every loader got one value, a study
    # measures a configuration setting it so once, as its baseline.
    assert {k: sorted(v) for k, v in result.script_loader.items()} == entry.script_loader
    if entry.processes > 1:
        assert len(result.ranks) == entry.processes
        for rank in result.ranks:
            assert rank.measurement is not None
            assert rank.measurement.samples_per_step == pytest.approx(entry.batch_size)


@pytest.mark.slow
@pytest.mark.parametrize("entry", [pytest.param(e, id=e.name) for e in entries() if "batch_size" in e.flags])
def test_a_batch_size_given_as_the_scripts_flag_changes_its_steps(entry: Entry, tmp_path: Path) -> None:
    """The scripts whose batch size only their own flag sets whole are tuned through that flag."""
    batch = entry.batch_size // 2
    cwd = entry.prepare(tmp_path)
    command = entry.trial_command(tmp_path / "trial", max_seconds=MAX_SECONDS, timeout=TIMEOUT_S,
                                  extra=("--set", f"batch_size={batch}", *entry.flag_options))
    proc = subprocess.run(command, cwd=cwd, env=entry.run_env(), capture_output=True, text=True,
                          timeout=TIMEOUT_S + 60)
    result = read_trial(proc.stdout)
    assert result is not None, f"exit {proc.returncode}, no result: {proc.stderr[-2000:]}"
    assert result.status == "ok", f"{result.failure}\n{result.log_tail[-2000:]}"
    assert result.measurement is not None and result.measurement.samples_per_step == pytest.approx(batch)
    assert f"{entry.flags['batch_size']} {batch}" in " ".join(result.script_args), result.script_args
