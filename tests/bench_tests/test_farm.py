"""The compile farm (the study's own compile stage on a simulated clock) on tiny hand-made landscapes, where
every figure is worked out by hand."""

from __future__ import annotations

import pytest

from autotune.landscapes.landscape import ConfigRecord, Landscape
from bench.lib.farm import (
    ASSUMED_LOAD_FRACTION,
    compile_farm,
    compile_then_measure,
    neuron_jobs,
    simulate_study,
    study_order,
)


def _record(index: int, batch: int, *, num_workers: int = 0, compile_s: float = 10.0, rest_s: float = 1.0,
            failed: bool = False, cached: bool = False) -> ConfigRecord:
    params = {"batch_size": batch, "mode": "default", "num_workers": num_workers}
    if failed:  # died before measuring anything, as the xla landscape's crashes did
        return ConfigRecord(index, params, "failed", category="crash", wall_seconds=compile_s)
    return ConfigRecord(index, params, "ok", throughput=100.0, compile_seconds=compile_s,
                        wall_seconds=compile_s + rest_s, cache_hits=2 if cached else 0, cache_misses=0 if cached else 2)


def _landscape(*records: ConfigRecord, persists: bool = True) -> Landscape:
    return Landscape({"target": "inductor", "compile_cache_persists": persists}, list(records))


def _jobs(*records: ConfigRecord, load_fraction: float | None = 0.0):
    """Jobs at the recorded figures (compile 10 s, rest 1 s: the scale is 1)."""
    jobs, _ = neuron_jobs(_landscape(*records), compile_s=10.0, rest_s=1.0, load_fraction=load_fraction)
    return jobs


def test_four_configurations_today_and_on_the_farm():
    jobs = _jobs(*(_record(i, b) for i, b in enumerate((8, 16, 32, 64))))
    # Today: each of 2 slots compiles and measures two configurations, 11 s each.
    today = compile_then_measure(jobs, slots=2, cache_persists=True)
    assert today.wall_s == pytest.approx(22.0)
    assert today.busy == pytest.approx(1.0)
    assert today.measuring == pytest.approx(4 / 44)
    # 4 workers compile all four at once (0-10 s); the 2 slots measure two at a time: 10-11, 11-12.
    farm = compile_farm(jobs, slots=2, workers=4)
    assert farm.wall_s == pytest.approx(12.0)
    assert farm.measuring == farm.busy == pytest.approx(4 / 24)
    assert farm.compiles == 4 and farm.compile_s == pytest.approx(40.0)
    # 2 workers: two compile 0-10 and are measured 10-11 while the other two compile 10-20.
    assert compile_farm(jobs, slots=2, workers=2).wall_s == pytest.approx(21.0)
    assert simulate_study(jobs, 2, 0).wall_s == today.wall_s


def test_a_measure_job_pays_the_load():
    jobs = _jobs(*(_record(i, b) for i, b in enumerate((8, 16, 32, 64))), load_fraction=None)
    assert [j.load_s for j in jobs] == pytest.approx([10.0 * ASSUMED_LOAD_FRACTION] * 4)
    # Measured 10-11.5 and 11.5-13 on each slot.
    assert compile_farm(jobs, slots=2, workers=4).wall_s == pytest.approx(13.0)


def test_equal_graphs_compile_once():
    a, b, c = _record(0, 16), _record(1, 16, num_workers=1), _record(2, 32)
    jobs = _jobs(a, b, c, load_fraction=0.05)
    # As the study's compile stage does it: b's compile job waits on a's lock holding the second
    # worker, so c is handed over only when both end at 10 s, and compiles 10-20. One slot measures
    # each 1.5 s (a 0.5 s load, a 1 s rest): a 10-11.5, b 11.5-13, c 20-21.5.
    farm = compile_farm(jobs, slots=1, workers=2)
    assert farm.compiles == 2
    assert farm.wall_s == pytest.approx(21.5)
    # A third worker takes c at once: all three are compiled by 10 s and measured back to back.
    assert compile_farm(jobs, slots=1, workers=3).wall_s == pytest.approx(14.5)
    # Today: a compiles cold (0-11), b loads a's graphs from the cache (11-12.5), c compiles (12.5-23.5).
    today = compile_then_measure(jobs, slots=1, cache_persists=True)
    assert (today.compiles, today.wall_s) == (2, pytest.approx(23.5))
    # Without a cache read back across processes today's design compiles b again.
    assert compile_then_measure(jobs, slots=1, cache_persists=False).wall_s == pytest.approx(33.0)


