"""The step clock's choice of what a step is, fed the boundaries a loop of each shape makes: no
real process, no torch."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from autotune.records import MeasurementProtocol, TrialPlan
from autotune.workers.step_clock import StepClock


class _Backends:
    def compiled_graphs(self) -> int:
        return 0

    def wait_device(self) -> None:
        pass


def _clock() -> StepClock:
    protocol = MeasurementProtocol(run_to_end=True)
    spec = SimpleNamespace(protocol=protocol, plan=TrialPlan(target="inductor", params={}), ranks_dir=None)
    runtime = SimpleNamespace(spec=spec, is_rank=False, spawned=False, training_thread=threading.current_thread(),
                              backends=_Backends(), started_at=None, check_numerics=lambda: None)
    return StepClock(runtime)  # type: ignore[arg-type]


def _run(clock: StepClock, iteration: list[tuple[str, float | None]], times: int) -> None:
    for _ in range(times):
        for source, samples in iteration:
            clock.boundary(source, samples)


def test_a_gan_iteration_is_one_step_whose_samples_are_the_models_input() -> None:
    # netD(real), backward, netD(fake), backward, optimizerD.step(), netD(fake), backward, and
    # optimizerG.step(), which the harness does not pass on (another optimizer's parameters).
    clock = _clock()
    gan = [("forward", 32), ("backward", None), ("forward", 32), ("backward", None), ("optimizer", None),
           ("forward", 32), ("backward", None)]
    _run(clock, gan, 10)
    assert clock.source == "optimizer"
    assert clock.steps == 10
    assert set(clock.sample_counts) == {32.0}


def test_hand_written_weight_updates_step_at_backward_and_an_evaluation_is_not_a_step() -> None:
    clock = _clock()
    for _ in range(3):  # epochs: training steps, then an evaluation at another batch size
        _run(clock, [("forward", 20), ("backward", None)], 5)
        _run(clock, [("forward", 10)], 4)
    assert clock.source == "backward"
    assert clock.steps == 15
    assert set(clock.sample_counts) == {20.0}


def test_a_forward_only_loop_steps_at_each_call_of_the_model() -> None:
    clock = _clock()
    _run(clock, [("forward", 16)], 12)
    assert (clock.source, clock.steps, set(clock.sample_counts)) == ("forward", 12, {16.0})


@pytest.mark.parametrize("late", ["optimizer", "loader"])
def test_a_loop_known_first_by_backward_steps_at_its_optimizer_or_loader(late: str) -> None:
    clock = _clock()
    clock.boundary("backward", None)
    _run(clock, [(late, 8 if late == "loader" else None), ("backward", None)], 6)
    assert clock.source == late and clock.steps == 6


def test_gradient_accumulation_steps_at_the_optimizer_after_warm_up() -> None:
    clock = _clock()
    _run(clock, [("forward", 4), ("backward", None)], 8)  # past warm-up on backward() alone
    assert not clock.warming
    _run(clock, [("forward", 4), ("backward", None)] * 7 + [("forward", 4), ("backward", None), ("optimizer", None)], 3)
    assert clock.source == "optimizer" and clock.steps == 3


def test_a_loader_seen_after_measuring_on_optimizer_steps_is_not_a_step() -> None:
    clock = _clock()
    _run(clock, [("forward", 8), ("backward", None), ("optimizer", None)], 6)
    assert not clock.warming
    clock.boundary("loader", 100)  # an evaluation loader between epochs
    assert clock.source == "optimizer" and clock.steps == 6
