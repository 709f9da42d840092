"""The runtime knobs as they are applied inside the user's process: one implementation for a trial
(``harness.py``, which also measures) and for a production run of the tuned configuration
(``apply.py``, which only applies), so that the job that runs afterwards gets exactly what the
trial measured.

Each function changes one thing the script made (its DataLoader's arguments, its device loader's
``batches_per_execution``, its model) and adds the knobs it found something to act on to
``applied``: a knob that never found its object never reached the script.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
import time
from importlib import metadata
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any, Callable

from autotune.records import CompileSpec, RuntimeKnobs, TraceSpec
from autotune.harness.tensors import cast_floats, input_dtype, module_device_type

if TYPE_CHECKING:
    import torch
    from torch_xla.distributed.parallel_loader import ParallelLoader


#: The DataLoader's knobs, each with the value a DataLoader given none uses.
LOADER_DEFAULTS = {"batch_size": 1, "num_workers": 0}


def set_loader_arguments(arguments: dict[str, Any], knobs: RuntimeKnobs, applied: set[str],
                         own: dict[str, list[int]] | None = None) -> None:
    """A ``DataLoader(...)`` call's bound arguments with the configuration's batch size and
    workers. ``own`` gathers what the script gave (:attr:`HarnessReport.script_loader`) first."""
    if own is not None:
        for name, default in LOADER_DEFAULTS.items():
            value = arguments.get(name, default)
            if name == "batch_size" and (arguments.get("batch_sampler") is not None or value is None):
                continue  # the loader batches with a sampler of its own: no batch size of its own
            if isinstance(value, int) and value not in own.setdefault(name, []):
                own[name].append(value)
    if knobs.batch_size is not None and arguments.get("batch_sampler") is None:
        arguments["batch_size"] = knobs.batch_size
        applied.add("batch_size")
    if knobs.num_workers is not None:
        arguments["num_workers"] = knobs.num_workers
        applied.add("num_workers")
        if knobs.num_workers == 0:
            # These options are only valid with worker processes.
            arguments.pop("prefetch_factor", None)
            arguments.pop("persistent_workers", None)


def patch_loader(knobs: RuntimeKnobs, applied: set[str], own: dict[str, list[int]] | None = None) -> None:
    """Every ``DataLoader`` made from now on takes the configuration's batch size and workers
    (and tells ``own`` what the script gave it)."""
    from torch.utils.data import DataLoader

    orig_init = DataLoader.__init__
    signature = inspect.signature(orig_init)

    def init(loader: DataLoader[object], *args: object, **kwargs: object) -> None:
        bound = signature.bind(loader, *args, **kwargs)
        set_loader_arguments(bound.arguments, knobs, applied, own)
        orig_init(*bound.args, **bound.kwargs)

    DataLoader.__init__ = init  # type: ignore[method-assign]


def patch_device_loader(parallel_loader: ModuleType, batches_per_execution: int | None, applied: set[str]) -> None:
    """torch-xla's ``ParallelLoader`` (and ``MpDeviceLoader``, which makes one) traces
    ``batches_per_execution`` steps into one graph."""
    if batches_per_execution is None:
        return
    orig_init = parallel_loader.ParallelLoader.__init__
    signature = inspect.signature(orig_init)

    def init(loader: ParallelLoader, *args: object, **kwargs: object) -> None:
        bound = signature.bind(loader, *args, **kwargs)
        bound.arguments["batches_per_execution"] = batches_per_execution
        applied.add("batches_per_execution")
        orig_init(*bound.args, **bound.kwargs)

    parallel_loader.ParallelLoader.__init__ = init


def compile_kwargs(spec: CompileSpec) -> dict[str, Any]:
    """``torch.compile``'s arguments for ``spec``."""
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


def patch_torch_compile(spec: CompileSpec, applied: set[str], on_compile: Callable[[], None]) -> Callable[..., Any]:
    """A script that compiles its model itself gets the configuration's options instead of its own
    (``eager`` undoes its compile); returns torch's own ``torch.compile``."""
    import torch

    orig_compile = torch.compile

    def compile_(model: Callable[..., object] | None = None, **_user_kwargs: object) -> Callable[..., object]:
        if model is None:
            return lambda m: compile_(m)
        on_compile()
        applied.add("compile")
        if spec.backend == "eager":
            return model
        return orig_compile(model, **compile_kwargs(spec))

    torch.compile = compile_
    return orig_compile