def test_a_failed_compile_never_takes_a_slot():
    jobs = _jobs(_record(0, 8, failed=True), _record(1, 16))
    assert not jobs[0].ok and jobs[0].compile_s == pytest.approx(10.0) and jobs[0].rest_s == 0
    farm = compile_farm(jobs, slots=1, workers=2)
    assert farm.wall_s == pytest.approx(11.0)
    assert farm.busy_s == farm.measuring_s == pytest.approx(1.0)
    # Today the failure holds the slot for the 10 s it took to fail.
    today = compile_then_measure(jobs, slots=1, cache_persists=True)
    assert (today.wall_s, today.busy_s, today.measuring_s) == (pytest.approx(21.0), pytest.approx(21.0),
                                                               pytest.approx(1.0))


def test_a_twin_of_a_failed_compile_compiles_itself():
    jobs = _jobs(_record(0, 8, failed=True), _record(1, 8, num_workers=1))
    # The second waits on the first's compile (0-10), which fails: it then compiles itself (10-20).
    farm = compile_farm(jobs, slots=1, workers=2)
    assert (farm.compiles, farm.wall_s) == (2, pytest.approx(21.0))


def test_ahead_bounds_what_is_compiled_before_a_slot_takes_it():
    jobs = _jobs(_record(0, 8), _record(1, 16))
    # One configuration ahead: the second is admitted only when a slot takes the first (at 10 s).
    assert compile_farm(jobs, slots=1, workers=4, ahead=1).wall_s == pytest.approx(21.0)
    assert compile_farm(jobs, slots=1, workers=4).wall_s == pytest.approx(12.0)
    with pytest.raises(ValueError):
        compile_farm(jobs, slots=1, workers=0)


def test_neuron_scaling_keeps_relative_differences():
    jobs, scale = neuron_jobs(_landscape(_record(0, 8, compile_s=2.0, rest_s=1.0),
                                         _record(1, 16, compile_s=6.0, rest_s=3.0),
                                         _record(2, 32, compile_s=8.0, failed=True)))
    # Mean compile 4 s -> 600 s, mean rest 2 s -> 60 s; the failure's 8 s until it failed is a compile.
    assert (scale.compile_factor, scale.rest_factor, scale.load_source) == (150.0, 30.0, "assumed")
    assert [j.compile_s for j in jobs] == [300.0, 900.0, 1200.0]
    assert [j.rest_s for j in jobs] == [30.0, 90.0, 0.0]
    assert [j.load_s for j in jobs] == pytest.approx([15.0, 45.0, 0.0])


def test_the_load_is_the_recorded_warm_compile():
    jobs, scale = neuron_jobs(_landscape(_record(0, 8, compile_s=4.0), _record(1, 8, num_workers=1,
                                                                                compile_s=1.0, cached=True)))
    # Both are charged the cold compile of their graphs (4 s -> 600 s); a load is the warm one (1 s).
    assert (scale.compile_factor, scale.load_fraction, scale.load_source) == (150.0, 0.25, "recorded")
    assert [(j.compile_s, j.load_s) for j in jobs] == [(600.0, 150.0), (600.0, 150.0)]


def test_study_order_is_seeded_and_capped_at_the_landscape():
    jobs = _jobs(*(_record(i, b) for i, b in enumerate((8, 16, 32, 64))))
    assert sorted(j.key for j in study_order(jobs, 50, seed=3)) == sorted(j.key for j in jobs)
    assert study_order(jobs, 2, seed=3) == study_order(jobs, 2, seed=3)
    assert len(study_order(jobs, 2, seed=3)) == 2
