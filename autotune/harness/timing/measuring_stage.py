"""The stage of a step clock after warm-up, while it measures: its caps (steps and seconds), the
evaluations between epochs that pause it, and when a closed window ends it. Which boundary is a
step, and warm-up, are the clock's; what the windows add up to is :mod:`~autotune.harness.timing.timed_windows`'."""

from __future__ import annotations

import time
from typing import Callable, Protocol

from autotune.measurement.windows import cannot_win
from autotune.records import MeasurementProtocol
from autotune.harness.timing.timed_windows import TimedWindows

#: A compile after warm-up restarts the measurement's time cap at most this many times.
MAX_CAP_RESTARTS = 2


class RanksStop(Protocol):
    """How the ranks of a trial stop together (:mod:`~autotune.harness.timing.rank_stop`)."""

    @property
    def shared(self) -> bool: ...

    def request(self, step: int) -> None: ...


class MeasuringStage:
    """The measurement of one phase of the run, from the end of its warm-up, in the windows of
    ``timed``. ``wait_device``: the lazy device's wait for the work queued on it (``None``: the
    device runs each step as the host gives it)."""

    def __init__(self, protocol: MeasurementProtocol, timed: TimedWindows, stop: RanksStop,
                 check_numerics: Callable[[], None], wait_device: Callable[[], None] | None) -> None:
        self.protocol = protocol
        self.timed = timed
        self.stop = stop
        self.check_numerics = check_numerics
        self.wait_device = wait_device
        #: What the time cap counts from: the end of warm-up, moved on by each evaluation and by a
        #: compile warm-up missed (:meth:`_late_compile`).
        self.started: float | None = None
        #: The steps measured in this phase: what the step cap counts.
        self.steps = 0
        #: Times the time cap was counted again from a compile (:meth:`_late_compile`).
        self.cap_restarts = 0
        #: When the loop left training for an evaluation, until its next training step.
        self.paused_at: float | None = None
        #: When the loop asked for its first training batch after an evaluation: the next window's start.
        self.resumed_at: float | None = None
        #: When the training loader last ran out (:meth:`exhausted`).
        self.exhausted_at: float | None = None
        #: The estimate could no longer beat the bar (``stop_below``): the measurement stopped early.
        self.pruned = False

    def begin(self, now: float, step: int) -> None:
        self.timed.open(now, step)
        self.started = now
        self.steps = 0  # the cap counts each phase's steps

    def _now(self) -> float:
        """Now, once the device has run what it was given."""
        if self.wait_device is not None:
            self.wait_device()
        return time.perf_counter()

    def exhausted(self, asked_at: float, synced: bool) -> None:
        """The loop asked its loader for a batch at ``asked_at`` and there was none: an epoch's last
        step ended then. An evaluation seen next ends the window there (:meth:`pause`); on a lazy
        device once the device has run the graph the loader cut (``synced``: a graph was cut since
        the step began)."""
        if self.wait_device is not None:
            if not synced:
                return
            asked_at = self._now()
        self.exhausted_at = asked_at

    def pause(self, asked_at: float | None, last_boundary: float | None, synced: bool) -> float | None:
        """The loop left training for an evaluation: where the training step that had begun (at
        ``last_boundary``) ended, which ends the open window; the next one opens when the loop asks
        for its next training batch. An epoch's test pass inside a window made the trial's figure
        training plus testing, where the script's own figure (and what a user reads as its speed)
        is training (docs/results/trial.md#an-evaluation-between-training-steps). The step ends
        where the training loader ran out, or else where the loop asked for the evaluation's first
        batch (``asked_at``): not once that batch has come, whose loading is the evaluation's. On
        a lazy device the window ends here only where a graph was cut since the step began
        (``synced``; else its work may still be queued: ``None``), once the device has
        run it."""
        if self.exhausted_at is not None and last_boundary is not None and self.exhausted_at >= last_boundary:
            end = self.exhausted_at
        elif self.wait_device is not None:
            if not synced:
                return None
            end = self._now()
        else:
            end = asked_at if asked_at is not None else time.perf_counter()
        self.paused_at = end
        self.resumed_at = None
        return end

    def end_phase(self, last_boundary: float | None, step: int, phase: int) -> None:
        """Another phase of the run begins at step ``step``: the open window ends with the last
        step of ``phase`` (at ``last_boundary``; on a lazy device once the device has run it)."""
        if self.timed.start is not None and self.paused_at is None:
            end = self._now() if self.wait_device is not None else last_boundary
            if end is not None and step > self.timed.first_step:
                self.timed.close(end, step, phase)
        self.timed.start = None
        self.paused_at = None

    def step(self, now: float, step: int, phase: int, aligned: bool, samples: float,
             more_to_come: bool) -> bool | None:
        """Step ``step`` of the measurement ended at ``now`` (``aligned``: where a graph was cut, on
        a lazy device): ``None`` while the measurement goes on, else whether its estimate converged
        as it ended. ``more_to_come``: the run has a phase not yet seen to its end."""
        if self.paused_at is not None:
            # Training again after an evaluation: a new window opens where the loop asked for its
            # first training batch (here, where no loader gives the loop its batches), and the time
            # cap does not count the evaluation.
            start = self.resumed_at if self.resumed_at is not None else now
            if self.started is not None:
                self.started += start - self.paused_at
            self.paused_at = self.resumed_at = None
            self.steps += 1
            self.timed.open(start, step)
            return None
        self.timed.samples += samples
        self.steps += 1
        p = self.protocol
        measured_s = now - (self.started or now)
        # The step cap gives way to the seconds a noisy host asks for; the seconds cap never does.
        capped = ((self.steps >= p.max_measure_steps and measured_s >= p.min_measure_seconds)
                  or measured_s >= p.max_measure_seconds)
        # A window ends by time (steps may speed up or slow down after warm-up), and on a lazy
        # device only where a graph was cut.
        if not aligned or (not capped and now - (self.timed.start or now) < p.min_window_seconds):
            return None
        self.timed.close(now, step, phase)
        self.check_numerics()
        if capped and self._late_compile():
            capped = False
        est = self.timed.estimate()
        enough = self.timed.enough(est, phase)
        settled = enough and not more_to_come
        if not settled and not capped and cannot_win(est, p.stop_below):
            self.pruned = capped = True
        if (settled or capped) and self.stop.shared and not p.run_to_end:
            # Every rank stops at one step a little ahead, so that none is left waiting in a
            # collective for a rank that has gone.
            self.stop.request(step)
            self.timed.open(now, step)
            return None
        if not (settled or capped):
            self.timed.open(now, step)
            return None
        if self.wait_device is not None:
            # The last window ends when the device has finished its work, not when the host has
            # merely queued it.
            self.timed.extend_last(self._now() - now)
            enough = self.timed.enough(self.timed.estimate(), phase)
        return bool(enough)

    def _late_compile(self) -> bool:
        """Whether a compile after warm-up moved the time cap: warm-up had not compiled every graph
        (on XLA under ``batches_per_execution``, the graph of the group of steps the loop's own
        sync shifted), so the cap is counted again from the end of the last window that compiled,
        up to MAX_CAP_RESTARTS times, while the windows without a compile are still too few to
        estimate from. Without this the estimate is those few windows': the compile's seconds over
        a handful of steps. The compiling window need not be the last one: a compile of nearly the
        whole cap leaves the cap to run out in the short window after it."""
        windows = self.timed.closed
        compiled = [w for w in windows if w.compiles]
        if (not compiled or compiled[-1].end <= (self.started or 0.0)
                or len(windows) - len(compiled) >= self.protocol.min_windows
                or self.cap_restarts >= MAX_CAP_RESTARTS or self.steps >= self.protocol.max_measure_steps):
            return False
        self.cap_restarts += 1
        self.started = compiled[-1].end
        return True
