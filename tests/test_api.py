"""The optional API outside a trial (inside one, ``harness_tests/test_harness.py`` runs it for real)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from autotune import api


def test_api_outside_a_trial_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOTUNE_PARAMS", raising=False)
    assert not api.in_trial()
    assert api.params() == {}
    assert api.param("batch_size", 8) == 8
    assert api.report(latency_ms=float("nan")) is None
    assert api.step(4) is None


def test_params_outside_a_trial_come_from_a_sourced_env_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_PARAMS", '{"batch_size": 32, "precision": "bf16_model"}')
    assert api.params() == {"batch_size": 32, "precision": "bf16_model"}
    assert api.param("batch_size") == 32
    for junk in ("not json", "[1, 2]", ""):
        monkeypatch.setenv("AUTOTUNE_PARAMS", junk)
        assert api.params() == {}


def test_public_names_are_the_api() -> None:
    code = "import autotune; print(autotune.params(), autotune.param('x', 1), autotune.report(latency_ms=1.0))"
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_PARAMS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["{}", "1", "None"]


def test_report_stays_callable_after_the_cli_renders() -> None:
    code = "import autotune, autotune.cli, autotune.rendering; autotune.report(latency_ms=1.0)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
