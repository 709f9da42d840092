"""The step clock: turns the step boundaries the harness sees into timing windows, and decides when
the estimate of a trial's throughput is good enough to stop."""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Protocol

from autotune.measurement.windows import (
    Estimate,
    Window,
    cannot_win,
    estimate,
    percentile,
    steady_windows,
    without_compiles,
)
from autotune.records import Measurement, MeasurementProtocol, TimedWindow


class TimedTrial(Protocol):
    """What the clock reads of the trial it times, as the trial runs (the harness's
    :class:`~autotune.workers.harness.TrialRuntime` is one)."""

    #: The thread that runs the training loop, once known: a boundary on any other is no step.
    training_thread: threading.Thread | None
    #: When the script began (``time.perf_counter``): the warm-up's start.
    started_at: float | None

    def check_numerics(self) -> None:
        """Raise :class:`NumericsFailure` if the latest loss is NaN or infinite."""
        ...


class TrialBackends(Protocol):
    """What the clock asks of the trial's compilers and devices (:class:`~autotune.workers.backends.Backends`)."""

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


#: A compile after warm-up restarts the measurement's time cap at most this many times.
MAX_CAP_RESTARTS = 2

#: What marks a step, weakest first: a call of the model, ``Tensor.backward()``, an optimizer step,
#: a batch of a data loader, the script's own ``autotune.step()``.
SOURCES = ("forward", "backward", "optimizer", "loader", "explicit")


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
        #: The leading dimension of the model's latest input: the samples of a step that no
        #: loader delimits.
        self.model_samples: float | None = None
        #: The samples of the latest batch a loader gave the loop: those of an optimizer step when
        #: the model is called in a way no hook sees (``module.forward(x)``).
        self.batch_samples: float | None = None
        #: The loop has trained (a ``backward()`` or an optimizer step was seen): from then on a
        #: batch taken with gradients off is an evaluation's, not a step (:meth:`batch`).
        self.trained = False
        #: Optimizer steps since the last batch of a loader (:meth:`_takes_over`).
        self.optimizer_steps_since_batch = 0
        #: The optimizer took over from a loader that only gave the loop its data once; the loader
        #: never delimits the steps again.
        self.loader_demoted = False
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
        # (_takes_over).
        self.source = source
        self.steps = 0
        self.warming = True
        self.quiet = 0
        self.first_step_at: float | None = None
        self.last_compiles = 0
        self.warmup_steps = 0
        self.warmup_seconds = 0.0
        self.window_start: float | None = None
        self.window_first_step = 0
        self.window_samples = 0.0
        self.window_compiles_at_start = 0
        self.windows: list[Window] = []
        self.step_times: list[float] = []
        self.last_boundary: float | None = None
        self.measure_started: float | None = None
        self.measure_steps = 0
        #: Times the measurement's time cap was counted again from a compile (_late_compile).
        self.cap_restarts = 0
        self.synced = True  # a graph cut happened since the last boundary
        #: When the loop left training for an evaluation, until its next training step.
        self.paused_at: float | None = None
        #: When the loop asked for its first training batch after an evaluation: the next window's start.
        self.resumed_at: float | None = None
        #: When the training loader last ran out (:meth:`exhausted`).
        self.exhausted_at: float | None = None
        self.done = False
        self.converged = False
        self.pruned = False
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
        if grad_enabled or not self.trained:
            if training_thread and self.paused_at is not None and self.resumed_at is None:
                self.resumed_at = asked_at
            self.boundary("loader", samples)
        elif training_thread:
            self._evaluating(asked_at)

    def exhausted(self, asked_at: float) -> None:
        """The loop asked its loader for a batch at ``asked_at`` and there was none: an epoch's last
        step ended then. An evaluation seen next ends the window there (:meth:`_evaluating`); on a
        lazy device once the device has run the graph the loader cut."""
        if (threading.current_thread() is not self.trial.training_thread or self.done or self.warming
                or self.window_start is None or self.paused_at is not None):
            return
        if self.lazy:
            if not self.synced:
                return
            asked_at = self._now(wait=True)
        self.exhausted_at = asked_at

    def _evaluating(self, asked_at: float | None) -> None:
        """The loop left training for an evaluation: the open window ends with the training step
        that had begun, and the next one opens when the loop asks for its next training batch.
        An epoch's test pass inside a window made the trial's figure training plus testing, where
        the script's own figure (and what a user reads as its speed) is training: 13% below it for
        a corpus LSTM whose small epochs each end with a test pass. The step ends where the
        training loader ran out, or else where the loop asked for the evaluation's first batch:
        not once that batch has come, whose loading (24 ms for the LSTM's test batch of 256,
        against 6 ms for a training batch of 64) is the evaluation's. On a lazy device the window
        ends here only where a graph was cut since the step began (else its work may still be
        queued), once the device has run it."""
        if self.done or self.warming or self.window_start is None or self.paused_at is not None:
            return
        if self.exhausted_at is not None and self.last_boundary is not None and self.exhausted_at >= self.last_boundary:
            end = self.exhausted_at
        elif self.lazy:
            if not self.synced:
                return
            end = self._now(wait=True)
        else:
            end = asked_at if asked_at is not None else time.perf_counter()
        if self.last_boundary is not None:
            self.step_times.append(end - self.last_boundary)
        self._close_window(end, running_step=True)
        self.window_start = None
        self.paused_at = end
        self.resumed_at = None

    def boundary(self, source: str, samples: float | None) -> None:
        if self.done or threading.current_thread() is not self.trial.training_thread:
            return
        if source == "loader":
            self.optimizer_steps_since_batch = 0
            if samples is not None:
                self.batch_samples = float(samples)
        elif source == "optimizer":
            self.optimizer_steps_since_batch += 1
        if source in ("backward", "optimizer"):
            self.trained = True
        if source == "forward" and samples is not None:
            self.model_samples = float(samples)
        if self.optimizing and source in ("forward", "backward"):
            # A closure's evaluation, not a step: counted as steps, twenty of LBFGS's could make a
            # whole measurement before its first step had ended (19 times its real figure).
            return
        if self.source is None:
            self.source = source
        elif source != self.source:
            if not self._takes_over(source):
                return
            self._reset(source)
        self.steps += 1
        if samples is None:
            # An optimizer step or a backward() carries no batch: its samples are those of the
            # model's latest input (the loop slices its own tensors, or made them once).
            samples = (self.model_samples or self.batch_samples
                       or (self.sample_counts[-1] if self.sample_counts else 1.0))
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

    def _takes_over(self, source: str) -> bool:
        """Whether steps of ``source`` replace those of the source that delimits them now."""
        if source == "loader" and self.loader_demoted:
            return False
        if source == "optimizer" and self.source == "loader" and self.optimizer_steps_since_batch >= 2:
            # The optimizer steps again and again with no batch between: the loader only gave the
            # loop its data (one batch taken with next(iter(loader)), trained on for many steps).
            self.loader_demoted = True
            return True
        if source == "explicit" or self.source == "forward":
            # The script marks its own steps, or a training loop shows that the model's calls
            # were not the steps (an evaluation between epochs calls the model too).
            return True
        if SOURCES.index(source) < SOURCES.index(self.source or "forward"):
            return False
        if self.source == "backward" and source == "optimizer":
            # Several backward() calls can make one step (a GAN's three, gradient accumulation):
            # an optimizer that steps is the loop's step, however late it shows up.
            return True
        # A spawned worker's loop is known by its first backward(), so its first optimizer step
        # can come before its first batch is seen; batches carry their sample counts.
        return source == "loader" and self.warming

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
        if self.window_start is not None and self.paused_at is None:
            end = self._now(wait=True) if self.lazy else self.last_boundary
            if end is not None and self.steps > self.window_first_step:
                self._close_window(end)
        self.phase += 1
        self.window_start = None
        self.paused_at = None
        self.warming = True
        self.quiet = 0

    def interleave(self) -> None:
        """An optimizer that had handed over stepped again: the optimizers step in turn (a GAN's
        generator stepped twice in a row, then its discriminator again), and what looked like a
        new phase is the same loop. Its windows are one phase again."""
        self.interleaved = True
        self.windows = [dataclasses.replace(w, phase=0) for w in self.windows]
        self.phase = 0

    def _more_to_come(self) -> bool:
        """Whether the run has a phase the measurement has not seen the end of."""
        return bool(self.unstepped) or (self.phase > 0 and not self.interleaved)

    # -- phases ----------------------------------------------------------------------------
    def _warmup_boundary(self, aligned: bool) -> None:
        now = self._now(wait=aligned)
        if self.first_step_at is None:
            self.first_step_at = now
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
            if not self.windows:  # not a later phase's warm-up: the run's
                self.warmup_steps = self.steps
                self.warmup_seconds = now - (self.trial.started_at or now)
                self.step_times = []
            self._open_window(now)
            self.measure_started = now
            self.measure_steps = 0  # the cap counts each phase's steps

    def _measure_boundary(self, aligned: bool, samples: float) -> None:
        now = time.perf_counter()
        if self.paused_at is not None:
            # Training again after an evaluation: a new window opens where the loop asked for its
            # first training batch (here, where no loader gives the loop its batches), and the time
            # cap does not count the evaluation.
            start = self.resumed_at if self.resumed_at is not None else now
            if self.measure_started is not None:
                self.measure_started += start - self.paused_at
            self.paused_at = self.resumed_at = None
            self.last_boundary = now
            self.measure_steps += 1
            self._open_window(start)
            return
        if self.last_boundary is not None:
            self.step_times.append(now - self.last_boundary)
        self.last_boundary = now
        self.window_samples += samples
        self.measure_steps += 1
        p = self.protocol
        measured_s = now - (self.measure_started or now)
        # The step cap gives way to the seconds a noisy host asks for; the seconds cap never does.
        capped = ((self.measure_steps >= p.max_measure_steps and measured_s >= p.min_measure_seconds)
                  or measured_s >= p.max_measure_seconds)
        # A window ends by time (steps may speed up or slow down after warm-up), and on a lazy
        # device only where a graph was cut.
        if not aligned or (not capped and now - (self.window_start or now) < p.min_window_seconds):
            return
        self._close_window(now)
        self.trial.check_numerics()
        if capped and self._late_compile(now):
            capped = False
        est = estimate(without_compiles(self.windows))
        enough = self._enough(est)
        settled = enough and not self._more_to_come()
        if not settled and not capped and cannot_win(est, p.stop_below):
            self.pruned = capped = True
        if (settled or capped) and self.stop.shared and not p.run_to_end:
            # Every rank stops at one step a little ahead, so that none is left waiting in a
            # collective for a rank that has gone.
            self.stop.request(self.steps)
            self._open_window(now)
            return
        if settled or capped:
            if self.lazy:
                # The last window ends when the device has finished its work, not when the host
                # has merely queued it.
                end = self._now(wait=True)
                last = self.windows[-1]
                self.windows[-1] = dataclasses.replace(last, seconds=last.seconds + (end - now))
                enough = self._enough(estimate(without_compiles(self.windows)))
            self.converged = bool(enough)
            self.done = True
            if not p.run_to_end:
                self._end_the_loop()
        else:
            self._open_window(now)

    def _enough(self, est: Estimate | None, *, in_this_phase: bool = True) -> bool:
        """Whether ``est`` is good enough to stop at: enough windows (with ``in_this_phase``, in
        the phase being measured too), and an interval narrow enough."""
        p = self.protocol
        if est is None:
            return False
        if in_this_phase and self.phase:
            quiet = sum(1 for w in self.windows if w.phase == self.phase and not w.compiles)
            if quiet < p.min_windows:
                return False
        return (est.windows_used >= p.min_windows and est.rel_half_width <= p.rel_ci
                and est.seconds >= p.min_measure_seconds)

    def _late_compile(self, now: float) -> bool:
        """Whether a compile after warm-up moved the time cap: warm-up had not compiled every graph
        (on XLA under ``batches_per_execution``, the graph of the group of steps the loop's own
        sync shifted), so the cap is counted again from the end of the last window that compiled,
        up to MAX_CAP_RESTARTS times, while the windows without a compile are still too few to
        estimate from. Without this the estimate is those few windows': the compile's seconds over
        a handful of steps. The compiling window need not be the last one: a compile of nearly the
        whole cap leaves the cap to run out in the short window after it."""
        compiled = [w for w in self.windows if w.compiles]
        if (not compiled or compiled[-1].end <= (self.measure_started or 0.0)
                or len(self.windows) - len(compiled) >= self.protocol.min_windows
                or self.cap_restarts >= MAX_CAP_RESTARTS or self.measure_steps >= self.protocol.max_measure_steps):
            return False
        self.cap_restarts += 1
        self.measure_started = compiled[-1].end
        return True

    def _open_window(self, now: float) -> None:
        self.window_start = now
        self.window_first_step = self.steps
        self.window_samples = 0.0
        self.window_compiles_at_start = self.backends.compiled_graphs()

    def _close_window(self, now: float, *, running_step: bool = False) -> None:
        """The open window ends at ``now``: with ``running_step``, the step that began at the last
        boundary ran to here and counts in it with its samples (a boundary's samples count in the
        window that ends at the next one)."""
        assert self.window_start is not None
        steps = self.steps - self.window_first_step
        samples = self.window_samples
        if running_step:
            steps += 1
            samples += self.sample_counts[-1] if self.sample_counts else 0.0
        self.windows.append(Window(steps, samples, now - self.window_start,
                                   self.backends.compiled_graphs() - self.window_compiles_at_start,
                                   self.window_start, self.phase))

    def _stop_with_the_others(self, aligned: bool, samples: float) -> None:
        """A rank (this one or another) asked every rank to stop at this step. The open window
        counts if it ends where a graph was cut (on a lazy device, else its steps have not run)."""
        if not self.warming and aligned and self.window_start is not None:
            self.window_samples += samples
            self._close_window(self._now(wait=self.lazy))
        self.converged = self._enough(estimate(without_compiles(self.windows)))
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
        predictions over both layers: half a second, after 6.5 s of its last phase) is no step. On
        a lazy device the window ends once the device has run the steps it was given."""
        if self.done or self.warming or self.window_start is None or self.steps <= self.window_first_step:
            return
        end = self._now(wait=self.lazy) if self.lazy or self.last_boundary is None else self.last_boundary
        self._close_window(end)
        self.done = True
        # A run measured to its end (it had phases) converged if its estimate is good enough, its
        # last phase however short.
        self.converged = self._enough(estimate(without_compiles(self.windows)), in_this_phase=False)

    # -- result ----------------------------------------------------------------------------
    def measurement(self) -> Measurement | None:
        steady = without_compiles(self.windows)
        est = estimate(steady)
        if est is None:
            return None
        used = steady_windows(steady)
        steps = sum(w.steps for w in used)
        return Measurement(
            throughput=est.throughput,
            ci95_low=est.ci_low,
            ci95_high=est.ci_high if math.isfinite(est.ci_high) else est.throughput * 10,
            step_time_median=percentile(self.step_times, 0.5),
            step_time_p90=percentile(self.step_times, 0.9),
            step_time_p99=percentile(self.step_times, 0.99),
            samples_per_step=sum(w.samples for w in used) / max(1, steps),
            steps_measured=steps,
            windows=len(used),
            converged=self.converged,
            warmup_steps=self.warmup_steps,
            warmup_seconds=self.warmup_seconds,
            pruned=self.pruned,
            phases=len({w.phase for w in used}),
        )

    def timed_windows(self) -> list[TimedWindow]:
        """The measured windows as they go into the report, for combining the ranks of a trial."""
        return [TimedWindow(start=w.start, seconds=w.seconds, steps=w.steps, samples=w.samples, compiles=w.compiles,
                            phase=w.phase)
                for w in self.windows]

    @property
    def graphs_after_warmup(self) -> int:
        return sum(w.compiles for w in self.windows)


class RankStop:
    """The ``stop`` file through which the ranks of one trial agree on the step they all end at.

    A rank whose estimate is good enough names a step two ahead of its own: ranks in lockstep are
    at most one step apart, so every rank sees the file before it passes that step. Each rank's
    clock looks for the file at every step boundary (a ``stat``, microseconds).
    """

    #: Steps between the request and the stop.
    AHEAD = 2

    def __init__(self, ranks_dir: str | None) -> None:
        self.path = Path(ranks_dir) / "stop" if ranks_dir else None
        self.at: int | None = None

    @property
    def shared(self) -> bool:
        """Whether this process is one of several measured ranks (only those coordinate)."""
        return self.path is not None

    def due(self, step: int) -> bool:
        if self.at is None and self.path is not None and self.path.exists():
            try:
                self.at = int(self.path.read_text())
            except ValueError:  # being written: read at the next step
                return False
        return self.at is not None and step >= self.at

    def request(self, step: int) -> None:
        """Ask every rank to stop ``AHEAD`` steps from ``step``, unless one asked already."""
        assert self.path is not None
        if self.path.exists():
            return
        tmp = self.path.with_name(f"stop.{os.getpid()}")
        tmp.write_text(str(step + self.AHEAD))
        try:
            os.link(tmp, self.path)  # atomic, and fails if another rank was first
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
