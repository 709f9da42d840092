"""GPUs are held like NeuronCores: a study on a Ray cluster that declares GPUs gives each trial its
own, through Ray's ``num_gpus``, and the trial sees only those (``CUDA_VISIBLE_DEVICES``).

No GPU is needed: Ray hands out the GPUs a node declares (``ray start --num-gpus 2``) and sets the
ids it gave each worker whether or not a GPU is there, as it does for NeuronCores.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.study.options import StudyResult
from study_tests.test_study import TWO_POINT_SPACE

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

pytestmark = pytest.mark.slow

_NODES = """
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print(json.dumps([n["Resources"] for n in ray.nodes() if n["Alive"]]))
"""


@pytest.fixture(scope="module")
def gpu_cluster() -> Iterator[str]:
    """A one-node Ray cluster that declares 2 GPUs and 2 CPUs; its address."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "disabled")
        # Short: Ray's sockets live under it, and a Unix socket's path has at most 107 characters.
        temp_dir = Path(tempfile.mkdtemp(prefix="atg-", dir="/tmp"))
        ports = [_free_port() for _ in range(5)]
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={ports[0]}",
               f"--dashboard-agent-listen-port={ports[1]}", f"--dashboard-agent-grpc-port={ports[2]}",
               f"--metrics-export-port={ports[3]}", f"--runtime-env-agent-port={ports[4]}", "--include-dashboard=false",
               "--num-cpus=2", "--num-gpus=2", f"--temp-dir={temp_dir}", "--object-store-memory=100000000",
               "--disable-usage-stats"]
        with (temp_dir / "head.log").open("w") as log:
            head = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        address = f"127.0.0.1:{ports[0]}"
        try:
            deadline = time.monotonic() + 120
            while True:
                out = subprocess.run([sys.executable, "-c", _NODES, address], capture_output=True, text=True,
                                     timeout=120)
                if out.returncode == 0 and json.loads(out.stdout.strip().splitlines()[-1])[0].get("GPU") == 2:
                    break
                assert time.monotonic() < deadline, "the Ray cluster with 2 GPUs did not come up"
                time.sleep(1)
            yield address
        finally:
            os.killpg(head.pid, 9)
            head.wait()
            shutil.rmtree(temp_dir, ignore_errors=True)


def test_each_trial_holds_its_own_gpu_and_sees_only_it(gpu_cluster: str, tmp_path: Path) -> None:
    # The tiny loop, saying first which GPUs its process sees, and lasting long enough that the
    # two workers' trials run at the same time.
    script = tmp_path / "gpu_train.py"
    script.write_text("import os, time\nprint('sees CUDA_VISIBLE_DEVICES=' + os.environ.get('CUDA_VISIBLE_DEVICES', "
                      "'unset'), flush=True)\ntime.sleep(3)\n" + (SCRIPTS / "tiny_train.py").read_text())
    (tmp_path / "space.yaml").write_text(TWO_POINT_SPACE)
    out = tmp_path / "out"
    # What a user exported is not what a trial sees: its placement wins.
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "RAY_AUTH_MODE": "disabled",
           "CUDA_VISIBLE_DEVICES": "7"}
    cmd = [sys.executable, "-m", "autotune.cli", "run", str(script), "--trials", "3", "--target", "inductor",
           "--space", str(tmp_path / "space.yaml"), "--workers", "2", "--gpus-per-trial", "1",
           "--ray-address", gpu_cluster, "--storage", f"sqlite:///{tmp_path / 'db'}", "--out", str(out),
           "--seed", "0", "--json"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    result = StudyResult.model_validate_json(done.stdout)
    assert [t.state for t in result.trials] == ["COMPLETE"] * 3, [(t.state, t.reason) for t in result.trials]

    gpus: dict[int, str] = {}
    for t in result.trials:
        folder = out / "trials" / f"{t.number:04d}"
        # Recorded in the trial's files: the env its process started with, and what the script saw.
        spec = json.loads((folder / "spec.json").read_text())
        held = spec["plan"]["env"]["CUDA_VISIBLE_DEVICES"]
        assert held in ("0", "1"), spec["plan"]["env"]
        assert held == t.placement["CUDA_VISIBLE_DEVICES"], t.placement
        assert f"sees CUDA_VISIBLE_DEVICES={held}\n" in (folder / "trial.log").read_text()
        gpus[t.number] = held
    overlapping = [(a, b) for a, b in itertools.combinations(result.trials, 2)
                   if a.started_at < b.ended_at and b.started_at < a.ended_at]
    assert overlapping, "two trials ran at the same time"
    for a, b in overlapping:
        assert gpus[a.number] != gpus[b.number], f"trials {a.number} and {b.number} ran at once on one GPU"
    print("GPU of each trial:", gpus, "overlapping:", [(a.number, b.number) for a, b in overlapping])


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
