"""The marks by which a trial measuring on a node's CPUs stops that node's compile jobs, and the
stopping itself: each user's own folder, stale marks, a cap on the time stopped, and no process
left stopped whatever ends the wait."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

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


@pytest.mark.timeout(120)
def test_a_trial_is_stopped_no_longer_than_its_timeout(write_script, tmp_path: Path) -> None:
    script = write_script("quick.py", "import autotune\nautotune.report(done=1.0)\n")
    started = time.monotonic()
    # A measurement that never ends (or a mark that never goes) asks to stop it for ever.
    result = run_trial(TrialPlan(target="inductor", params={}), script, trial_dir=tmp_path / "trial",
                       limits=TrialLimits(timeout_s=3.0), pause=lambda: True)
    assert result.ok, (result.failure, result.log_tail)
    assert 3.0 <= time.monotonic() - started < 60


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


def test_a_stopped_trial_ends_with_the_process_that_launched_it(write_script, tmp_path: Path) -> None:
    """The launcher SIGKILLed (a Ray worker, or its whole node's raylet, or ``autotune trial``)
    while its trial is stopped: the trial cannot notice by itself, the kernel ends it."""
    import subprocess
    import sys

    pid_file = tmp_path / "pid"
    script = write_script("sleeps_long.py", f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                                            "time.sleep(120)\n")
    launcher = f"""
from pathlib import Path
from autotune.records import TrialPlan
from autotune.workers.launcher import TrialLimits, run_trial
pid = Path({str(pid_file)!r})
run_trial(TrialPlan(target="inductor", params={{}}), {str(script)!r}, trial_dir={str(tmp_path / 'trial')!r},
          limits=TrialLimits(timeout_s=60.0), pause=lambda: pid.exists() and bool(pid.read_text()))
"""
    parent = subprocess.Popen([sys.executable, "-c", launcher])
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    trial = psutil.Process(int(pid_file.read_text()))
    while trial.status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
        time.sleep(0.1)
    assert trial.status() == psutil.STATUS_STOPPED
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if trial.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.1)
    trial.kill()
    pytest.fail("the stopped trial outlived the process that launched it")
