"""The harness: runs inside the trial process, around the user's unmodified script.

``python -m autotune.workers.harness SPEC.json`` reads a :class:`TrialSpec`, installs its interceptions,
runs the script as ``__main__`` and writes a :class:`HarnessReport` to ``spec.result_path``.

What it intercepts, and why:

- ``DataLoader(...)``: the trial's ``batch_size`` and ``num_workers`` replace the script's.
- ``ParallelLoader``/``MpDeviceLoader`` (torch-xla): the trial's ``batches_per_execution``.
- Iteration of a data loader on the main thread (or ``autotune.step()``, or as a last resort an
  optimizer step): a step boundary, where the step clock takes its timestamps.
- ``torch_xla.sync``: tells the clock where lazy graphs were cut, so that windows end on a cut.
- ``torch.nn.Module.__call__``, until the first call of a module with parameters: that module is
  the model; the harness casts it, wraps its forward in autocast, or compiles it, as the plan says.
- ``torch.compile``: a script that compiles its model itself gets the trial's options instead.
- ``Tensor.backward``: the first losses (for the numerics guard) and a NaN check at window edges.

The env vars of the plan were set by the launcher before this process started, since
``XLA_FLAGS``, ``PJRT_DEVICE`` and ``NEURON_CC_FLAGS`` are read when the backend loads.
"""

from __future__ import annotations

import inspect
import math
import os
import runpy
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from autotune import api
from autotune.atomic_file import write_atomic
from autotune.measurement.failures import classify
from autotune.measurement.windows import Window, cannot_win, estimate, percentile, without_compiles
from autotune.records import (
    CompileSpec,
    Failure,
    FailureCategory,
    HarnessReport,
    Measurement,
    TrialSpec,
)
from autotune.targets import failure_patterns
from autotune.workers import isa_probe