def prepare_model(target: torch.nn.Module, knobs: RuntimeKnobs, applied: set[str], orig_compile: Callable[..., Any] | None,
                  compiled_by_script: bool) -> Callable[..., Any] | None:
    """Cast the model (its parameters, and its floating inputs and outputs back) and wrap its
    forward in autocast, as the configuration says; returns the model's call compiled as the
    configuration compiles it, to set as its ``_compiled_call_impl``, or ``None`` where nothing is
    compiled here (no compile, ``eager``, or the script compiled the model itself, with the
    configuration's options)."""
    import torch

    applied.update(("compile", "autocast_dtype", "autocast_device", "model_dtype"))
    if knobs.model_dtype:
        dtype = getattr(torch, knobs.model_dtype)
        target.to(dtype)

        input_dtypes: list[torch.dtype | None] = []

        def cast_inputs(_mod: torch.nn.Module, args: tuple, kwargs: dict) -> tuple:
            input_dtypes.append(input_dtype(args, kwargs))
            return cast_floats(args, dtype), cast_floats(kwargs, dtype)

        def cast_outputs(_mod: torch.nn.Module, _args: tuple, _kwargs: dict, out: object) -> object:
            return cast_floats(out, input_dtypes.pop() if input_dtypes else None)

        target.register_forward_pre_hook(cast_inputs, with_kwargs=True)
        target.register_forward_hook(cast_outputs, with_kwargs=True)
    if knobs.autocast_dtype:
        device = knobs.autocast_device or module_device_type(target)
        dtype = getattr(torch, knobs.autocast_dtype)
        forward = target.forward

        def autocast_forward(*args: object, **kwargs: object) -> object:
            with torch.autocast(device_type=device, dtype=dtype):
                out = forward(*args, **kwargs)
            return cast_floats(out, input_dtype(args, kwargs))

        target.forward = autocast_forward
    spec = knobs.compile
    if spec is None or spec.backend == "eager" or compiled_by_script or orig_compile is None:
        return None
    return compiled_call(target, spec, orig_compile)


def compiled_call(target: torch.nn.Module, spec: CompileSpec, orig_compile: Callable[..., Any]) -> Callable[..., Any]:
    """The model's call compiled with ``spec``, to set as its ``_compiled_call_impl``.

    Compiled in place, as ``Module.compile()`` does, so that the script keeps calling the object it
    holds. ``Module.compile()`` itself compiles ``Module._call_impl``, a frame in torch/nn that
    dynamo skips: a built-in container (``nn.Sequential``) would then never be compiled. Starting
    from a frame of ours makes dynamo inline the module instead."""
    call_impl = target._call_impl

    def run_model(*args: object, **kwargs: object) -> object:
        return call_impl(*args, **kwargs)

    return orig_compile(run_model, **compile_kwargs(spec))


