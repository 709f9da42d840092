"""The throughput of a trial of several processes from its ranks' windows: the samples of every
rank in the time all of them were measuring."""

from __future__ import annotations

import pytest

from autotune.measurement.ranks import combined_windows, common_span
from autotune.measurement.windows import estimate
from autotune.measurement.windows import Window
from autotune.records import HarnessReport, Measurement, TimedWindow
from autotune.workers.multiprocess import combine, combined_measurement, failed_ranks, rank_log


def steady(rate: float, start: float, count: int, seconds: float = 1.0, jitter: float = 0.0) -> list[Window]:
    """``count`` back-to-back windows from ``start`` at ``rate`` samples/s (alternately +-jitter)."""
    return [Window(steps=10, samples=(rate + (jitter if i % 2 else -jitter)) * seconds, seconds=seconds,
                   start=start + i * seconds) for i in range(count)]


def test_ranks_in_lockstep_add_up() -> None:
    est = estimate(combined_windows([steady(100, 0.0, 6, jitter=2), steady(100, 0.01, 6, jitter=2)]))
    assert est is not None
    assert est.throughput == pytest.approx(200, rel=0.01)
    assert est.ci_low < 200 < est.ci_high and est.rel_half_width < 0.05


def test_only_the_time_every_rank_measured_counts() -> None:
    # Rank 1 started 2 s late and ran 2 s longer, at another pace: only seconds 2..5 are common.
    ranks = [steady(100, 0.0, 5), steady(50, 2.0, 5)]
    assert common_span(ranks) == (2.0, 5.0)
    slices = combined_windows(ranks)
    assert sum(w.seconds for w in slices) == pytest.approx(3.0)
    assert all(w.rate == pytest.approx(150) for w in slices)


def test_a_window_that_compiled_is_left_out_as_for_one_process() -> None:
    slow = Window(steps=10, samples=10, seconds=1.0, compiles=1, start=2.0)
    ranks = [steady(100, 0.0, 6), [*steady(100, 0.0, 2), slow, *steady(100, 3.0, 3)]]
    assert estimate(combined_windows(ranks)).throughput == pytest.approx(200, rel=0.01)  # type: ignore[union-attr]


def test_ranks_that_never_overlap_have_no_common_time() -> None:
    assert common_span([steady(100, 0.0, 3), steady(100, 10.0, 3)]) is None
    assert combined_windows([steady(100, 0.0, 3), []]) == []


def report(rank: int, rate: float, start: float, half: float = 5.0) -> HarnessReport:
    windows = steady(rate, start, 5)
    return HarnessReport(
        rank=rank, steps_seen=60, finished=True,
        windows=[TimedWindow(start=w.start, seconds=w.seconds, steps=w.steps, samples=w.samples) for w in windows],
        measurement=Measurement(throughput=rate, ci95_low=rate - half, ci95_high=rate + half, step_time_median=0.1,
                                step_time_p90=0.2 * (rank + 1), samples_per_step=rate / 10, steps_measured=50,
                                windows=5, converged=True, warmup_steps=3 + rank, warmup_seconds=1.0 + rank))


def test_ranks_that_never_overlap_add_their_own_figures() -> None:
    m = combined_measurement([report(0, 100, 0.0), report(1, 60, 100.0)])
    assert m is not None
    assert m.throughput == pytest.approx(160)
    assert m.ci95_high - m.throughput == pytest.approx((5**2 + 5**2) ** 0.5)


def test_the_trials_report_takes_the_slowest_rank_and_the_longest_compile() -> None:
    ranks = [report(0, 100, 0.0), report(1, 100, 0.0)]
    ranks[1].compile.compile_seconds, ranks[1].compile.graphs_after_warmup = 7.0, 3
    ranks[0].compile.compile_seconds = 2.0
    out = combine(None, ranks)
    assert out is not None and out.measurement is not None
    assert out.measurement.throughput == pytest.approx(200)
    assert out.measurement.samples_per_step == pytest.approx(20)
    assert out.measurement.step_time_p90 == pytest.approx(0.4) and out.measurement.warmup_steps == 4
    assert out.compile.compile_seconds == 7.0 and out.compile.graphs_after_warmup == 3
    assert out.finished and not out.stopped_early


# torchrun's summary of a failed job (torch 2.9), as in a trial's log: rank 0 failed first, in a
# collective whose partner, rank 1, had exited with code 3.
TORCHRUN_SUMMARY = """
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-23_11:20:22
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 7601)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-23_11:20:22
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 7600)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
"""


def test_torchruns_summary_names_every_failed_rank() -> None:
    assert failed_ranks(TORCHRUN_SUMMARY) == [(1, 1, 3), (0, 0, 1)]
    assert failed_ranks("rank 0 steady-state throughput: 10.0 samples/s") == []


def test_a_ranks_lines_are_cut_out_of_the_log_even_where_another_rank_broke_into_one() -> None:
    # As torchrun --tee wrote it in a CI run: rank 1's Gloo line arrived in two pieces, rank 0's between.
    log = ("[default0]:rank 0 starts\n"
           "[default1]:[Gloo] Rank [default0]:[Gloo] Rank 0 is connected to 1 peer ranks.\n"
           "[default1]:1 is connected to 1 peer ranks.\n"
           "E1126 torchrun's own line\n"
           "[default1]:rank 1 fails by crash\n"
           "[default1]:no newline at the end")
    assert rank_log(log, 1).splitlines() == [
        "[Gloo] Rank 1 is connected to 1 peer ranks.", "rank 1 fails by crash", "no newline at the end"]
    assert rank_log(log, 0).splitlines() == ["rank 0 starts", "[Gloo] Rank 0 is connected to 1 peer ranks."]
    assert rank_log(log, 2) == ""
