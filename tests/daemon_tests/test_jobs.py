"""Jobs through the real CLI and a real daemon: submit, wait, status, best, logs, cancel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from .conftest import FAST, SCRIPTS, autotune

pytestmark = pytest.mark.slow


def test_two_clients_submit_at_once_and_both_finish(start_daemon, tmp_path: Path) -> None:
    d = start_daemon("--slots", "4", "--max-concurrent-jobs", "2")
    clients = [
        subprocess.Popen([sys.executable, "-m", "autotune.cli", "submit", str(SCRIPTS / "tiny_train.py"),
                          "--server", d.url, "--trials", "2", "--workers", "2", *FAST, "--study", f"client{i}",
                          "--wait"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    # A third job waits in the queue (two run at once); cancelling it ends it at once.
    deadline = time.monotonic() + 120
    while len(_running(d)) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    third = autotune("submit", SCRIPTS / "tiny_train.py", "--server", d.url, "--trials", "1", *FAST, cwd=tmp_path)
    assert third.returncode == 0, third.stderr
    third_id = third.stdout.strip()
    assert d.job(third_id)["state"] == "queued"
    cancelled = autotune("cancel", third_id, "--server", d.url, cwd=tmp_path)
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == f"{third_id} cancelled", cancelled.stdout

    outs = [c.communicate(timeout=400) for c in clients]
    for c, (out, err) in zip(clients, outs):
        assert c.returncode == 0, err
    ids = [out.splitlines()[0].strip() for out, _ in outs]
    infos = [d.job(i) for i in ids]
    for info in infos:
        assert info["state"] == "succeeded" and info["exit_code"] == 0, info
        assert info["done"] == 2 and info["best_value"] > 0 and info["workers"] == 2, info
    assert max(i["started_at"] for i in infos) < min(i["ended_at"] for i in infos), "the two jobs ran at once"
    assert "succeeded" in outs[0][1], "--wait follows the job's progress on stderr"
    assert d.job(third_id)["state"] == "cancelled" and d.job(third_id)["exit_code"] == 130

    env = autotune("best", ids[0], "--server", d.url, "--format", "env", cwd=tmp_path)
    assert env.returncode == 0 and "export AUTOTUNE_PARAMS=" in env.stdout, env.stderr
    best = json.loads(autotune("best", ids[1], "--server", d.url, cwd=tmp_path).stdout)
    assert best["study"] == "client1" and best["params"]["mode"] == "eager"
    listing = json.loads(autotune("status", "--server", d.url, "--json", cwd=tmp_path).stdout)
    assert {j["id"] for j in listing} == {*ids, third_id}
    trial_log = autotune("logs", ids[0], "0", "--server", d.url, cwd=tmp_path)
    assert trial_log.returncode == 0 and "loss" in trial_log.stdout, trial_log.stderr
    job_log = autotune("logs", ids[0], "--server", d.url, cwd=tmp_path).stdout
    assert "autotune serve: attempt 1" in job_log and "succeeded (exit code 0)" in job_log


def test_cancel_stops_a_running_job_and_everything_it_started(start_daemon, tmp_path: Path) -> None:
    """The job's trials are held at a gate of the test's, so that they are running when it cancels."""
    d = start_daemon("--slots", "2")
    gate = tmp_path / "gate"
    gate.mkdir()
    submitted = autotune("submit", SCRIPTS / "gated_train.py", "--server", d.url, "--trials", "50", "--workers", "2",
                         "--env", f"AUTOTUNE_TEST_GATE={gate}", *FAST, cwd=tmp_path)
    job_id = submitted.stdout.strip()
    deadline = time.monotonic() + 180
    while len(list(gate.glob("waiting-*"))) < 2:  # both workers' trials are running, held
        assert time.monotonic() < deadline, f"the job's trials never started: {d.job(job_id)}"
        time.sleep(0.2)
    pid = _job_pid(d, job_id)
    tree = [p.pid for p in _tree(pid)]
    assert {int(w.name.removeprefix("waiting-")) for w in gate.glob("waiting-*")} <= set(tree)

    cancelled = autotune("cancel", job_id, "--server", d.url, cwd=tmp_path)
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == f"{job_id} cancelled", cancelled.stdout
    info = d.job(job_id)
    assert info["state"] == "cancelled" and info["exit_code"] == 130
    deadline = time.monotonic() + 30
    while alive := [p for p in tree if _alive(p)]:
        assert time.monotonic() < deadline, f"left running after cancel: {alive}"
        time.sleep(0.2)


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:  # ended meanwhile
        return ""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _running(d) -> list[dict]:
    with d.http() as c:
        return [j for j in c.get("/jobs").json() if j["state"] == "running"]


def _job_pid(d, job_id: str) -> int:
    from autotune.daemon.jobs import JobStore

    job = JobStore(d.storage).get(job_id)
    assert job is not None and job.pid, job
    assert os.path.exists(f"/proc/{job.pid}")
    return job.pid


def test_a_job_whose_script_changed_answers_from_the_study_it_measured(start_daemon, tmp_path: Path) -> None:
    """A job asked for study X whose script changed since X was measured measures a study of its own:
    its best, status and report are that study's, not X's."""
    d = start_daemon("--slots", "2")
    project = tmp_path / "project"
    project.mkdir()
    script = project / "train.py"
    script.write_text((SCRIPTS / "tiny_train.py").read_text())

    def submit() -> str:
        done = autotune("submit", script, "--server", d.url, "--trials", "1", *FAST, "--study", "same", "--wait",
                        cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()[0].strip()

    first = submit()
    script.write_text(script.read_text().replace("torch.manual_seed(0)", "torch.manual_seed(1)"))
    second = submit()
    assert d.job(first)["study"] == "same"
    measured = d.job(second)["study"]
    assert measured.startswith("same-"), measured
    best = json.loads(autotune("best", second, "--server", d.url, cwd=tmp_path).stdout)
    assert best["study"] == measured
    assert json.loads(autotune("best", first, "--server", d.url, cwd=tmp_path).stdout)["study"] == "same"


def test_a_trial_run_again_shows_the_log_of_the_attempt_asked_for(start_daemon, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A trial whose Ray worker died runs again in a folder of its own: its log is its last
    attempt's, and --attempt shows another."""
    monkeypatch.setenv("FAULT_MARKER_DIR", str(tmp_path))  # the daemon's, its job's and their trials'
    d = start_daemon("--slots", "1")
    space = tmp_path / "space.yaml"
    space.write_text("target: inductor\nparameters:\n"
                     "  fault: {type: categorical, choices: [worker_dies_once], default: worker_dies_once}\n"
                     "  mode: {type: categorical, choices: [eager], default: eager}\n")
    done = autotune("submit", SCRIPTS / "faulty.py", "--server", d.url, "--trials", "1", "--target", "inductor",
                    "--space", space, "--wait", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().splitlines()[0]
    logs = {attempt: autotune("logs", job_id, "0", *(("--attempt", str(attempt)) if attempt else ()),
                              "--server", d.url, cwd=tmp_path) for attempt in (None, 1, 2, 3)}
    assert "attempt 1: its worker is killed" in logs[1].stdout, logs[1].stdout
    assert "a later attempt: its worker lives" in logs[2].stdout and "attempt 1:" not in logs[2].stdout
    assert logs[None].stdout == logs[2].stdout, "the last attempt's by default"
    assert logs[3].returncode == 2 and f"no log of attempt 3 of trial 0 of job {job_id}" in logs[3].stderr
