"""The windows a step clock times, and what they add up to: the trial's :class:`Measurement` and
the windows of its report (:class:`TimedWindow`), from which the launcher adds up the ranks of a
multi-process trial. When a window opens and closes is the clock's; what a window holds, and
whether the windows are enough to stop at, is here."""

from __future__ import annotations

import dataclasses
import math
from typing import Protocol

from autotune.measurement.windows import Estimate, Window, estimate, percentile, steady_windows, without_compiles
from autotune.records import Measurement, MeasurementProtocol, TimedWindow

class CompiledGraphs(Protocol):
    """What a window asks of the trial's compilers: how many graphs they have compiled so far."""

    def compiled_graphs(self) -> int: ...


class TimedWindows:
    """``closed``: the windows timed so far; the open one began at ``start`` (``None``: none is
    open), at step ``first_step``, and has taken ``samples`` since."""

    def __init__(self, protocol: MeasurementProtocol, backends: CompiledGraphs) -> None:
        self.protocol = protocol
        self.backends = backends
        self.closed: list[Window] = []
        self.start: float | None = None
        self.first_step = 0
        self.samples = 0.0
        self.compiles_at_start = 0

    def open(self, now: float, step: int) -> None:
        self.start = now
        self.first_step = step
        self.samples = 0.0
        self.compiles_at_start = self.backends.compiled_graphs()

    def close(self, now: float, step: int, phase: int, *, running_samples: float | None = None) -> None:
        """The open window ends at ``now``, at step ``step``. With ``running_samples``, the step
        that began at the last boundary ran to here and counts in it with those samples (a
        boundary's samples count in the window that ends at the next one)."""
        assert self.start is not None
        steps = step - self.first_step
        samples = self.samples
        if running_samples is not None:
            steps += 1
            samples += running_samples
        self.closed.append(Window(steps, samples, now - self.start,
                                  self.backends.compiled_graphs() - self.compiles_at_start, self.start, phase))

    def extend_last(self, seconds: float) -> None:
        """The last window ran ``seconds`` past its end as the host saw it: the device was still at
        its work."""
        last = self.closed[-1]
        self.closed[-1] = dataclasses.replace(last, seconds=last.seconds + seconds)

    def one_phase(self) -> None:
        """What looked like phases of the run was one loop: its windows are of one phase."""
        self.closed = [dataclasses.replace(w, phase=0) for w in self.closed]

    def estimate(self) -> Estimate | None:
        return estimate(without_compiles(self.closed))

    def enough(self, est: Estimate | None, phase: int, *, in_this_phase: bool = True) -> bool:
        """Whether ``est`` is good enough to stop at: enough windows (with ``in_this_phase``, in
        ``phase``, the one being measured, too), and an interval narrow enough."""
        p = self.protocol
        if est is None:
            return False
        if in_this_phase and phase:
            quiet = sum(1 for w in self.closed if w.phase == phase and not w.compiles)
            if quiet < p.min_windows:
                return False
        return (est.windows_used >= p.min_windows and est.rel_half_width <= p.rel_ci
                and est.seconds >= p.min_measure_seconds)

    def measurement(self, step_times: list[float], *, converged: bool, warmup_steps: int, warmup_seconds: float,
                    pruned: bool) -> Measurement | None:
        steady = without_compiles(self.closed)
        est = estimate(steady)
        if est is None:
            return None
        used = steady_windows(steady)
        steps = sum(w.steps for w in used)
        return Measurement(
            throughput=est.throughput,
            ci95_low=est.ci_low,
            ci95_high=est.ci_high if math.isfinite(est.ci_high) else est.throughput * 10,
            step_time_median=percentile(step_times, 0.5),
            step_time_p90=percentile(step_times, 0.9),
            step_time_p99=percentile(step_times, 0.99),
            samples_per_step=sum(w.samples for w in used) / max(1, steps),
            steps_measured=steps,
            windows=len(used),
            converged=converged,
            warmup_steps=warmup_steps,
            warmup_seconds=warmup_seconds,
            pruned=pruned,
            phases=len({w.phase for w in used}),
        )

    def timed(self) -> list[TimedWindow]:
        """The windows as they go into the report, for combining the ranks of a trial."""
        return [TimedWindow(start=w.start, seconds=w.seconds, steps=w.steps, samples=w.samples, compiles=w.compiles,
                            phase=w.phase)
                for w in self.closed]

    @property
    def graphs_after_warmup(self) -> int:
        return sum(w.compiles for w in self.closed)
