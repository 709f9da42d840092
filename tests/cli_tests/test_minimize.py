"""``autotune minimize`` as a user runs it: real trials of a real failing XLA configuration."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
#: thunk_runtime=false fails on XLA:CPU 2.9 ("CpuExecutable has no thunks."); the other three run.
FAILING = ["--set", "thunk_runtime=false", "--set", "fast_math=true", "--set", "batch_size=32",
           "--set", "xnnpack=true"]


def autotune(*args: str | Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def minimize(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return autotune("minimize", SCRIPTS / "tiny_xla_train.py", "--target", "xla", *FAILING, "--json",
                    "--cache", tmp_path / "cache", *extra, "--", "--steps", "60", cwd=tmp_path)


@pytest.mark.slow
def test_four_moved_knobs_reduce_to_thunk_runtime_alone_and_the_cache_answers_a_second_run(tmp_path: Path) -> None:
    stopped = minimize(tmp_path, "--budget", "2", "--out", str(tmp_path / "first"))
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    early = json.loads(stopped.stdout)
    # The halves were tried: the one with thunk_runtime still fails, and no removal from it was tried.
    assert early["knobs"] == {"thunk_runtime": False, "xnnpack": True}
    assert early["minimal"] is False and early["unproven"] == ["thunk_runtime", "xnnpack"]
    assert early["trials"] == 3  # the configuration itself, then two halves

    proc = minimize(tmp_path, "--out", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["knobs"] == {"thunk_runtime": False}
    assert out["minimal"] is True and out["needed"] == ["thunk_runtime"]
    assert out["moved"] == {"batch_size": 32, "fast_math": True, "thunk_runtime": False, "xnnpack": True}
    assert out["category"] == "script_error" and "CpuExecutable has no thunks" in out["reason"]
    # the half that ran (batch_size, fast_math) is remembered; failures of this category are run again
    assert out["from_cache"] == 1 and out["trials"] == out["tested"] - 1 == 4

    report = tmp_path / "report"
    readme = (report / "README.md").read_text()
    flags = next(line for line in readme.splitlines() if line.startswith("- XLA_FLAGS="))
    assert "--xla_cpu_use_thunk_runtime=false" in flags and "xnnpack" not in flags, flags
    assert "torch-xla: 2.9" in readme and "CpuExecutable has no thunks" in readme
    assert "CpuExecutable has no thunks" in (report / "log_tail.txt").read_text()
    assert json.loads((report / "minimal.json").read_text())["knobs"] == {"thunk_runtime": False}
    assert json.loads((report / "provenance.json").read_text())["versions"]["torch-xla"].startswith("2.9")
    reproduce = (report / "reproduce.sh").read_text()
    assert "--set thunk_runtime=False" in reproduce and "fast_math" not in reproduce

    # The command in the report reproduces the failure.
    command = next(line for line in reproduce.splitlines() if line.startswith("autotune trial"))
    again = autotune(*shlex.split(command)[1:], cwd=tmp_path)
    assert again.returncode == 1 and "CpuExecutable has no thunks" in again.stdout + again.stderr


def test_a_configuration_is_needed(tmp_path: Path) -> None:
    proc = autotune("minimize", SCRIPTS / "tiny_xla_train.py", "--target", "xla", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--set KEY=VALUE" in proc.stderr


def test_a_budget_below_one_trial_is_refused(tmp_path: Path) -> None:
    proc = autotune("minimize", SCRIPTS / "tiny_xla_train.py", *FAILING, "--budget", "0", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "--budget must be at least 1" in proc.stderr


def test_a_study_that_does_not_exist_is_named(tmp_path: Path) -> None:
    proc = autotune("minimize", "nosuchstudy", "--trial", "3", "--storage", f"sqlite:///{tmp_path}/s.db",
                    cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr

