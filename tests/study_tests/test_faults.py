"""Faults survived by a study, the numerics guard, and two drivers on one study."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import psutil
import pytest

from autotune.study.study import tune
from autotune.study.options import EXIT_ALL_FAILED
from autotune.targets.inductor import InductorTarget
from autotune.workers.launcher import TrialLimits, run_trial
from bench.fleet_faults import full_disk, mount_refused
from corpus.make_data import write_mnist

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
pytestmark = pytest.mark.slow

FAULTS = {  # fault -> (state, failure category)
    "none": ("COMPLETE", None),
    "segfault": ("FAIL", "crash"),
    "hang": ("FAIL", "timeout"),
    "raise": ("FAIL", "script_error"),
    "host_oom": ("FAIL", "host_oom"),
    "compile_error": ("FAIL", "compile_error"),
    "killed": ("FAIL", "crash"),
    "worker_dies_once": ("COMPLETE", None),
}


def fault_space(tmp_path: Path, faults: list[str]) -> Path:
    path = tmp_path / "faults.yaml"
    known = "\n".join(f"  - {{fault: {f}}}" for f in faults if f != "none")
    path.write_text(f"""
target: inductor
parameters:
  fault: {{type: categorical, choices: [{', '.join(faults)}], default: none}}
  mode: {{type: categorical, choices: [eager], default: eager}}
known_good:
{known}
""")
    return path


def test_every_fault_ends_as_a_categorised_trial_and_the_study_finishes(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAULT_MARKER_DIR", str(tmp_path))  # Ray workers were started before: pass it on
    space = fault_space(tmp_path, list(FAULTS))
    # race=0: eight trials would measure the fault-free one again for the between-run noise, which
    # is not what this test is about.
    result = tune(SCRIPTS / "faulty.py", trials=len(FAULTS), target="inductor", space=str(space),
                  trial_timeout=25, memory_limit="1GiB", seed=0, study="faults", race=0)
    assert result.exit_code == 0
    by_fault = {t.params.get("fault", "none"): t for t in result.trials}
    assert set(by_fault) == set(FAULTS), result.trials
    for fault, (state, category) in FAULTS.items():
        t = by_fault[fault]
        assert (t.state, t.category) == (state, category), (fault, t.reason, t.log_tail)
    assert "deliberate failure" in by_fault["raise"].log_tail
    assert "Unknown flag" in by_fault["compile_error"].log_tail

    shown = subprocess.run([sys.executable, "-m", "autotune.cli", "show", "faults"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    for category in ("crash", "timeout", "script_error", "host_oom", "compile_error"):
        assert category in shown.stdout
    assert "deliberate failure" in shown.stdout, "the log tail of each failure is shown"


def test_a_worker_that_always_dies_fails_its_trial_after_one_retry(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    space = fault_space(tmp_path, ["none", "worker_always_dies"])
    result = tune(SCRIPTS / "faulty.py", trials=2, target="inductor", space=str(space), trial_timeout=30, seed=0)
    dead = [t for t in result.trials if t.params.get("fault") == "worker_always_dies"]
    assert dead and dead[0].state == "FAIL" and dead[0].category == "crash"
    assert "died twice" in dead[0].reason
    assert any(t.state == "COMPLETE" for t in result.trials), "the study went on after the dead worker"


def test_a_script_whose_data_is_missing_stops_the_study_at_its_first_trial(ray_cluster, tmp_path, monkeypatch):
    # Not the configuration's fault: every other configuration would fail the same way, so the
    # study asks for no more trials and says why, in place of running 5 doomed ones.
    monkeypatch.chdir(tmp_path)
    result = tune(SCRIPTS / "no_data.py", trials=5, target="inductor", workers=1, trial_timeout=60, seed=0,
                  study="no-data")
    # The known-good configuration the study enqueued waits for the study to continue.
    (trial,) = [t for t in result.trials if t.state != "WAITING"]
    assert trial.category == "missing_data", trial
    assert trial.reason.startswith("the script's data set is not where the script reads it")
    assert result.exit_code == EXIT_ALL_FAILED
    assert result.outlook is not None and result.outlook.verdict == "stopped"
    assert result.outlook.line.startswith("no configuration ran: the study stopped: trial 0 failed: the script's "
                                          "data set is not where the script reads it")
    assert any("Every configuration would fail the same way" in note for note in result.notes)
    # Once the data is there, the same command continues the study, and the baseline the first
    # run could not measure is measured now, not answered from its failure: after the two
    # known-good configurations that were waiting (the baseline is queued again behind them).
    write_mnist(tmp_path / "data-that-is-not-here", train=512, test=64)
    again = tune(SCRIPTS / "no_data.py", trials=3, target="inductor", workers=1, trial_timeout=60, seed=0,
                 study="no-data")
    assert again.exit_code == 0 and again.baseline_value is not None and again.best is not None
    measured = [t for t in again.trials if t.state == "COMPLETE"]
    assert len(measured) == 3 and all(t.duplicate_of is None for t in measured)
    assert trial.params in [t.params for t in measured]


def test_a_trial_killed_from_outside_is_a_crash(tmp_path):
    plan = InductorTarget().plan({"mode": "eager"})
    box = {}
    runner = threading.Thread(target=lambda: box.update(r=run_trial(
        plan, SCRIPTS / "sleepy_train.py", trial_dir=tmp_path / "t", limits=TrialLimits(timeout_s=60))))
    runner.start()
    victim = None
    for _ in range(200):
        victim = next((p for p in psutil.process_iter(["cmdline"])
                       if "autotune.harness" in " ".join(p.info["cmdline"] or [])
                       and str(tmp_path) in " ".join(p.info["cmdline"] or [])), None)
        if victim:
            break
        time.sleep(0.05)
    assert victim is not None
    victim.kill()
    runner.join(60)
    result = box["r"]
    assert result.failure.category.value == "crash" and result.failure.signal == "SIGKILL"


def test_a_diverging_cast_is_never_the_best(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    space = tmp_path / "precision.yaml"
    space.write_text("""
