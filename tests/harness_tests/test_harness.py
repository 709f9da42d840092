"""The harness inside a real trial process: what it intercepts in an unmodified script, and what it measures.

Every trial here is a real subprocess running real torch (and torch-xla, and inductor). The scripts
are tiny, print what they see (the batch size, the dtype of a parameter, how often they synced),
and would run for minutes if the harness did not stop them once the measurement is done.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.measurement.windows import PRUNE_MIN_WINDOWS
from autotune.records import MeasurementProtocol, TrialResult

pytestmark = pytest.mark.slow

RunScript = Callable[..., TrialResult]  # the run_script fixture


def full_log(result: TrialResult) -> str:
    assert result.log_path is not None
    return Path(result.log_path).read_text(errors="replace")


def assert_measured(result: TrialResult) -> None:
    assert result.status == "ok", f"{result.failure}\n{result.log_tail}"
    assert result.failure is None
    m = result.measurement
    assert m is not None
    assert m.throughput > 0
    assert m.windows >= 1  # more on a quiet machine; a busy one can slow steps 30-fold after warm-up
    assert m.ci95_low <= m.throughput <= m.ci95_high
    assert m.steps_measured >= m.windows
    assert m.warmup_steps >= 1


# --- a plain torch loop ------------------------------------------------------------------------------

PLAIN_LOOP = """
    import sys
    import time

    import torch
    from torch.utils.data import DataLoader, Dataset, get_worker_info

    class Points(Dataset):
        def __len__(self):
            return 512

        def __getitem__(self, i):
            info = get_worker_info()
            return torch.randn(16), i % 4, -1 if info is None else info.id

    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    torch.manual_seed(0)
    loader = DataLoader(Points(), batch_size=8, num_workers=0, shuffle=True, drop_last=True)
    print(f"loader batch_size={loader.batch_size} num_workers={loader.num_workers}", flush=True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    while step < steps:
        for x, y, worker in loader:
            if step == 0:
                print(f"first batch: {x.shape[0]} samples from worker {worker[0].item()}", flush=True)
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            time.sleep(0.001)  # a step of at least 1 ms: 100k steps would take minutes
            step += 1
            if step == steps:
                break
    print(f"ran all {steps} steps", flush=True)
"""


@pytest.fixture(scope="module")
def plain_loop(write_script) -> Path:
    return write_script("plain_loop.py", PLAIN_LOOP)


@pytest.fixture(scope="module")
def plain_trial(run_script: RunScript, plain_loop: Path) -> TrialResult:
    return run_script(plain_loop, target="inductor", sets={"batch_size": "16"})


def test_plain_loop_is_measured(plain_trial: TrialResult) -> None:
    assert_measured(plain_trial)
    m = plain_trial.measurement
    assert m.samples_per_step == 16
    # Steps that mostly sleep keep their pace on a busy machine: several windows, a finite CI.
    assert m.windows >= 2
    assert m.ci95_high < 10 * m.throughput  # one window would give the placeholder 10x
    # Each step sleeps 1 ms: at most 16 samples per ms; a figure below 32/s means steps were lost.
    assert 32 < m.throughput < 16_000
    assert m.step_time_median >= 0.001
    assert m.step_time_p90 >= m.step_time_median
    # The throughput and the step times were measured over the same steps.
    assert 0.25 < m.throughput * m.step_time_median / m.samples_per_step < 4
    assert plain_trial.peak_host_memory_bytes and plain_trial.peak_host_memory_bytes > 50 * 2**20
    assert plain_trial.plan.params == {"batch_size": 16}


def test_batch_size_override_reaches_the_data_loader(plain_trial: TrialResult) -> None:
    log = full_log(plain_trial)
    assert "loader batch_size=16 num_workers=0" in log
    assert "first batch: 16 samples from worker -1" in log
    # What the script gave its DataLoader itself, before the configuration replaced it.
    assert plain_trial.script_loader == {"batch_size": [8], "num_workers": [0]}


def test_first_losses_are_recorded(plain_trial: TrialResult) -> None:
    losses = plain_trial.losses
    assert len(losses) == MeasurementProtocol().losses_recorded
    assert all(math.isfinite(v) for v in losses)
    # Cross-entropy over 4 classes starts near ln 4.
    assert 0.5 < losses[0] < 3.0


def test_long_script_is_stopped_once_measured(plain_trial: TrialResult) -> None:
    assert plain_trial.stopped_early
    assert "ran all" not in full_log(plain_trial)
    # The script alone would run for more than 100 s.
    assert plain_trial.wall_seconds < 60


def test_a_trial_that_cannot_win_stops_after_a_few_windows(run_script: RunScript, plain_loop: Path) -> None:
    # Steps of at least 1 ms cannot reach 16 samples per ms; rel_ci 0 never converges, so only
    # the sequential test against the bar can end this measurement before its 20 s cap.
    protocol = MeasurementProtocol(rel_ci=0.0, max_measure_seconds=20.0, max_measure_steps=100_000,
                                   stop_below=1e9)
    result = run_script(plain_loop, protocol=protocol)
    assert_measured(result)
    m = result.measurement
    assert m.pruned and not m.converged
    assert result.stopped_early
    assert PRUNE_MIN_WINDOWS <= m.windows <= PRUNE_MIN_WINDOWS + 2
    assert m.ci95_high < 1e9


def test_a_trial_above_the_bar_is_not_pruned(run_script: RunScript, plain_loop: Path) -> None:
    protocol = MeasurementProtocol(rel_ci=0.0, max_measure_seconds=2.0, stop_below=1.0)
    result = run_script(plain_loop, protocol=protocol)
    assert_measured(result)
    assert not result.measurement.pruned
    assert result.measurement.windows > PRUNE_MIN_WINDOWS + 2  # ran to its 2 s cap


def test_trial_directory_holds_spec_report_and_log(plain_trial: TrialResult) -> None:
    trial_dir = Path(plain_trial.log_path).parent
    assert {"spec.json", "report.json", "trial.log"} <= {p.name for p in trial_dir.iterdir()}


def test_script_that_finishes_by_itself(run_script: RunScript, plain_loop: Path) -> None:
    result = run_script(plain_loop, args=["40"], protocol=MeasurementProtocol(min_window_seconds=0.005, rel_ci=0.0))
    assert result.status == "ok", result.log_tail
    assert not result.stopped_early
    assert "ran all 40 steps" in full_log(result)
    assert result.measurement is not None and result.measurement.samples_per_step == 8


def test_num_workers_override(run_script: RunScript, plain_loop: Path) -> None:
    result = run_script(plain_loop, sets={"num_workers": "2"})
    assert_measured(result)
    log = full_log(result)
    assert "loader batch_size=8 num_workers=2" in log
    assert re.search(r"first batch: 8 samples from worker [01]\b", log), log
    assert result.script_loader == {"batch_size": [8], "num_workers": [0]}


UNEVEN_WARMUP = """
    import time

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4)
    step = 0
    while True:
        for (x,) in loader:
            # The first steps are slow (as first steps are: allocations, lazy init), the rest take 2 ms.
            time.sleep(0.15 if step < 4 else 0.002)
            step += 1
