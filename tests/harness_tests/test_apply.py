"""A production run of a tuned configuration: ``source best.env && python train.py`` and ``autotune
exec best.json -- python train.py`` give the job every knob a trial applied.

Each job here is a real process running real torch and torch-xla on the CPU. Its script is a plain
training loop that knows nothing of autotune; it writes down what it observes (the batch it
receives, its parameters' dtype, its device loader's batches per execution, whether its model was
compiled, its arguments and environment), which is what each test checks.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from autotune.records import ApplySpec
from autotune.results.outputs import BestConfig, write_outputs
from autotune.trial import prepare_trial

pytestmark = pytest.mark.slow

#: A torch-xla loop as its authors write it: DataLoader -> MpDeviceLoader -> forward, backward,
#: ``xm.optimizer_step``; its own flags; and a worker started with ``spawn`` when asked.
XLA_LOOP = """
    import argparse
    import json
    import os
    import sys

    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    from torch.utils.data import DataLoader, TensorDataset


    def train(index, args):
        device = torch_xla.device()
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        data = TensorDataset(torch.randn(256, 16), torch.randint(0, 4, (256,)))
        loader = DataLoader(data, batch_size=args.batch_size, num_workers=args.num_workers, drop_last=True)
        device_loader = pl.MpDeviceLoader(loader, device)
        seen = {}
        for step, (x, y) in enumerate(device_loader):
            optimizer.zero_grad()
            out = model(x)
            torch.nn.functional.cross_entropy(out.float(), y).backward()
            xm.optimizer_step(optimizer)
            if step == 0:
                seen.update(batch=x.shape[0], param_dtype=str(next(model.parameters()).dtype),
                            out_dtype=str(out.dtype))
            if step + 1 >= args.steps:
                break
        seen.update(argv=sys.argv[1:], num_workers=loader.num_workers, xla_flags=os.environ.get("XLA_FLAGS"),
                    batches_per_execution=device_loader._parallel_loader._batches_per_execution,
                    compiled=model._compiled_call_impl is not None, world_size=os.environ.get("WORLD_SIZE"),
                    xla_use_bf16=os.environ.get("XLA_USE_BF16"),
                    spawned=index is not None)
        rank = os.environ.get("RANK", "0")
        with open(f"{args.out}.{rank}.json", "w") as f:
            json.dump(seen, f)


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--batch-size", type=int, default=8)
        parser.add_argument("--num-workers", type=int, default=0)
        parser.add_argument("--steps", type=int, default=3)
        parser.add_argument("--spawn", action="store_true")
        parser.add_argument("--set-flags", default=None, help="set XLA_FLAGS itself, as hand-tuned scripts do")
        parser.add_argument("--out", required=True)
        args = parser.parse_args()
        if args.set_flags is not None:
            os.environ["XLA_FLAGS"] = args.set_flags
        if args.spawn:
            torch.multiprocessing.spawn(train, args=(args,), nprocs=1)
        else:
            train(None, args)
        print("done")
"""


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("job") / "train.py"
    path.write_text(textwrap.dedent(XLA_LOOP))
    return path


def best_of(script: Path, sets: dict[str, Any], *, target: str = "xla", flags: dict[str, str] | None = None,
            nproc_per_node: int = 1, env: dict[str, str] | None = None) -> BestConfig:
    """The best configuration a study of ``script`` would hand back for ``sets``, planned as its trial was."""
    plan = prepare_trial(script, target=target, sets=sets, flags=flags, nproc_per_node=nproc_per_node,
                         base_env=env if env is not None else clean_env()).plan
    script_args = plan.script_args([]) if plan.script_flags else None
    return BestConfig(study="train-xla", trial=4, target=target, params=plan.params, env=plan.env,
                      flags_env=plan.flags_env, compiler_flags=plan.compiler_flags, launch=plan.launch,
                      nproc_per_node=plan.nproc_per_node, nnodes=plan.nnodes, script_args=script_args, value=100.0,
                      speedup=3.0,
                      apply=ApplySpec.of(plan, study="train-xla", trial=4, script=script.name, env=plan.env,
                                         speedup=3.0))


def clean_env() -> dict[str, str]:
    """This machine's environment without anything of autotune's or a shell's earlier best.env."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("AUTOTUNE_") and k not in ("PYTHONPATH", "XLA_FLAGS", "PJRT_DEVICE")}


