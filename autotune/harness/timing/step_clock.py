"""The step clock: turns the step boundaries the harness sees into timing windows, and decides when
the estimate of a trial's throughput is good enough to stop."""

from __future__ import annotations

import threading
import time
import weakref
from typing import Protocol

from autotune.measurement.windows import Window
from autotune.records import Measurement, MeasurementProtocol, TimedWindow
from autotune.harness.timing.measuring_stage import MeasuringStage
from autotune.harness.timing.rank_stop import RankStop
from autotune.harness.timing.step_sources import StepSources
from autotune.harness.timing.timed_windows import TimedWindows


class TimedTrial(Protocol):
    """What the clock reads of the trial it times, as the trial runs (the harness's
    :class:`~autotune.harness.trial_process.TrialRuntime` is one)."""

    #: The thread that runs the training loop, once known: a boundary on any other is no step.
    training_thread: threading.Thread | None
    #: When the script began (``time.perf_counter``): the warm-up's start.
    started_at: float | None

    def check_numerics(self) -> None:
        """Raise :class:`NumericsFailure` if the latest loss is NaN or infinite."""
        ...


class TrialBackends(Protocol):
    """What the clock asks of the trial's compilers and devices (:class:`~autotune.harness.backends.Backends`)."""

    def compiled_graphs(self) -> int: ...

    def wait_device(self) -> None: ...


class TrialComplete(BaseException):
    """Raised at a step boundary once the estimate has converged, to end the user's loop.

    A ``BaseException`` so that a script's ``except Exception`` does not swallow it.
    """


class WorkerComplete(SystemExit):
    """:class:`TrialComplete` in a worker the script spawned itself: a clean exit (code 0).

    ``torch.multiprocessing.spawn`` ends a worker's siblings as soon as one exits with an error,
    before they reach the step they agreed to stop at; a ``SystemExit(0)`` ends the worker
    cleanly there, and where the exception travels back to the parent (``torch_xla.launch``'s
    process pool) it ends the parent's script cleanly too. Raised as ``WorkerComplete(0)``.
    """


class NumericsFailure(BaseException):
    """The loss became NaN or infinite."""


