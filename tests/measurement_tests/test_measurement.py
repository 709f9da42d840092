"""Statistics of timing windows: MSER truncation, the throughput estimate and its 95% CI."""

from __future__ import annotations

import math
import random

import pytest

from autotune.measurement.windows import (
    PRUNE_MIN_WINDOWS,
    Window,
    cannot_win,
    estimate,
    mser_truncation,
    percentile,
    steady_windows,
    t975,
    without_compiles,
)

# --- MSER truncation ---------------------------------------------------------------------------


def test_mser_cuts_a_transient() -> None:
    rng = random.Random(1)
    transient = [10.0, 7.0, 5.0, 3.5]
    steady = [1.0 + rng.gauss(0, 0.05) for _ in range(30)]
    d = mser_truncation(transient + steady)
    # All of the transient goes; MSER may take a few noisy steady points with it, never many.
    assert len(transient) <= d <= len(transient) + 4


def test_mser_keeps_a_constant_series() -> None:
    assert mser_truncation([5.0] * 20) == 0


@pytest.mark.parametrize("seed", range(5))
def test_mser_keeps_most_of_a_steady_noisy_series(seed: int) -> None:
    rng = random.Random(seed)
    values = [100 + rng.gauss(0, 5) for _ in range(40)]
    assert mser_truncation(values) <= 4


def test_mser_never_cuts_more_than_half() -> None:
    # A series that only settles at its very end: the rule still keeps the second half.
    values = [float(100 - i) for i in range(20)]
    assert mser_truncation(values) <= 10


@pytest.mark.parametrize("values", [[], [1.0], [1.0, 9.0, 9.0]])
def test_mser_on_short_series(values: list[float]) -> None:
    assert mser_truncation(values) == 0


# --- the estimate and its confidence interval ---------------------------------------------------

STEP_SECONDS = 0.002
BATCH = 8
TRUTH = BATCH / STEP_SECONDS  # samples/s


def noisy_windows(rng: random.Random, n: int, *, steps: int = 100, noise: float = 0.01) -> list[Window]:
    """Windows of ``steps`` steps whose duration has a relative noise of ``noise``."""
    return [Window(steps, steps * BATCH, steps * STEP_SECONDS * (1 + rng.gauss(0, noise))) for _ in range(n)]


def coverage(n_windows: int, reps: int = 1000) -> tuple[float, float]:
    """How often the 95% CI holds the truth, and the mean relative half-width."""
    hits, widths = 0, []
    for rep in range(reps):
        est = estimate(noisy_windows(random.Random(rep), n_windows))
        assert est is not None
        hits += est.ci_low <= TRUTH <= est.ci_high
        widths.append(est.rel_half_width)
    return hits / reps, sum(widths) / reps


def test_estimate_of_steady_windows() -> None:
    est = estimate(noisy_windows(random.Random(0), 10))
    assert est is not None
    assert est.throughput == pytest.approx(TRUTH, rel=0.01)
    assert est.ci_low < est.throughput < est.ci_high
    assert est.ci_low <= TRUTH <= est.ci_high
    assert est.rel_half_width < 0.02
    assert est.windows_used + est.truncated == 10


def test_estimate_is_total_samples_over_total_time() -> None:
    windows = [Window(10, 80, 0.2), Window(10, 80, 0.2), Window(10, 40, 0.1), Window(10, 80, 0.2)]
    est = estimate(windows)
    assert est is not None
    assert est.truncated == 0
    assert est.throughput == pytest.approx(280 / 0.7)
    assert est.ci_low == pytest.approx(est.ci_high, abs=1e-6) == pytest.approx(400.0)


def test_ci_covers_the_truth_most_of_the_time() -> None:
    covered, width = coverage(10)
    assert covered >= 0.85
    assert width < 0.01  # and it is not covering by being wide


def test_ci_covers_the_truth_at_its_nominal_rate() -> None:
    covered, _ = coverage(10)
    assert 0.925 <= covered <= 0.99


def test_estimate_leaves_out_a_slow_start() -> None:
    rng = random.Random(3)
    warmup = [Window(100, 800, s) for s in (4.0, 1.0, 0.5)]  # compiles, then caches warming up
    est = estimate(warmup + noisy_windows(rng, 12))
    assert est is not None
    assert est.truncated >= 3
    assert est.throughput == pytest.approx(TRUTH, rel=0.01)
    assert est.ci_low <= TRUTH <= est.ci_high


def test_estimate_edge_cases() -> None:
    assert estimate([]) is None
    assert estimate([Window(1, 8, 0.0)]) is None
    single = estimate([Window(10, 80, 0.1)])
    assert single is not None
    assert single.throughput == pytest.approx(800.0)
    assert single.ci_low == 0.0 and math.isinf(single.ci_high)
    assert math.isinf(single.rel_half_width)


