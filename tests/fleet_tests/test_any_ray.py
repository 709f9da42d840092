"""What a local Ray gives autotune's workers on every Ray release the package allows. Not marked
slow, so that CI's run on the lowest versions checks it on the oldest Ray.

- Ray 2.50 to 2.55 empty CUDA_VISIBLE_DEVICES and NEURON_RT_VISIBLE_CORES in a worker that holds
  no GPU or NeuronCore, unless told not to (and warn so at every start): a trial that shares the
  node's GPUs would see none. A worker keeps the node's values.
- Ray before 2.52 has no token: a local Ray that a stranger can join says so in the study's notes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from .conftest import JOIN_AS_STRANGER

START = textwrap.dedent("""
    import json, os, subprocess, sys
    import ray
    from autotune.execution.scheduler import connect
    from autotune.workers.ray_worker import worker_class

    notes = []
    assert connect(None, notes=notes)
    worker = worker_class().remote(1, "xla")  # a CPU target's trial worker: it asks Ray for no devices
    names = ("CUDA_VISIBLE_DEVICES", "NEURON_RT_VISIBLE_CORES")
    seen = ray.get(worker.__ray_call__.remote(lambda self: {n: os.environ.get(n) for n in names}))
""") + JOIN_AS_STRANGER + textwrap.dedent("""
    print(json.dumps({"seen": seen, "notes": notes, "stranger joined": "joined" in stranger.stdout}))
    ray.shutdown()
""")


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """A local Ray started as a study starts it, with device variables exported: what its worker
    saw, the notes, whether a stranger joined; and what the driver printed on stderr."""
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), CUDA_VISIBLE_DEVICES="7", NEURON_RT_VISIBLE_CORES="5")
    done = subprocess.run([sys.executable, "-c", START], env=env, cwd=home, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def test_a_worker_without_devices_keeps_the_nodes(local_ray: tuple[dict[str, Any], str]) -> None:
    outcome, stderr = local_ray
    assert outcome["seen"] == {"CUDA_VISIBLE_DEVICES": "7", "NEURON_RT_VISIBLE_CORES": "5"}
    assert "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO" not in stderr, stderr[-3000:]


def test_a_local_ray_that_a_stranger_can_join_says_so(local_ray: tuple[dict[str, Any], str]) -> None:
    outcome, _ = local_ray
    said = [n for n in outcome["notes"] if "without token authentication" in n]
    assert bool(said) == outcome["stranger joined"], outcome
