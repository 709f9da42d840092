"""The driver side of one trial: what is checked and planned before any process starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import AutotuneError, InvalidConfigError, ScriptError, TargetError
from autotune.trial import check_script, parse_sets, prepare_trial
from autotune.units import parse_size

XLA_SCRIPT = "import torch_xla\nprint('hello')\n"


@pytest.fixture
def xla_script(tmp_path: Path) -> Path:
    path = tmp_path / "train_xla.py"
    path.write_text(XLA_SCRIPT)
    return path


def test_parse_sets() -> None:
    assert parse_sets(["batch_size=32", " precision = bf16_model ", "flags=a=b"]) == {
        "batch_size": "32", "precision": "bf16_model", "flags": "a=b"}
    assert parse_sets(None) == {}


@pytest.mark.parametrize("item", ["batch_size", "=32", " =1"])
def test_parse_sets_rejects_malformed_items(item: str) -> None:
    with pytest.raises(InvalidConfigError, match="expected KEY=VALUE"):
        parse_sets([item])


@pytest.mark.parametrize(("text", "expected"), [
    ("8GiB", 8 * 2**30), ("512M", 512 * 2**20), ("512MB", 512 * 2**20), ("1.5G", int(1.5 * 2**30)),
    ("1e9", 10**9), ("4096", 4096), ("2 kib", 2048),
])
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["lots", "8 PiB", "-1G", ""])
def test_parse_size_rejects_nonsense(text: str) -> None:
    with pytest.raises(InvalidConfigError, match="memory size"):
        parse_size(text)


@pytest.mark.parametrize("text", ["1.2.3GiB", "2e"])
def test_parse_size_rejects_malformed_numbers(text: str) -> None:
    with pytest.raises(InvalidConfigError, match="memory size"):
        parse_size(text)


def test_check_script(tmp_path: Path, xla_script: Path) -> None:
    assert check_script(xla_script) == xla_script.resolve()
    with pytest.raises(ScriptError, match="script not found"):
        check_script(tmp_path / "missing.py")
    with pytest.raises(ScriptError, match="not a file"):
        check_script(tmp_path)
    binary = tmp_path / "model.pt"
    binary.write_bytes(b"PK\x03\x04\x00\x00" + bytes(range(256)))
    with pytest.raises(ScriptError, match="not a Python script"):
        check_script(binary)
    broken = tmp_path / "broken.py"
    broken.write_text("for x in range(3)\n    print(x)\n")
    with pytest.raises(ScriptError, match=r"broken.py: line 1: .*must be valid Python"):
        check_script(broken)


def test_target_auto_detection(tmp_path: Path, xla_script: Path) -> None:
    plain = tmp_path / "plain.py"
    plain.write_text("import torch\n")
    assert prepare_trial(xla_script).target.name == "xla"
    assert prepare_trial(plain).target.name == "inductor"
    with pytest.raises(TargetError, match="unknown target 'tpu'"):
        prepare_trial(plain, target="tpu")


@pytest.mark.parametrize("line", ["import torch_xla.core.xla_model as xm", "from torch_xla import runtime",
                                  "  import torch_xla"])
def test_auto_detects_xla_imports(tmp_path: Path, line: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(f"import torch\nif True:\n{line if line.startswith(' ') else '  ' + line}\n")
    assert prepare_trial(script).target.name == "xla"


def test_auto_detects_xla_in_a_combined_import(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import os, torch, torch_xla\n")
    assert prepare_trial(script).target.name == "xla"


def test_space_of_another_target_is_rejected(xla_script: Path) -> None:
    with pytest.raises(AutotuneError, match="is for target 'inductor', not 'xla'"):
        prepare_trial(xla_script, target="xla", space="inductor")


def test_plan_of_an_xla_trial(xla_script: Path) -> None:
    prepared = prepare_trial(xla_script, target="xla", sets={"backend_opt_level": "0", "fast_math": "true",
                                                             "precision": "bf16_model"}, base_env={})
    assert prepared.params == {"backend_opt_level": 0, "fast_math": True, "precision": "bf16_model"}
    plan = prepared.plan
    assert plan.env == {"PJRT_DEVICE": "CPU",
                        "XLA_FLAGS": "--xla_backend_optimization_level=0 --xla_cpu_enable_fast_math=true"}
    assert plan.compiler_flags == plan.env["XLA_FLAGS"]
    assert plan.knobs.model_dtype == "bfloat16"
    assert plan.knobs.lazy_device is True


def test_plan_keeps_the_callers_xla_flags_and_device(xla_script: Path) -> None:
    env = {"PJRT_DEVICE": "TPU", "XLA_FLAGS": "--xla_dump_to=/tmp/dump --xla_cpu_enable_fast_math=false"}
    plan = prepare_trial(xla_script, target="xla", sets={"fast_math": "true"}, base_env=env).plan
    assert "PJRT_DEVICE" not in plan.env
    assert plan.env["XLA_FLAGS"] == "--xla_dump_to=/tmp/dump --xla_cpu_enable_fast_math=true"


def test_plan_reads_the_process_environment_by_default(xla_script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/dump")
    plan = prepare_trial(xla_script, target="xla", sets={"fast_math": "true"}).plan
    assert plan.env.get("PJRT_DEVICE", "TPU") == "TPU"
    assert plan.env["XLA_FLAGS"] == "--xla_dump_to=/tmp/dump --xla_cpu_enable_fast_math=true"


@pytest.mark.parametrize(("sets", "fragment"), [
    ({"mode": "eager", "freezing": "true"}, "parameter 'freezing' only applies when mode is one of default"),
    ({"mode": "warp"}, "'warp' is not allowed"),
    ({"batch_size": "7"}, "7 is not allowed"),
])
def test_impossible_inductor_configurations(tmp_path: Path, sets: dict, fragment: str) -> None:
    script = tmp_path / "plain.py"
    script.write_text("import torch\n")
    with pytest.raises(InvalidConfigError, match=fragment):
        prepare_trial(script, target="inductor", sets=sets)