def run_job(best: BestConfig, script: Path, args: list[str], tmp: Path, *, how: str,
            command: list[str] | None = None) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """Run the job the way a user does after a study (``how``: ``source`` or ``exec``) and read
    what its rank 0 observed."""
    write_outputs(tmp, best, [], None)
    out = tmp / "seen"
    command = command or [sys.executable, str(script)]
    argv = [*command, *args, "--out", str(out)]
    if how == "source":
        line = f"source {tmp / 'best.env'} && exec " + " ".join(map(shlex_quote, argv))
        done = subprocess.run(["bash", "-c", line], env=clean_env(), capture_output=True, text=True, timeout=300)
    else:
        autotune = [sys.executable, "-m", "autotune.cli"]
        done = subprocess.run([*autotune, "exec", str(tmp / "best.json"), "--", *argv], env=clean_env(),
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((tmp / "seen.0.json").read_text()), done


def shlex_quote(word: str) -> str:
    import shlex

    return shlex.quote(word)


@pytest.mark.parametrize("how", ["source", "exec"])
def test_every_kind_of_xla_knob_reaches_the_job(loop: Path, tmp_path: Path, how: str) -> None:
    best = best_of(loop, {"batch_size": 32, "num_workers": 1, "precision": "bf16_model",
                          "batches_per_execution": 2, "fast_math": True})
    seen, done = run_job(best, loop, [], tmp_path, how=how)
    assert seen["batch"] == 32  # the DataLoader's batch size, though the script asked for 8
    assert seen["num_workers"] == 1
    assert seen["param_dtype"] == "torch.bfloat16"  # the model cast
    assert seen["batches_per_execution"] == 2  # MpDeviceLoader's
    assert "--xla_cpu_enable_fast_math=true" in seen["xla_flags"]  # a compiler flag, by env var
    assert seen["compiled"] is False
    assert "done" in done.stdout  # the script's own output, untouched
    first = done.stderr.splitlines()[0] if how == "source" else next(
        line for line in done.stderr.splitlines() if "applying" in line)
    assert "applying study train-xla, trial 4" in first
    assert "batch_size=32 (the DataLoader's batch_size)" in first
    assert "fast_math=True (compiler flag in XLA_FLAGS)" in first
    assert "warning" not in done.stderr


@pytest.mark.parametrize("how", ["source", "exec"])
def test_compiled_backend_and_spawned_workers(loop: Path, tmp_path: Path, how: str) -> None:
    """torch.compile(backend="openxla") of the model and an env var (XLA_USE_BF16), in a worker the
    script spawns itself."""
    best = best_of(loop, {"batch_size": 16, "openxla": True, "precision": "xla_use_bf16"})
    seen, done = run_job(best, loop, ["--spawn"], tmp_path, how=how)
    assert seen["spawned"] is True
    assert seen["batch"] == 16
    assert seen["compiled"] is True
    assert seen["xla_use_bf16"] == "1"
    assert done.stderr.count("applying study") == 1  # said once, not again by the spawned worker


@pytest.mark.parametrize("how", ["source", "exec"])
def test_a_knob_that_is_the_scripts_own_flag_reaches_its_arguments(loop: Path, tmp_path: Path, how: str) -> None:
    best = best_of(loop, {"batch_size": 64}, flags={"batch_size": "--batch-size"})
    seen, done = run_job(best, loop, ["--batch-size", "8"], tmp_path, how=how)
    assert seen["argv"][:2] == ["--batch-size", "64"]
    assert seen["batch"] == 64
    assert "script argument --batch-size 64" in done.stderr


def test_exec_starts_the_measured_torchrun_launch(loop: Path, tmp_path: Path) -> None:
    best = best_of(loop, {"batch_size": 16}, nproc_per_node=2)
    seen, done = run_job(best, loop, [], tmp_path, how="exec")
    assert seen["world_size"] == "2"
    assert seen["batch"] == 16
    assert (tmp_path / "seen.1.json").exists()
    assert "torch.distributed.run --standalone --nproc_per_node=2" in done.stderr
    assert done.stderr.count("applying study") == 1
    assert "warning" not in done.stderr  # the launch it measured is the launch it runs


def test_exec_of_a_best_measured_on_two_nodes_runs_the_measured_launch_on_each(loop: Path, tmp_path: Path) -> None:
    """Two nodes on this host: ``autotune exec`` on each, told its node rank and where node 0 is."""
    best = best_of(loop, {"batch_size": 16, "nnodes": 2})
    write_outputs(tmp_path, best, [], None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "autotune.cli", "exec", str(tmp_path / "best.json"), "--", sys.executable, str(loop),
            "--out", str(tmp_path / "seen")]
    nodes = [subprocess.Popen(argv, env={**clean_env(), "PET_NODE_RANK": str(i), "PET_MASTER_ADDR": "127.0.0.1",
                                         "PET_MASTER_PORT": str(port)}, stderr=subprocess.PIPE, text=True)
             for i in (0, 1)]
    said = [node.communicate(timeout=300)[1] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], said
    seen = [json.loads((tmp_path / f"seen.{rank}.json").read_text()) for rank in (0, 1)]
    assert [(s["world_size"], s["batch"]) for s in seen] == [("2", 16)] * 2
    assert all("torch.distributed.run --nnodes=2 --nproc_per_node=1" in err for err in said), said
    assert all("measured on 2 nodes: run this on each of them" in err for err in said)


def test_a_plain_python_run_of_a_torchrun_best_is_warned(loop: Path, tmp_path: Path) -> None:
    best = best_of(loop, {"batch_size": 16}, nproc_per_node=2)
    seen, done = run_job(best, loop, [], tmp_path, how="source")
    assert seen["world_size"] is None
    assert "warning: the configuration was measured as torchrun --nproc_per_node=2, this run has 1 process" \
        in done.stderr


def test_a_launcher_with_another_process_count_is_warned(loop: Path, tmp_path: Path) -> None:
    best = best_of(loop, {"batch_size": 16}, nproc_per_node=2)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", str(loop)]
    seen, done = run_job(best, loop, [], tmp_path, how="exec", command=command)
    assert seen["world_size"] == "1"
    assert "this launcher starts 1" in done.stderr


def test_a_knob_with_nothing_to_act_on_is_a_warning(tmp_path: Path) -> None:
    """A loop with no DataLoader cannot take a batch size: the job says so when it ends."""
    script = tmp_path / "slices.py"
    script.write_text(textwrap.dedent("""
        import torch
        model = torch.nn.Linear(8, 2)
        data = torch.randn(64, 8)
        for i in range(0, 64, 16):
            model(data[i:i + 16]).sum().backward()
        print("trained")
    """))
    best = best_of(script, {"batch_size": 32}, target="inductor")
    write_outputs(tmp_path, best, [], None)
    done = subprocess.run(["bash", "-c", f"source {tmp_path / 'best.env'} && python {script}"], env=clean_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "trained\n"
    assert "warning: batch_size=32 was not applied: the script made no DataLoader" in done.stderr


def test_the_scripts_own_write_of_a_configured_variable_is_told(loop: Path, tmp_path: Path) -> None:
    best = best_of(loop, {"fast_math": True})
    seen, done = run_job(best, loop, ["--set-flags=--xla_cpu_enable_fast_math=false"], tmp_path, how="source")
    assert seen["xla_flags"] == "--xla_cpu_enable_fast_math=false"
    assert "warning: train.py:" in done.stderr
    assert "set XLA_FLAGS itself, replacing the tuned value (fast_math)" in done.stderr


def test_neuron_cc_flags_set_by_the_script_is_told(tmp_path: Path) -> None:
    """The seeds' hand-tuned scripts set NEURON_CC_FLAGS themselves, replacing the tuned flags (a
    contract: the script needs no Neuron device to set a variable)."""
    script = tmp_path / "seeds.py"
    script.write_text(textwrap.dedent("""
        import os
        os.environ["NEURON_CC_FLAGS"] = "--model-type=transformer --optlevel 1"
        import torch
        print(os.environ["NEURON_CC_FLAGS"])
    """))
    env = {"NEURON_CC_FLAGS": "--model-type=transformer --optlevel=3"}
    spec = ApplySpec(study="seeds-neuron", trial=2, target="neuron", script="seeds.py", env=env,
                     flags_env="NEURON_CC_FLAGS",
                     routes={"optlevel": [{"kind": "compiler flag", "detail": "NEURON_CC_FLAGS"}]},
                     params={"optlevel": 3})
    best = BestConfig(study="seeds-neuron", trial=2, target="neuron", params={"optlevel": 3}, env=env,
                      flags_env="NEURON_CC_FLAGS", value=1.0, apply=spec)
    write_outputs(tmp_path, best, [], None)
    done = subprocess.run(["bash", "-c", f"source {tmp_path / 'best.env'} && python {script}"], env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "--model-type=transformer --optlevel 1\n"
    assert "warning: seeds.py:3 set NEURON_CC_FLAGS itself, replacing the tuned value (optlevel)" in done.stderr


def test_best_env_holds_nothing_of_the_tuning_machine(loop: Path, tmp_path: Path) -> None:
    best = best_of(loop, {"batch_size": 16})
    text = best.env_file()
    for machine in ("NEURON_RT_VISIBLE_CORES", "MASTER_PORT", "OMP_NUM_THREADS", "AUTOTUNE_TRIAL_SPEC"):
        assert machine not in text
    spec = ApplySpec.model_validate_json(best.variables()["AUTOTUNE_APPLY"])
    assert spec.knobs.threads is None and spec.knobs.lazy_device is False


def test_exec_refuses_bad_input(loop: Path, tmp_path: Path) -> None:
    autotune = [sys.executable, "-m", "autotune.cli", "exec"]
    other = tmp_path / "other.json"
    other.write_text('{"not": "a best"}')
    (tmp_path / "tpu.json").write_text(best_of(loop, {"batch_size": 16}).model_copy(
        update={"target": "tpu9"}).model_dump_json())
    for argv, message in [
        ([str(tmp_path / "missing.json"), "--", "python", "x.py"], "no such file"),
        ([str(other), "--", "python", "x.py"], "is not a best.json"),
        ([str(tmp_path / "tpu.json"), "--", "python", "x.py"], "unknown target 'tpu9'"),
    ]:
        done = subprocess.run([*autotune, *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert message in done.stderr
        assert "Traceback" not in done.stderr
    write_outputs(tmp_path, best_of(loop, {"batch_size": 16}), [], None)
    done = subprocess.run([*autotune, str(tmp_path / "best.json")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no command to run" in done.stderr
    done = subprocess.run([*autotune, str(tmp_path / "best.json"), "--", "no-such-command-here"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no-such-command-here: command not found" in done.stderr
    done = subprocess.run([*autotune, str(tmp_path / "best.json"), "--", shutil.which("sh") or "sh", "-c", "exit 7"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 7  # the command's own exit code


INDUCTOR_LOOP = """
    import torch
    from torch._dynamo.utils import counters

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    inner = []
    model[0].register_forward_hook(lambda _m, _i, out: inner.append(out.dtype))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(3):
        optimizer.zero_grad()
        out = model(torch.randn(8, 16))
        out.float().sum().backward()
        optimizer.step()
    print(f"first layer computed in {inner[-1]}, graphs compiled {counters['stats']['unique_graphs']}")
"""


@pytest.mark.parametrize("how", ["source", "exec"])
def test_inductor_compile_and_autocast_reach_the_job(tmp_path: Path, how: str) -> None:
    """torch.compile with the tuned mode, and autocast to bf16, on a plain eager loop."""
    script = tmp_path / "eager.py"
    script.write_text(textwrap.dedent(INDUCTOR_LOOP))
    best = best_of(script, {"mode": "default", "precision": "bf16_autocast"}, target="inductor")
    write_outputs(tmp_path, best, [], None)
    if how == "source":
        command = ["bash", "-c", f"source {tmp_path / 'best.env'} && python {script}"]
    else:
        command = [sys.executable, "-m", "autotune.cli", "exec", str(tmp_path / "best.json"), "--",
                   sys.executable, str(script)]
    done = subprocess.run(command, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "first layer computed in torch.bfloat16" in done.stdout
    assert "graphs compiled 0" not in done.stdout
    assert "mode=default (torch.compile of the model)" in done.stderr
