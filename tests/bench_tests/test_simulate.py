"""What a simulated study reports as its best: the study's own rule over the runs it read."""

from __future__ import annotations

from bench.lib.simulate import Step, Trace


def _run(key: str, value: float, figure: float) -> Step:
    return Step(key, value, 10.0, 0.0, figure)


def test_one_lucky_run_does_not_lead_a_configuration_measured_three_times_unless_beyond_its_luck() -> None:
    # "a" is raced (three runs, 80 to 120); "b" read 106 once, "d" and "e" 90 and 95: no further
    # apart than one configuration's runs, so the study keeps "a" as its best, as its table and
    # best.json say. Read as the highest mean, "b".
    steps = [_run("a", 1.0, 100.0), _run("b", 2.0, 106.0), _run("a", 1.0, 80.0), _run("a", 1.0, 120.0),
             _run("d", 4.0, 90.0), _run("e", 5.0, 95.0)]
    assert Trace(steps).chosen() == 1.0
    # Three times the others: the one run leads.
    assert Trace(steps + [_run("c", 3.0, 300.0)]).chosen() == 3.0
    # Nothing measured twice: the highest run.
    assert Trace(steps[:2]).chosen() == 2.0
