"""The step clock's choice of what a step is, fed the boundaries a loop of each shape makes: no
real process, no torch."""

from __future__ import annotations

import threading

import pytest

from autotune.records import MeasurementProtocol, RuntimeKnobs, TrialPlan
from autotune.harness.timing.step_clock import StepClock, TrialComplete


class _Backends:
    def compiled_graphs(self) -> int:
        return 0

    def wait_device(self) -> None:
        pass


class _Trial:
    """The trial as the clock sees it: its loop runs on this thread, and its losses are finite."""

    def __init__(self) -> None:
        self.training_thread: threading.Thread | None = threading.current_thread()
        self.started_at: float | None = None

    def check_numerics(self) -> None:
        pass


def _clock() -> StepClock:
    return StepClock(MeasurementProtocol(run_to_end=True), _Trial(), _Backends())


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


def test_an_optimizer_with_a_closure_steps_once_for_all_its_evaluations() -> None:
    # LBFGS.step(closure) calls the model and backward() up to 20 times inside one step; quick
    # evaluations counted as steps had the estimate converge before the first step ended.
    clock = _clock()
    for _ in range(6):
        clock.optimizing = True  # the optimizer's step pre-hook
        _run(clock, [("forward", 7), ("backward", None)], 20)
        assert clock.source in (None, "optimizer") and clock.steps <= 5  # no evaluation was a step
        clock.optimizing = False  # its post-hook, which then tells the clock of the step
        clock.boundary("optimizer", None)
    assert clock.source == "optimizer"
    assert clock.steps == 6
    assert set(clock.sample_counts) == {7.0}


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


def test_an_evaluation_loader_under_no_grad_after_training_is_not_a_step() -> None:
    # Two epochs of 64-sample batches, each followed by a test pass of 1,000-sample batches taken
    # under torch.no_grad() (mnist_rnn, vae): the test batches are no steps.
    clock = _clock()
    for _ in range(2):
        for _ in range(6):
            clock.batch(64, grad_enabled=True)
            _run(clock, [("forward", 64), ("backward", None), ("optimizer", None)], 1)
        for _ in range(3):
            clock.batch(1000, grad_enabled=False)
            clock.boundary("forward", 1000)
    assert clock.source == "loader" and clock.steps == 12
    assert set(clock.sample_counts) == {64.0}


def test_a_forward_only_loop_under_no_grad_steps_at_its_loader() -> None:
    clock = _clock()
    for _ in range(5):
        clock.batch(32, grad_enabled=False)
        clock.boundary("forward", 32)
    assert (clock.source, clock.steps) == ("loader", 5)


def test_one_batch_taken_from_a_loader_then_many_optimizer_steps_steps_at_the_optimizer() -> None:
    # x, y = next(iter(loader)); then full-batch steps on it (mnist_forward_forward). A batch that
    # comes later (its test loader) does not take the steps back.
    clock = _clock()
    clock.batch(512, grad_enabled=True)
    _run(clock, [("forward", 512), ("forward", 512), ("backward", None), ("optimizer", None)], 10)
    clock.batch(256, grad_enabled=True)
    _run(clock, [("forward", 512), ("backward", None), ("optimizer", None)], 3)
    assert clock.source == "optimizer" and clock.steps == 12
    assert set(clock.sample_counts) == {512.0}


def test_gradient_accumulation_over_batches_keeps_the_loader_as_the_step() -> None:
    clock = _clock()
    _run(clock, [("loader", 8), ("forward", 8), ("backward", None), ("loader", 8), ("forward", 8),
                 ("backward", None), ("optimizer", None)], 6)
    assert clock.source == "loader" and clock.steps == 12


class _Compiler(_Backends):
    def __init__(self) -> None:
        self.graphs = 0

    def compiled_graphs(self) -> int:
        return self.graphs


def _timed_clock(monkeypatch, protocol: MeasurementProtocol | None = None,
                 plan: TrialPlan | None = None) -> tuple[StepClock, _Compiler, list[float]]:
    """A clock on a fake time (``now[0]``) and a fake compiler, by default with a landscape's short cap."""
    from autotune.harness.timing import step_clock

    now = [0.0]
    monkeypatch.setattr(step_clock.time, "perf_counter", lambda: now[0])
    protocol = protocol or MeasurementProtocol(run_to_end=True, max_measure_seconds=5.0, min_windows=4, quiet_steps=2)
    plan = plan or TrialPlan(target="xla", params={})
    compiler = _Compiler()
    return StepClock(protocol, _Trial(), compiler, lazy=plan.knobs.lazy_device), compiler, now


def _step(clock: StepClock, compiler: _Compiler, now: list[float], seconds: float, compiles: int = 0) -> None:
    compiler.graphs += compiles
    now[0] += seconds
    clock.boundary("loader", 32)


