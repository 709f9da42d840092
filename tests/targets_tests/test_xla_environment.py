"""The caller's environment as the xla target keys results by it: what torch-xla writes into the
environment of a process that imports it is not the user's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from autotune.targets.xla import XlaTarget

READ = """
import json, sys
from autotune.provenance import caller_env
from autotune.targets.xla import XlaTarget
before = caller_env(XlaTarget())
if sys.argv[1] == "import":
    import torch_xla
    torch_xla.device()  # torch-xla sets PJRT_DEVICE=CPU and adds its fast-math default to XLA_FLAGS
print(json.dumps([before, caller_env(XlaTarget())]))
"""


def _read(env: dict[str, str], how: str) -> list[dict[str, str]]:
    done = subprocess.run([sys.executable, "-c", READ, how], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_process_that_imported_torch_xla_keys_results_as_one_that_did_not() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "XLA_FLAGS")}
    before, after = _read(env, "import")
    assert before == after == {}
    env["XLA_FLAGS"] = "--xla_backend_optimization_level=1"
    before, after = _read(env, "import")
    assert before == after == {"XLA_FLAGS": "--xla_backend_optimization_level=1"}


def test_the_users_own_settings_still_count() -> None:
    target = XlaTarget()
    assert target.result_env({"PJRT_DEVICE": "CUDA", "XLA_FLAGS": "--xla_cpu_enable_fast_math=true"}) == \
        {"PJRT_DEVICE": "CUDA", "XLA_FLAGS": "--xla_cpu_enable_fast_math=true"}
    assert target.result_env({"PJRT_DEVICE": "CPU", "XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}) == {}


def test_a_trials_flags_leave_out_what_torch_xla_adds_itself() -> None:
    plan = XlaTarget().plan({"thunk_runtime": False},
                            {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false --xla_cpu_use_xnnpack=true"})
    assert plan.env["XLA_FLAGS"] == "--xla_cpu_use_xnnpack=true --xla_cpu_use_thunk_runtime=false"
