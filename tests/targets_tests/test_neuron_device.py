"""The Neuron target on a real device: a planned configuration compiles and trains a tiny model,
and a traced-inference study tunes a served model and loads its traced models back from the cache.

Skipped unless ``torch_neuronx`` imports (so: everywhere but a Trn/Inf instance with the Neuron
SDK). Run it there with ``pytest -m neuron tests/targets_tests/test_neuron_device.py``. The step
runs in a fresh process because torch-neuronx reads ``NEURON_CC_FLAGS`` and the cache variables
from the environment it starts with, exactly as a trial process does.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.neuron, pytest.mark.timeout(1800)]

pytest.importorskip("torch_neuronx")

from autotune.study.study import tune  # noqa: E402
from autotune.targets.neuron import NeuronTarget, compile_cache_env  # noqa: E402

# One training step of a tiny MLP under the plan's runtime knobs; prints the loss last.
STEP_SCRIPT = r'''
import json, sys
import torch

knobs = json.loads(sys.argv[1])
native = (knobs.get("compile") or {}).get("backend") == "neuron"
if native:
    import torch_neuronx  # registers the neuron device
    device = torch.device("neuron")
else:
    import torch_xla
    device = torch_xla.device()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10))
dtype = getattr(torch, knobs["model_dtype"]) if knobs.get("model_dtype") else torch.float32
model = model.to(device=device, dtype=dtype)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
forward = torch.compile(model, backend="neuron") if native else model
batch = knobs.get("batch_size") or 8

for _ in range(3):
    x = torch.randn(batch, 64).to(device=device, dtype=dtype)
    y = torch.randint(0, 10, (batch,)).to(device)
    opt.zero_grad()
    if knobs.get("autocast_device"):
        with torch.autocast(device_type=knobs["autocast_device"], dtype=getattr(torch, knobs["autocast_dtype"])):
            loss = torch.nn.functional.cross_entropy(forward(x).float(), y)
    else:
        loss = torch.nn.functional.cross_entropy(forward(x).float(), y)
    loss.backward()
    opt.step()
    if not native:
        torch_xla.sync()
print(float(loss.detach().cpu()))
'''


def test_planned_configuration_compiles_and_trains(tmp_path: Path) -> None:
    target = NeuronTarget()
    assert target.available()
    space = target.default_space()
    native = space.fixed.get("path") == "native"
    level = {"native_opt_level": 1} if native else {"optlevel": 1}
    config = space.validate({"precision": "bf16_model", "model_type": "transformer", **level})
    plan = target.plan(config, dict(os.environ))

    cache_root = tmp_path / "cache"
    cache_env = compile_cache_env(str(cache_root), target.versions().get("neuronx-cc"),
                                  "native" if native else "xla")
    script = tmp_path / "step.py"
    script.write_text(STEP_SCRIPT)
    result = subprocess.run(
        [sys.executable, str(script), plan.knobs.model_dump_json()],
        env={**os.environ, **plan.env, **cache_env}, capture_output=True, text=True, timeout=1700,
    )
    assert result.returncode == 0, f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    assert math.isfinite(float(result.stdout.strip().splitlines()[-1]))

    # The compiled graphs went where compile_cache_env sent them, compiled with our flags.
    if native:
        assert any(cache_root.rglob("*.neff"))
        return
    modules = list((cache_root / "neuron-compile-cache").glob("neuronxcc-*/MODULE_*"))
    assert modules and any((m / "model.neff").is_file() for m in modules)
    ours = plan.env["NEURON_CC_FLAGS"].split()
    recorded = [json.loads((m / "compile_flags.json").read_text()) for m in modules
                if (m / "compile_flags.json").is_file()]
    assert recorded and all(set(ours) <= set(flags) for flags in recorded)


# A traced model served as the Neuron inference tutorials do: trace with flags of the script's own
# (which the configuration's replace), then one request after another.
SERVE_SCRIPT = r"""
import argparse
import torch
import torch_neuronx

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=1)
args = parser.parse_args()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).eval()
example = torch.randn(args.batch_size, 256)
traced = torch_neuronx.trace(model, example, compiler_args=["--optlevel", "1"])
with torch.no_grad():
    for _ in range(20_000):
        traced(example)
"""


def test_traced_inference_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "serve.py"
    script.write_text(SERVE_SCRIPT)
    options = dict(trials=3, target="neuron", space="neuron-inf2-inference", seed=0, cache=tmp_path / "cache",
                   arg=["batch_size=--batch-size"], objective=["latency_p99"],
                   sets={"model_type": "transformer", "data_parallel": False})
    result = tune(script, **options)
    assert result.best is not None, result.failures_by_category
    ran = [t for t in result.trials if t.duplicate_of is None and t.state == "COMPLETE"]
    assert ran
    traced = list((tmp_path / "cache" / "neuron-traced").glob("*.pt"))
    assert len(traced) >= len(ran)

    # The same configurations measured again load their traced models instead of compiling them.
    again = tune(script, **options, study="again", fresh=True)
    measured = [t for t in again.trials if t.duplicate_of is None and t.state == "COMPLETE"]
    assert measured and all(t.cache_hits and not t.cache_misses for t in measured)
