"""The script's model, as the harness finds, prepares and times it.

The model is the first module with parameters that the training thread calls: its FLOPs are
counted on that first call, before the trial's casts and compile change it; then the plan's casts,
autocast and compile are applied (:func:`~autotune.harness.knobs.prepare_model`) and each later
call is a step boundary of the weakest kind. A script that traces its model for Neuron
(``torch_neuronx.trace``) is served by the traced model instead: each of its calls is a request,
timed as a step that has run on the device when the call returns.
"""

from __future__ import annotations

import sys
import threading
import weakref
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from autotune.records import RuntimeKnobs
from autotune.harness import knobs as runtime_knobs
from autotune.harness.apply import after_import
from autotune.harness.flops import model_flops_per_sample
from autotune.harness.timing.step_clock import StepClock, TimedTrial
from autotune.harness.tensors import batch_len

if TYPE_CHECKING:
    import torch


class ScriptModel:
    """The model of the script that ``trial`` runs; ``applied`` collects the knobs applied to it,
    ``notes`` what the trial's report should say of it."""

    def __init__(self, trial: TimedTrial, clock: StepClock, knobs: RuntimeKnobs, applied: set[str],
                 notes: list[str]) -> None:
        self.trial = trial
        self.clock = clock
        self.knobs = knobs
        self.applied = applied
        self.notes = notes
        #: The model once found (or the traced model that serves).
        self.module: torch.nn.Module | None = None
        #: The script compiled its model itself (``torch.compile``, which gets the trial's options).
        self.user_compiled = False
        #: The model's FLOPs per sample (:mod:`~autotune.harness.flops`), once its first call counted them.
        self.flops_per_sample: float | None = None
        self.device: str | None = None
        self.traced_models: runtime_knobs.TracedModels | None = None
        self._orig_module_call: Callable | None = None
        self._orig_torch_compile: Callable | None = None
        #: The traced model that serves the script's requests (or what wraps it), whose calls are timed.
        self._serving: Callable[[], torch.nn.Module | None] = lambda: None
        self._timed_classes: set[type] = set()

    def patch_torch_compile(self) -> None:
        assert self.knobs.compile is not None

        def compiled_by_script() -> None:
            self.user_compiled = True

        self._orig_torch_compile = runtime_knobs.patch_torch_compile(self.knobs.compile, self.applied,
                                                                     compiled_by_script)

    def install_root_hook(self) -> None:
        """Find the model: the first module with parameters called on the training thread."""
        import torch

        Module = torch.nn.Module
        orig_call = Module.__call__
        self._orig_module_call = orig_call
        trial, found = self.trial, self

        def call(module: torch.nn.Module, *args: object, **kwargs: object) -> object:
            if (threading.current_thread() is trial.training_thread
                    and next(module.parameters(), None) is not None):
                Module.__call__ = orig_call
                # Before the trial's casts and compile: the model as the script wrote it.
                found.flops_per_sample = model_flops_per_sample(module, args, kwargs, batch_len((args, kwargs)))
                found.device = next(module.parameters()).device.type
                found.prepare(module)
                return module(*args, **kwargs)
            return orig_call(module, *args, **kwargs)

        Module.__call__ = call

    def prepare(self, module: torch.nn.Module) -> None:
        target = getattr(module, "_orig_mod", module)  # a model the script compiled itself
        self.module = target
        compiled = runtime_knobs.prepare_model(target, self.knobs, self.applied, self._orig_torch_compile,
                                               self.user_compiled)
        if compiled is not None:
            target._compiled_call_impl = TimedCall(self.clock, compiled)
            self.user_compiled = True
        else:
            self._time_calls(module)

    def _time_calls(self, module: torch.nn.Module) -> None:
        """Each call of the model is a step boundary (for loops without a loader or an optimizer:
        inference), taken on the object the script calls, so that it runs outside any compiled code
        (a model the script compiled runs its wrapper's call eagerly)."""
        module._compiled_call_impl = TimedCall(self.clock, module._compiled_call_impl or module._call_impl)

    def _stop_finding(self) -> None:
        import torch

        if self._orig_module_call is not None and self.module is None:
            torch.nn.Module.__call__ = self._orig_module_call

    # -- a traced model (torch_neuronx.trace) --------------------------------------------------
    def trace(self, flags: str) -> None:
        """Apply the configuration's compiler settings (``flags``: its ``NEURON_CC_FLAGS``) to the
        models the script traces, once it imports torch_neuronx."""
        assert self.knobs.trace is not None
        self.traced_models = runtime_knobs.TracedModels(self.knobs.trace, flags, self.applied, self._serve,
                                                        self._on_args_replaced)
        after_import("torch_neuronx", self._patch_neuronx)

    def _patch_neuronx(self, neuronx: ModuleType) -> None:
        assert self.traced_models is not None
        self.traced_models.patch(neuronx)
        traced_trace = neuronx.trace

        def trace(*args: object, **kwargs: object) -> object:
            # The model the script traces runs inside trace() to be recorded: those calls are no
            # requests, and the model that serves is the traced one.
            self._stop_finding()
            return traced_trace(*args, **kwargs)

        setattr(neuronx, "trace", trace)

    def _serve(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` serves the requests from now on. A traced model's call returns once the
        NeuronCore has run it, with its outputs on the host: a window may end at any request."""
        self._stop_finding()
        self.clock.lazy = False
        self.module = model
        self._serving = weakref.ref(model)
        cls = type(model)
        if cls not in self._timed_classes:
            # On the class: a TorchScript module ignores a call set on the instance, and the
            # object the script holds (and may torch.jit.save) must stay the one trace made.
            self._timed_classes.add(cls)
            orig_call = cls.__call__
            clock, serving = self.clock, lambda: self._serving()

            def call(module: torch.nn.Module, *args: object, **kwargs: object) -> object:
                if module is serving():
                    clock.boundary("forward", batch_len((args, kwargs)))
                return orig_call(module, *args, **kwargs)

            cls.__call__ = call
        return model

    def _on_args_replaced(self, replaced: list[str]) -> None:
        note = (f"torch_neuronx.trace: the configuration replaced the script's own compiler_args "
                f"{', '.join(replaced)}")
        if note not in self.notes:
            self.notes.append(note)
            sys.stderr.write(f"autotune: {note}\n")


class TimedCall:
    """A model's call with a step boundary before it, set as the module's ``_compiled_call_impl``,
    which ``Module.__call__`` runs in place of its own (as it does for ``Module.compile()``).

    Not a forward pre-hook: a module with a hook takes ``Module._call_impl``'s slow path on every
    call. A copy of the model (``deepcopy``: an EMA of its weights; ``torch.save``) is made
    without it, as torch makes one of a compiled module, and calls its own weights.
    """

    def __init__(self, clock: StepClock, call: Callable[..., Any]) -> None:
        self.clock = clock
        self.call = call

    def __call__(self, *args: object, **kwargs: object) -> object:
        self.clock.boundary("forward", batch_len((args, kwargs)))
        return self.call(*args, **kwargs)