"""


def test_windows_last_at_least_min_window_seconds(run_script: RunScript, write_script) -> None:
    protocol = MeasurementProtocol(max_measure_seconds=2.0)
    result = run_script(write_script("uneven.py", UNEVEN_WARMUP), protocol=protocol)
    assert_measured(result)
    m = result.measurement
    seconds_per_step = m.samples_per_step / m.throughput
    window_seconds = m.steps_measured / m.windows * seconds_per_step
    assert window_seconds >= 0.8 * protocol.min_window_seconds


# --- the optional API ---------------------------------------------------------------------------------

API_SCRIPT = """
    import json
    import time

    import autotune

    print(f"in_trial={autotune.in_trial()}", flush=True)
    print("params=" + json.dumps(autotune.params(), sort_keys=True), flush=True)
    print(f"batch_size={autotune.param('batch_size')} missing={autotune.param('nope', 'fallback')}", flush=True)
    autotune.report(latency_ms=5.0)
    autotune.report(latency_ms=3.25, tokens_per_s=120)
    while True:  # a loop without a DataLoader marks its own steps
        time.sleep(0.002)
        autotune.step(4)
"""


def test_script_reads_params_and_reports_metrics(run_script: RunScript, write_script) -> None:
    result = run_script(write_script("api.py", API_SCRIPT), sets={"batch_size": "32", "num_workers": "1"})
    log = full_log(result)
    assert "in_trial=True" in log
    assert 'params={"batch_size": 32, "num_workers": 1}' in log
    assert "batch_size=32 missing=fallback" in log
    assert result.metrics == {"latency_ms": 3.25, "tokens_per_s": 120.0}
    assert_measured(result)
    assert result.measurement.samples_per_step == 4
    assert 4 / 0.05 < result.measurement.throughput < 4 / 0.002
    assert result.stopped_early


# --- inductor ---------------------------------------------------------------------------------------

SELF_COMPILING = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)),
                          mode="max-autotune")
    print(f"torch.compile returned a {type(model).__name__}", flush=True)
    loader = DataLoader(TensorDataset(torch.randn(256, 16)), batch_size=8, drop_last=True)
    with torch.no_grad():
        while True:
            for (x,) in loader:
                model(x)
"""