class TrialComplete(BaseException):
    """Raised at a step boundary once the estimate has converged, to end the user's loop.

    A ``BaseException`` so that a script's ``except Exception`` does not swallow it.
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

    def __init__(self, runtime: TrialRuntime) -> None:
        self.rt = runtime
        self.protocol = runtime.spec.protocol
        self.lazy = runtime.spec.plan.knobs.lazy_device
        self._reset(source=None)

    def _reset(self, source: str | None) -> None:
        self.source = source  # "explicit", "loader" or "optimizer": the first kind seen delimits steps
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
        self.synced = True  # a graph cut happened since the last boundary
        self.done = False
        self.converged = False
        self.pruned = False
        self.sample_counts: list[float] = []
        self._last_aligned_step = 0

    # -- events ----------------------------------------------------------------------------
    def boundary(self, source: str, samples: float | None) -> None:
        if self.done or threading.current_thread() is not threading.main_thread():
            return
        if self.source is None:
            self.source = source
        elif source == "explicit" and self.source != "explicit":
            self._reset(source)  # the script marks its own steps: start measuring again on those
        elif source != self.source:
            return
        self.steps += 1
        if samples is None:
            samples = self.sample_counts[-1] if self.sample_counts else 1.0
        self.sample_counts.append(float(samples))
        aligned = self.synced or not self.lazy
        if self.warming:
            self._warmup_boundary(aligned)
        else:
            self._measure_boundary(aligned, samples)
        if aligned:
            self.synced = False

    def on_sync(self) -> None:
        self.synced = True

    # -- phases ----------------------------------------------------------------------------
    def _warmup_boundary(self, aligned: bool) -> None:
        now = self._now(wait=aligned)
        if self.first_step_at is None:
            self.first_step_at = now
        if not aligned:
            return
        compiles = self.rt.compiled_graphs()
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
            self.warming = False
            self.warmup_steps = self.steps
            self.warmup_seconds = now - (self.rt.started_at or now)
            self.step_times = []
            self._open_window(now)
            self.measure_started = now

    def _measure_boundary(self, aligned: bool, samples: float) -> None:
        now = time.perf_counter()
        if self.last_boundary is not None:
            self.step_times.append(now - self.last_boundary)
        self.last_boundary = now
        self.window_samples += samples
        self.measure_steps += 1
        p = self.protocol
        capped = (self.measure_steps >= p.max_measure_steps
                  or now - (self.measure_started or now) >= p.max_measure_seconds)
        # A window ends by time (steps may speed up or slow down after warm-up), and on a lazy
        # device only where a graph was cut.
        if not aligned or (not capped and now - (self.window_start or now) < p.min_window_seconds):
            return
        self._close_window(now)
        self.rt.check_numerics()
        est = estimate(without_compiles(self.windows))
        enough = (est is not None and est.windows_used >= p.min_windows and est.rel_half_width <= p.rel_ci)
        if not enough and not capped and cannot_win(est, p.stop_below):
            self.pruned = capped = True
        if enough or capped:
            if self.lazy:
                # The last window ends when the device has finished its work, not when the host
                # has merely queued it.
                end = self._now(wait=True)
                last = self.windows[-1]
                self.windows[-1] = Window(last.steps, last.samples, last.seconds + (end - now), last.compiles)
                est = estimate(without_compiles(self.windows))
                enough = est is not None and est.windows_used >= p.min_windows and est.rel_half_width <= p.rel_ci
            self.converged = bool(enough)
            self.done = True
            if not p.run_to_end:
                raise TrialComplete()
        else:
            self._open_window(now)

    def _open_window(self, now: float) -> None:
        self.window_start = now
        self.window_first_step = self.steps
        self.window_samples = 0.0
        self.window_compiles_at_start = self.rt.compiled_graphs()

    def _close_window(self, now: float) -> None:
        assert self.window_start is not None
        steps = self.steps - self.window_first_step
        self.windows.append(Window(steps, self.window_samples, now - self.window_start,
                                   self.rt.compiled_graphs() - self.window_compiles_at_start))

    def _now(self, wait: bool) -> float:
        if wait:
            self.rt.wait_device()
        return time.perf_counter()

    def finish(self) -> None:
        """The script ended: the window it was in counts, if it holds a step past warm-up."""
        if self.done or self.warming or self.window_start is None or self.steps <= self.window_first_step:
            return
        now = self._now(wait=self.lazy)
        self._close_window(now)
        self.done = True

    # -- result ----------------------------------------------------------------------------
    def measurement(self) -> Measurement | None:
        steady = without_compiles(self.windows)
        est = estimate(steady)
        if est is None:
            return None
        used = steady[est.truncated:]
        steps = sum(w.steps for w in used)
        return Measurement(
            throughput=est.throughput,
            ci95_low=est.ci_low,
            ci95_high=est.ci_high if math.isfinite(est.ci_high) else est.throughput * 10,
            step_time_median=percentile(self.step_times, 0.5),
            step_time_p90=percentile(self.step_times, 0.9),
            samples_per_step=sum(w.samples for w in used) / max(1, steps),
            steps_measured=steps,
            windows=len(used),
            converged=self.converged,
            warmup_steps=self.warmup_steps,
            warmup_seconds=self.warmup_seconds,
            pruned=self.pruned,
        )

    @property
    def graphs_after_warmup(self) -> int:
        return sum(w.compiles for w in self.windows)


class TrialRuntime:
    """The state of one trial inside its process, and the interceptions that feed it."""

    def __init__(self, spec: TrialSpec) -> None:
        self.spec = spec
        self.plan = spec.plan
        self.knobs = spec.plan.knobs
        self.report = HarnessReport()
        self.clock = StepClock(self)
        self.started_at: float | None = None
        self.losses: list[Any] = []
        self.last_loss: Any = None
        self.model: Any = None
        self.user_compiled = False
        self._xla = None
        self._root_hook_installed = False
        self._orig_module_call: Callable | None = None
        self.params = dict(spec.plan.params)

    # -- the optional API (autotune.report / autotune.step) ----------------------------------
    def on_report(self, metrics: dict[str, float]) -> None:
        self.report.metrics.update(metrics)

    def on_step(self, samples: int | None) -> None:
        self.clock.boundary("explicit", samples)

    # -- device ------------------------------------------------------------------------------
    def wait_device(self) -> None:
        if self._xla is not None:
            import torch_xla

            # Only a runtime the script started: waiting would otherwise start one (and pick a
            # device) for a script that never touched XLA.
            if torch_xla._XLAC._xla_runtime_is_initialized():
                self._xla.wait_device_ops()
        elif "torch" in sys.modules:
            import torch

            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()

    def compiled_graphs(self) -> int:
        total = 0
        if "torch_xla" in sys.modules:
            import torch_xla.debug.metrics as met

            total += met.counter_value("UncachedCompile") or 0
        if "torch._dynamo" in sys.modules:
            from torch._dynamo.utils import counters

            total += counters["stats"].get("unique_graphs", 0)
        return total

    def compile_seconds(self) -> float | None:
        seconds = None
        if "torch_xla" in sys.modules:
            import torch_xla.debug.metrics as met

            data = met.metric_data("CompileTime")
            if data:
                seconds = (seconds or 0.0) + data[1] / 1e9
        if "torch._dynamo" in sys.modules:
            from torch._dynamo.utils import calculate_time_spent

            # A training graph's backward is compiled at its first backward() call, outside
            # the frame compile; a cache hit loads both at the first forward.
            times = calculate_time_spent()
            spent = times.get("entire_frame_compile", 0.0) + times.get("entire_backward_compile", 0.0)
            if spent:
                seconds = (seconds or 0.0) + spent
        return seconds

    def cache_counts(self) -> tuple[int | None, int | None]:
        if "torch._dynamo" in sys.modules:
            from torch._dynamo.utils import counters

            ind = counters["inductor"]
            hits, misses = ind.get("fxgraph_cache_hit", 0), ind.get("fxgraph_cache_miss", 0)
            if hits or misses:
                return hits, misses
        return None, None

    def check_numerics(self) -> None:
        if self.last_loss is None:
            return
        value = _to_float(self.last_loss)
        if value is not None and not math.isfinite(value):
            raise NumericsFailure(f"loss became {value} at step {self.clock.steps}")

    # -- interceptions -----------------------------------------------------------------------
    def install(self) -> None:
        import torch

        if self.knobs.threads:
            torch.set_num_threads(self.knobs.threads)
        self._patch_dataloader(torch)
        self._patch_backward(torch)
        self._patch_optimizer(torch)
        if self.knobs.compile is not None:
            self._patch_torch_compile(torch)
            if self.knobs.compile.backend == "inductor":
                isa_probe.install(os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
        if self.knobs.compile is not None or self.knobs.model_dtype or self.knobs.autocast_dtype:
            self._install_root_hook(torch)
        if self.knobs.lazy_device or "torch_xla" in sys.modules:
            self._patch_xla()

    def _patch_dataloader(self, torch: Any) -> None:
        from torch.utils.data import DataLoader
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        knobs = self.knobs
        orig_init = DataLoader.__init__
        signature = inspect.signature(orig_init)

        def init(loader: Any, *args: Any, **kwargs: Any) -> None:
            bound = signature.bind(loader, *args, **kwargs)
            a = bound.arguments
            if knobs.batch_size is not None and a.get("batch_sampler") is None:
                a["batch_size"] = knobs.batch_size
            if knobs.num_workers is not None:
                a["num_workers"] = knobs.num_workers
                if knobs.num_workers == 0:
                    # These options are only valid with worker processes.
                    a.pop("prefetch_factor", None)
                    a.pop("persistent_workers", None)
            orig_init(*bound.args, **bound.kwargs)

        DataLoader.__init__ = init  # type: ignore[method-assign]
        orig_next = _BaseDataLoaderIter.__next__
        clock = self.clock

        def next_(it: Any) -> Any:
            batch = orig_next(it)
            clock.boundary("loader", _batch_len(batch))
            return batch

        _BaseDataLoaderIter.__next__ = next_  # type: ignore[method-assign]

    def _patch_backward(self, torch: Any) -> None:
        orig = torch.Tensor.backward
        runtime = self
        keep = self.spec.protocol.losses_recorded

        def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if tensor.numel() == 1:
                loss = tensor.detach()
                runtime.last_loss = loss
                if len(runtime.losses) < keep:
                    runtime.losses.append(loss)
            return orig(tensor, *args, **kwargs)

        torch.Tensor.backward = backward

    def _patch_optimizer(self, torch: Any) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        clock = self.clock
        register_optimizer_step_post_hook(lambda opt, args, kwargs: clock.boundary("optimizer", None))

    def _patch_xla(self) -> None:
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.distributed.parallel_loader as pl

        self._xla = xm
        clock = self.clock
        orig_sync = torch_xla.sync

        def sync(*args: Any, **kwargs: Any) -> Any:
            out = orig_sync(*args, **kwargs)
            clock.on_sync()
            return out

        torch_xla.sync = sync
        bpe = self.knobs.batches_per_execution
        if bpe is not None:
            orig_pl_init = pl.ParallelLoader.__init__

            def pl_init(loader: Any, *args: Any, **kwargs: Any) -> None:
                bound = inspect.signature(orig_pl_init).bind(loader, *args, **kwargs)
                bound.arguments["batches_per_execution"] = bpe
                orig_pl_init(*bound.args, **bound.kwargs)

            pl.ParallelLoader.__init__ = pl_init
        orig_dev_next = pl.PerDeviceLoader.__next__

        def dev_next(it: Any) -> Any:
            batch = orig_dev_next(it)
            clock.boundary("loader", _batch_len(batch))
            return batch

        pl.PerDeviceLoader.__next__ = dev_next

    def _compile_kwargs(self, spec: CompileSpec) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"backend": spec.backend, "fullgraph": spec.fullgraph, "dynamic": spec.dynamic}
        if spec.backend == "inductor":
            if spec.options:
                # torch.compile takes either a mode or options; a mode is a set of options.
                import torch._inductor

                # list_mode_options(None) returns every mode's table, not the default mode's.
                mode_options = torch._inductor.list_mode_options(spec.mode or "default", spec.dynamic)
                kwargs["options"] = {**mode_options, **spec.options}
            elif spec.mode:
                kwargs["mode"] = spec.mode
        return kwargs

    def _patch_torch_compile(self, torch: Any) -> None:
        spec = self.knobs.compile
        assert spec is not None
        orig_compile = torch.compile
        runtime = self

        def compile_(model: Any = None, **_user_kwargs: Any) -> Any:
            if model is None:
                return lambda m: compile_(m)
            runtime.user_compiled = True
            if spec.backend == "eager":
                return model
            return orig_compile(model, **runtime._compile_kwargs(spec))

        torch.compile = compile_
        self._orig_torch_compile = orig_compile

    def _install_root_hook(self, torch: Any) -> None:
        """Find the model: the first module with parameters called on the main thread."""
        Module = torch.nn.Module
        orig_call = Module.__call__
        self._orig_module_call = orig_call
        runtime = self

        def call(module: Any, *args: Any, **kwargs: Any) -> Any:
            if (threading.current_thread() is threading.main_thread()
                    and next(module.parameters(), None) is not None):
                Module.__call__ = orig_call
                runtime._prepare_model(module)
                return module(*args, **kwargs)
            return orig_call(module, *args, **kwargs)

        Module.__call__ = call

    def _prepare_model(self, module: Any) -> None:
        import torch

        target = getattr(module, "_orig_mod", module)  # a model the script compiled itself
        self.model = target
        knobs = self.knobs
        if knobs.model_dtype:
            dtype = getattr(torch, knobs.model_dtype)
            target.to(dtype)

            input_dtypes: list[Any] = []

            def cast_inputs(_mod: Any, args: tuple, kwargs: dict) -> tuple:
                input_dtypes.append(_input_dtype(args, kwargs))
                return _cast_floats(args, dtype), _cast_floats(kwargs, dtype)

            def cast_outputs(_mod: Any, _args: tuple, _kwargs: dict, out: Any) -> Any:
                return _cast_floats(out, input_dtypes.pop() if input_dtypes else None)

            target.register_forward_pre_hook(cast_inputs, with_kwargs=True)
            target.register_forward_hook(cast_outputs, with_kwargs=True)
        if knobs.autocast_dtype:
            device = knobs.autocast_device or _module_device_type(target)
            dtype = getattr(torch, knobs.autocast_dtype)
            forward = target.forward

            def autocast_forward(*args: Any, **kwargs: Any) -> Any:
                with torch.autocast(device_type=device, dtype=dtype):
                    out = forward(*args, **kwargs)
                return _cast_floats(out, _input_dtype(args, kwargs))

            target.forward = autocast_forward
        spec = knobs.compile
        if spec is not None and spec.backend != "eager" and not self.user_compiled:
            # Compiled in place, as Module.compile() does, so that the script keeps calling the
            # object it holds. Module.compile() itself compiles Module._call_impl, a frame in
            # torch/nn that dynamo skips: a built-in container (nn.Sequential) would then never
            # be compiled. Starting from a frame of ours makes dynamo inline the module instead.
            call_impl = target._call_impl

            def run_model(*args: Any, **kwargs: Any) -> Any:
                return call_impl(*args, **kwargs)

            target._compiled_call_impl = self._orig_torch_compile(run_model, **self._compile_kwargs(spec))
            self.user_compiled = True

    # -- result ------------------------------------------------------------------------------
    def finalize(self) -> HarnessReport:
        r = self.report
        r.steps_seen = self.clock.steps
        try:
            self.clock.finish()
            r.measurement = self.clock.measurement()
        except Exception as exc:  # a bug in the statistics must not lose the rest of the result
            r.error = r.error or f"measurement failed: {exc!r}"
        r.compile.graphs_compiled = self.compiled_graphs()
        r.compile.graphs_after_warmup = self.clock.graphs_after_warmup
        r.compile.compile_seconds = self.compile_seconds()
        r.compile.cache_hits, r.compile.cache_misses = self.cache_counts()
        values = [_to_float(t) for t in self.losses]
        r.losses = [v for v in values if v is not None]
        if r.failure is None and any(not math.isfinite(v) for v in r.losses):
            r.failure = Failure(category=FailureCategory.numerics,
                                reason="the loss became NaN or infinite in the first steps")
        return r


def _to_float(t: Any) -> float | None:
    try:
        return float(t.float().cpu().item()) if hasattr(t, "cpu") else float(t)
    except Exception:
        return None


def _batch_len(batch: Any) -> int | None:
    """The number of samples in a batch: the leading dim of its first tensor."""
    stack = [batch]
    while stack:
        item = stack.pop(0)
        shape = getattr(item, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return None


def _input_dtype(args: tuple, kwargs: dict) -> Any:
    """The dtype of the first floating tensor among a call's arguments."""
    import torch

    for value in [*args, *kwargs.values()]:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.dtype
    return None


