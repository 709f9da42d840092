"""Restarts lose nothing: a SIGKILLed daemon comes back with its queue, its running job still
running (adopted), and a job whose process died too resumed with its measured trials."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import optuna
import psutil
import pytest

from autotune.daemon.jobs import JobStore

from .conftest import FAST, SCRIPTS, autotune

pytestmark = pytest.mark.slow


def _completed(storage: str, study: str) -> dict[int, float]:
    return {t.number: t.value for t in optuna.load_study(study_name=study, storage=storage).trials
            if t.state.name == "COMPLETE"}


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:  # ended meanwhile
        return ""


GATED = SCRIPTS / "gated_train.py"


def _waiting(gate: Path) -> int:
    """Trials held at ``gate`` now (each has its process, so its driver has recorded its heartbeat)."""
    return len(list(gate.glob("waiting-*")))


def _until(what: str, ready: Callable[[], bool], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)


def _kill_tree(pid: int) -> None:
    root = psutil.Process(pid)
    for p in [root, *root.children(recursive=True)]:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def test_a_killed_daemon_restarts_with_its_queue_and_jobs(start_daemon, tmp_path) -> None:
    """Each job's trials wait at a gate of the test's (``tests/scripts/gated_train.py``): a ticket
    lets one trial through, so the daemon is killed while a trial is known to be held, whatever the
    machine's speed."""
    d = start_daemon("--slots", "2", "--max-concurrent-jobs", "1")
    ids, gates = {}, {}
    for name, fresh in (("first", ()), ("second", ("--fresh",))):
        # --fresh: the second job measures its trials instead of taking the first job's results
        # from the daemon's cache (step 2 kills it while it measures).
        gates[name] = tmp_path / f"gate-{name}"
        gates[name].mkdir()
        proc = autotune("submit", GATED, "--server", d.url, "--trials", "3", "--workers", "2", "--study", name,
                        "--env", f"AUTOTUNE_TEST_GATE={gates[name]}", *fresh, *FAST, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        ids[name] = proc.stdout.strip()
    first, second = ids["first"], ids["second"]

    # 1. SIGKILL the daemon while the first job holds a trial: the job keeps running, and is adopted.
    (gates["first"] / "ticket-1").touch()
    _until("the first job measured a trial and holds the next", lambda: d.job(first)["done"] >= 1
           and _waiting(gates["first"]) >= 1)
    kept = _completed(d.storage, "first")
    pid = JobStore(d.storage).get(first).pid
    d.kill()
    assert JobStore(d.storage).get(second).state.value == "queued"
    d.start()
    assert d.job(second)["state"] == "queued", "the queue is intact"
    job = JobStore(d.storage).get(first)
    assert job.state.value == "running" and job.pid == pid and job.attempts == 1, "adopted, not restarted"
    assert "adopted" in d.log.read_text()
    (gates["first"] / "open").touch()
    done = d.wait_for(first, lambda j: j["state"] not in ("queued", "running"))
    assert done["state"] == "succeeded" and done["exit_code"] == 0 and done["done"] == 3, done
    after = _completed(d.storage, "first")
    assert all(after[n] == v for n, v in kept.items()), "the trials measured before the kill are kept"

    # 2. Then the second job starts; SIGKILL the daemon and the job's processes (a lost machine)
    # while a trial is held, after its heartbeat reached the database (a trial with none Optuna
    # never sees as stale).
    (gates["second"] / "ticket-1").touch()
    _until("the second job measured a trial and holds the next", lambda: d.job(second)["done"] >= 1
           and _waiting(gates["second"]) >= 1)
    pid = JobStore(d.storage).get(second).pid
    kept = _completed(d.storage, "second")
    d.kill()
    _kill_tree(pid)
    (gates["second"] / "open").touch()
    d.start()
    done = d.wait_for(second, lambda j: j["state"] not in ("queued", "running"), timeout=300)
    assert done["state"] == "succeeded" and done["exit_code"] == 0, done
    assert done["attempts"] == 2 and "resumed" in (done["message"] or ""), done
    after = _completed(d.storage, "second")
    assert all(after[n] == v for n, v in kept.items()), "the trials measured before the crash are kept"
    assert done["done"] >= 3
    # Its log holds both attempts; --attempt shows one.
    attempts = [autotune("logs", second, "--attempt", str(k), "--server", d.url, cwd=tmp_path) for k in (1, 2, 3)]
    assert "autotune serve: attempt 1," in attempts[0].stdout and "attempt 2," not in attempts[0].stdout
    assert "queued again to resume its study" in attempts[0].stdout
    assert "autotune serve: attempt 2," in attempts[1].stdout and "attempt 1," not in attempts[1].stdout
    assert "succeeded (exit code 0)" in attempts[1].stdout
    assert attempts[2].returncode == 2 and f"no attempt 3 of job {second}" in attempts[2].stderr
