"""The throughput of a trial of several processes, from each rank's own timing windows.

Each rank times its own windows; the trial's figure is the samples all ranks processed in the time
every one of them was measuring (from the latest first window to the earliest last one), over
that time. Ranks in lockstep (DDP) each go at the slowest rank's pace, so the sum is what the
job achieves; ranks that do not wait for each other simply add up. The common time is cut into
as many equal slices as the sparsest rank has windows, each slice holding every rank's samples in
it (a window's samples spread evenly over its time), and those slices give the one 95% interval.
Where a rank's window was left out (it compiled), the slice takes that rank at its rate in the
rest of the slice, or is left out if the rank has nothing in it.
"""

from __future__ import annotations

from typing import Sequence

from autotune.measurement.windows import Window, without_compiles


def common_span(ranks: Sequence[Sequence[Window]]) -> tuple[float, float] | None:
    """The time every rank was measuring: ``(start, end)``, or ``None`` where they never overlap."""
    if not ranks or any(not windows for windows in ranks):
        return None
    start = max(windows[0].start for windows in ranks)
    end = min(windows[-1].end for windows in ranks)
    return (start, end) if end > start else None


def samples_between(windows: Sequence[Window], start: float, end: float) -> tuple[float, float, float]:
    """Samples, steps and seconds of ``windows`` that fall in ``[start, end]``, a window counted in
    proportion to its overlap."""
    samples = steps = seconds = 0.0
    for w in windows:
        overlap = min(end, w.end) - max(start, w.start)
        if overlap > 0 and w.seconds > 0:
            share = overlap / w.seconds
            samples += w.samples * share
            steps += w.steps * share
            seconds += overlap
    return samples, steps, seconds


def combined_windows(ranks: Sequence[Sequence[Window]]) -> list[Window]:
    """The common measuring time of ``ranks`` as equal slices, each with every rank's samples
    (and the first rank's steps, so that steps count steps of the job, not of each process)."""
    steady = [without_compiles(windows) for windows in ranks]
    span = common_span(steady)
    if span is None:
        return []
    start, end = span
    count = max(1, min(sum(1 for w in windows if start <= w.start < end) for windows in steady))
    width = (end - start) / count
    slices = []
    for i in range(count):
        lo = start + i * width
        parts = [samples_between(windows, lo, lo + width) for windows in steady]
        if any(seconds <= 0 for _, _, seconds in parts):
            continue
        rate = sum(samples / seconds for samples, _, seconds in parts)
        steps = parts[0][1] * width / parts[0][2]
        slices.append(Window(steps=max(1, round(steps)), samples=rate * width, seconds=width, start=lo))
    return slices
