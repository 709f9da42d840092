"""The harness: runs inside the trial process, around the user's unmodified script.

``python -m autotune.harness SPEC.json`` reads a :class:`TrialSpec`, installs its interceptions,
runs the script as ``__main__`` and writes a :class:`HarnessReport` to ``spec.result_path``.

What it intercepts, and why:

- ``DataLoader(...)``: the trial's ``batch_size`` and ``num_workers`` replace the script's.
- ``ParallelLoader``/``MpDeviceLoader`` (torch-xla): the trial's ``batches_per_execution``.
- Step boundaries, where the step clock takes its timestamps (the strongest kind seen delimits
  the steps, :data:`~autotune.harness.timing.step_sources.SOURCES`): ``autotune.step()``; iteration of a
  data loader on the main thread; else a step of the loop's optimizer (the first that stepped,
  so that a GAN's two optimizers make one step); else ``torch.autograd.backward`` (loops that
  update their weights by hand); else a call of the model (inference).
- ``torch_xla.sync`` (also as ``torch_xla.compile`` calls it): tells the clock where lazy graphs
  were cut, so that windows end on a cut.
- ``torch.nn.Module.__call__``, until the first call of a module with parameters: that module is
  the model; the harness casts it, wraps its forward in autocast, or compiles it, as the plan says.
  Each later call of the model is a step boundary of the weakest kind, and the leading dimension
  of its first tensor input is the samples of a step that no loader delimits.
- ``torch.compile``: a script that compiles its model itself gets the trial's options instead.
- ``torch_neuronx.trace`` (Neuron's traced inference): the trial's compiler settings go into its
  ``compiler_args`` in place of the script's own, a model traced before with the same arguments is
  loaded from the cache instead, and the traced model (or what ``torch_neuronx.dynamic_batch`` and
  ``torch_neuronx.DataParallel`` make of it) is what serves: each of its calls is a request, timed
  as a step that has run on the device when the call returns.
- ``torch.autograd.backward`` (``Tensor.backward()`` calls it): also the first losses (for the
  numerics guard) and a NaN check at window edges.
- ``torch.optim.Optimizer.__init__``: the optimizers the script made. One that has not stepped
  yet keeps the trial going past a converged estimate (the run has a later phase); one that takes
  over starts that phase (:meth:`~autotune.harness.timing.step_clock.StepClock.new_phase`).

The env vars of the plan were set by the launcher before this process started, since
``XLA_FLAGS``, ``PJRT_DEVICE`` and ``NEURON_CC_FLAGS`` are read when the backend loads.
"""

from __future__ import annotations

import math
import os
import runpy
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TypeVar

from autotune import api
from autotune.process_tree import die_with_parent
from autotune.records import (
    Failure,
    FailureCategory,
    HarnessReport,
    INTERCEPTIONS,
    NEUTRAL_KNOB_VALUES,
    TrialSpec,
)
from autotune.harness import isa_probe
from autotune.harness import knobs as runtime_knobs
from autotune.harness import ranks
from autotune.harness.backends import Backends
from autotune.harness.ending import record_end, write_report
from autotune.harness.optimizer_steps import OptimizerSteps
from autotune.harness.script_model import ScriptModel
from autotune.harness.timing.rank_stop import RankStop, StoreStop
from autotune.harness.timing.step_clock import NumericsFailure, StepClock
from autotune.harness.tensors import batch_len, to_float

if TYPE_CHECKING:
    import torch

#: A loader's iterator, and the batch it yields.
It = TypeVar("It")
Batch = TypeVar("Batch")


