"""The marks by which a trial measuring on a node's CPUs stops that node's compile jobs, and the
stopping itself: each user's own folder, stale marks, a cap on the time stopped, and no process
left stopped whatever ends the wait."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from autotune.records import TrialPlan
from autotune.workers import ray_worker
from autotune.workers.launcher import TrialLimits, run_trial
from autotune.workers.ray_worker import measuring, measuring_dir, measuring_here


@pytest.fixture
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return tmp_path / ray_worker.MEASURING_NAME.format(uid=os.getuid())


def test_marks_live_in_a_folder_only_this_user_can_enter(runtime_dir: Path) -> None:
    assert not measuring_here()
    with measuring():
        assert measuring_here()
        assert [p.name for p in runtime_dir.iterdir()] == [str(os.getpid())]
    assert stat.S_IMODE(runtime_dir.stat().st_mode) == 0o700 and not measuring_here()
    with measuring(on=False):
        assert not measuring_here()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_folder_another_user_made_is_not_trusted(runtime_dir: Path) -> None:
    runtime_dir.mkdir(mode=0o755)
    (runtime_dir / str(os.getpid())).write_text(repr(psutil.Process().create_time()))
    os.chown(runtime_dir, 65534, 65534)  # nobody's: its marks could stop this user's compile jobs for good
    assert measuring_dir() is None and not measuring_here()
    with measuring():  # the trial runs, unmarked
        assert not measuring_here()


def test_a_mark_whose_process_is_gone_or_whose_id_is_another_process_is_stale(runtime_dir: Path) -> None:
    runtime_dir.mkdir(mode=0o700)
    (runtime_dir / "1").write_text("0.0")  # pid 1 is alive, but it is not the process that marked
    (runtime_dir / str(2 ** 22 + 1)).write_text("0.0")  # above any pid: no such process
    (runtime_dir / "junk").write_text("")
    assert not measuring_here()
    assert list(runtime_dir.iterdir()) == [], "stale marks are removed"


@pytest.mark.timeout(180)
def test_a_trial_is_stopped_no_longer_than_its_timeout(write_script, tmp_path: Path) -> None:
    script = write_script("quick.py", "import autotune\nautotune.report(done=1.0)\n")
    started = time.monotonic()
    # A measurement that never ends (or a mark that never goes) asks to stop it for ever. 12 s:
    # the run after it took under 6 s here with the machine loaded five times over, and a running
    # trial has its whole timeout (the time stopped does not count against it).
    timeout = 12.0
    result = run_trial(TrialPlan(target="inductor", params={}), script, trial_dir=tmp_path / "trial",
                       limits=TrialLimits(timeout_s=timeout), pause=lambda: True)
    assert result.ok, (result.failure, result.log_tail)  # stopped for its timeout, then it ran
    # Stopped once for its timeout, then running for less than another: never stopped twice as long.
    assert timeout <= time.monotonic() - started < 3 * timeout


def test_no_process_is_left_stopped_when_the_wait_ends_in_an_error(write_script, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = write_script("sleeps.py", f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                                       "time.sleep(120)\n")
    stopped = []

    def pause() -> bool:
        """Stop the trial once it runs, then fail while it is stopped."""
        if stopped:
            raise RuntimeError("the marks' folder went away")
        if pid_file.exists() and pid_file.read_text():
            stopped.append(True)
        return bool(stopped)

    with pytest.raises(RuntimeError, match="went away"):
        run_trial(TrialPlan(target="inductor", params={}), script, trial_dir=tmp_path / "trial",
                  limits=TrialLimits(timeout_s=60.0), pause=pause)
    try:
        psutil.Process(int(pid_file.read_text())).wait(timeout=10)  # killed, not left stopped
    except psutil.NoSuchProcess:
        pass


def _ends_soon(procs: list[psutil.Process], what: str) -> None:
    """Each of ``procs`` is dead (or a zombie waiting for its reaper) within 10 s; else killed and failed."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            alive = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        except psutil.NoSuchProcess:
            continue
        if not alive:
            return
        time.sleep(0.1)
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    pytest.fail(f"{what} outlived the process that launched it")


def _launch_stopped(tmp_path: Path, script: Path, pid_file: Path, count: int, nproc: int) -> tuple[Any, list[Any]]:
    """A process that runs ``script`` as a trial of ``nproc`` processes and stops it once ``count``
    pids are in ``pid_file``; that process, and the trial's processes once stopped."""
    import subprocess
    import sys

    launcher = f"""
from pathlib import Path
from autotune.trial import prepare_trial
from autotune.workers.launcher import TrialLimits, run_trial
pids = Path({str(pid_file)!r})
prepared = prepare_trial({str(script)!r}, target="inductor", nproc_per_node={nproc})
run_trial(prepared.plan, prepared.script, trial_dir={str(tmp_path / 'trial')!r}, limits=TrialLimits(timeout_s=120.0),
          pause=lambda: pids.exists() and len(pids.read_text().split()) >= {count})
"""
    parent = subprocess.Popen([sys.executable, "-c", launcher])
    try:
        deadline = time.monotonic() + 90
        while not (pid_file.exists() and len(pid_file.read_text().split()) >= count) and time.monotonic() < deadline:
            time.sleep(0.1)
        procs = [psutil.Process(int(pid)) for pid in pid_file.read_text().split()]
        while any(p.status() != psutil.STATUS_STOPPED for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(p.status() == psutil.STATUS_STOPPED for p in procs), "every process of the trial was stopped"
    except BaseException:
        parent.kill()
        raise
    return parent, procs


SLEEPS = "import os, time\nwith open({pids!r}, 'a') as fh:\n    fh.write(f'{{os.getpid()}}\\n')\ntime.sleep(120)\n"


def test_a_stopped_trial_ends_with_the_process_that_launched_it(write_script, tmp_path: Path) -> None:
    """The launcher SIGKILLed (a Ray worker, or its whole node's raylet, or ``autotune trial``)
    while its trial is stopped: the trial cannot notice by itself, the kernel ends it."""
    pid_file = tmp_path / "pids"
    script = write_script("sleeps_long.py", SLEEPS.format(pids=str(pid_file)))
    parent, procs = _launch_stopped(tmp_path, script, pid_file, count=1, nproc=1)
    parent.kill()
    parent.wait()
    _ends_soon(procs, "the stopped trial")


def test_the_stopped_ranks_of_a_torchrun_trial_end_with_its_launcher(write_script, tmp_path: Path) -> None:
    """torchrun's agent dies with the launcher, and each rank with the agent, all of them stopped."""
    pid_file = tmp_path / "pids"
    script = write_script("ranks_sleep.py", SLEEPS.format(pids=str(pid_file)))
    parent, procs = _launch_stopped(tmp_path, script, pid_file, count=2, nproc=2)
    agent = psutil.Process(parent.pid).children()
    parent.kill()
    parent.wait()
    _ends_soon(procs + agent, "a stopped rank or its torchrun agent")
