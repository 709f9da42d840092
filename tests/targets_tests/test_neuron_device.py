"""The Neuron target on a real device: a planned configuration compiles and trains a tiny model.

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
