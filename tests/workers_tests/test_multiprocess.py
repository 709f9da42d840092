"""Trials of several processes, for real on CPU: ranks started by torchrun (gloo DDP, and torch-xla
with ``init_process_group('xla')``), and workers the script spawns itself (``torch_xla.launch``,
``torch.multiprocessing.spawn``).
The trial's batch size must reach every rank, the trial's throughput is the ranks' sum, and a rank
that crashes, hangs, runs out of memory or never joins ends the whole trial with no process left
behind."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.records import FailureCategory as C, TrialResult
from autotune.workers.multiprocess import rank_log

from .test_launcher import dies_soon

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

RunScript = Callable[..., TrialResult]  # the run_script fixture


def own_lines(result: TrialResult, local_rank: int) -> str:
    """One rank's lines in the trial's log."""
    return rank_log(Path(result.log_path or "").read_text(), local_rank)


def printed_throughput(result: TrialResult) -> dict[str, float]:
    """Each rank's last own figure in the trial's log."""
    found = [m for i in range(2)
             for m in re.findall(r"^rank (\d+) steady-state throughput: ([\d.]+)", own_lines(result, i), re.M)]
    return {rank: float(value) for rank, value in found}


def test_gloo_ranks_add_up_and_stop_together(run_script: RunScript) -> None:
    result = run_script(SCRIPTS / "ranks_train.py", sets={"batch_size": 16}, nproc_per_node=2,
                        args=["--mode", "gloo", "--steps", "100000"])
    assert result.ok, f"{result.failure}\n{result.log_tail}"
    assert "rank 0 batch 16" in own_lines(result, 0) and "rank 1 batch 16" in own_lines(result, 1)
    assert result.plan.launch == "torchrun --nproc_per_node=2"
    # Stopped once measured, both ranks at one step: no rank left waiting for the other.
    assert result.stopped_early and [r.rank for r in result.ranks] == [0, 1]
    steps = {r.steps_seen for r in result.ranks}
    assert len(steps) == 1 and steps.pop() < 100000
    m = result.measurement
    assert m is not None and m.samples_per_step == 32
    assert m.ci95_low <= m.throughput <= m.ci95_high
    own = printed_throughput(result)
    assert set(own) == {"0", "1"}
    assert abs(m.throughput - sum(own.values())) / sum(own.values()) < 0.10, (m.throughput, own)


def test_xla_ranks_under_torchrun(run_script: RunScript) -> None:
    result = run_script(SCRIPTS / "ranks_train.py", target="xla", sets={"batch_size": 16}, nproc_per_node=2,
                        args=["--mode", "xla"])
    assert result.ok, f"{result.failure}\n{result.log_tail}"
    # torch-xla on CPU numbers every process's replica 0: the prefix tells the ranks apart.
    assert "rank 0 batch 16" in own_lines(result, 0) and "rank 0 batch 16" in own_lines(result, 1)
    assert [r.rank for r in result.ranks] == [0, 1]
    assert all(r.measurement is not None for r in result.ranks)
    assert result.measurement is not None and result.measurement.samples_per_step == 32
    assert result.compile.graphs_compiled >= 1


@pytest.mark.parametrize("mode, target, workers", [("spawn", "xla", 1), ("mp", "inductor", 2)])
def test_workers_the_script_spawns_are_measured(run_script: RunScript, mode: str, target: str, workers: int) -> None:
    """``torch_xla.launch`` (one worker on CPU) and ``torch.multiprocessing.spawn`` (two, gloo DDP):
    workers started with ``spawn`` that import the script again, each given the trial's batch size."""
    result = run_script(SCRIPTS / "ranks_train.py", target=target, sets={"batch_size": 16},
                        args=["--mode", mode, "--steps", "100000"])
    assert result.ok, f"{result.failure}\n{result.log_tail}"
    log = Path(result.log_path or "").read_text()
    assert all(f"rank {i} batch 16" in log for i in range(workers))
    assert [r.rank for r in result.ranks] == list(range(workers)) and all(r.pid for r in result.ranks)
    # Stopped once measured, every worker at one step, and the script's parent ended cleanly.
    assert result.stopped_early and len({r.steps_seen for r in result.ranks}) == 1
    assert result.measurement is not None and result.measurement.samples_per_step == 16 * workers


def run_fault(run_script: RunScript, tmp_path: Path, fault: str, **limits: float) -> TrialResult:
    result = run_script(SCRIPTS / "rank_fault.py", args=["--fault", fault], nproc_per_node=2,
                        base_env={**os.environ, "RANK_PID_DIR": str(tmp_path)}, **limits)
    assert result.status == "failed" and result.failure is not None
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    assert len(pids) == 2, result.log_tail
    assert all(dies_soon(pid) for pid in pids), "a rank outlived its trial"
    return result


def test_a_rank_that_crashes_ends_the_trial(run_script: RunScript, tmp_path: Path) -> None:
    result = run_fault(run_script, tmp_path, "crash")
    assert result.failure is not None and result.failure.category == C.crash
    assert result.failure.reason.startswith("rank 1:") and result.failure.exit_code == 3
    assert "rank 1 fails by crash" in result.log_tail  # the failing rank's own lines
    assert "[default" not in result.log_tail


def test_a_rank_that_hangs_ends_the_trial_at_its_timeout(run_script: RunScript, tmp_path: Path) -> None:
    # 30 s: both ranks must have started (torchrun, torch imported twice) before rank 1 hangs, which
    # took over 14 s on this 2-core machine while the other test process ran a study.
    result = run_fault(run_script, tmp_path, "hang", timeout_s=30, rendezvous_s=60)
    assert result.failure is not None and result.failure.category == C.timeout
    assert "timeout of 30 s" in result.failure.reason and "without a report" in result.failure.reason
    assert result.wall_seconds < 45


def test_a_rank_out_of_host_memory_ends_the_trial(run_script: RunScript, tmp_path: Path) -> None:
    # Two ranks with torch imported hold about 1.3 GiB here; rank 1 then takes 100 MB every 20 ms.
    result = run_fault(run_script, tmp_path, "oom", memory_bytes=3 * 2**30)
    assert result.failure is not None and result.failure.category == C.host_oom
    assert "over its limit of 3.00 GiB" in result.failure.reason
    assert result.wall_seconds < 40


def test_a_rank_that_never_joins_is_a_rendezvous_failure(run_script: RunScript, tmp_path: Path) -> None:
    result = run_fault(run_script, tmp_path, "absent", rendezvous_s=3)
    assert result.failure is not None and result.failure.category == C.rendezvous, result.failure
    assert result.failure.reason.startswith("rank 0:")
    assert "DistStoreError" in result.log_tail
    assert result.wall_seconds < 60