class StepClock:
    """Turns step boundaries into timing windows and decides when the estimate is good enough.

    Warm-up lasts until ``quiet_steps`` consecutive steps compile nothing; then windows of at least
    ``min_window_seconds`` each are timed. On a lazy device a window may only
    end where a graph was cut, and the device is waited for at the start and at the end of the
    measurement, so the figure is what the script's own timing loop would print in steady state.
    """

    def __init__(self, protocol: MeasurementProtocol, trial: TimedTrial, backends: TrialBackends, *,
                 lazy: bool = False, stop: RankStop | None = None, spawned: bool = False) -> None:
        self.protocol = protocol
        self.trial = trial
        self.backends = backends
        self.lazy = lazy
        #: Only the ranks of a multi-process trial stop together; a lone process stops on its own.
        self.stop = stop or RankStop(None)
        #: In a worker the script spawned, the loop ends with a clean exit (:class:`WorkerComplete`).
        self.spawned = spawned
        #: What the loop's events say of its steps: which kind delimits them, and their samples.
        self.sources = StepSources()
        #: Inside an optimizer's step(): an optimizer with a closure (LBFGS) calls the model and
        #: backward() many times there, all of them one step.
        self.optimizing = False
        #: The optimizers the script made that have not stepped yet (the harness keeps it): one
        #: still waiting when the estimate converges trains a later phase of the run.
        self.unstepped: weakref.WeakSet[object] = weakref.WeakSet()
        #: The phase of the run, counted up each time another optimizer takes over (:meth:`new_phase`).
        self.phase = 0
        #: An optimizer that had handed over stepped again: the "phases" were a loop that steps
        #: its optimizers in turn, and the run need not be measured to its end.
        self.interleaved = False
        self._reset(source=None)

    def _reset(self, source: str | None) -> None:
        # One of SOURCES: the first kind seen delimits steps, until a stronger one takes over
        # (StepSources.takes_over).
        self.source = source
        self.steps = 0
        self.warming = True
        self.quiet = 0
        self.last_compiles = 0
        self.warmup_steps = 0
        self.warmup_seconds = 0.0
        #: The windows timed, and the one open.
        self.timed = TimedWindows(self.protocol, self.backends)
        self.step_times: list[float] = []
        self.last_boundary: float | None = None
        #: The stage after warm-up: its caps, the evaluations that pause it, and when it ends.
        self.measuring = MeasuringStage(self.protocol, self.timed, self.stop, self.trial.check_numerics,
                                        self.backends.wait_device if self.lazy else None)
        self.synced = True  # a graph cut happened since the last boundary
        self.done = False
        self.converged = False
        self.stopped = False  # the clock ended the script's loop
        self.sample_counts: list[float] = []
        self._last_aligned_step = 0

    # -- events ----------------------------------------------------------------------------
    def batch(self, samples: float | None, grad_enabled: bool, asked_at: float | None = None) -> None:
        """A batch of a data loader, which the loop asked for at ``asked_at``. Once the loop has
        trained, a batch taken with gradients off (under ``torch.no_grad()``) belongs to an
        evaluation between epochs and is no step: a test pass of larger batches would otherwise be
        counted as training, and its time is not the training loop's either (:meth:`_evaluating`)."""
        training_thread = threading.current_thread() is self.trial.training_thread
        if grad_enabled or not self.sources.trained:
            if training_thread and self.measuring.paused_at is not None and self.measuring.resumed_at is None:
                self.measuring.resumed_at = asked_at
            self.boundary("loader", samples)
        elif training_thread:
            self._evaluating(asked_at)

    def exhausted(self, asked_at: float) -> None:
        """The loop asked its loader for a batch at ``asked_at`` and there was none: an epoch's last
        step ended then. An evaluation seen next ends the window there (:meth:`_evaluating`); on a
        lazy device once the device has run the graph the loader cut."""
        if (threading.current_thread() is not self.trial.training_thread or self.done or self.warming
                or self.timed.start is None or self.measuring.paused_at is not None):
            return
        self.measuring.exhausted(asked_at, self.synced)

    def _evaluating(self, asked_at: float | None) -> None:
        """The loop left training for an evaluation: the open window ends with the training step
        that had begun (:meth:`MeasuringStage.pause`), and the next one opens when the loop asks
        for its next training batch."""
        if self.done or self.warming or self.timed.start is None or self.measuring.paused_at is not None:
            return
        end = self.measuring.pause(asked_at, self.last_boundary, self.synced)
        if end is None:
            return
        if self.last_boundary is not None:
            self.step_times.append(end - self.last_boundary)
        self.timed.close(end, self.steps, self.phase,
                         running_samples=self.sample_counts[-1] if self.sample_counts else 0.0)
        self.timed.start = None

    def boundary(self, source: str, samples: float | None) -> None:
        if self.done or threading.current_thread() is not self.trial.training_thread:
            return
        self.sources.see(source, samples)
        if self.optimizing and source in ("forward", "backward"):
            # A closure's evaluation, not a step: counted as steps, twenty of LBFGS's could make a
            # whole measurement before its first step had ended (19 times its real figure).
            return
        if self.source is None:
            self.source = source
        elif source != self.source:
            if not self.sources.takes_over(source, self.source, self.warming):
                return
            self._reset(source)
        self.steps += 1
        if samples is None:
            samples = self.sources.samples(self.sample_counts[-1] if self.sample_counts else None)
        self.sample_counts.append(float(samples))
        aligned = self.synced or not self.lazy
        if self.stop.due(self.steps):
            self._stop_with_the_others(aligned, samples)
        elif self.warming:
            self._warmup_boundary(aligned)
        else:
            self._measure_boundary(aligned, samples)
        if aligned:
            self.synced = False

    def on_sync(self) -> None:
        self.synced = True

    def new_phase(self) -> None:
        """Another optimizer took over from the one whose steps were counted: the run has moved
        on to a phase of its own (the next layer of a forward-forward net, with other shapes and
        another speed). The open window ends with the last step of the phase before; the new one
        warms up (its graphs compile) and is measured in windows of its own, and from here on the
        run is measured to its end (or the cap), so that each phase weighs in the figure as much
        as it does in the run: stopping in the first phase measured 0.83 of a two-layer run."""
        if threading.current_thread() is not self.trial.training_thread or self.done:
            return
        if self.warming:
            self.phase += 1
            return
        self.measuring.end_phase(self.last_boundary, self.steps, self.phase)
        self.phase += 1
        self.warming = True
        self.quiet = 0

    def interleave(self) -> None:
        """An optimizer that had handed over stepped again: the optimizers step in turn (a GAN's
        generator stepped twice in a row, then its discriminator again), and what looked like a
        new phase is the same loop. Its windows are one phase again."""
        self.interleaved = True
        self.timed.one_phase()
        self.phase = 0

    def _more_to_come(self) -> bool:
        """Whether the run has a phase the measurement has not seen the end of."""
        return bool(self.unstepped) or (self.phase > 0 and not self.interleaved)

    # -- phases ----------------------------------------------------------------------------
    def _warmup_boundary(self, aligned: bool) -> None:
        now = self._now(wait=aligned)
        if not aligned:
            return
        compiles = self.backends.compiled_graphs()
        if compiles != self.last_compiles or self.steps <= 1:
            self.quiet = 0
            self.last_compiles = compiles
        else:
            self.quiet += 1
            if self.last_boundary is not None:
                self.step_times.append((now - self.last_boundary) / max(1, self.steps - self._last_aligned_step))
        self.last_boundary = now
        self._last_aligned_step = self.steps
        if self.quiet >= self.protocol.quiet_steps:
            if self.protocol.compile_only:  # every graph of the loop is compiled: nothing to measure
                if self.stop.shared:
                    self.stop.request(self.steps)  # the ranks stop together, at one step
                    return
                self.done = True
                self._end_the_loop()
            self.warming = False
            if not self.timed.closed:  # not a later phase's warm-up: the run's
                self.warmup_steps = self.steps
                self.warmup_seconds = now - (self.trial.started_at or now)
                self.step_times = []
            self.measuring.begin(now, self.steps)

    def _measure_boundary(self, aligned: bool, samples: float) -> None:
        now = time.perf_counter()
        if self.measuring.paused_at is None and self.last_boundary is not None:
            self.step_times.append(now - self.last_boundary)
        self.last_boundary = now
        converged = self.measuring.step(now, self.steps, self.phase, aligned, samples, self._more_to_come())
        if converged is None:
            return
        self.converged = converged
        self.done = True
        if not self.protocol.run_to_end:
            self._end_the_loop()

    def _stop_with_the_others(self, aligned: bool, samples: float) -> None:
        """A rank (this one or another) asked every rank to stop at this step. The open window
        counts if it ends where a graph was cut (on a lazy device, else its steps have not run)."""
        if not self.warming and aligned and self.timed.start is not None:
            self.timed.samples += samples
            self.timed.close(self._now(wait=self.lazy), self.steps, self.phase)
        self.converged = self.timed.enough(self.timed.estimate(), self.phase)
        self.done = True
        self._end_the_loop()

    def _end_the_loop(self) -> None:
        self.stopped = True
        raise WorkerComplete(0) if self.spawned else TrialComplete()

    def _now(self, wait: bool) -> float:
        if wait:
            self.backends.wait_device()
        return time.perf_counter()

    def finish(self) -> None:
        """The script ended: the window it was in counts, if it holds a step past warm-up, up to
        where its last step ended. What the script did after that (forward-forward MNIST's
        predictions over both layers) is no step. On
        a lazy device the window ends once the device has run the steps it was given."""
        if self.done or self.warming or self.timed.start is None or self.steps <= self.timed.first_step:
            return
        end = self._now(wait=self.lazy) if self.lazy or self.last_boundary is None else self.last_boundary
        self.timed.close(end, self.steps, self.phase)
        self.done = True
        # A run measured to its end (it had phases) converged if its estimate is good enough, its
        # last phase however short.
        self.converged = self.timed.enough(self.timed.estimate(), self.phase, in_this_phase=False)

    # -- result ----------------------------------------------------------------------------
    def measurement(self) -> Measurement | None:
        return self.timed.measurement(self.step_times, converged=self.converged, warmup_steps=self.warmup_steps,
                                      warmup_seconds=self.warmup_seconds, pruned=self.measuring.pruned)

    def timed_windows(self) -> list[TimedWindow]:
        """The measured windows as they go into the report, for combining the ranks of a trial."""
        return self.timed.timed()

    @property
    def windows(self) -> list[Window]:
        return self.timed.closed

    @property
    def graphs_after_warmup(self) -> int:
        return self.timed.graphs_after_warmup
