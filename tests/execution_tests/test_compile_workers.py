"""Compile workers on Ray: two racing on the same graphs compile them once, and a worker killed
mid-compile publishes nothing; its configuration is compiled again by another worker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from autotune.execution.scheduler import plan_compile_placement
from autotune.execution.worker_pool import WorkerPool
from autotune.published import Published
from autotune.records import CompileOutcome, CompileRequest, MeasurementProtocol, TrialPlan, TrialRequest
from autotune.targets import get_target

pytestmark = pytest.mark.slow

# A "compile" of a few seconds, then steps: each run leaves a line in RUNS. With SLOW_ONCE the
# first run's compile takes long enough to be killed in.
SCRIPT = """
import os, sys, time
import autotune
runs = os.environ["RUNS"]
first = not os.path.exists(runs)
with open(runs, "a") as fh:
    fh.write(f"{os.getpid()}\\n")
time.sleep(12 if first and os.environ.get("SLOW_ONCE") else 2)
for _ in range(50):
    time.sleep(0.01)
    autotune.step(8)
"""


def _job(tmp_path: Path, name: str, key: str, env: dict[str, str]) -> CompileRequest:
    script = tmp_path / "compile_me.py"
    script.write_text(SCRIPT)
    plan = TrialPlan(target="inductor", params={"batch_size": 8}, env=env)
    trial = TrialRequest(plan=plan, script=str(script), cwd=str(tmp_path), trial_dir=str(tmp_path / name),
                         timeout_s=120, protocol=MeasurementProtocol(compile_only=True))
    return CompileRequest(trial=trial, artifact_key=key, cache_root=str(tmp_path / "cache"))


def _finish(pool: WorkerPool, n: int) -> dict[str, CompileOutcome]:
    done: dict[str, CompileOutcome] = {}
    deadline = time.monotonic() + 120
    while len(done) < n and time.monotonic() < deadline:
        for finished in pool.wait(timeout=1.0):
            assert finished.error is None and finished.compiled is not None, finished.error
            done[str(finished.tag)] = finished.compiled
    return done


def test_two_workers_racing_on_one_graph_compile_it_once(ray_cluster, tmp_path):
    runs = tmp_path / "runs.txt"
    pool = WorkerPool(plan_compile_placement(get_target("inductor"), workers=2))
    try:
        assert pool.free == 2
        for name in ("a", "b"):
            pool.submit(_job(tmp_path, name, "k" * 64, {"RUNS": str(runs)}), tag=name)
        done = _finish(pool, 2)
    finally:
        pool.shutdown()
    assert len(runs.read_text().splitlines()) == 1, "the graphs were compiled once"
    compiled = [o for o in done.values() if o.result is not None]
    waited = [o for o in done.values() if o.stage.published_before]
    assert len(compiled) == 1 and compiled[0].result.ok, done
    assert len(waited) == 1 and waited[0].stage.waited_seconds > 1, "the second waited for the first, then found it"
    assert Published(tmp_path / "cache").manifest("k" * 64) is not None


def test_a_compile_worker_killed_mid_compile_publishes_nothing_and_another_compiles_it(ray_cluster, tmp_path):
    import ray

    runs = tmp_path / "runs.txt"
    key = "d" * 64
    published = Published(tmp_path / "cache")
    pool = WorkerPool(plan_compile_placement(get_target("inductor"), workers=2))
    try:
        pool.submit(_job(tmp_path, "a", key, {"RUNS": str(runs), "SLOW_ONCE": "1"}), tag="a")
        deadline = time.monotonic() + 60
        while not runs.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert runs.exists(), "the compile never started"
        (running,) = pool.running.values()
        ray.kill(running.worker.actor)  # the compile worker dies mid-compile
        time.sleep(1.0)
        assert published.manifest(key) is None, "nothing is published by a killed compile"
        done = _finish(pool, 1)
    finally:
        pool.shutdown()
    outcome = done["a"]
    assert outcome.result is not None and outcome.result.ok, outcome
    assert "lost" in outcome.stage.placement, "the outcome says that a first attempt was lost"
    assert len(runs.read_text().splitlines()) == 2, "compiled again, by the worker that replaced it"
    assert published.manifest(key) is not None


def test_a_stopped_compile_whose_worker_dies_ends_with_it_and_runs_again_in_a_folder_of_its_own(ray_cluster,
                                                                                                tmp_path):
    import psutil
    import ray

    from autotune.workers.ray_worker import measuring

    runs = tmp_path / "runs.txt"
    job = _job(tmp_path, "a", "e" * 64, {"RUNS": str(runs), "SLOW_ONCE": "1"})
    pool = WorkerPool(plan_compile_placement(get_target("inductor"), workers=2))
    try:
        pool.submit(job.model_copy(update={"pause_while_measuring": True}), tag="a")
        deadline = time.monotonic() + 60
        while not runs.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        first = psutil.Process(int(runs.read_text().split()[0]))
        with measuring():  # a trial measures on this node: the compile job stops
            while first.status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
                time.sleep(0.1)
            assert first.status() == psutil.STATUS_STOPPED, "the compile job stopped while a trial measured"
            (running,) = pool.running.values()
            ray.kill(running.worker.actor)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    if first.status() == psutil.STATUS_ZOMBIE:
                        break
                except psutil.NoSuchProcess:
                    break
                time.sleep(0.1)
            else:
                first.kill()
                pytest.fail("the stopped compile outlived its worker")
        done = _finish(pool, 1)
    finally:
        pool.shutdown()
    result = done["a"].result
    assert result is not None and result.ok, done
    assert Path(result.log_path).parent == tmp_path / "a" / "attempt-2", "the second attempt has a folder of its own"
