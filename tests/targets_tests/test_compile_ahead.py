"""Each target's compile job (--compile-workers), by contract: the exact commands, env vars and
cache paths a compile job and its measure job use."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from autotune.records import MeasurementProtocol, TrialRequest
from autotune.execution.compile_stage import compile_job
from autotune.targets import get_target
from autotune.workers.multiprocess import trial_command


def _request(plan) -> TrialRequest:
    return TrialRequest(plan=plan, script="train.py", trial_dir="/tmp/study/trials/0003", timeout_s=600,
                        protocol=MeasurementProtocol(stop_below=100.0))


def test_neuron_compiles_ahead_under_neuron_parallel_compile_with_the_platform_named_for_both_jobs():
    target = get_target("neuron")
    plan = target.cached_plan({"path": "xla", "model_type": "transformer", "optlevel": 2, "batch_size": 8},
                              "/shared/autotune-cache", base_env={})
    job, measure = target.compile_ahead(plan, "trn1.32xlarge")
    assert job.wrapper == ["neuron_parallel_compile"] and measure.wrapper == []
    # The persistent cache hashes NEURON_CC_FLAGS as given: both jobs carry the same string, and a
    # CPU node that cannot detect the platform is told it.
    assert job.env["NEURON_CC_FLAGS"] == measure.env["NEURON_CC_FLAGS"] == \
        "--target=trn1 --model-type=transformer --optlevel=2"
    assert job.env["NEURON_COMPILE_CACHE_URL"] == measure.env["NEURON_COMPILE_CACHE_URL"] == \
        "/shared/autotune-cache/neuron-compile-cache"
    assert job.env["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn1"
    assert "NEURON_PLATFORM_TARGET_OVERRIDE" not in measure.env
    assert trial_command(job, Path("/tmp/spec.json"))[:4] == ["neuron_parallel_compile", *trial_command(
        measure, Path("/tmp/spec.json"))[:3]]
    assert trial_command(job, Path("/tmp/spec.json"))[-3:] == ["-m", "autotune.harness", "/tmp/spec.json"]


def test_a_neuron_configuration_that_names_its_target_keeps_it():
    target = get_target("neuron")
    plan = target.plan({"path": "xla", "target": "inf2", "optlevel": 1}, {})
    job, measure = target.compile_ahead(plan, "trn1")
    assert job.env["NEURON_CC_FLAGS"] == measure.env["NEURON_CC_FLAGS"] == "--target=inf2 --optlevel=1"
    assert job.env["NEURON_PLATFORM_TARGET_OVERRIDE"] == "inf2"


def test_neuron_torchrun_trials_run_torchrun_under_neuron_parallel_compile():
    target = get_target("neuron")
    plan = target.plan({"path": "xla", "nproc_per_node": 2}, {})
    job, _ = target.compile_ahead(plan, "trn1")
    command = trial_command(job, Path("/tmp/spec.json"))
    assert command[0] == "neuron_parallel_compile" and command[2:5] == ["-m", "torch.distributed.run", "--standalone"]


def test_the_neuron_native_path_compiles_in_its_trials():
    target = get_target("neuron")
    assert target.compile_ahead(target.plan({"path": "native"}, {}), "trn2") is None
    assert "native path" in target.compile_job_note()


def test_an_inductor_compile_job_keeps_to_one_compile_thread():
    target = get_target("inductor")
    plan = target.cached_plan({"mode": "default"}, "/cache")
    job, measure = target.compile_ahead(plan, None)
    assert job.env["TORCHINDUCTOR_COMPILE_THREADS"] == "1" and "TORCHINDUCTOR_COMPILE_THREADS" not in measure.env
    assert job.env["TORCHINDUCTOR_CACHE_DIR"] == measure.env["TORCHINDUCTOR_CACHE_DIR"] == "/cache/inductor"


def test_xla_compiles_ahead_only_where_its_persistent_cache_is_read_back(monkeypatch):
    target = get_target("xla")
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    assert target.compile_ahead(target.plan({"backend_opt_level": 2}, {}), None) is None
    assert "XLA:CPU cannot read back" in target.compile_job_note()
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    plan = target.cached_plan({"backend_opt_level": 2}, "/cache", base_env={"PJRT_DEVICE": "TPU"})
    job, measure = target.compile_ahead(plan, None)
    assert job.env["XLA_PERSISTENT_CACHE_PATH"] == measure.env["XLA_PERSISTENT_CACHE_PATH"] == "/cache/xla-tpu"


@pytest.mark.parametrize("name, pauses", [("inductor", True), ("neuron", False)])
def test_a_compile_job_only_compiles_and_stops_while_a_cpu_trial_measures(name, pauses):
    target = get_target(name)
    request = _request(target.plan({"batch_size": 8}, {}))
    job, measure = compile_job(target, request, platform="trn1", cache_root="/cache", key_of=lambda env: "k" * 64)
    assert job.trial.protocol.compile_only and job.trial.protocol.stop_below is None
    assert not measure.protocol.compile_only and measure.protocol.stop_below == 100.0
    assert job.trial.trial_dir == "/tmp/study/trials/0003-compile" and measure.trial_dir == request.trial_dir
    assert job.cache_root == "/cache" and job.artifact_key == "k" * 64
    assert job.pause_while_measuring is pauses


def test_a_compile_job_on_a_node_without_neuron_parallel_compile_says_so(tmp_path, monkeypatch):
    from autotune.workers.launcher import TrialLimits, run_trial

    monkeypatch.setenv("PATH", str(tmp_path))  # no Neuron SDK here, nor anything else
    target = get_target("neuron")
    job, _ = target.compile_ahead(target.plan({"path": "xla"}, {}), "trn1")
    script = tmp_path / "train.py"
    script.write_text("print('never runs')\n")
    result = run_trial(job, script, trial_dir=tmp_path / "trial", limits=TrialLimits(timeout_s=60),
                       protocol=MeasurementProtocol(compile_only=True))
    assert not result.ok
    assert result.failure.reason == "cannot start neuron_parallel_compile on this node: No such file or directory"


def test_a_compile_node_without_a_device_compiles_for_the_measuring_platform(tmp_path, monkeypatch):
    """The exact environment the compile node's ``neuron_parallel_compile`` process starts with."""
    from autotune.workers.launcher import TrialLimits, run_trial

    seen = tmp_path / "env.json"
    fake = tmp_path / "bin" / "neuron_parallel_compile"
    fake.parent.mkdir()
    fake.write_text(f"""#!{sys.executable}
import json, os
keys = ("NEURON_PLATFORM_TARGET_OVERRIDE", "NEURON_CC_FLAGS", "NEURON_COMPILE_CACHE_URL")
open({str(seen)!r}, "w").write(json.dumps({{k: os.environ.get(k) for k in keys}}))
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    target = get_target("neuron")
    plan = target.cached_plan({"path": "xla", "model_type": "transformer", "optlevel": 3}, str(tmp_path / "cache"),
                              base_env={})
    job, _ = target.compile_ahead(plan, "inf2.xlarge")
    script = tmp_path / "serve.py"
    script.write_text("print('compiled by the fake')\n")
    run_trial(job, script, trial_dir=tmp_path / "trial", limits=TrialLimits(timeout_s=60),
              protocol=MeasurementProtocol(compile_only=True))
    assert json.loads(seen.read_text()) == {
        "NEURON_PLATFORM_TARGET_OVERRIDE": "inf2",
        "NEURON_CC_FLAGS": "--target=inf2 --model-type=transformer --optlevel=3",
        "NEURON_COMPILE_CACHE_URL": str(tmp_path / "cache" / "neuron-compile-cache"),
    }