def test_window_rate() -> None:
    assert Window(4, 32, 0.5).rate == 64.0
    assert Window(4, 32, 0.0).rate == 0.0


# --- t975 and percentile -------------------------------------------------------------------------


@pytest.mark.parametrize(("df", "quantile"), [
    (1, 12.706), (2, 4.303), (5, 2.571), (10, 2.228), (20, 2.086), (30, 2.042),
    (40, 2.021), (60, 2.000), (120, 1.980), (1000, 1.962),
])
def test_t975_matches_students_t(df: int, quantile: float) -> None:
    assert t975(df) == pytest.approx(quantile, abs=0.003)


def test_t975_decreases_towards_the_normal_quantile() -> None:
    values = [t975(df) for df in range(1, 500)]
    assert all(a >= b for a, b in zip(values, values[1:]))
    assert 1.96 < t975(10**6) < 1.9601
    assert math.isinf(t975(0))


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([1, 2, 3, 4], 0.5, 2.5),
    ([4, 1, 3, 2], 0.5, 2.5),
    ([1, 2, 3, 4], 0.0, 1.0),
    ([1, 2, 3, 4], 1.0, 4.0),
    (list(range(1, 11)), 0.9, 9.1),
    ([7.5], 0.9, 7.5),
])
def test_percentile(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing() -> None:
    assert math.isnan(percentile([], 0.5))


def test_cannot_win_needs_enough_windows_and_the_whole_interval_below_the_bar() -> None:
    steady = [Window(10, 100.0, 1.0 + 0.01 * (i % 2)) for i in range(PRUNE_MIN_WINDOWS)]
    est = estimate(steady)
    assert est is not None and est.windows_used == PRUNE_MIN_WINDOWS
    assert cannot_win(est, bar=200.0)
    assert not cannot_win(est, bar=est.ci_high), "the interval's upper end is not below the bar"
    assert not cannot_win(est, bar=None), "no bar: never pruned"
    assert not cannot_win(estimate(steady[:-1]), bar=200.0), "too few windows to judge"
    assert not cannot_win(None, bar=200.0)


def test_a_one_off_compile_after_warm_up_leaves_the_estimate() -> None:
    steady = [Window(10, 100.0, 1.0) for _ in range(6)]
    compiled = Window(10, 100.0, 5.0, compiles=1)  # a graph compiled inside the window
    kept = without_compiles([*steady[:3], compiled, *steady[3:]])
    assert kept == steady
    assert estimate(kept).throughput == pytest.approx(100.0)


def test_a_recompilation_storm_is_the_steady_state() -> None:
    storm = [Window(10, 100.0, 2.0, compiles=1) for _ in range(4)] + [Window(10, 100.0, 1.0)] * 2
    assert without_compiles(storm) == storm


def test_a_run_of_two_phases_is_all_their_samples_over_all_their_seconds() -> None:
    # A slower first phase is no warm-up: cut off the whole series as a transient, the estimate
    # would be the second phase's alone.
    first = [Window(10, 1000.0 * (1 + 0.01 * (i % 3)), 1.0, phase=0) for i in range(3)]
    second = [Window(10, 3000.0 * (1 + 0.01 * (i % 3)), 1.0, phase=1) for i in range(20)]
    est = estimate(first + second)
    assert est is not None
    samples = sum(w.samples for w in first + second)
    assert est.throughput == pytest.approx(samples / 23.0)
    assert est.ci_low < est.throughput < est.ci_high < 1.05 * est.throughput
    assert steady_windows(first + second) == first + second


def test_each_phase_has_its_own_transient_and_its_own_compiles() -> None:
    first = [Window(10, 100.0, 1.0, phase=0)] + [Window(10, 1000.0, 1.0, phase=0) for _ in range(7)]
    second = ([Window(10, 50.0, 1.0, compiles=1, phase=1)]
              + [Window(10, 3000.0 + i, 1.0, phase=1) for i in range(7)])
    kept = without_compiles(first + second)
    assert kept == first + second[1:]
    assert steady_windows(kept) == first[1:] + second[1:]
    est = estimate(kept)
    assert est is not None and est.throughput == pytest.approx((7000 + 7 * 3000 + 21) / 14)


def test_a_phase_of_one_window_is_as_uncertain_as_the_others() -> None:
    first = [Window(10, 1000.0 + 10 * (i % 2), 1.0, phase=0) for i in range(6)]
    est = estimate(first + [Window(10, 2000.0, 1.0, phase=1)])
    assert est is not None and math.isfinite(est.ci_high)
    assert est.throughput == pytest.approx((sum(w.samples for w in first) + 2000) / 7)
