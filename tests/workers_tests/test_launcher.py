"""The launcher: whatever a real trial process does (segfault, hard exit, exception, hang, memory
blow-up, NaN loss, an abort inside XLA), the caller gets a categorised failed TrialResult with the
tail of the log, never an exception."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from autotune.records import FailureCategory as C, MeasurementProtocol, TrialResult

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
RunScript = Callable[..., TrialResult]  # the run_script fixture


def assert_failed(result: TrialResult, category: C) -> None:
    assert result.status == "failed"
    assert not result.ok
    assert result.failure is not None, result.log_tail
    assert result.failure.category == category, f"{result.failure}\n{result.log_tail}"
    assert result.failure.reason
    assert result.wall_seconds > 0
    assert result.log_path and Path(result.log_path).is_file()


def test_segfault_is_a_crash(run_script: RunScript) -> None:
    result = run_script(SCRIPTS / "segfault.py")
    assert_failed(result, C.crash)
    assert result.failure.signal == "SIGSEGV"
    assert "SIGSEGV" in result.failure.reason
    assert "reading address 0" in result.log_tail


def test_hard_exit_is_a_crash(run_script: RunScript) -> None:
    result = run_script(SCRIPTS / "exit_hard.py")
    assert_failed(result, C.crash)
    assert result.failure.exit_code == 3
    assert result.failure.signal is None
    assert "code 3" in result.failure.reason
    assert "exiting with os._exit(3)" in result.log_tail


def test_exception_is_a_script_error(run_script: RunScript) -> None:
    result = run_script(SCRIPTS / "raises.py")
    assert_failed(result, C.script_error)
    assert "RuntimeError" in result.failure.reason
    assert "RuntimeError: deliberate failure" in result.log_tail
    assert "raises.py" in result.log_tail  # the script's own frame in the traceback
    assert len(result.losses) == 2  # what the script did before it failed is kept


def test_sys_exit_with_an_error_code_is_a_script_error(run_script: RunScript, write_script) -> None:
    result = run_script(write_script("exits.py", "import sys\nprint('giving up', flush=True)\nsys.exit(3)\n"))
    assert_failed(result, C.script_error)
    assert result.failure.exit_code == 3
    assert "giving up" in result.log_tail


def test_script_without_steps_is_a_script_error(run_script: RunScript, write_script) -> None:
    result = run_script(write_script("no_steps.py", "print('nothing to train', flush=True)\n"))
    assert_failed(result, C.script_error)
    assert "no step was seen" in result.failure.reason
    assert "nothing to train" in result.log_tail


def test_hang_is_a_timeout_and_its_children_die(run_script: RunScript, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    # Long enough for the trial process to import torch and start its child on a busy runner.
    result = run_script(SCRIPTS / "hang.py", timeout_s=12,
                        base_env={**os.environ, "HANG_CHILD_PID_FILE": str(pid_file)})
    assert_failed(result, C.timeout)
    assert result.failure.signal == "SIGKILL"
    assert "timeout of 12 s" in result.failure.reason
    assert 12 <= result.wall_seconds < 25
    assert pid_file.exists(), f"the script did not start its child within the timeout\n{result.log_tail}"
    assert dies_soon(int(pid_file.read_text()))


def dies_soon(pid: int, within_s: float = 2.0) -> bool:
    """Whether ``pid`` is gone (or a zombie nobody reaped yet) within ``within_s``: SIGKILL is not instant."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def test_memory_blow_up_is_host_oom(run_script: RunScript) -> None:
    limit = 2**30  # the harness with torch imported holds about 0.6 GiB here
    result = run_script(SCRIPTS / "allocates.py", memory_bytes=limit)
    assert_failed(result, C.host_oom)
    assert result.failure.signal == "SIGKILL"
    assert "over its limit of 1.00 GiB" in result.failure.reason
    assert result.peak_host_memory_bytes > limit
    assert "allocated 200 MB" in result.log_tail  # the script was running, not just importing
    assert "allocated everything" not in result.log_tail
    assert result.wall_seconds < 30


