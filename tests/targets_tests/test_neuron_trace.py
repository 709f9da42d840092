"""Traced inference on Neuron, by contract: what each trial hands ``torch_neuronx.trace``, how the
traced model's requests are measured, and the traced model kept in the cache.

No Neuron device or torch-neuronx exists here. A stand-in ``torch_neuronx`` package, written by
the test onto the trial's ``PYTHONPATH``, has the documented signatures (``trace(func,
example_inputs, *_, ..., compiler_workdir=None, compiler_args=None, ...)``,
``DataParallel(model, device_ids=None, dim=0, set_dynamic_batching=True)``), records each call
to a file and traces with ``torch.jit.trace`` on the CPU: it pins the arguments and the serving
loop, never a Neuron figure. ``test_neuron_device.py`` runs a traced study on a real device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.records import APPLY_ENV, ApplySpec, MeasurementProtocol, TrialResult
from autotune.targets.neuron.flags import merge_compiler_args
from autotune.trial import prepare_trial
from autotune.workers.launcher import TrialLimits, run_trial
from autotune.harness.apply import HOOK_DIR

STAND_IN = '''
"""A stand-in for torch-neuronx: the documented inference API, recorded, traced on the CPU."""
import json
import os

import torch


def _record(call, **fields):
    with open(os.environ["STAND_IN_NEURONX_LOG"], "a") as fh:
        fh.write(json.dumps({"call": call, **fields}) + "\\n")


def trace(func, example_inputs, *_, input_output_aliases={}, compiler_workdir=None, compiler_args=None,
          partitioner_config=None, inline_weights_to_neff=True, cpu_backend=False):
    _record("trace", compiler_args=compiler_args)
    return torch.jit.trace(func, example_inputs)


def dynamic_batch(neuron_script):
    _record("dynamic_batch")
    return neuron_script


class DataParallel(torch.nn.Module):
    def __init__(self, model, device_ids=None, dim=0, set_dynamic_batching=True):
        super().__init__()
        _record("DataParallel", set_dynamic_batching=set_dynamic_batching)
        self.module = model

    def forward(self, *args):
        return self.module(*args)
'''

#: A serving script as the Neuron tutorials write one: trace with flags of its own, then serve.
SERVE = '''
import sys

import torch
import torch_neuronx

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).eval()
example = torch.randn(4, 64)
compiler_args = {compiler_args}
traced = torch_neuronx.trace(model, example, compiler_args=compiler_args)
if "--parallel" in sys.argv:
    traced = torch_neuronx.DataParallel(torch_neuronx.dynamic_batch(traced))
with torch.no_grad():
    for _ in range(200_000):
        traced(example)
'''

PROTOCOL = MeasurementProtocol(max_measure_seconds=1.5, max_measure_steps=3000)


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in package on the trial's PYTHONPATH; returns the file its calls go to."""
    package = tmp_path / "site" / "torch_neuronx"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(STAND_IN)
    log = tmp_path / "neuronx-calls.jsonl"
    monkeypatch.setenv("PYTHONPATH", str(package.parent))
    monkeypatch.setenv("STAND_IN_NEURONX_LOG", str(log))
    return log


def _calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _serve(tmp_path: Path, sets: dict[str, Any], compiler_args: Any, *, cache: Path | None = None,
           args: list[str] | None = None) -> TrialResult:
    script = tmp_path / "serve.py"
    script.write_text(SERVE.format(compiler_args=repr(compiler_args)))
    prepared = prepare_trial(script, target="neuron", space="neuron-inf2-inference", sets=sets,
                             cache_root=str(cache) if cache else None)
    trial_dir = tmp_path / f"trial-{len(list(tmp_path.glob('trial-*')))}"
    return run_trial(prepared.plan, prepared.script, args, trial_dir=trial_dir,
                     limits=TrialLimits(timeout_s=180), protocol=PROTOCOL)


# --- the compiler arguments, by exact strings --------------------------------------------------


@pytest.mark.parametrize("configured, script, merged, replaced", [
    # The reported case: the script's own --model-type and --optlevel give way.
    ("--target=inf2 --model-type=transformer --optlevel=3", ["--model-type", "generic", "--optlevel", "1"],
     ["--target=inf2", "--model-type=transformer", "--optlevel=3"],
     ["--model-type=generic -> --model-type=transformer", "--optlevel=1 -> --optlevel=3"]),
    # A string, other spellings (-O1), flags of the script's own kept in its order.
    ("--target=inf2 --auto-cast=matmult --auto-cast-type=bf16", "--verbose=35 -O1 --model-type=transformer",
     ["--target=inf2", "--model-type=transformer", "--auto-cast=matmult", "--auto-cast-type=bf16", "--optlevel=1",
      "--verbose=35"], []),
    # Nothing from the script: the configuration's alone; the baseline: the script's alone.
    ("--target=inf2 --enable-fast-loading-neuron-binaries", None,
     ["--target=inf2", "--enable-fast-loading-neuron-binaries"], []),
    ("", ["--model-type", "transformer", "--workdir", "/tmp/a b"], ["--model-type=transformer", "--workdir", "/tmp/a b"],
     []),
])
def test_merged_compiler_args(configured: str, script: Any, merged: list[str], replaced: list[str]) -> None:
    assert merge_compiler_args(configured, script) == (merged, replaced)


