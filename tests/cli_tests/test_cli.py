"""``autotune trial`` as a user runs it: a subprocess, its exit code, stdout and stderr."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from autotune.records import FailureCategory, Measurement, TrialPlan, TrialResult
from autotune.rendering import render_trial

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

QUICK_LOOP = """
    import time

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=8, drop_last=True)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    while True:
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            time.sleep(0.001)
"""


def autotune(*args: str | Path, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def row(output: str, label: str) -> str:
    """The value of the human output's row ``label``."""
    m = re.search(rf"^{re.escape(label)}\s{{2,}}(.+?)\s*$", output, re.MULTILINE)
    assert m, f"no {label!r} row in:\n{output}"
    return m.group(1)


# --- real trials ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_json_output_is_one_trial_result(tmp_path: Path) -> None:
    proc = autotune("trial", SCRIPTS / "tiny_train.py", "--json", "--set", "batch_size=16", "--max-seconds", "1",
                    "--trial-dir", tmp_path / "trial", "--", "--steps", "100000", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    result = TrialResult.model_validate(json.loads(lines[0]))
    assert result.ok
    assert result.plan.target == "inductor"  # auto: the script does not import torch_xla
    assert result.plan.params == {"batch_size": 16}
    assert result.measurement is not None and result.measurement.throughput > 0
    assert result.measurement.samples_per_step == 16
    assert result.script_loader == {"batch_size": [32], "num_workers": [0]}, "the script's own, before the 16"
    assert result.stopped_early
    assert result.log_path == str(tmp_path / "trial" / "trial.log")
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_human_output(tmp_path: Path, write_script) -> None:
    script = write_script("loop.py", QUICK_LOOP)
    proc = autotune("trial", script, "--max-seconds", "1", "--trial-dir", tmp_path / "trial", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert row(out, "status") == "ok"
    assert row(out, "target") == "inductor"
    assert row(out, "parameters") == "(the script's own)"
    assert row(out, "script's DataLoader") == "batch_size 8, num_workers 0"
    throughput = row(out, "throughput")
    m = re.match(r"([\d,.]+) samples/s\s+\(95% CI ([\d,.]+) \.\. ([\d,.]+)", throughput)
    assert m, throughput
    value, low, high = (float(g.replace(",", "")) for g in m.groups())
    assert 0 < low <= value <= high
    assert value < 8 / 0.001  # 8 samples per step of at least 1 ms
    assert row(out, "step time").startswith("median ")
    assert row(out, "graphs compiled").startswith("0 ")
    assert row(out, "first losses")
    assert "stopped the script" in row(out, "wall time")
    assert row(out, "log").startswith(str(tmp_path)[:30])
    assert (tmp_path / "trial" / "trial.log").is_file()


@pytest.mark.slow
def test_a_batch_size_given_as_the_scripts_flag_changes_what_it_does(tmp_path: Path) -> None:
    proc = autotune("trial", SCRIPTS / "sliced_batches.py", "--json", "--set", "batch_size=64", "--arg",
                    "batch_size=--batch_size", "--max-seconds", "1", "--cache", tmp_path / "cache",
                    "--trial-dir", tmp_path / "trial", "--", "--batch_size", "8", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = TrialResult.model_validate(json.loads(proc.stdout))
    assert result.script_args == ["--batch_size", "64"]  # the script's own 8 replaced
    assert result.measurement is not None and result.measurement.samples_per_step == 64
    assert "batch_size=64" in (tmp_path / "trial" / "trial.log").read_text()  # what the script printed
    (knob,) = result.knobs
    assert knob.took_effect is True and [r.kind for r in knob.routes] == ["script argument"]
    assert result.plan.knobs.batch_size is None and result.warnings == []


@pytest.mark.slow
def test_a_batch_size_that_never_reached_the_script_is_a_warning(tmp_path: Path) -> None:
    args = ("trial", SCRIPTS / "sliced_batches.py", "--set", "batch_size=64", "--max-seconds", "1",
            "--cache", tmp_path / "cache", "--trial-dir", tmp_path / "trial")
    proc = autotune(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    warning = row(proc.stdout, "warning")
    assert warning.startswith("batch_size=64") and "did not take effect" in warning
    proc = autotune(*args, "--json", cwd=tmp_path)
    result = TrialResult.model_validate(json.loads(proc.stdout))
    assert result.measurement is not None and result.measurement.samples_per_step == 32  # the script's own
    (warning,) = json.loads(proc.stdout)["warnings"]
    assert warning.startswith("batch_size=64: the script made no DataLoader")


@pytest.mark.slow
def test_failed_trial_exits_1(tmp_path: Path) -> None:
    proc = autotune("trial", SCRIPTS / "raises.py", "--trial-dir", tmp_path / "trial", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert row(proc.stdout, "status") == "failed: script_error"
    assert row(proc.stdout, "reason") == "the script raised RuntimeError: deliberate failure"
    assert "RuntimeError: deliberate failure" in proc.stdout  # the log tail


@pytest.mark.slow
def test_failed_trial_json(tmp_path: Path) -> None:
    proc = autotune("trial", SCRIPTS / "exit_hard.py", "--json", "--trial-dir", tmp_path / "trial", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    result = TrialResult.model_validate_json(proc.stdout)
    assert result.status == "failed"
    assert result.failure is not None and result.failure.category == FailureCategory.crash
    assert result.failure.exit_code == 3


# --- bad input: exit code 2, one or two lines on stderr, no traceback, before any trial ------------------

RANGE_SPACE = """\
target: inductor
parameters:
  batch_size:
    type: int
    low: 1
    high: 64
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("import torch\nprint('training')\n")
    (tmp_path / "broken.py").write_text("import torch\nfor x in range(3)\n    print(x)\n")
    (tmp_path / "model.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)))
    (tmp_path / "ranges.yaml").write_text(RANGE_SPACE)
    (tmp_path / "data").mkdir()
    return tmp_path


BAD_INPUT: dict[str, tuple[list[str], list[str]]] = {
    # name: (arguments after "trial", fragments of the message)
    "missing script": (["missing.py"], ["script not found: missing.py"]),
    "a directory": (["data"], ["not a file: data"]),
    "syntax error": (["broken.py"], ["broken.py: line 2", "must be valid Python"]),
    "binary file": (["model.bin"], ["model.bin is not a Python script"]),
    "unknown target": (["train.py", "--target", "tpu"], ["unknown target 'tpu'", "auto, neuron, xla, inductor"]),
    "unknown parameter": (["train.py", "--set", "bacth_size=16"],
                          ["unknown parameter 'bacth_size' for target inductor", "known parameters:", "batch_size"]),
    "value not among the choices": (["train.py", "--set", "batch_size=7"],
                                    ["parameter 'batch_size': 7 is not allowed", "8, 16, 32, 64"]),
    "value of the wrong type": (["train.py", "-t", "xla", "--set", "fast_math=maybe"],
                                ["parameter 'fast_math': 'maybe' is not a valid bool"]),
    "a list with a value not among the choices": (["train.py", "--set", "batch_size=16,7"],
                                                  ["parameter 'batch_size': 7 is not allowed"]),
    "value out of range": (["train.py", "--space", "ranges.yaml", "--set", "batch_size=65"],
                           ["parameter 'batch_size': 65 is out of range [1, 64]"]),
    "malformed --set": (["train.py", "--set", "batch_size"], ["--set 'batch_size': expected KEY=VALUE"]),
    "impossible combination": (["train.py", "-t", "inductor", "--set", "mode=eager", "--set", "freezing=true"],
                               ["'freezing' only applies when mode is one of", "remove it or change mode"]),
    "space of another target": (["train.py", "-t", "xla", "--space", "inductor"],
                                ["is for target 'inductor', not 'xla'"]),
    "non-positive timeout": (["train.py", "--trial-timeout", "0"], ["--trial-timeout 0.0: Input should be greater than 0"]),
    "unreadable memory limit": (["train.py", "--memory-limit", "lots"], ["memory size 'lots'"]),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input(workdir: Path, case: str) -> None:
    args, fragments = BAD_INPUT[case]
    proc = autotune("trial", *args, "--trial-dir", workdir / "trial", cwd=workdir, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2, proc.stderr
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in proc.stderr
    assert proc.stdout == ""
    assert not (workdir / "trial").exists()  # rejected before any trial started


def test_malformed_memory_limit_number(workdir: Path) -> None:
    proc = autotune("trial", "train.py", "--memory-limit", "1.2.3GiB", cwd=workdir, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_human_output_never_cuts_values() -> None:
    flags = " ".join(f"--xla_flag_number_{i}=true" for i in range(6))
    log = "/home/someone/projects/a-long-project-name/.autotune/trials/20260101-000000/trial.log"
    result = TrialResult(
        status="ok", plan=TrialPlan(target="xla", params={"fast_math": True}, env={"XLA_FLAGS": flags},
                                    flags_env="XLA_FLAGS"),
        measurement=Measurement(throughput=1000.0, ci95_low=990.0, ci95_high=1010.0, step_time_median=0.008,
                                step_time_p90=0.009, samples_per_step=8, steps_measured=100, windows=5,
                                converged=True, warmup_steps=3, warmup_seconds=4.0),
        log_path=log, wall_seconds=12.0)
    console = Console(width=80, record=True, file=open(os.devnull, "w"))
    render_trial(result, console)
    text = "".join(console.export_text().split())  # values may wrap, but every character must be there
    assert "".join(log.split()) in text
    assert "".join(flags.split()) in text
