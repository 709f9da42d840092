"""bench/search_bench.py --confirm reports the configuration the study would: the study's own
standing (:func:`autotune.repeats.racing.standing`), not a rule of the benchmark's."""

from __future__ import annotations

from autotune.landscapes.landscape import ConfigRecord
from bench.search_bench import _reported


def _truth(*keys: str) -> dict[str, ConfigRecord]:
    return {k: ConfigRecord(i, {"n": i}, "ok", throughput=100.0, ci95_low=98.0, ci95_high=102.0)
            for i, k in enumerate(keys)}


def test_two_configurations_of_one_mean_go_to_the_one_measured_first() -> None:
    # a read 110 then 100, b 100 then 110: one mean over two runs. The study ranks a tie by trial
    # number (autotune best reports the earlier one): b, measured first, not a, the higher first run.
    ranked = [("a", 110.0), ("b", 100.0)]
    assert _reported(ranked, {"a": 100.0, "b": 110.0}, 2, _truth("a", "b"), order=["b", "a"]) == "b"
    assert _reported(ranked, {"a": 100.0, "b": 110.0}, 2, _truth("a", "b"), order=["a", "b"]) == "a"


def test_a_lucky_single_run_does_not_beat_a_configuration_measured_twice() -> None:
    # c's one run (104) is above b's mean (102.5), by less than its luck: a's and b's repeats
    # show runs 10% apart, and the configurations lie within 15% of each other.
    ranked = [("a", 110.0), ("b", 105.0), ("c", 104.0), ("d", 85.0), ("e", 80.0)]
    keys = [k for k, _ in ranked]
    assert _reported(ranked, {"a": 90.0, "b": 100.0}, 2, _truth(*keys), order=keys) == "b"


def test_without_re_measuring_the_best_single_run_is_reported() -> None:
    ranked = [("a", 110.0), ("b", 105.0)]
    assert _reported(ranked, {}, 0, _truth("a", "b"), order=["b", "a"]) == "a"
