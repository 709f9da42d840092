"""Trials that span several nodes (``--nnodes``), for real: a Ray cluster of three nodes on this
machine, torchrun on two of them for each trial, their gloo ranks meeting over loopback.

Its own cluster, not the session's (:mod:`.conftest`): three nodes of a trial's CPUs each and no devices,
so that a trial of two nodes always has a third to go to when one of its nodes is lost.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from autotune.records import TrialResult
from autotune.storage.attrs import TrialAttrs
from autotune.storage.optuna_storage import rdb_storage

from .conftest import RayFleet, _free_port, _kill, _start_node
from .test_nodes import result_of

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

pytestmark = pytest.mark.slow

#: Processes of each trial on each of its nodes.
NPROC = 2


class ThreeNodes(RayFleet):
    others: list[subprocess.Popen]
    #: The folder the ranks of nodes_train.py write to, and wait at while it holds ``hold`` (every
    #: node's processes have it in their env: Ray's workers take the env of ``ray start``, not the driver's).
    gate: Path


@pytest.fixture(scope="module")
def three_nodes() -> Iterator[ThreeNodes]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "disabled")
        temp_dir = Path(tempfile.mkdtemp(prefix="atn-", dir="/tmp"))
        (temp_dir / "gate").mkdir()
        mp.setenv("AUTOTUNE_TEST_GATE", str(temp_dir / "gate"))
        port = _free_port()
        head = _start_node(["--head", f"--port={port}", "--include-dashboard=false"], {}, temp_dir / "head", cpus=NPROC)
        fleet = ThreeNodes(f"127.0.0.1:{port}", temp_dir, head, "")
        fleet.others, fleet.gate = [], temp_dir / "gate"
        try:
            # Three nodes come up in half a minute on a quiet machine, in minutes on a busy one.
            fleet.wait(lambda nodes: len(nodes) == 1, timeout=300)
            fleet.others = [_start_node(["--address", fleet.address], {}, temp_dir / f"node{i}", cpus=NPROC) for i in (1, 2)]
            fleet.wait(lambda nodes: len(nodes) == 3, timeout=300)
            yield fleet
        finally:
            for node in [*fleet.others, head]:
                _kill(node, signal.SIGKILL)
            shutil.rmtree(temp_dir, ignore_errors=True)


def study(tmp_path: Path, address: str, trials: int = 1) -> subprocess.Popen:
    (tmp_path / "space.yaml").write_text("target: inductor\nparameters:\n"
                                         "  batch_size: {type: int, choices: [16], default: 16}\n"
                                         "  mode: {type: categorical, choices: [eager], default: eager}\n")
    cmd = [sys.executable, "-m", "autotune.cli", "run", str(SCRIPTS / "nodes_train.py"), "--nnodes", "2",
           "--nproc-per-node", str(NPROC), "--trials", str(trials), "--target", "inductor", "--space", "space.yaml",
           "--ray-address", address, "--storage", f"sqlite:///{tmp_path / 'db'}", "--study", "nodes", "--seed", "0",
           "--trial-timeout", "240", "--json"]
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stored_results(tmp_path: Path) -> list[TrialResult]:
    stored = optuna.load_study(study_name="nodes", storage=rdb_storage(f"sqlite:///{tmp_path / 'db'}"))
    return [TrialResult.model_validate_json(TrialAttrs.of(t).result or "") for t in stored.get_trials()]


def test_a_trial_of_two_nodes_runs_its_ranks_on_both_and_adds_them_up(three_nodes, tmp_path) -> None:
    summary = result_of(study(tmp_path, three_nodes.address))
    (trial,) = summary.trials
    assert trial.state == "COMPLETE", (trial.reason, trial.log_tail)
    (result,) = stored_results(tmp_path)
    nodes = result.placement["ray_nodes"].split(",")
    assert len(nodes) == 2 and len(set(nodes)) == 2, result.placement
    assert set(nodes) <= {n["id"] for n in three_nodes.nodes()}
    assert result.plan.world_size == 2 * NPROC and [r.rank for r in result.ranks] == list(range(2 * NPROC))
    assert result.plan.launch == f"torchrun --nnodes=2 --nproc_per_node={NPROC}"
    m = result.measurement
    assert m is not None and m.samples_per_step == 16 * 2 * NPROC, m
    # The sum over both nodes: each node's ranks measured their own share.
    ranks = [r.measurement.throughput for r in result.ranks if r.measurement]
    assert len(ranks) == 2 * NPROC and abs(m.throughput - sum(ranks)) / sum(ranks) < 0.25, (m.throughput, ranks)
    assert summary.trials[0].params["nnodes"] == 2
    # Stopped once measured, every rank on both nodes at one step (through node 0's store).
    assert result.stopped_early and len({r.steps_seen for r in result.ranks}) == 1, result.ranks
    print(f"{m.throughput:.0f} samples/s from ranks of {[round(t) for t in ranks]} on nodes {nodes}")


def _ancestors(pid: int) -> Iterator[int]:
    while pid > 1:
        yield pid
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _alive(pid: int) -> bool:
    """Running, not a zombie left for its parent to reap."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_node_lost_mid_trial_leaves_no_rank_and_the_trial_runs_again(three_nodes, tmp_path) -> None:
    gate = three_nodes.gate
    for old in gate.iterdir():
        old.unlink()
    (gate / "hold").touch()
    driver = study(tmp_path, three_nodes.address)
    deadline = time.monotonic() + 180
    while len(list(gate.glob("rank-*"))) < 2 * NPROC and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    held = {int(p.name.split("-")[2]) for p in gate.glob("rank-*")}
    assert len(held) == 2 * NPROC, "the ranks did not all start"
    # A node of the trial other than the head (which holds the cluster), lost at once as a machine dies.
    lost = next(node for node in three_nodes.others
                if any(node.pid in _ancestors(pid) for pid in held if _alive(pid)))
    _kill(lost, signal.SIGKILL)
    three_nodes.others.remove(lost)
    (gate / "hold").unlink()

    summary = result_of(driver)
    (trial,) = summary.trials
    assert trial.state == "COMPLETE", (trial.reason, trial.log_tail)
    assert "lost" in trial.placement, trial.placement
    print("lost:", trial.placement["lost"], "; measured again on", trial.placement["ray_nodes"])
    left = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert "nodes_train.py" not in left and not [pid for pid in held if _alive(pid)], left
