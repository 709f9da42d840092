"""The between-run noise model: pooled spread, intervals over runs, and telling two apart."""

import math
import random
import statistics

import pytest

from autotune.measurement.noise import RunNoise, Runs, ahead, margin


def test_the_spread_is_pooled_over_configurations_on_the_logarithms():
    noise = RunNoise.of([[100.0, 110.0, 90.0], [1000.0, 1100.0, 900.0], [555.0]])
    assert noise.df == 4  # (3 - 1) + (3 - 1); a configuration run once adds nothing
    logs = [math.log(v) for v in (100.0, 110.0, 90.0)]
    one = sum((x - statistics.fmean(logs)) ** 2 for x in logs)
    assert math.isclose(noise.squares, 2 * one)  # the same relative spread at ten times the speed
    assert RunNoise.of([[7.0]]).sigma is None and RunNoise().spread is None


def test_an_earlier_estimate_weighs_as_a_few_repeats_at_most():
    old = RunNoise(squares=0.5, df=50)
    assert old.weighed_as(6).df == 6 and math.isclose(old.weighed_as(6).sigma or 0, old.sigma or 0)
    assert (old.weighed_as(6) + RunNoise(0.01, 2)).df == 8


def test_the_interval_over_runs_covers_the_mean_of_a_repeat_about_95_percent_of_the_time():
    rng = random.Random(7)
    sigma, covered, tries = 0.08, 0, 2000
    for _ in range(tries):
        repeats = [[math.exp(rng.gauss(0, sigma)) for _ in range(3)] for _ in range(3)]
        noise = RunNoise.of(repeats)
        run = 1000 * math.exp(rng.gauss(0, sigma))
        # Its own interval says +-1%: one process measured well; the next reads elsewhere.
        fig = Runs((run,), (0.01,)).figure(noise)
        others = statistics.fmean(1000 * math.exp(rng.gauss(0, sigma)) for _ in range(4))
        covered += fig.low <= others <= fig.high
    assert 0.90 <= covered / tries <= 0.995


def test_more_runs_narrow_the_interval_and_a_wide_run_widens_it():
    noise = RunNoise.of([[100.0, 105.0, 95.0, 102.0]])
    one, four = Runs((100.0,)).figure(noise), Runs((100.0, 101.0, 99.0, 100.0)).figure(noise)
    assert four.high - four.low < one.high - one.low
    # A short run whose own interval is wider than the spread between runs keeps its own width.
    wide = Runs((100.0,), (0.5,)).figure(noise)
    assert wide.high - wide.low > one.high - one.low
    # Nothing known: no interval to claim.
    assert Runs((100.0,)).figure(RunNoise()).high is None


def test_two_configurations_are_told_apart_only_beyond_the_noise():
    quiet, loud = RunNoise.of([[100.0, 101.0, 99.0]] * 3), RunNoise.of([[100.0, 130.0, 75.0]] * 3)
    a, b = Runs((110.0, 111.0)), Runs((100.0, 100.5))
    assert ahead(a, b, quiet) == 1 and ahead(b, a, quiet) == -1
    assert ahead(a, b, loud) == 0
    # Where less is better (latency), the lower figure is ahead.
    assert ahead(a, b, quiet, maximize=False) == -1
    assert ahead(a, b, RunNoise()) == 0  # unknown noise and no intervals: nothing can be told


def test_the_bar_under_which_a_run_cannot_win_widens_with_the_noise():
    quiet, loud = RunNoise.of([[100.0, 101.0, 99.0]] * 3), RunNoise.of([[100.0, 120.0, 85.0]] * 3)
    leader = Runs((1000.0, 1010.0))
    assert 0 < (margin(leader, quiet) or 0) < (margin(leader, loud) or 0) < 1
    assert margin(leader, RunNoise()) is None


def test_a_configurations_mean_weighs_each_run_by_the_seconds_it_measured() -> None:
    # A run of 3 s read 2,000 before the study knew its host was noisy; one of 12 s read 1,400:
    # together, all their samples over all their seconds.
    runs = Runs((2000.0, 1400.0), seconds=(3.0, 12.0))
    assert runs.mean == pytest.approx((2000 * 3 + 1400 * 12) / 15)
    assert runs.figure(RunNoise(0.02, 2)).mean == pytest.approx(1520.0)
    assert Runs((2000.0,), seconds=(3.0,)).plus(1400.0, seconds=12.0).mean == pytest.approx(1520.0)
    # Where a run's seconds are unknown (a metric the script reported), the runs weigh alike.
    assert Runs((2000.0, 1400.0)).mean == pytest.approx(1700.0)
    assert Runs((2000.0, 1400.0), seconds=(3.0, None)).mean == pytest.approx(1700.0)
    assert Runs((2000.0,)).plus(1400.0, seconds=12.0).mean == pytest.approx(1700.0)


def test_one_runs_mean_is_its_value_to_the_last_digit() -> None:
    # The study's best is the trial whose stored value is least; its mean over one run must be
    # that value exactly, which v x s / s is not for about one pair in ten.
    rng = random.Random(1)
    pairs = [(rng.uniform(1e-4, 1e4), rng.uniform(0.5, 20.0)) for _ in range(200)]
    assert any(v * s / s != v for v, s in pairs)
    for v, s in pairs:
        assert Runs((v,), seconds=(s,)).mean == v
