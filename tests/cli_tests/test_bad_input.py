"""Bad input: a one- or two-line message, exit code 2, no traceback, nothing written or lost."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
TINY = str(SCRIPTS / "tiny_train.py")


def run_cli(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def assert_rejected(proc: subprocess.CompletedProcess, *needles: str) -> None:
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr + proc.stdout
    assert 1 <= len(lines) <= 2, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def assert_nothing_written(cwd: Path, before: set[str]) -> None:
    assert {p.name for p in cwd.iterdir()} == before


@pytest.fixture
def work(tmp_path: Path) -> tuple[Path, set[str]]:
    (tmp_path / "not_python.bin").write_bytes(b"\x7fELF\x00\x00binary")
    (tmp_path / "broken.py").write_text("def f(:\n    pass\n")
    (tmp_path / "bad_space.yaml").write_text("target: inductor\nparameters:\n  mode:\n    type: categorical\n"
                                             "    choices: eager\n")
    (tmp_path / "contradictory.yaml").write_text(
        "target: inductor\nparameters:\n  mode: {type: categorical, choices: [eager], default: eager}\n"
        "  freezing: {type: bool, when: {mode: [default]}}\n")
    (tmp_path / "corrupt.db").write_bytes(b"this is not a sqlite database" * 100)
    (tmp_path / "bad_prices.yaml").write_text("inf2.xlarge: cheap\n")
    (tmp_path / "not_prices.yaml").write_text("inf2.xlarge: [0.76\n")
    for name, spec in (("zero_step", "{type: int, low: 1, high: 8, step: 0}"),
                       ("negative_step", "{type: int, low: 1, high: 8, step: -2}"),
                       ("log_step", "{type: float, low: 0.001, high: 1, log: true, step: 0.01}")):
        (tmp_path / f"{name}.yaml").write_text(f"target: inductor\nparameters:\n  width: {spec}\n")
    (tmp_path / "injecting_name.yaml").write_text(
        "target: inductor\nparameters:\n  'x;touch pwned': {type: int, low: 1, high: 8}\n")
    (tmp_path / "latin1_space.yaml").write_bytes(
        b"target: inductor\nparameters:\n  mode: {type: categorical, choices: [caf\xe9]}\n")
    (tmp_path / "latin1_prices.yaml").write_bytes(b"inf2.xlarge: 0.76  # \xff\n")
    return tmp_path, {p.name for p in tmp_path.iterdir()}


CASES = {
    "missing script": (["run", "no_such_script.py"], ["script not found"]),
    "syntax error": (["run", "broken.py"], ["line 1"]),
    "non-Python file": (["run", "not_python.bin"], ["not a Python script"]),
    "unknown target": (["run", TINY, "--target", "tpu9000"], ["unknown target"]),
    "unknown parameter": (["run", TINY, "--target", "inductor", "--set", "warp_speed=9"], ["unknown parameter"]),
    "out-of-range value": (["run", TINY, "--target", "inductor", "--set", "batch_size=7"], ["not allowed"]),
    "malformed --set": (["run", TINY, "--target", "inductor", "--set", "batch_size"], ["KEY=VALUE"]),
    "malformed space": (["run", TINY, "--target", "inductor", "--space", "bad_space.yaml"], ["line 5", "choices"]),
    "contradictory space": (["run", TINY, "--target", "inductor", "--space", "contradictory.yaml"],
                            ["line 4", "can never happen"]),
    "lnc 2 on trn1": (["run", TINY, "--target", "neuron", "--platform", "trn1", "--set", "lnc=2"],
                      ["NCC_EARG001", "trn2"]),
    "zero trials": (["run", TINY, "--target", "inductor", "--trials", "0"], ["--trials"]),
    "negative trials": (["run", TINY, "--target", "inductor", "--trials", "-3"], ["--trials"]),
    "unreachable ray": (["run", TINY, "--target", "inductor", "--ray-address", "127.0.0.1:9"], ["cannot reach"]),
    "unwritable out": (["run", TINY, "--target", "inductor", "--out", "/proc/autotune-out"], ["cannot write"]),
    "unwritable cache": (["run", TINY, "--target", "inductor", "--cache", "/proc/autotune-cache"], ["cannot write"]),
    "missing storage driver": (["run", TINY, "--target", "inductor", "--storage", "mysql://u@127.0.0.1/db"],
                               ["driver is not installed"]),
    "malformed storage URL": (["run", TINY, "--target", "inductor", "--storage", "postgresql://u@h:port/db"],
                              ["not a database URL"]),
    "unreachable storage": (["run", TINY, "--target", "inductor", "--storage", "postgresql://u:s%7Bx@127.0.0.1:9/db"],
                            ["cannot open storage", "u:***@127.0.0.1:9"]),
    "zero step": (["run", TINY, "--target", "inductor", "--space", "zero_step.yaml"],
                  ["zero_step.yaml: line 3", "'step' must be positive"]),
    "negative step": (["run", TINY, "--target", "inductor", "--space", "negative_step.yaml"],
                      ["line 3", "'step' must be positive, not -2"]),
    "step with log": (["run", TINY, "--target", "inductor", "--space", "log_step.yaml"],
                      ["line 3", "'step' and 'log' cannot be combined"]),
    "parameter name that is no identifier": (["run", TINY, "--target", "inductor", "--space", "injecting_name.yaml"],
                                             ["line 3", "parameter name 'x;touch pwned'"]),
    "space file that is not UTF-8": (["run", TINY, "--target", "inductor", "--space", "latin1_space.yaml"],
                                     ["latin1_space.yaml", "not UTF-8"]),
    "prices file that is not UTF-8": (["run", TINY, "--target", "inductor", "--prices", "latin1_prices.yaml"],
                                      ["latin1_prices.yaml", "not UTF-8"]),
    "memory size beyond a float": (["run", TINY, "--target", "inductor", "--memory-limit", "1e400"],
                                   ["memory size '1e400'", "larger than any machine"]),
    "unknown sampler": (["run", TINY, "--target", "inductor", "--sampler", "oracle"], ["sampler"]),
    "unknown objective": (["run", TINY, "--target", "inductor", "--objective", "p99 latency"],
                          ["unknown objective 'p99 latency'", "latency_p99"]),
    "malformed constraint": (["run", TINY, "--target", "inductor", "--constraint", "latency_p99=50"],
                             ["--constraint 'latency_p99=50'", "NAME<=VALUE"]),
    "constraint not a number": (["run", TINY, "--target", "inductor", "--constraint", "latency_p99<=soon"],
                                ["'soon' is not a number of ms"]),
    "prefer not an objective": (["run", TINY, "--target", "inductor", "--objective", "throughput",
                                 "--objective", "latency_p99", "--prefer", "cost"], ["--prefer 'cost'"]),
    "unknown instance type without a price": (["run", TINY, "--target", "inductor", "--instance-type", "inf2.xlarg"],
                                              ["'inf2.xlarg': not in autotune's catalogue", "--price-per-hour"]),
    "negative price": (["run", TINY, "--target", "inductor", "--price-per-hour=-0.76"], ["--price-per-hour", "positive"]),
    "zero price": (["run", TINY, "--target", "inductor", "--price-per-hour", "0"], ["--price-per-hour", "positive"]),
    "price that is no number": (["run", TINY, "--target", "inductor", "--price-per-hour", "cheap"],
                                ["--price-per-hour 'cheap'", "valid number"]),
    "price in a prices file that is no number": (["run", TINY, "--target", "inductor", "--prices", "bad_prices.yaml"],
                                                 ["bad_prices.yaml", "'cheap' is not a price"]),
    "malformed prices file": (["run", TINY, "--target", "inductor", "--prices", "not_prices.yaml"],
                              ["not_prices.yaml line 2", "not YAML or JSON"]),
    "missing prices file": (["run", TINY, "--target", "inductor", "--prices", "no_prices.yaml"],
                            ["no_prices.yaml", "cannot read it"]),
    "race budget below 0": (["run", TINY, "--target", "inductor", "--race", "-0.5"], ["--race", "greater than or equal to 0"]),
    "race budget that is no number": (["run", TINY, "--target", "inductor", "--race", "some"],
                                      ["--race 'some'", "valid number"]),
    "compare with two formats": (["compare", "a", "b", "--json", "--csv"], ["--json and --csv"]),
    "compare a study that is not stored": (["compare", "nowhere"], ["no study database"]),
    "trial with bad combination": (["trial", TINY, "--target", "inductor", "--set", "mode=eager",
                                    "--set", "freezing=true"], ["only applies"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_cleanly(work, case: str) -> None:
    cwd, before = work
    args, needles = CASES[case]
    assert_rejected(run_cli(cwd, *args), *needles)
    assert_nothing_written(cwd, before)


def test_a_corrupted_database_is_refused_and_left_as_it_was(work) -> None:
    cwd, before = work
    db = cwd / "corrupt.db"
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    proc = run_cli(cwd, "run", TINY, "--target", "inductor", "--storage", f"sqlite:///{db}")
    assert_rejected(proc, "cannot open storage")
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
    assert_nothing_written(cwd, before)


# torch_xla hidden from the CLI's process, as on a CUDA machine without torch-xla: ``find_spec``
# answers None for a name that ``sys.modules`` maps to None, and an import of it fails.
HIDE_TORCH_XLA = ("import sys; sys.modules['torch_xla'] = None; sys.argv[0] = 'autotune'; "
                  "from autotune.cli import main; main()")
XLA_SCRIPT = str(Path(__file__).resolve().parents[2] / "examples" / "vit_xla_train.py")


@pytest.mark.parametrize("args", [
    ["run", TINY, "--target", "xla", "--trials", "1"],
    ["trial", TINY, "--target", "xla"],
    ["run", XLA_SCRIPT, "--trials", "1"],  # --target auto, and the script imports torch_xla
], ids=["run --target xla", "trial --target xla", "auto on a torch_xla script"])
def test_a_missing_optional_package_is_named_with_its_install_command(work, args: list[str]) -> None:
    cwd, before = work
    proc = subprocess.run([sys.executable, "-c", HIDE_TORCH_XLA, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)
    assert_rejected(proc, "torch-xla", 'pip install torch==2.9.0 torch-xla==2.9.0 (or, in a checkout: pip install -e ".[cpu]")')
    assert_nothing_written(cwd, before)
