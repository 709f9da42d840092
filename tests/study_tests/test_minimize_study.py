"""``autotune minimize STUDY --trial N``: a failed trial of a real study reduced with real trials."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.study.study import tune

SCRIPTS = Path(__file__).resolve().parents[2] / "tests" / "scripts"


@pytest.mark.slow
def test_a_failed_trial_of_a_study_reduces_to_its_failing_knob_with_the_studys_results(ray_cluster, tmp_path,
                                                                                       monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    cache = tmp_path / "cache"
    # Pinned by --set, both knobs are in the study's own baseline, which fails: the reduction starts
    # from the space's baseline, where both are moved.
    result = tune(SCRIPTS / "tiny_xla_train.py", "--steps", "60", trials=1, target="xla", seed=0, cache=str(cache),
                  sets={"thunk_runtime": False, "fast_math": True})
    failed = result.trials[0]
    assert failed.state == "FAIL" and "CpuExecutable has no thunks" in failed.reason
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", "minimize", result.study, "--trial", "0", "--json",
                           "--cache", str(cache), "--out", str(tmp_path / "report")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["knobs"] == {"thunk_runtime": False} and out["minimal"]
    assert out["moved"] == {"fast_math": True, "thunk_runtime": False}
    # The trial's own result is the study's: fast_math alone, thunk_runtime alone and the baseline ran.
    assert out["trials"] == 3 and out["tested"] == 4
    assert "--steps 60" in (tmp_path / "report" / "reproduce.sh").read_text()


@pytest.mark.slow
def test_a_trial_that_did_not_fail_is_refused(ray_cluster, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = tune(SCRIPTS / "tiny_xla_train.py", "--steps", "60", trials=1, target="xla", seed=0,
                  cache=str(tmp_path / "cache"))
    assert result.trials[0].state == "COMPLETE"
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", "minimize", result.study, "--trial", "0"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "did not fail" in proc.stderr and "Traceback" not in proc.stderr