def _cast_floats(value: Any, dtype: Any) -> Any:
    """``value`` with its floating tensors (in tuples, lists, dicts) cast to ``dtype``.

    The model runs in low precision, but the script computes its loss outside the model against
    targets of the original dtype, as it did before; outputs go back to the inputs' dtype so that
    such a loss (``mse_loss(out, y)``) and its backward work unchanged.
    """
    import torch

    if dtype is None:
        return value
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() and value.dtype != dtype else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_cast_floats(v, dtype) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_floats(v, dtype) for v in value)
    if isinstance(value, dict):
        return type(value)({k: _cast_floats(v, dtype) for k, v in value.items()})
    return value


def _module_device_type(module: Any) -> str:
    p = next(module.parameters(), None)
    return p.device.type if p is not None else "cpu"


def run(spec: TrialSpec) -> int:
    runtime = TrialRuntime(spec)
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
    except TrialComplete:
        report.finished = True
        report.stopped_early = True
    except NumericsFailure as exc:
        report.failure = Failure(category=FailureCategory.numerics, reason=str(exc))
    except SystemExit as exc:
        code = exc.code
        if code in (0, None):
            report.finished = True
        else:
            report.error = f"SystemExit({code!r})"
            report.failure = Failure(category=FailureCategory.script_error,
                                     reason=f"the script exited with {code!r}", exit_code=code if isinstance(code, int) else 1)
    except BaseException as exc:  # anything the script raised becomes a categorised failure
        text = "".join(traceback.format_exception(exc))
        sys.stderr.write(text)
        report.error = f"{type(exc).__name__}: {exc}"[:2000]
        default = FailureCategory.host_oom if isinstance(exc, MemoryError) else FailureCategory.script_error
        report.failure = classify(text, failure_patterns(), default=default,
                                  default_reason=f"the script raised {type(exc).__name__}")
    finally:
        try:
            runtime.finalize()
        except BaseException as exc:
            report.error = report.error or f"harness finalize failed: {exc!r}"
        write_atomic(spec.result_path, report.model_dump_json())
        sys.stdout.flush()
        sys.stderr.flush()
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


def _exit_with_parent() -> None:
    """End this trial if the process that launched it dies (a killed driver or worker)."""
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
        sys.stderr.write("usage: python -m autotune.workers.harness SPEC.json\n")
        sys.exit(2)
    spec = TrialSpec.model_validate_json(Path(argv[0]).read_text())
    code = run(spec)
    # Skip interpreter teardown: a backend's atexit handlers or a stuck DataLoader worker must not
    # turn a finished trial into a hang. The launcher kills what is left of the process group.
    os._exit(code)


if __name__ == "__main__":
    main()