def test_the_default_memory_limit_is_each_trial_s_share_of_the_machine(tmp_path: Path) -> None:
    """N trials at once on a machine share its 80%: each is limited to 1/N of it, not all of it."""
    from autotune.records import TrialPlan
    from autotune.workers.launcher import TrialLimits, run_trial

    sharing = max(1, int(psutil.virtual_memory().total * 0.8 // 2**30))  # a share of about 1 GiB
    limits = TrialLimits(timeout_s=60.0, sharing=sharing)
    result = run_trial(TrialPlan(target="inductor", params={}), SCRIPTS / "allocates.py", trial_dir=tmp_path / "t",
                       limits=limits)
    assert_failed(result, C.host_oom)
    assert f"over its limit of {limits.memory_limit() / 2**30:.2f} GiB" in result.failure.reason
    assert limits.memory_limit() <= 1.1 * 2**30


WORKERS_LOOP = """
    import time

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.randn(4096, 16), torch.randint(0, 4, (4096,))), batch_size=8,
                        num_workers=2)
    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    while True:
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            time.sleep(0.001)
"""


def test_data_loader_workers_do_not_count_shared_memory_twice(run_script: RunScript, write_script) -> None:
    # One trial process with torch holds about 0.6 GiB here; its two forked workers add little
    # memory of their own, but their RSS repeats the parent's.
    result = run_script(write_script("workers_loop.py", WORKERS_LOOP), memory_bytes=2**30)
    assert result.status == "ok", result.failure
    assert result.peak_host_memory_bytes < 2**30


def test_nan_loss_from_the_start_is_numerics(run_script: RunScript) -> None:
    result = run_script(SCRIPTS / "nan_loss.py")
    assert_failed(result, C.numerics)


NAN_LATER = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    step = 0
    for epoch in range(1000):
        for x, y in loader:
            step += 1
            loss = torch.nn.functional.mse_loss(model(x), y)
            if step > 12:
                loss = loss * float("nan")  # diverges after the first recorded losses
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    print("finished", flush=True)
"""


def test_nan_loss_during_measurement_is_numerics(run_script: RunScript, write_script) -> None:
    # 20 windows cannot converge before the loss turns NaN at step 13.
    result = run_script(write_script("nan_later.py", NAN_LATER), protocol=MeasurementProtocol(min_windows=20))
    assert_failed(result, C.numerics)
    assert "loss became nan" in result.failure.reason
    assert "finished" not in result.log_tail
    assert len(result.losses) == 10


def test_unknown_xla_flag_is_a_compile_error(run_script: RunScript) -> None:
    env = {**os.environ, "XLA_FLAGS": "--xla_this_flag_does_not_exist"}
    result = run_script(SCRIPTS / "bad_xla_flags.py", target="xla", base_env=env)
    assert_failed(result, C.compile_error)
    assert result.failure.signal == "SIGABRT"
    assert "Unknown flag in XLA_FLAGS: --xla_this_flag_does_not_exist" in result.log_tail
    assert "finished" not in result.log_tail


XLA_SOFTMAX = """
    import torch
    import torch_xla

    device = torch_xla.device()
    a = torch.randn(64, 64, device=device)
    b = (a @ a).relu().sum(0).softmax(0)
    torch_xla.sync()
    print(f"computed {b.sum().item():.3f}", flush=True)
"""


def test_thunk_runtime_off_fails_the_trial(run_script: RunScript, write_script) -> None:
    # --xla_cpu_use_thunk_runtime=false makes XLA:CPU 2.9 abort while compiling ("LLVM ERROR: Program
    # used external function '__xla_cpu_runtime_ParallelForkJoin' which could not be resolved!").
    # The category it gets is reported, not pinned: today it is a crash (SIGABRT).
    result = run_script(write_script("xla_softmax.py", XLA_SOFTMAX), target="xla", sets={"thunk_runtime": "false"})
    assert result.plan.env["XLA_FLAGS"] == "--xla_cpu_use_thunk_runtime=false"
    assert result.status == "failed"
    assert result.failure is not None
    assert result.failure.category in (C.compile_error, C.crash)
    assert "computed" not in result.log_tail
    assert "LLVM ERROR" in result.log_tail


def test_a_paused_trial_stops_running_and_its_pause_does_not_count_against_its_timeout(write_script, tmp_path):
    from autotune.records import TrialPlan
    from autotune.workers.launcher import TrialLimits, run_trial

    ticks, held = tmp_path / "ticks.txt", tmp_path / "held"
    # After 10 ticks it waits until the test has begun to hold it, so that it cannot end first.
    script = write_script("ticking.py", f"""
import os, time
import autotune
with open({str(ticks)!r}, "w") as fh:
    for i in range(40):
        while i == 10 and not os.path.exists({str(held)!r}):
            time.sleep(0.01)
        fh.write(f"{{time.monotonic()}}\\n")
        fh.flush()
        time.sleep(0.05)
autotune.report(done=1.0)
""")
    stopped_at: list[float] = []

    def pause() -> bool:
        """Stop it for 12 s once it has ticked 10 times."""
        if not stopped_at and ticks.exists() and len(ticks.read_text().split()) >= 10:
            stopped_at.append(time.monotonic())
            held.touch()
        return bool(stopped_at) and time.monotonic() - stopped_at[0] < 12.0

    # About 4 s of running (start-up, 2 s of ticks; twice that on a busy machine) and 12 s stopped.
    result = run_trial(TrialPlan(target="inductor", params={}), script, trial_dir=tmp_path / "trial",
                       limits=TrialLimits(timeout_s=12.0), pause=pause)
    assert result.ok, (result.failure, result.log_tail)
    assert result.wall_seconds > 12.0, "it ran past its timeout in wall time, not in running time"
    stamps = [float(line) for line in ticks.read_text().split()]
    assert max(b - a for a, b in zip(stamps, stamps[1:])) > 10.0, "nothing ran while it was stopped"
