"""What a simulated study reports as its best: the study's own rule over the runs it read."""

from __future__ import annotations

from bench.lib.simulate import Step, Trace


def _run(key: str, value: float, figure: float) -> Step:
    return Step(key, value, 10.0, 0.0, figure)


def test_one_lucky_run_does_not_lead_a_configuration_measured_three_times_unless_beyond_the_noise() -> None:
    # "a" is raced (three runs, about 100); "b" read 106 once: within the noise of a's runs, so the
    # study keeps "a" as its best, as its table and best.json say. Read as the highest mean, "b".
    steps = [_run("a", 1.0, 100.0), _run("b", 2.0, 106.0), _run("a", 1.0, 96.0), _run("a", 1.0, 104.0)]
    assert Trace(steps).chosen() == 1.0
    # Beyond the noise, the one run leads.
    assert Trace(steps + [_run("c", 3.0, 300.0)]).chosen() == 3.0
    # Nothing measured twice: the highest run.
    assert Trace(steps[:2]).chosen() == 2.0