target: inductor
parameters:
  precision: {type: categorical, choices: [fp32, bf16_autocast], default: fp32}
  mode: {type: categorical, choices: [eager], default: eager}
known_good:
  - {precision: bf16_autocast}
""")
    result = tune(SCRIPTS / "precision_sensitive.py", trials=2, target="inductor", space=str(space), seed=0)
    cast = next(t for t in result.trials if t.params.get("precision") == "bf16_autocast")
    base = next(t for t in result.trials if t.params.get("precision") == "fp32")
    assert cast.state == "COMPLETE" and cast.numerics_violated, cast
    assert not base.numerics_violated
    assert result.best.trial == base.number
    study = optuna.load_study(study_name=result.study, storage=result.storage)
    frozen = study.trials[cast.number]
    assert frozen.user_attrs["numerics_constraint"] > 0, "Optuna's constraint records the violation"
    # With the guard off the same measurement may win.
    loose = tune(SCRIPTS / "precision_sensitive.py", trials=2, target="inductor", space=str(space), seed=0,
                 study="loose", numerics_guard=False)
    assert not any(t.numerics_violated for t in loose.trials)


def test_two_drivers_on_one_study_cooperate(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("""
target: inductor
parameters:
  batch_size: {type: int, choices: [8, 16, 32, 64, 128]}
  mode: {type: categorical, choices: [eager], default: eager}
""")
    cmd = [sys.executable, "-m", "autotune.cli", "run", str(SCRIPTS / "tiny_train.py"), "--trials", "4",
           "--space", str(space), "--study", "shared", "--target", "inductor",
           # No re-measurements (noise, races): sharing the trials is the point, and the study is shorter.
           "--race", "0"]
    drivers = [subprocess.Popen([*cmd, "--seed", str(i)], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [d.communicate(timeout=400) for d in drivers]
    assert all(d.returncode == 0 for d in drivers), [o[1][-1500:] for o in outs]
    study = optuna.load_study(study_name="shared", storage=f"sqlite:///{tmp_path}/.autotune/autotune.db")
    measured = [t for t in study.trials if t.user_attrs.get("counted") and t.user_attrs.get("result")]
    assert len(measured) == 4, "--trials 4 is four trials for the study, whichever driver ran them"
    keys = [t.user_attrs["config_key"] for t in measured]
    assert len(keys) == len(set(keys)), "no configuration measured twice (each is claimed first)"


def test_a_full_disk_fails_a_trial_as_infrastructure_and_the_study_resumes_once_freed(tmp_path):
    """bench/fleet_faults.py's full disk, short: the cache root and the outputs on a tmpfs that is
    filled while the third trial is held; then it is freed and the same command run again."""
    refused = mount_refused()
    if refused:
        pytest.skip(f"no tmpfs can be mounted here ({refused}): the test needs root, as CI runs")
    outcome = full_disk(tmp_path, trials=4, before=2)
    assert outcome.finished, outcome.notes  # the resumed run exited 0, and every JSON file stayed whole
    assert (outcome.completed, outcome.lost, outcome.measured_twice) == (4, 0, 0), outcome
    assert outcome.failures == {2: "disk_full"}, "the held trial failed as the machine's fault, not its own"
    said = [n for n in outcome.notes if "no space left" in n]
    assert len(said) == 1 and said[0].startswith("trial 2 failed: no space left on the filesystem of"), said
