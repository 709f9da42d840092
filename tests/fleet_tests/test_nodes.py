"""Trials over the nodes of a Ray cluster, and a node lost mid-trial.

Neuron cannot run here; what is tested is the contract: each trial holds NeuronCores of the node it
ran on (Ray's ``neuron_cores`` resource sets ``NEURON_RT_VISIBLE_CORES`` per node), and the node is
recorded with the trial.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.study.options import StudyResult
from autotune.targets.neuron.cores import NeuronCoreSlot
from study_tests.test_study import TWO_POINT_SPACE

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

pytestmark = pytest.mark.slow

#: Three configurations: the script's own batch size, 16 and 64.
SPACE = TWO_POINT_SPACE


def run(tmp_path: Path, address: str, storage: str, *args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "autotune.cli", "run", *args, "--ray-address", address, "--storage", storage,
           "--study", "fleet", "--seed", "0", "--json"]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result_of(process: subprocess.Popen, codes: tuple[int, ...] = (0,)) -> StudyResult:
    try:
        out, err = process.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    assert process.returncode in codes, err[-3000:]
    return StudyResult.model_validate_json(out)


def test_neuron_trials_run_on_both_nodes_each_within_its_nodes_cores(ray_fleet, tmp_path) -> None:
    ray_fleet.start_second()
    cores_of = {n["id"]: int(n["resources"]["neuron_cores"]) for n in ray_fleet.nodes()}
    # 2 + 4 NeuronCores hold three trials of 2 cores: one on the head, two on the second node, all
    # three at once. What counts is where they ran and which cores they held, not what the script
    # does there: it fails after two steps, so that the test takes seconds.
    result = result_of(run(tmp_path, ray_fleet.address, f"sqlite:///{tmp_path / 'db'}", str(SCRIPTS / "raises.py"),
                           "--trials", "3", "--target", "neuron", "--platform", "trn1", "--cores-per-trial", "2",
                           "--set", "batches_per_execution=1", "--set", "precision=fp32"), codes=(0, 3))
    ran = [t for t in result.trials if t.placement]
    assert len(ran) == 3, [t.model_dump(include={"number", "state", "reason"}) for t in result.trials]
    per_node: dict[str, list[str]] = {}
    for t in ran:
        node = t.placement["ray_node"]
        slot = NeuronCoreSlot.parse(t.placement["NEURON_RT_VISIBLE_CORES"])
        assert slot.count == 2 and 0 <= slot.first and slot.last < cores_of[node], (t.placement, cores_of[node])
        per_node.setdefault(node, []).append(slot.range)
    assert set(per_node) == set(cores_of), "the trials ran on both nodes"
    assert all(len(r) == len(set(r)) for r in per_node.values()), "no two trials on a node held the same cores"
    print("trials per node:", {cores_of[n]: len(r) for n, r in per_node.items()})


def test_a_study_submitted_as_a_ray_job(ray_fleet, tmp_path) -> None:
    ray_fleet.start_second()
    work = tmp_path / "job"
    work.mkdir()
    shutil.copy(SCRIPTS / "tiny_train.py", work)
    (work / "space.yaml").write_text(SPACE)
    # What a user types in the folder of their script; autotune joins the job's cluster by itself.
    submit = [sys.executable, "-m", "ray.scripts.scripts", "job", "submit", "--address", ray_fleet.dashboard,
              "--working-dir", ".", "--", "autotune", "run", "tiny_train.py", "--trials", "2", "--target", "inductor",
              "--space", "space.yaml", "--workers", "2", "--storage", f"sqlite:///{tmp_path / 'job.db'}",
              "--cache", str(tmp_path / "cache"), "--json"]
    # The head's job agent can take minutes to come up on a busy machine.
    deadline = time.monotonic() + 300
    while True:
        job = subprocess.run(submit, cwd=work, capture_output=True, text=True, timeout=300)
        logs = job.stdout + job.stderr
        if "No available agent to submit job" not in logs or time.monotonic() > deadline:  # Ray: "try again later"
            break
        time.sleep(3)
    assert job.returncode == 0, logs[-3000:]
    assert re.search(r"trial 0 \(\d/2\): [\d,.]+ samples/s, ok; baseline", logs), \
        "the per-trial lines are in the job's log"
    result = StudyResult.model_validate_json(re.search(r"^\{.*\}$", logs, re.M).group(0))
    assert len({t.placement["ray_node"] for t in result.trials}) == 2, "both nodes of the cluster ran a trial"


def test_the_node_that_declares_compile_slots_compiles_ahead_of_the_trials(ray_fleet, tmp_path) -> None:
    ray_fleet.start_second()
    compiler = next(n["id"] for n in ray_fleet.nodes() if n["resources"].get("compile_slots"))
    space = tmp_path / "space.yaml"
    space.write_text("target: inductor\nparameters:\n"
                     "  batch_size: {type: int, choices: [32], default: 32}\n"
                     "  mode: {type: categorical, choices: [default], default: default}\n")
    result = result_of(run(tmp_path, ray_fleet.address, f"sqlite:///{tmp_path / 'db'}", str(SCRIPTS / "tiny_train.py"),
                           "--trials", "1", "--target", "inductor", "--space", str(space), "--compile-ahead", "1",
                           "--cache", str(tmp_path / "shared-cache")))
    (trial,) = result.trials
    assert trial.state == "COMPLETE", trial.reason
    assert trial.compile_stage is not None and trial.compile_stage.placement["ray_node"] == compiler
    assert trial.compile_stage_seconds > 0 and trial.cache_misses == 0 and (trial.cache_hits or 0) >= 1
    assert result.cache_hit_rate == 1.0


def test_a_node_lost_mid_trial_is_not_the_configurations_fault(ray_fleet, postgres_url, tmp_path) -> None:
    ray_fleet.start_second()
    head = next(n["id"] for n in ray_fleet.nodes() if "trn1.2xlarge" in n["resources"])
    (tmp_path / "space.yaml").write_text(SPACE)
    # The trials wait at a gate of the test's: both are running, held, when the node is lost.
    gate = tmp_path / "gate"
    gate.mkdir()
    driver = run(tmp_path, ray_fleet.address, postgres_url, str(SCRIPTS / "gated_train.py"), "--trials", "3",
                 "--target", "inductor", "--space", str(tmp_path / "space.yaml"), "--workers", "2",
                 "--env", f"AUTOTUNE_TEST_GATE={gate}")
    # One worker on each node (one CPU each): once two trials wait, one of them is on the second node.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and driver.poll() is None and len(list(gate.glob("waiting-*"))) < 2:
        time.sleep(0.2)
    assert len(list(gate.glob("waiting-*"))) == 2, "the two trials did not start"
    ray_fleet.kill_second()
    (gate / "open").touch()

    result = result_of(driver)
    assert [t.state for t in result.trials] == ["COMPLETE"] * 3, [(t.state, t.reason) for t in result.trials]
    lost = [t for t in result.trials if "lost" in t.placement]
    assert len(lost) == 1, [t.placement for t in result.trials]
    assert all(t.placement["ray_node"] == head for t in lost), "measured again on the remaining node"
    print("lost:", json.dumps(lost[0].placement))
