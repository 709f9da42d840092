"""A script that ends before a noisy host's seconds are measured runs again, and the run is what
its processes measured together."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from autotune.measurement.noise import RUN_SECONDS, RunNoise, Runs
from autotune.measurement.windows import t975
from autotune.records import Measurement, MeasurementProtocol, TrialResult
from autotune.repeats import pruning
from autotune.workers.run_parts import MAX_PROCESSES, pooled, reachable, short

RunScript = Callable[..., TrialResult]  # the run_script fixture



def measured(throughput: float, seconds: float, rel: float = 0.01, *, pruned: bool = False) -> Measurement:
    steps = round(seconds * throughput / 4)
    return Measurement(throughput=throughput, ci95_low=throughput * (1 - rel), ci95_high=throughput * (1 + rel),
                       step_time_median=4 / throughput, step_time_p90=4 / throughput, samples_per_step=4,
                       steps_measured=steps, windows=5, converged=False, warmup_steps=3, warmup_seconds=1.0,
                       pruned=pruned)


def test_a_run_is_short_only_where_the_script_ended_before_the_seconds_asked() -> None:
    noisy = MeasurementProtocol(min_measure_seconds=10.0)
    assert short(measured(100.0, 3.0), noisy, stopped_early=False)
    assert not short(measured(100.0, 12.0), noisy, stopped_early=False)
    assert not short(measured(100.0, 3.0), noisy, stopped_early=True)  # the harness stopped it: capped
    assert not short(measured(100.0, 3.0, pruned=True), noisy, stopped_early=False)
    assert not short(measured(100.0, 3.0), MeasurementProtocol(), stopped_early=False)  # a quiet host
    assert not short(None, noisy, stopped_early=False)
    # Five processes of 3 s reach 10 s; five of a second do not, and the script runs once.
    assert reachable(measured(100.0, 3.0), noisy) and not reachable(measured(100.0, 1.0), noisy)


def test_processes_pool_their_samples_and_seconds_and_their_spread_widens_the_interval() -> None:
    protocol = MeasurementProtocol(min_measure_seconds=10.0)
    parts = [measured(100.0, 4.0), measured(200.0, 2.0), measured(100.0, 4.0)]
    m = pooled(parts, protocol)
    assert m.processes == 3
    assert m.seconds == pytest.approx(10.0, rel=0.01)
    assert m.throughput == pytest.approx((400 + 400 + 400) / 10, rel=0.01)  # not the mean of the figures (133)
    assert m.steps_measured == sum(p.steps_measured for p in parts)
    # Each process's own interval is +-1%; the processes read 100 and 200: the mean of three such
    # runs is uncertain by far more, and the interval says so.
    assert m.ci95_high / m.throughput - 1 > 0.5
    same = pooled([measured(100.0, 4.0), measured(100.0, 4.0)], protocol)
    assert same.throughput == pytest.approx(100.0, rel=0.01)
    assert same.ci95_high / same.throughput - 1 == pytest.approx(0.01 * math.sqrt(2) / 2, rel=0.05)
    assert pooled(parts[:1], protocol) == parts[0]


def test_two_processes_weigh_their_spread_with_the_noise_the_study_measured() -> None:
    # A neighbour slowed one of two processes by half. Their spread alone is one degree of freedom
    # (t = 12.7: an interval of x80 either way, which a table would print as 6.9 .. 69,123.0): too
    # few to give an interval, so the run keeps its processes' own.
    parts = [measured(100.0, 5.0), measured(50.0, 5.0)]
    alone = pooled(parts, MeasurementProtocol(min_measure_seconds=10.0))
    assert alone.ci95_high / alone.throughput < 1.05
    # The study measured runs of 10 s here varying by sigma 0.15 over 12 degrees of freedom: with
    # those, the two processes' mean (10 s in all) is uncertain by tens of percent.
    noise = RunNoise(squares=0.15 ** 2 * 12, df=12)
    protocol = pruning.under_noise(MeasurementProtocol(), noise)
    assert (protocol.noise_squares, protocol.noise_df) == (noise.squares, noise.df)
    weighed = pooled(parts, protocol)
    assert weighed.throughput == alone.throughput
    seconds = tuple(m.seconds for m in parts)
    combined = RunNoise.of([Runs((100.0, 50.0), seconds=seconds)]) + noise
    # A run of 10 s made of two processes is as uncertain as one process that measured that long.
    expected = math.expm1(t975(combined.df) * (combined.sigma or 0) * math.sqrt(RUN_SECONDS / sum(seconds)))
    assert weighed.ci95_high / weighed.throughput - 1 == pytest.approx(expected, rel=1e-6)
    assert 0.2 < expected < 0.6


STEPS = """
    import os
    import time
    from pathlib import Path

    import autotune

    # Each process of a run counts itself, and the second and later step at half the first's speed.
    counter = Path({counter!r})
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    pause = 0.01 if n == 1 else 0.02
    for _ in range({steps}):
        time.sleep(pause)
        autotune.step(4)
"""


@pytest.mark.timeout(240)
def test_a_script_that_ends_too_soon_for_a_noisy_host_runs_again_and_its_processes_are_pooled(
        run_script: RunScript, write_script, tmp_path: Path) -> None:
    counter = tmp_path / "processes"
    script = write_script("ends_soon.py", STEPS.format(counter=str(counter), steps=60))
    # 60 steps of 10 ms: well under a second measured per process, against 1.5 s asked.
    protocol = MeasurementProtocol(min_measure_seconds=1.5, max_measure_seconds=30.0, min_window_seconds=0.1)
    result = run_script(script, protocol=protocol)
    assert result.ok, (result.failure, result.log_tail)
    m = result.measurement
    assert m is not None and 1 < m.processes <= MAX_PROCESSES, m
    assert int(counter.read_text()) == m.processes
    assert m.seconds >= 1.5 or m.processes == MAX_PROCESSES
    # The later processes run at half the first's speed: the pooled figure lies between the two,
    # nearer the slower, which measured longer.
    assert 4 / 0.02 * 0.7 < m.throughput < 4 / 0.01 * 0.8, m.throughput
    assert any(f"measured over {m.processes} processes" in n for n in result.notes), result.notes
    assert (Path(result.log_path or "").parent / "processes" / "2" / "trial.log").exists()


@pytest.mark.timeout(120)
def test_a_script_too_short_for_five_processes_to_reach_the_seconds_asked_runs_once(
        run_script: RunScript, write_script, tmp_path: Path) -> None:
    counter = tmp_path / "processes"
    script = write_script("ends_soon.py", STEPS.format(counter=str(counter), steps=60))
    result = run_script(script, protocol=MeasurementProtocol(min_measure_seconds=30.0, max_measure_seconds=30.0,
                                                             min_window_seconds=0.1))
    assert result.ok, (result.failure, result.log_tail)
    assert result.measurement is not None and result.measurement.processes == 1
    assert counter.read_text() == "1"
    assert any("would not measure the 30 s asked, so it ran once" in n for n in result.notes), result.notes


@pytest.mark.timeout(120)
def test_on_a_quiet_host_a_script_that_ends_soon_runs_once(run_script: RunScript, write_script,
                                                           tmp_path: Path) -> None:
    counter = tmp_path / "processes"
    script = write_script("ends_soon.py", STEPS.format(counter=str(counter), steps=60))
    result = run_script(script, protocol=MeasurementProtocol(max_measure_seconds=30.0, min_window_seconds=0.1))
    assert result.ok, (result.failure, result.log_tail)
    assert result.measurement is not None and result.measurement.processes == 1
    assert counter.read_text() == "1"