class TrialRuntime:
    """The state of one trial inside its process, and the interceptions that feed it."""

    def __init__(self, spec: TrialSpec, is_rank: bool = False, spawned: bool = False) -> None:
        self.spec = spec
        #: The thread that runs the training loop: the main one, except in a spawned worker, where
        #: torch-xla runs the script's function on a thread of its own; there it is the first
        #: thread that calls ``backward()`` or steps an optimizer (never a data loader's thread).
        self.training_thread: threading.Thread | None = None if spawned else threading.main_thread()
        self.spawned = spawned
        self.plan = spec.plan
        self.knobs = spec.plan.knobs
        #: One of several measured processes of the trial (a torchrun rank, a spawned worker).
        self.is_rank = is_rank
        self.report = HarnessReport(rank=ranks.process_rank() if is_rank else None, pid=os.getpid())
        self.started_at: float | None = None
        self.losses: list[torch.Tensor] = []
        self.last_loss: torch.Tensor | None = None
        self.backends = Backends()
        self.clock = StepClock(spec.protocol, self, self.backends, lazy=spec.plan.knobs.lazy_device,
                               stop=_rank_stop(spec, is_rank), spawned=spawned)
        self.params = dict(spec.plan.params)
        #: The runtime knobs the harness found what to apply to (a DataLoader, the model).
        self.applied: set[str] = set()
        self.model = ScriptModel(self, self.clock, self.knobs, self.applied, self.report.notes)

    # -- the optional API (autotune.report / autotune.step) ----------------------------------
    def on_report(self, metrics: dict[str, float]) -> None:
        self.report.metrics.update(metrics)

    def on_step(self, samples: int | None) -> None:
        self.clock.boundary("explicit", samples)

    def check_numerics(self) -> None:
        if self.last_loss is None:
            return
        value = to_float(self.last_loss)
        if value is not None and not math.isfinite(value):
            raise NumericsFailure(f"loss became {value} at step {self.clock.steps}")

    # -- interceptions -----------------------------------------------------------------------
    def install(self) -> None:
        import torch

        if self.knobs.threads:
            torch.set_num_threads(self.knobs.threads)
        self._patch_dataloader()
        self._patch_backward()
        OptimizerSteps(self, self.clock).install()
        if self.spec.rendezvous_timeout_s:
            ranks.cap_rendezvous(self.spec.rendezvous_timeout_s)
        if self.knobs.compile is not None:
            self.model.patch_torch_compile()
            if self.knobs.compile.backend == "inductor":
                isa_probe.install(os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
        self.model.install_root_hook()
        if self.knobs.lazy_device or "torch_xla" in sys.modules:
            self._patch_xla()
        if self.knobs.trace is not None:
            self.model.trace(self.plan.env.get(self.plan.flags_env or "", ""))
        runtime_knobs.watch_env(self.plan.env, self.plan.flags_env, self.on_env_override)

    def on_env_override(self, name: str, value: str | None, where: str) -> None:
        """The script replaced a variable of the configuration: the trial measures the script's own
        value of whatever that variable carries."""
        self.report.env_overrides[name] = where
        sys.stderr.write(f"autotune: warning: {where} {'set' if value is not None else 'removed'} {name} itself, "
                         "replacing the configuration's value: this trial measures the script's own\n")

    def _patch_dataloader(self) -> None:
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        runtime_knobs.patch_loader(self.knobs, self.applied, self.report.script_loader)
        orig_next = _BaseDataLoaderIter.__next__
        clock_batch = self._clock_batch

        def next_(it: _BaseDataLoaderIter) -> object:
            return clock_batch(orig_next, it)

        _BaseDataLoaderIter.__next__ = next_  # type: ignore[method-assign]

    def _clock_batch(self, next_batch: Callable[[It], Batch], it: It) -> Batch:
        """A loader iterator's next batch, told to the clock with the time the loop asked for it
        (where the step that takes it began), or the loader's end (where the last step ended)."""
        import torch

        asked = time.perf_counter()
        try:
            batch = next_batch(it)
        except StopIteration:
            self.clock.exhausted(asked)
            raise
        self.clock.batch(batch_len(batch), torch.is_grad_enabled(), asked)
        return batch

    def _patch_backward(self) -> None:
        """``torch.autograd.backward``, which ``Tensor.backward()`` calls as a script may itself: a
        step boundary once the gradients are there (for loops that update their weights by hand),
        and the loss it starts from, for the numerics guard. One wrapper, not one here and one
        around ``Tensor.backward``: on a short step each Python frame the harness adds per step
        shows in the trial's figure (docs/results/trial.md#the-harnesss-cost-per-step). A backward()
        run inside another (reentrant checkpointing) is part of the outer one."""
        import torch

        orig_autograd: Callable[..., None] = torch.autograd.backward
        runtime = self
        clock = self.clock
        keep = self.spec.protocol.losses_recorded
        depth = [0]
        Tensor = torch.Tensor

        def autograd_backward(tensors: torch.Tensor | Sequence[torch.Tensor], *args: object, **kwargs: object) -> None:
            runtime.training_thread = runtime.training_thread or threading.current_thread()
            if depth[0] == 0 and isinstance(tensors, Tensor) and tensors.numel() == 1:
                # Detached: a loop that frees its graph (retain_graph=True, then del) frees it here too.
                loss = runtime.last_loss = tensors.detach()
                if len(runtime.losses) < keep:
                    runtime.losses.append(loss)
            depth[0] += 1
            try:
                out = orig_autograd(tensors, *args, **kwargs)
            finally:
                depth[0] -= 1
            if depth[0] == 0:
                clock.boundary("backward", None)
            return out

        torch.autograd.backward = autograd_backward

    def _patch_xla(self) -> None:
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.distributed.parallel_loader as pl

        self.backends.xla = xm
        clock = self.clock
        orig_sync: Callable[..., None] = torch_xla.sync

        def sync(*args: object, **kwargs: object) -> None:
            out = orig_sync(*args, **kwargs)
            clock.on_sync()
            return out

        torch_xla.sync = sync
        # torch_xla.compile(step_fn) cuts the graph with its own module's sync, not the package's.
        module = sys.modules.get("torch_xla.torch_xla")
        if module is not None:
            setattr(module, "sync", sync)
        runtime_knobs.patch_device_loader(pl, self.knobs.batches_per_execution, self.applied)
        orig_dev_next = pl.PerDeviceLoader.__next__
        clock_batch = self._clock_batch

        def dev_next(it: pl.PerDeviceLoader) -> object:
            return clock_batch(orig_dev_next, it)

        setattr(pl.PerDeviceLoader, "__next__", dev_next)

    # -- result ------------------------------------------------------------------------------
    def finalize(self) -> HarnessReport:
        r = self.report
        r.steps_seen = self.clock.steps
        if self.is_rank and r.rank is None:
            r.rank = ranks.process_rank()  # torch-xla numbers a spawned child once it starts
        try:
            self.clock.finish()
            r.measurement = self.clock.measurement()
            if r.measurement is not None:
                r.measurement.flops_per_sample = self.model.flops_per_sample
                r.measurement.model_device = self.model.device
            r.windows = self.clock.timed_windows()
        except Exception as exc:  # a bug in the statistics must not lose the rest of the result
            r.error = r.error or f"measurement failed: {exc!r}"
        r.compile.graphs_compiled = self.backends.compiled_graphs()
        r.compile.graphs_after_warmup = self.clock.graphs_after_warmup
        r.compile.compile_seconds = self.backends.compile_seconds()
        r.compile.cache_hits, r.compile.cache_misses = self.backends.cache_counts()
        traced = self.model.traced_models
        if traced is not None and (traced.loaded or traced.traced):
            r.compile.graphs_compiled += traced.traced
            r.compile.compile_seconds = (r.compile.compile_seconds or 0.0) + traced.trace_seconds
            r.compile.cache_hits = (r.compile.cache_hits or 0) + traced.loaded
            r.compile.cache_misses = (r.compile.cache_misses or 0) + traced.traced
        r.knobs_applied = {knob: knob in self.applied for knob, value in self.knobs.model_dump().items()
                           if value not in (None, False) and NEUTRAL_KNOB_VALUES.get(knob) != value
                           and INTERCEPTIONS.get(knob, ("", None))[1] is not None}
        if r.exit_code is not None and r.measurement is not None:
            # The script ran its steps and was measured, then exited with an error code of its own
            # (an accuracy target a short run cannot meet): the measurement stands.
            r.failure = None
            r.finished = True
        values = [to_float(t) for t in self.losses]
        r.losses = [v for v in values if v is not None]
        if r.failure is None and any(not math.isfinite(v) for v in r.losses):
            r.failure = Failure(category=FailureCategory.numerics,
                                reason="the loss became NaN or infinite in the first steps")
        return r


def run(spec: TrialSpec, *, is_rank: bool = False) -> int:
    runtime = TrialRuntime(spec, is_rank=is_rank)
    report = runtime.report
    script = str(Path(spec.script).resolve())
    os.chdir(spec.cwd)
    sys.argv = [script, *spec.args]
    sys.path.insert(0, str(Path(script).parent))
    _seed(spec.seed)
    api._install(runtime)
    try:
        runtime.install()
        runtime.started_at = time.perf_counter()
        runpy.run_path(script, run_name="__main__")
        report.finished = True
    except BaseException as exc:
        record_end(report, exc)
    finally:
        write_report(runtime, ranks.report_path(spec, is_rank))
    return 0 if report.failure is None else 1


def _seed(seed: int) -> None:
    import random

    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass
    import torch

    torch.manual_seed(seed)


def _rank_stop(spec: TrialSpec, is_rank: bool) -> RankStop:
    """How this process stops with the other ranks: through their node's folder, or, where the trial
    spans several nodes, through node 0's store (torchrun gives every rank its address)."""
    if is_rank and spec.node is not None:
        return StoreStop(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    return RankStop(spec.ranks_dir if is_rank else None)


def _exit_with_parent() -> None:
    """End this trial if the process that launched it dies (a killed driver or worker, or the
    torchrun agent of a rank): the kernel ends it even while it is stopped, and the watch below
    where the kernel cannot (off Linux)."""
    die_with_parent()
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="autotune-parent-watch", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    _exit_with_parent()
    if len(argv) != 1:
        sys.stderr.write("usage: python -m autotune.harness SPEC.json\n")
        sys.exit(2)
    spec = TrialSpec.model_validate_json(Path(argv[0]).read_text())
    is_rank = ranks.is_torchrun_rank(spec)
    if is_rank:
        ranks.apply_rank_env(spec)
    code = run(spec, is_rank=is_rank)
    # Skip interpreter teardown: a backend's atexit handlers or a stuck DataLoader worker must not
    # turn a finished trial into a hang. The launcher kills what is left of the process group.
    os._exit(code)


if __name__ == "__main__":
    main()