class TracedModels:
    """``torch_neuronx.trace`` with the configuration's compiler settings: each call merges them into
    the script's ``compiler_args`` (the configuration's value of a setting wins), and, where the
    trial has a cache of traced models, loads a model traced before with the same arguments
    instead of compiling it again (the traced module is TorchScript: ``torch.jit.save``/``load``).

    ``torch_neuronx.DataParallel`` (the model on every NeuronCore the process holds) and
    ``torch_neuronx.dynamic_batch`` (requests of other batch sizes than the example's) are applied
    as the configuration says: to the traced model where it turns them on, and the script's own
    calls passed through or skipped where it turns them off. ``on_traced`` gets whatever serves."""

    def __init__(self, spec: TraceSpec, flags: str, applied: set[str], on_traced: Callable[[torch.nn.Module], torch.nn.Module],
                 on_replaced: Callable[[list[str]], None]) -> None:
        self.spec = spec
        #: The configuration's compiler flags (its ``NEURON_CC_FLAGS``), whose settings trace takes.
        self.flags = flags
        self.applied = applied
        self.on_traced = on_traced
        self.on_replaced = on_replaced
        self.loaded = 0
        self.traced = 0
        self.trace_seconds = 0.0
        #: What the configuration made of a traced model, which the script's own call leaves as is.
        self._made: list[torch.nn.Module] = []

    def patch(self, neuronx: ModuleType) -> None:
        from autotune.targets.neuron.flags import merge_compiler_args

        orig_trace = neuronx.trace
        # Either may be missing from an older torch-neuronx; each is wrapped only where it exists.
        orig_parallel: Any = getattr(neuronx, "DataParallel", None)
        orig_dynamic: Any = getattr(neuronx, "dynamic_batch", None)
        spec = self.spec

        def parallel(model: torch.nn.Module, *args: object, **kwargs: object) -> torch.nn.Module:
            bound = inspect.signature(orig_parallel).bind(model, *args, **kwargs)
            if spec.dynamic_batch is not None:
                bound.arguments["set_dynamic_batching"] = spec.dynamic_batch
                self.applied.add("trace")
            return orig_parallel(*bound.args, **bound.kwargs)

        def serve(traced: torch.nn.Module) -> torch.nn.Module:
            if spec.data_parallel and orig_parallel is not None:
                traced = parallel(traced)
                self._made.append(traced)
            elif spec.dynamic_batch and orig_dynamic is not None:
                traced = orig_dynamic(traced)
                self._made.append(traced)
            return self.on_traced(traced)

        def data_parallel(model: torch.nn.Module, *args: object, **kwargs: object) -> torch.nn.Module:
            if spec.data_parallel is False or any(model is m for m in self._made):
                self.applied.add("trace")
                return self.on_traced(model)
            return self.on_traced(parallel(model, *args, **kwargs))

        def dynamic_batch(model: torch.nn.Module, *args: object, **kwargs: object) -> torch.nn.Module:
            if spec.dynamic_batch is False or any(model is m for m in self._made):
                self.applied.add("trace")
                return self.on_traced(model)
            return self.on_traced(orig_dynamic(model, *args, **kwargs))

        if orig_parallel is not None:
            setattr(neuronx, "DataParallel", data_parallel)
        if orig_dynamic is not None:
            setattr(neuronx, "dynamic_batch", dynamic_batch)

        def trace(func: Callable[..., Any], example_inputs: object, *args: object, **kwargs: Any) -> torch.nn.Module:
            merged, replaced = merge_compiler_args(self.flags, kwargs.get("compiler_args"))
            kwargs["compiler_args"] = merged
            self.applied.add("trace")
            if replaced:
                self.on_replaced(replaced)
            saved = self._artifact(func, example_inputs, kwargs)
            if saved is not None and saved.exists():
                import torch

                self.loaded += 1
                return serve(torch.jit.load(str(saved)))
            started = time.perf_counter()
            traced = orig_trace(func, example_inputs, *args, **kwargs)
            self.trace_seconds += time.perf_counter() - started
            self.traced += 1
            if saved is not None:
                _save_traced(traced, saved)
            return serve(traced)

        setattr(neuronx, "trace", trace)

    def _artifact(self, func: Callable[..., Any], example_inputs: object, kwargs: dict[str, Any]) -> Path | None:
        """Where a model traced from ``func`` with these arguments is kept: keyed like a NEFF, by
        what is compiled (the module, its weights, which a traced model holds, and the example
        inputs' shapes) and how (the compiler arguments and the versions that compile); ``None``
        for a callable that is no module, whose closure no key can see."""
        import torch

        if self.spec.cache_dir is None or not isinstance(func, torch.nn.Module):
            return None
        key = hashlib.sha256()
        for package in ("torch", "torch-neuronx", "neuronx-cc"):
            key.update(f"{package}={_version(package)};".encode())
        key.update(repr(sorted((k, repr(v)) for k, v in kwargs.items() if k != "compiler_workdir")).encode())
        key.update(f"{type(func).__module__}.{type(func).__qualname__}\n{func!r}".encode())
        for name, tensor in func.state_dict().items():
            key.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
            key.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        inputs: tuple[Any, ...] | list[Any] = (example_inputs if isinstance(example_inputs, (tuple, list))
                                               else (example_inputs,))
        key.update(repr([(tuple(t.shape), str(t.dtype)) if hasattr(t, "shape") else repr(t) for t in inputs]).encode())
        return Path(self.spec.cache_dir) / f"{key.hexdigest()}.pt"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


def _save_traced(traced: torch.jit.ScriptModule, path: Path) -> None:
    """Saved through a temporary file renamed into place: a trial killed while saving leaves no
    half-written model that the next one would load."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.jit.save(traced, str(tmp))
    os.replace(tmp, path)


def replaces(configured: str, value: str | None, is_flags: bool) -> bool:
    """Whether writing ``value`` to a variable the configuration set to ``configured`` replaces the
    configuration's value: a flag variable may gain flags around the configuration's, any other
    must keep its value."""
    if value is None:
        return True
    return configured not in value if is_flags else value != configured


def watch_env(configured: dict[str, str], flags_env: str | None,
              on_override: Callable[[str, str | None, str], None]) -> None:
    """Call ``on_override(name, value, where)`` when code of the process replaces or removes one of
    the ``configured`` env vars (``os.environ["NEURON_CC_FLAGS"] = "..."``, ``update``, ``pop``,
    ``del``): the compiler or backend then reads the script's value, not the configuration's.
    ``where`` is the file and line that did it."""
    if not configured:
        return
    environ_type = type(os.environ)
    orig_set, orig_del = environ_type.__setitem__, environ_type.__delitem__

    def check(name: str, value: str | None) -> None:
        if name in configured and replaces(configured[name], value, name == flags_env):
            on_override(name, value, _caller())

    def setitem(mapping: os._Environ[str], key: str, value: str) -> None:
        orig_set(mapping, key, value)
        if mapping is os.environ:
            check(key, value)

    def delitem(mapping: os._Environ[str], key: str) -> None:
        orig_del(mapping, key)
        if mapping is os.environ:
            check(key, None)

    environ_type.__setitem__ = setitem  # type: ignore[method-assign]
    environ_type.__delitem__ = delitem  # type: ignore[method-assign]


def _caller() -> str:
    """The first frame outside ``os``, the mapping ABCs and this module: who wrote the variable."""
    skipped = {os.__file__, __file__, getattr(sys.modules.get("_collections_abc"), "__file__", "")}
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename in skipped:
        frame = frame.f_back
    if frame is None:
        return "unknown"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