@pytest.mark.slow
@pytest.mark.parametrize("sets, script_args, handed", [
    ({"model_type": "transformer", "optlevel": 3}, ["--model-type", "generic", "--optlevel", "1"],
     ["--target=inf2", "--model-type=transformer", "--optlevel=3"]),
    ({"auto_cast": "all", "auto_cast_type": "fp8_e4m3", "fast_loading": True}, "--model-type=transformer",
     ["--target=inf2", "--model-type=transformer", "--auto-cast=all", "--auto-cast-type=fp8_e4m3",
      "--enable-fast-loading-neuron-binaries"]),
    ({"mixed_precision_accumulation": False}, None, ["--target=inf2", "--disable-mixed-precision-accumulation"]),
])
def test_each_trial_hands_trace_its_configuration(tmp_path: Path, stand_in: Path, sets: dict[str, Any],
                                                   script_args: Any, handed: list[str]) -> None:
    result = _serve(tmp_path, sets, script_args)
    assert [c["compiler_args"] for c in _calls(stand_in) if c["call"] == "trace"] == [handed]
    assert result.status == "ok", result.failure


@pytest.mark.slow
def test_the_trial_says_which_flags_of_the_script_it_replaced(tmp_path: Path, stand_in: Path) -> None:
    result = _serve(tmp_path, {"model_type": "transformer", "optlevel": 3},
                    ["--model-type", "generic", "--optlevel", "1"])
    assert result.notes == ["torch_neuronx.trace: the configuration replaced the script's own compiler_args "
                            "--model-type=generic -> --model-type=transformer, --optlevel=1 -> --optlevel=3"]
    assert "autotune: torch_neuronx.trace: the configuration replaced" in Path(result.log_path).read_text()


# --- the serving loop, measured ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("sets, args, calls", [
    ({"optlevel": 2}, [], [{"call": "trace"}]),
    # The script's own dynamic batching and DataParallel, untouched by the configuration.
    ({"optlevel": 2}, ["--parallel"], [{"call": "trace"}, {"call": "dynamic_batch"},
                                       {"call": "DataParallel", "set_dynamic_batching": True}]),
    # The configuration's: DataParallel without dynamic batching for a script that serves one core...
    ({"data_parallel": True, "dynamic_batch": False}, [],
     [{"call": "trace"}, {"call": "DataParallel", "set_dynamic_batching": False}]),
    # ... and neither for one that spreads its model itself.
    ({"data_parallel": False, "dynamic_batch": False}, ["--parallel"], [{"call": "trace"}]),
])
def test_a_traced_serving_loop_is_measured_request_by_request(tmp_path: Path, stand_in: Path, sets: dict[str, Any],
                                                              args: list[str], calls: list[dict[str, Any]]) -> None:
    result = _serve(tmp_path, sets, None, args=args)
    assert result.status == "ok", (result.failure, result.log_tail)
    m = result.measurement
    assert m is not None and m.samples_per_step == 4  # each request is the example's batch of 4
    assert m.step_time_p99 is not None and 0 < m.step_time_median <= m.step_time_p90 <= m.step_time_p99
    assert m.throughput > 0
    assert [{k: v for k, v in c.items() if k != "compiler_args"} for c in _calls(stand_in)] == calls


@pytest.mark.slow
def test_a_second_trial_loads_the_traced_model_from_the_cache(tmp_path: Path, stand_in: Path) -> None:
    cache = tmp_path / "cache"
    sets = {"model_type": "transformer", "optlevel": 3}
    first = _serve(tmp_path, sets, ["--optlevel", "1"], cache=cache)
    assert first.status == "ok", first.failure
    assert (first.compile.cache_hits, first.compile.cache_misses, first.compile.graphs_compiled) == (0, 1, 1)
    saved = list((cache / "neuron-traced").glob("*.pt"))
    assert len(saved) == 1

    second = _serve(tmp_path, sets, ["--optlevel", "1"], cache=cache)
    assert second.status == "ok", second.failure
    assert (second.compile.cache_hits, second.compile.cache_misses) == (1, 0)
    assert len(_calls(stand_in)) == 1  # the second trial never traced

    # Another configuration is another compile.
    third = _serve(tmp_path, {"model_type": "transformer", "optlevel": 2}, ["--optlevel", "1"], cache=cache)
    assert third.compile.cache_misses == 1 and len(list((cache / "neuron-traced").glob("*.pt"))) == 2


# --- a production run of the tuned configuration ----------------------------------------------


def test_a_production_run_traces_with_the_tuned_settings(tmp_path: Path, stand_in: Path) -> None:
    script = tmp_path / "serve.py"
    script.write_text(SERVE.format(compiler_args=repr(["--optlevel", "1"])).replace("200_000", "3"))
    prepared = prepare_trial(script, target="neuron", platform="inf2", sets={"optlevel": 3},
                             cache_root=str(tmp_path / "cache"))
    tuned = {"NEURON_CC_FLAGS": prepared.plan.env["NEURON_CC_FLAGS"]}  # as best.env exports it
    spec = ApplySpec.of(prepared.plan, study="serve", trial=1, script="serve.py", env=tuned)
    assert spec.knobs.trace is not None and spec.knobs.trace.cache_dir is None  # the tuning machine's
    env = {**os.environ, **tuned, APPLY_ENV: spec.model_dump_json(),
           "PYTHONPATH": os.pathsep.join([str(HOOK_DIR), os.environ["PYTHONPATH"]])}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _calls(stand_in) == [{"call": "trace", "compiler_args": ["--target=inf2", "--optlevel=3"]}]
    assert ("autotune: torch_neuronx.trace: the tuned compiler settings replace the script's own compiler_args "
            "--optlevel=1 -> --optlevel=3") in done.stderr