def test_eager_mode_undoes_the_scripts_torch_compile(run_script: RunScript, write_script) -> None:
    result = run_script(write_script("self_compiling.py", SELF_COMPILING), sets={"mode": "eager"})
    assert_measured(result)
    assert result.plan.knobs.compile is not None and result.plan.knobs.compile.backend == "eager"
    assert "torch.compile returned a Sequential" in full_log(result)
    assert result.compile.graphs_compiled == 0
    assert result.compile.compile_seconds is None


INFERENCE_LOOP = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
    loader = DataLoader(TensorDataset(torch.randn(256, 16)), batch_size=8, drop_last=True)
    with torch.no_grad():
        while True:
            for (x,) in loader:
                model(x)
"""


def test_default_mode_compiles_a_plain_scripts_model(run_script: RunScript, write_script) -> None:
    # A model of torch's own classes (nn.Sequential) is the hard case: torch 2.9's Module.compile()
    # skips it silently, since its frames live in torch/nn.
    result = run_script(write_script("infer.py", INFERENCE_LOOP), sets={"mode": "default"})
    assert_measured(result)
    assert result.plan.knobs.compile.backend == "inductor"
    assert result.compile.graphs_compiled >= 1
    assert result.compile.compile_seconds is not None and result.compile.compile_seconds > 0
    assert (result.compile.cache_hits or 0) + (result.compile.cache_misses or 0) >= 1


COPIED_MODEL = """
    import copy
    import os
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 8)
    ema = None
    for step in range(400):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        if ema is None:  # an EMA of the weights, as timm's ModelEmaV3 keeps one: a deep copy
            ema = copy.deepcopy(model)
            with torch.no_grad():
                ema.weight.zero_()
                ema.bias.fill_(3.0)
            path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model.pt")  # not the cwd
            torch.save(model, path)
            saved = torch.load(path, weights_only=False)
    # The copies run their own weights, not the model's the harness times.
    with torch.no_grad():
        assert torch.equal(ema(x), torch.full((16, 1), 3.0)), "the EMA copy ran the model's weights"
        saved.bias.fill_(-5.0)
        assert not torch.equal(saved(x), model(x)), "the saved copy ran the model's weights"
    print("copies call their own weights")
"""


@pytest.mark.parametrize("mode", ["eager", "default"])
def test_a_copy_of_the_model_calls_its_own_weights(run_script: RunScript, write_script, mode: str) -> None:
    result = run_script(write_script(f"copied_{mode}.py", COPIED_MODEL), sets={"mode": mode},
                        protocol=MeasurementProtocol(run_to_end=True, max_measure_seconds=60.0,
                                                     max_measure_steps=100_000))
    assert_measured(result)
    assert "copies call their own weights" in full_log(result)


# --- torch-xla ----------------------------------------------------------------------------------------

XLA_LOOP = """
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    from torch.utils.data import DataLoader, TensorDataset

    syncs = 0
    _sync = torch_xla.sync

    def counting_sync(*args, **kwargs):
        global syncs
        syncs += 1
        return _sync(*args, **kwargs)

    torch_xla.sync = counting_sync  # what MpDeviceLoader calls to cut the graph
    device = torch_xla.device()
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(512, 16), torch.randint(0, 4, (512,))), batch_size=8,
                        drop_last=True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    steps = 0
    try:
        while True:
            for x, y in pl.MpDeviceLoader(loader, device):
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                xm.optimizer_step(optimizer)
                steps += 1
    finally:
        print(f"final: {steps} steps, {syncs} syncs", flush=True)
"""


def steps_and_syncs(result: TrialResult) -> tuple[int, int]:
    m = re.search(r"final: (\d+) steps, (\d+) syncs", full_log(result))
    assert m, result.log_tail
    return int(m.group(1)), int(m.group(2))


@pytest.fixture(scope="module")
def xla_loop(write_script) -> Path:
    return write_script("xla_loop.py", XLA_LOOP)


@pytest.fixture(scope="module")
def xla_trial(run_script: RunScript, xla_loop: Path) -> TrialResult:
    return run_script(xla_loop, target="xla")


def test_xla_loop_is_measured(xla_trial: TrialResult) -> None:
    assert_measured(xla_trial)
    assert xla_trial.plan.knobs.lazy_device
    assert xla_trial.measurement.samples_per_step == 8
    assert xla_trial.compile.graphs_compiled >= 1
    assert xla_trial.compile.compile_seconds is not None and xla_trial.compile.compile_seconds > 0
    assert len(xla_trial.losses) == 10 and all(0.5 < v < 3 for v in xla_trial.losses)
    steps, syncs = steps_and_syncs(xla_trial)
    assert steps > 20 and syncs >= steps  # one graph cut per step


def test_batches_per_execution_cuts_the_graph_every_second_step(
        run_script: RunScript, xla_loop: Path, xla_trial: TrialResult) -> None:
    result = run_script(xla_loop, target="xla", sets={"batches_per_execution": "2"})
    assert_measured(result)
    assert result.plan.knobs.batches_per_execution == 2
    steps, syncs = steps_and_syncs(result)
    # A converged trial stops the loop: on a busy machine that can be a dozen steps, enough to
    # tell one cut per step (syncs >= steps, as above) from one per two.
    assert steps >= 10
    assert syncs <= 0.6 * steps
    # Two steps traced into one graph make other graphs than one step does.
    assert result.compile.graphs_compiled > xla_trial.compile.graphs_compiled


MANUAL_SYNC = """
    import os

    import torch
    import torch_xla
    from torch.utils.data import DataLoader, TensorDataset

    print(f"XLA_FLAGS={os.environ.get('XLA_FLAGS')}", flush=True)
    device = torch_xla.device()
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(512, 16), torch.randint(0, 4, (512,))), batch_size=8,
                        drop_last=True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    while True:
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            torch_xla.sync()
            step += 1
            if step == 1:
                print(f"after step 1 the parameters are {next(model.parameters()).dtype}", flush=True)
