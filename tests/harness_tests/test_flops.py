"""The model's FLOPs per sample, counted on shapes alone: the figures by hand, the model untouched, and
the count of a real trial with the device its model ran on."""

from __future__ import annotations

from pathlib import Path

import torch

from autotune.records import MeasurementProtocol
from autotune.trial import prepare_trial, run_prepared
from autotune.harness.flops import model_flops_per_sample
from autotune.workers.launcher import TrialLimits

# Per sample, a Linear(i, o) forward is 2*i*o FLOPs; its backward as a training loop runs it is the
# weight's gradient (2*i*o) plus the gradient of its input where a layer before it needs that (2*i*o).
FORWARD = 2 * (64 * 128 + 128 * 10)
TRAINING = 2 * FORWARD + 2 * 128 * 10


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


def test_a_training_step_counts_forward_and_backward_and_leaves_the_model_as_it_was() -> None:
    model = mlp()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    x = torch.randn(32, 64)
    assert model_flops_per_sample(model, (x,), {}, 32) == TRAINING
    assert all(torch.equal(p, before[n]) and p.grad is None for n, p in model.named_parameters())


def test_inference_counts_the_forward_alone() -> None:
    with torch.no_grad():
        assert model_flops_per_sample(mlp(), (torch.randn(8, 64),), {}, 8) == FORWARD


def test_a_model_that_reads_its_data_is_not_counted() -> None:
    class Reads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(x) * float(x.sum().item() > 0)

    assert model_flops_per_sample(Reads(), (torch.randn(2, 4),), {}, 2) is None


def test_batch_norm_running_statistics_do_not_move() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    mean = model[1].running_mean.clone()
    assert model_flops_per_sample(model, (torch.randn(8, 4),), {}, 8) is not None
    assert torch.equal(model[1].running_mean, mean) and model[1].num_batches_tracked.item() == 0


def test_a_trial_of_a_cpu_training_loop_counts_its_model_and_the_device_it_ran_on(tmp_path) -> None:
    """The same MLP trained by a real script in a real trial process, under autotune's harness."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "tiny_train.py"
    prepared = prepare_trial(script, target="inductor", sets={"batch_size": 16, "mode": "eager"})
    result = run_prepared(prepared, ["--steps", "200"], trial_dir=tmp_path / "trial", limits=TrialLimits(timeout_s=120),
                          protocol=MeasurementProtocol(max_measure_seconds=1.0))
    assert result.ok, result.failure
    m = result.measurement
    assert m.flops_per_sample == TRAINING and m.model_device == "cpu"
    assert m.flops_per_second == TRAINING * m.throughput