def test_a_compile_just_after_warm_up_does_not_become_the_measurement(monkeypatch) -> None:
    # Under batches_per_execution, XLA compiles one more graph a few steps after warm-up: one
    # 30 s window. The cap (5 s) counts again from its end, and the steps after it are measured.
    clock, compiler, now = _timed_clock(monkeypatch)
    _step(clock, compiler, now, 10.0, compiles=1)
    for _ in range(3):
        _step(clock, compiler, now, 0.1)
    assert not clock.warming
    _step(clock, compiler, now, 30.0, compiles=1)
    assert not clock.done, "the cap was counted from the compile"
    while not clock.done:
        _step(clock, compiler, now, 0.1)
    m = clock.measurement()
    assert m is not None and m.throughput == pytest.approx(320.0, rel=0.01)
    assert clock.measuring.cap_restarts == 1


def test_a_recompilation_storm_still_ends_the_measurement(monkeypatch) -> None:
    clock, compiler, now = _timed_clock(monkeypatch)
    for _ in range(3):
        _step(clock, compiler, now, 0.1)
    steps = 0
    while not clock.done:
        _step(clock, compiler, now, 6.0, compiles=1)
        steps += 1
        assert steps < 10
    assert clock.measuring.cap_restarts == 2 and clock.measurement() is not None


def test_a_compile_that_takes_nearly_the_whole_cap_does_not_become_the_measurement(monkeypatch) -> None:
    # Seen recording the xla space (batch 16, batches_per_execution 2): a 4.9 s compile after
    # warm-up did not reach the 5 s cap, the step after it did, and the trial reported the
    # compile's seconds over 6 steps (18.9 samples/s where its steps ran at about 400). The cap
    # counts again from the end of the window that compiled, even when a later window hits it.
    clock, compiler, now = _timed_clock(monkeypatch)
    _step(clock, compiler, now, 10.0, compiles=1)
    for _ in range(3):
        _step(clock, compiler, now, 0.1)
    assert not clock.warming
    _step(clock, compiler, now, 4.6, compiles=1)  # the window closes with the cap not yet reached
    assert not clock.done and clock.windows[-1].compiles
    _step(clock, compiler, now, 0.3)  # this quiet window reaches it
    assert not clock.done, "the cap was counted from the end of the compile"
    while not clock.done:
        _step(clock, compiler, now, 0.1)
    m = clock.measurement()
    assert m is not None and m.throughput == pytest.approx(320.0, rel=0.01)
    assert clock.measuring.cap_restarts == 1


def test_an_evaluation_between_epochs_is_not_in_the_measurement(monkeypatch) -> None:
    # Eight training steps of 0.1 s (32 samples), then a test pass of 2 s under no_grad, epoch
    # after epoch: the loop trains at 320 samples/s, which is what the script's own progress lines
    # say; with the test passes in its windows the trial said 20% less.
    clock, compiler, now = _timed_clock(monkeypatch)

    def train(steps: int) -> None:
        for _ in range(steps):
            clock.batch(32, grad_enabled=True)
            now[0] += 0.1
            clock.boundary("optimizer", None)

    def evaluate() -> None:
        for _ in range(4):
            clock.batch(1000, grad_enabled=False)
            now[0] += 0.5

    train(8)
    started = clock.measuring.started
    assert not clock.warming and started is not None
    evaluate()
    train(1)
    assert clock.measuring.started == pytest.approx(started + 2.0), "the time cap counts training, not testing"
    epochs = 1
    while not clock.done:
        train(8)
        evaluate()
        epochs += 1
        assert epochs < 20
    m = clock.measurement()
    assert m is not None and m.throughput == pytest.approx(320.0, rel=1e-6)
    assert m.samples_per_step == 32 and m.step_time_median == pytest.approx(0.1)


def test_loading_the_evaluations_first_batch_is_not_in_the_measurement(monkeypatch) -> None:
    # The corpus LSTM: a training batch takes 6 ms to load and 94 ms to train on, the test pass's
    # first batch (256 samples) 24 ms to load. The window ends where the training loader ran out,
    # not once the test batch has come, and opens where the loop asks for the next epoch's first
    # batch, not once it has come: 320 samples/s, as the script's own lines say. Ending and
    # opening the windows after the loads read 313.
    clock, compiler, now = _timed_clock(monkeypatch)

    def load(grad_enabled: bool, samples: float, seconds: float) -> None:
        asked = now[0]
        now[0] += seconds
        clock.batch(samples, grad_enabled=grad_enabled, asked_at=asked)

    def epoch() -> None:
        for _ in range(8):
            load(True, 32, 0.006)
            now[0] += 0.094
            clock.boundary("optimizer", None)
        clock.exhausted(now[0])
        load(False, 256, 0.024)
        now[0] += 0.5

    epochs = 0
    while not clock.done:
        epoch()
        epochs += 1
        assert epochs < 40
    m = clock.measurement()
    assert m is not None and m.throughput == pytest.approx(320.0, rel=1e-6)
    assert m.samples_per_step == 32


