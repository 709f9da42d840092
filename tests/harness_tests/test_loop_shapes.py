"""Loops as upstream scripts write them (pytorch/examples, torch-xla's tests, benchmarks), run
unmodified in real trials: each is measured, one step per iteration of its loop, with the samples
of its batch, whether or not it has a DataLoader, an optimizer, a graph cut of its own or one model.

Each script runs to its end here (``run_to_end``, no cap it can reach), so that the steps the
harness counted can be compared with the iterations the script ran.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.records import MeasurementProtocol, TrialResult

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
RunScript = Callable[..., TrialResult]  # the run_script fixture
TO_THE_END = MeasurementProtocol(run_to_end=True, max_measure_seconds=120.0, max_measure_steps=1_000_000)


def steps_seen(result: TrialResult) -> int:
    assert result.log_path is not None
    return json.loads((Path(result.log_path).parent / "report.json").read_text())["steps_seen"]


def measured(result: TrialResult, samples: float) -> None:
    assert result.ok, f"{result.failure}\n{result.log_tail}"
    assert result.measurement is not None and result.measurement.throughput > 0
    assert result.measurement.samples_per_step == pytest.approx(samples)


def test_hand_written_weight_updates_without_a_loader(run_script: RunScript) -> None:
    """word_language_model: ``p.data.add_(p.grad, alpha=-lr)``, the corpus sliced per step, an
    evaluation at batch 10 after each epoch that must count neither as steps nor as samples."""
    result = run_script(SCRIPTS / "manual_sgd_lstm.py", args=["--batch_size", "8", "--epochs", "3"],
                        protocol=TO_THE_END)
    measured(result, 8)
    batches = len(range(0, 20_000 // 8 - 1, 16))
    assert steps_seen(result) == 3 * batches


def test_a_gan_step_is_one_iteration_of_two_optimizers(run_script: RunScript) -> None:
    result = run_script(SCRIPTS / "gan_two_optimizers.py", args=["--batchSize", "64", "--niter", "3"],
                        protocol=TO_THE_END)
    measured(result, 64)
    assert steps_seen(result) == 3 * (4096 // 64)


def test_forward_only_on_random_inputs_made_once(run_script: RunScript) -> None:
    result = run_script(SCRIPTS / "forward_random.py", args=["-b", "4", "--iters", "800"], protocol=TO_THE_END)
    measured(result, 4)
    assert steps_seen(result) == 10 + 800  # the script's own warm-up calls are steps too


def test_a_loop_that_slices_its_tensors_by_its_own_batch_size(run_script: RunScript) -> None:
    result = run_script(SCRIPTS / "sliced_batches.py", args=["--batch_size", "64", "--epochs", "4"],
                        protocol=TO_THE_END)
    measured(result, 64)
    assert steps_seen(result) == 4 * (4096 // 64)


def test_an_xla_step_wrapped_in_torch_xla_compile(run_script: RunScript) -> None:
    """torch_xla.compile cuts the graph itself: without its cuts no window could end."""
    result = run_script(SCRIPTS / "xla_compiled_step.py", target="xla", args=["--num_steps", "400"],
                        protocol=TO_THE_END)
    measured(result, 16)
    assert steps_seen(result) == 400


def test_an_exit_code_after_the_measurement_is_a_note_not_a_failure(run_script: RunScript) -> None:
    result = run_script(SCRIPTS / "below_target.py", args=["--num_steps", "600"], protocol=TO_THE_END)
    measured(result, 32)
    assert result.failure is None
    (note,) = result.notes
    assert "exited with code 1 after it was measured" in note
    assert "is below target" in note  # the script's last lines say why


def test_an_exit_code_before_any_measurement_is_still_a_failure(run_script: RunScript) -> None:
    result = run_script(SCRIPTS / "below_target.py", args=["--num_steps", "2"], protocol=TO_THE_END)
    assert not result.ok and result.failure is not None
    assert result.failure.exit_code == 1 and result.notes == []


def test_a_net_trained_layer_by_layer_is_measured_over_every_layer(run_script: RunScript) -> None:
    """Each layer trains with an optimizer of its own, made up front; the second runs about three
    times as fast as the first. Stopped once the first layer's figure converged, the trial said
    what the first layer runs at, not the run (0.83 of forward-forward MNIST's own figure)."""
    result = run_script(SCRIPTS / "layer_by_layer.py", args=["--steps", "600"],
                        protocol=MeasurementProtocol(max_measure_seconds=20.0))
    measured(result, 256)
    assert not result.stopped_early, "the trial ended the run before its last layer had trained"
    # Every step but the second layer's first, which the harness cannot yet tell from an
    # optimizer stepped in turn with the first.
    assert steps_seen(result) == 2 * 600 - 1
    assert result.measurement is not None and result.measurement.phases == 2
    assert result.log_path is not None
    printed = Path(result.log_path).read_text()
    first = float(printed.split("layer 0: ")[1].split()[0])
    whole = float(printed.split("whole run: ")[1].split()[0])
    assert whole > 1.2 * first  # the script itself: the second layer is much faster
    assert result.measurement.throughput > 1.15 * first

