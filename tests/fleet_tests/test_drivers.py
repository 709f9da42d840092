"""Several drivers, one study: ``autotune run`` processes on one PostgreSQL study and one Ray cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from autotune.study.options import StudyResult
from autotune.storage.optuna_storage import rdb_storage
from autotune.storage.attrs import TrialAttrs

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

pytestmark = pytest.mark.slow

#: Five configurations (the script's own batch size and four others).
SPACE = """
target: inductor
parameters:
  batch_size:
    type: int
    choices: [8, 16, 64, 128]
  mode:
    type: categorical
    choices: [eager]
    default: eager
"""


def driver(tmp_path: Path, name: str, url: str, address: str, trials: int, study: str = "shared",
           gate: Path | None = None) -> subprocess.Popen:
    """``autotune run`` in a folder of its own (its outputs and its cache root), on the shared study,
    racing off; its trials wait at ``gate`` (``tests/scripts/gated_train.py``) where one is given."""
    cwd = tmp_path / name
    cwd.mkdir(exist_ok=True)
    (tmp_path / "space.yaml").write_text(SPACE)
    script = "gated_train.py" if gate is not None else "tiny_train.py"
    cmd = [sys.executable, "-m", "autotune.cli", "run", str(SCRIPTS / script), "--trials", str(trials),
           "--target", "inductor", "--space", str(tmp_path / "space.yaml"), "--study", study, "--storage", url,
           "--ray-address", address, "--seed", "0", "--json",
           *(["--env", f"AUTOTUNE_TEST_GATE={gate}"] if gate is not None else []),
           # No re-measurements: a driver measuring a configuration again holds no running trial,
           # and the kill below needs each driver to hold one at the same moment.
           "--race", "0"]
    env = {**os.environ, "XDG_CACHE_HOME": str(cwd / "cache")}
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen, timeout: float = 300) -> StudyResult:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-2000:]
    return StudyResult.model_validate_json(out)


def study_trials(url: str) -> list[optuna.trial.FrozenTrial]:
    """The shared study's trials; none before a driver has created it."""
    try:
        return optuna.load_study(study_name="shared", storage=rdb_storage(url)).get_trials()
    except KeyError:
        return []


def test_two_drivers_share_one_study_and_a_killed_one_loses_nothing(ray_fleet, postgres_url, tmp_path):
    """Their trials wait at a gate of the test's: one ticket lets one trial through, then each
    driver holds one when the first is killed."""
    ray_fleet.start_second()
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "ticket-0").touch()
    # Started together with the same seed: they ask for the same configurations at the same time.
    first, second = (driver(tmp_path, name, postgres_url, ray_fleet.address, trials=5, gate=gate)
                     for name in ("a", "b"))
    completed: dict[int, float] = {}
    deadline = time.monotonic() + 240
    while not (completed and len(list(gate.glob("waiting-*"))) == 2):
        if time.monotonic() > deadline or first.poll() is not None:
            ended = first.poll()
            for d in (first, second):  # not left running into the next test, on the same cluster
                d.kill()
            pytest.fail(f"the first driver ended (exit {ended}) or never held a trial beside the second's:\n"
                        + first.communicate()[1][-2000:])
        time.sleep(0.5)
        completed = {t.number: t.value for t in study_trials(postgres_url) if t.state.name == "COMPLETE"}
    first.send_signal(signal.SIGKILL)
    first.wait()
    (gate / "open").touch()

    result = finished(second)  # it waits for the killed driver's trial to go stale, then runs it
    trials = study_trials(postgres_url)
    counted = [t for t in trials if TrialAttrs.of(t).counted]
    assert len(counted) == 5, "--trials 5 is five trials for the study, whichever driver ran them"
    measured = [t.user_attrs["config_key"] for t in counted if t.user_attrs.get("result")]
    assert len(measured) == len(set(measured)) == 5, "no configuration was measured twice"
    for number, value in completed.items():
        assert trials[number].value == value, "a trial completed before the kill is kept as it was"
    # Optuna's retry of a stale trial is a new trial naming the failed one.
    killed = [trials[t.system_attrs["failed_trial"]] for t in trials if "failed_trial" in t.system_attrs]
    assert killed, "the killed driver's running trial was failed by its stale heartbeat and queued again"
    # Killed while it measured, or after it wrote its result and before it told it: never counted.
    assert all(t.state.name == "FAIL" and not TrialAttrs.of(t).counted for t in killed)
    assert all(t.user_attrs["config_key"] in measured for t in killed), "and its configuration measured again"

    again = finished(driver(tmp_path, "a", postgres_url, ray_fleet.address, trials=5, gate=gate))
    assert again.ran == 0, "a restarted driver finds the study complete"
    assert {t.number for t in again.trials} == {t.number for t in trials} == {t.number for t in result.trials}


def test_two_cpu_studies_run_side_by_side_on_their_own_nodes(ray_fleet, postgres_url, tmp_path):
    # Each study's one worker asks for one node's CPUs, not the cluster's two: both are placed at
    # once, on different nodes. (Before, each asked for 2 CPUs, which no 1-CPU node has.)
    ray_fleet.start_second()
    drivers = [driver(tmp_path, name, postgres_url, ray_fleet.address, trials=2, study=name) for name in ("a", "b")]
    a, b = (finished(d) for d in drivers)
    overlapping = [(x, y) for x in a.trials for y in b.trials
                   if x.started_at < y.ended_at and y.started_at < x.ended_at]
    assert overlapping, "the two studies ran at the same time"
    assert all(x.placement["ray_node"] != y.placement["ray_node"] for x, y in overlapping), \
        "trials that ran at the same time held different nodes"