def test_an_evaluation_with_no_end_of_the_loader_ends_the_window_where_its_batch_was_asked_for(monkeypatch) -> None:
    # A loop that breaks out of its training loader (a step limit per epoch) never exhausts it.
    clock, compiler, now = _timed_clock(monkeypatch)
    epochs = 0
    while not clock.done:
        for _ in range(8):
            asked = now[0]
            now[0] += 0.006
            clock.batch(32, grad_enabled=True, asked_at=asked)
            now[0] += 0.094
            clock.boundary("optimizer", None)
        asked = now[0]
        now[0] += 0.024
        clock.batch(256, grad_enabled=False, asked_at=asked)
        now[0] += 0.5
        epochs += 1
        assert epochs < 40
    m = clock.measurement()
    assert m is not None and m.throughput == pytest.approx(320.0, rel=1e-6)


class _Optimizer:
    """Stands for an optimizer the script made: the clock only holds it weakly."""


def _phased_clock(monkeypatch, *, lazy: bool = False, cap: float = 30.0) -> tuple[StepClock, list[float]]:
    plan = TrialPlan(target="xla" if lazy else "inductor", params={}, knobs=RuntimeKnobs(lazy_device=lazy))
    clock, _compiler, now = _timed_clock(monkeypatch, MeasurementProtocol(max_measure_seconds=cap), plan)
    return clock, now


def _train(clock: StepClock, now: list[float], steps: int, seconds: float) -> None:
    for _ in range(steps):
        now[0] += seconds
        clock.on_sync()  # a lazy device's graph cut at each step (no-op otherwise)
        clock.boundary("optimizer", 512)


def test_a_run_whose_later_layer_trains_with_its_own_optimizer_is_measured_over_both(monkeypatch) -> None:
    # Forward-forward MNIST: 300 full-batch steps of layer 0 (20 ms each), then 300 of layer 1
    # (10 ms) with the second optimizer, made up front. Stopped in layer 0, the trial said
    # 25,600 samples/s of a run that goes at 2 x 512 / 30 ms = 34,133.
    clock, now = _phased_clock(monkeypatch)
    second = _Optimizer()
    clock.unstepped.add(second)
    _train(clock, now, 300, 0.020)
    assert not clock.done, "an optimizer yet to step: the run has a phase to come"
    clock.unstepped.discard(second)
    clock.new_phase()
    _train(clock, now, 300, 0.010)
    assert not clock.done, "a run with phases is measured to its end"
    now[0] += 0.5  # the script's predictions after training, no step
    clock.finish()
    m = clock.measurement()
    assert m is not None and m.phases == 2 and m.converged
    assert m.throughput == pytest.approx(2 * 512 / 0.030, rel=0.01)
    assert m.ci95_low < m.throughput < m.ci95_high


def test_without_an_optimizer_to_come_the_first_phase_converges_and_stops(monkeypatch) -> None:
    clock, now = _phased_clock(monkeypatch)
    with pytest.raises(TrialComplete):
        _train(clock, now, 300, 0.020)
    m = clock.measurement()
    assert m is not None and m.phases == 1 and m.converged
    assert m.throughput == pytest.approx(512 / 0.020, rel=1e-6)


def test_optimizers_that_step_in_turn_are_one_phase_and_the_trial_stops(monkeypatch) -> None:
    # A generator that stepped twice in a row took over as the counted optimizer, then the
    # discriminator (which had handed over) stepped again: one loop, stopped once converged.
    clock, now = _phased_clock(monkeypatch)
    _train(clock, now, 10, 0.020)
    clock.new_phase()
    _train(clock, now, 1, 0.020)
    clock.interleave()  # the harness: the first optimizer stepped again
    with pytest.raises(TrialComplete):
        _train(clock, now, 300, 0.020)
    assert clock.converged and clock.measurement().phases == 1


def test_a_later_phase_stopped_at_the_cap_on_a_lazy_device_keeps_its_last_window(monkeypatch) -> None:
    # On a lazy device the last window is stretched to when the device has finished: still the
    # later phase's, not the first's.
    clock, now = _phased_clock(monkeypatch, lazy=True, cap=3.0)
    second = _Optimizer()
    clock.unstepped.add(second)
    _train(clock, now, 100, 0.020)
    clock.unstepped.discard(second)
    clock.new_phase()
    with pytest.raises(TrialComplete):
        _train(clock, now, 1000, 0.010)
    assert clock.windows[-1].phase == 1
    m = clock.measurement()
    assert m is not None and m.phases == 2


@pytest.mark.parametrize("min_seconds", [0.0, 10.0])
def test_a_run_on_a_noisy_host_measures_the_seconds_asked_for_past_the_step_cap(monkeypatch, min_seconds) -> None:
    # A steady loop of 5 ms steps converges in a few windows. On a host whose runs vary from one
    # to the next the study asks each run for 10 s of steady windows: 1,000 steps (the step cap)
    # are only 5 s, so the step cap gives way; the seconds cap (30 s) would not.
    protocol = MeasurementProtocol(min_measure_seconds=min_seconds)
    clock, now = _timed_clock(monkeypatch, protocol, TrialPlan(target="inductor", params={}))[::2]
    with pytest.raises(TrialComplete):
        _train(clock, now, 10_000, 0.005)
    m = clock.measurement()
    assert m is not None and m.converged
    measured = m.steps_measured * 0.005
    if min_seconds:
        assert measured >= min_seconds and m.steps_measured > protocol.max_measure_steps
    else:
        assert measured < 3.0