"""


@pytest.fixture(scope="module")
def manual_sync_bf16_trial(run_script: RunScript, write_script) -> TrialResult:
    return run_script(write_script("manual_sync.py", MANUAL_SYNC), target="xla",
                      sets={"precision": "bf16_model", "backend_opt_level": "0"})


def test_manual_sync_xla_loop_is_measured(manual_sync_bf16_trial: TrialResult) -> None:
    result = manual_sync_bf16_trial
    assert_measured(result)
    assert result.measurement.samples_per_step == 8
    assert result.compile.graphs_compiled >= 1
    assert len(result.losses) == 10 and all(math.isfinite(v) for v in result.losses)


def test_bf16_model_casts_the_model(manual_sync_bf16_trial: TrialResult) -> None:
    assert manual_sync_bf16_trial.plan.knobs.model_dtype == "bfloat16"
    assert "after step 1 the parameters are torch.bfloat16" in full_log(manual_sync_bf16_trial)


def test_a_knob_at_its_neutral_value_needs_nothing_to_act_on(run_script: RunScript, write_script) -> None:
    """A loop that moves each batch to the device itself and syncs (no MpDeviceLoader) runs the same
    at batches_per_execution 1, the loader's own default: it is measured as that configuration,
    where 2, which such a loop cannot take, never reached it."""
    script = write_script("manual_sync.py", MANUAL_SYNC)
    one = run_script(script, target="xla", sets={"batches_per_execution": 1})
    assert_measured(one)
    assert one.idle_knobs == []
    two = run_script(script, target="xla", sets={"batches_per_execution": 2})
    assert [k.param for k in two.idle_knobs] == ["batches_per_execution"]


SETS_ITS_OWN_FLAGS = """
    import os

    os.environ["{variable}"] = "{value}"  # as the seeds' hand-tuned scripts do
    import torch
    import torch_xla

    device = torch_xla.device()
    model = torch.nn.Linear(16, 4).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    while True:
        optimizer.zero_grad()
        model(torch.randn(8, 16).to(device)).sum().backward()
        optimizer.step()
        torch_xla.sync()
"""


@pytest.mark.parametrize("target, sets, variable, value, knob", [
    ("xla", {"fast_math": True}, "XLA_FLAGS", "--xla_cpu_enable_fast_math=false", "fast_math"),
    # A contract for Neuron: setting the variable needs no Neuron device.
    ("neuron", {"optlevel": 3}, "NEURON_CC_FLAGS", "--model-type=transformer --optlevel 1", "optlevel"),
])
def test_a_script_that_sets_a_configured_variable_itself_measured_its_own(
        run_script: RunScript, write_script, target: str, sets: dict, variable: str, value: str, knob: str) -> None:
    script = write_script(f"own_{variable}.py", SETS_ITS_OWN_FLAGS.format(variable=variable, value=value))
    result = run_script(script, target=target, sets=sets)
    assert result.status == "ok", result.log_tail
    idle = {k.param: k.detail for k in result.idle_knobs}
    assert knob in idle, result.knobs
    assert f"the script set {variable} itself (own_{variable}.py:3)" in idle[knob]
    assert f"own_{variable}.py:3 set {variable} itself, replacing the configuration's value" in full_log(result)


def test_xla_flags_reach_the_trial_process(manual_sync_bf16_trial: TrialResult) -> None:
    m = re.search(r"^XLA_FLAGS=(.*)$", full_log(manual_sync_bf16_trial), re.MULTILINE)
    assert m, manual_sync_bf16_trial.log_tail
    # torch_xla adds defaults of its own (--xla_cpu_enable_fast_math=false) to what it was given.
    assert "--xla_backend_optimization_level=0" in m.group(1).split()
