"""A production run of a tuned configuration: every knob a trial applied, applied the same way, with
nothing measured, no step limit and no change to the script's output or exit code.

``best.env`` (and ``autotune exec``) put the hook folder first on ``PYTHONPATH`` and the
configuration in ``AUTOTUNE_APPLY`` (an :class:`~autotune.records.ApplySpec` as JSON), so every
Python process of the job runs :func:`install` at start: the script itself, torchrun's ranks,
the workers that ``torch_xla.launch``, ``xmp.spawn`` or ``torch.multiprocessing.spawn`` start, and
the DataLoader's workers. In each:

- a process that runs the study's script (by file name) gets the configuration's flags of the
  script's own in its arguments, before the script parses them;
- once torch is imported: the DataLoader's batch size and workers, ``torch.compile`` as the
  configuration compiles (also where the script compiles its model itself), the model cast or run
  under autocast, once torch-xla's loader module is imported, ``batches_per_execution``, and once
  torch-neuronx is, the tuned compiler settings in ``torch_neuronx.trace``'s ``compiler_args``;
- the configuration's env vars are watched: a script that sets ``NEURON_CC_FLAGS`` itself replaces
  the tuned flags, and is told so.

The job's first process that imports torch says, in one line on stderr, what it applies and how;
a launch that differs from the measured one is a warning line, and so, when the process ends, is
each knob that found nothing to act on (no DataLoader to take the batch size).
"""

from __future__ import annotations

import atexit
import importlib.abc
import os
import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from autotune.records import APPLY_ENV, INTERCEPTIONS, NEUTRAL_KNOB_VALUES, ApplySpec, KnobRoute
from autotune.harness import knobs as runtime_knobs

if TYPE_CHECKING:
    import torch

#: The folder of ``sitecustomize.py``, first on every trial's and every applied job's ``PYTHONPATH``.
HOOK_DIR = Path(__file__).resolve().parent / "hook"
#: Set in the environment once a process of the job has said what it applies, so that its
#: children (torchrun's ranks, spawned workers) do not say it again.
ANNOUNCED_ENV = "AUTOTUNE_APPLY_ANNOUNCED"
PREFIX = "autotune:"


class ProductionRun:
    """The tuned configuration, applied inside one process of a production job."""

    def __init__(self, spec: ApplySpec) -> None:
        self.spec = spec
        self.knobs = spec.knobs
        #: The runtime knobs that found what they act on in this process.
        self.applied: set[str] = set()
        self.model: torch.nn.Module | None = None
        self.compiled_by_script = False
        self._orig_compile: Callable[..., Any] | None = None

    def install(self) -> None:
        if _runs_script(self.spec.script):
            sys.argv[1:] = self._script_args(sys.argv[1:])
        runtime_knobs.watch_env(self.spec.env, self.spec.flags_env, self.on_env_override)
        after_import("torch", lambda _module: self.on_torch())
        atexit.register(self.on_exit)

    def _script_args(self, args: list[str]) -> list[str]:
        for flag in self.spec.script_flags:
            args = flag.apply(args)
        return args

    # -- once torch is imported -----------------------------------------------------------------
    def on_torch(self) -> None:
        if not os.environ.get(ANNOUNCED_ENV):
            os.environ[ANNOUNCED_ENV] = "1"
            for line in self.announcement():
                _say(line)
        runtime_knobs.patch_loader(self.knobs, self.applied)
        if self.knobs.compile is not None:
            self._orig_compile = runtime_knobs.patch_torch_compile(self.knobs.compile, self.applied,
                                                                   self._compiled_by_script)
        if self.knobs.batches_per_execution is not None:
            after_import("torch_xla.distributed.parallel_loader", lambda module: runtime_knobs.patch_device_loader(
                module, self.knobs.batches_per_execution, self.applied))
        if self.knobs.trace is not None:
            flags = self.spec.env.get(self.spec.flags_env or "", "")
            traced = runtime_knobs.TracedModels(self.knobs.trace, flags, self.applied, lambda model: model,
                                                self._on_args_replaced)
            after_import("torch_neuronx", traced.patch)
        self._install_root_hook()

    def _compiled_by_script(self) -> None:
        self.compiled_by_script = True

    def _install_root_hook(self) -> None:
        """The model is the first module with parameters that the process calls (on any thread: a
        worker of ``torch_xla.launch`` runs the script's function on a thread of its own)."""
        import torch

        Module = torch.nn.Module
        orig_call = Module.__call__
        run = self

        def call(module: torch.nn.Module, *args: object, **kwargs: object) -> object:
            if next(module.parameters(), None) is not None and not _in_loader_worker():
                Module.__call__ = orig_call
                run.on_model(module)
            return orig_call(module, *args, **kwargs)

        Module.__call__ = call

    def on_model(self, module: torch.nn.Module) -> None:
        target = getattr(module, "_orig_mod", module)  # a model the script compiled itself
        self.model = target
        compiled = runtime_knobs.prepare_model(target, self.knobs, self.applied, self._orig_compile,
                                               self.compiled_by_script)
        if compiled is not None:
            target._compiled_call_impl = compiled

    # -- what it says ---------------------------------------------------------------------------
    def announcement(self) -> list[str]:
        s = self.spec
        gain = f", {s.speedup:.2f}x the baseline when measured" if s.speedup else ""
        knobs = "; ".join(f"{name}={value} ({_how(s.routes.get(name))})" for name, value in s.params.items()
                          if s.routes.get(name)) or "every knob at the script's own value"
        lines = [f"{PREFIX} applying study {s.study}, trial {s.trial} ({s.target}{gain}): {knobs}"]
        if not _runs_script(s.script) and s.script_flags and not _is_launcher():
            lines.append(f"{PREFIX} warning: this process runs {Path(sys.argv[0]).name or sys.argv[0]!r}, not "
                         f"{s.script!r}: the configuration's flags of the script ("
                         f"{' '.join(f.describe() for f in s.script_flags)}) go only to a script of that name")
        processes = _processes_of_this_run()
        if processes != s.nproc_per_node:
            measured = s.launch or "one process (python)"
            lines.append(f"{PREFIX} warning: the configuration was measured as {measured}, this run has {processes} "
                         f"process{'es' if processes != 1 else ''} per node: start it with `autotune exec "
                         f"{s.study} -- python {s.script} ...` to get the measured launch")
        return lines

    def _on_args_replaced(self, replaced: list[str]) -> None:
        _say(f"{PREFIX} torch_neuronx.trace: the tuned compiler settings replace the script's own "
             f"compiler_args {', '.join(replaced)}")

    def on_env_override(self, name: str, value: str | None, where: str) -> None:
        _say(f"{PREFIX} warning: {where} {'set' if value is not None else 'removed'} {name} itself, replacing the "
             f"tuned value{_carried_by(self.spec.routes, name)}: this run does not use it")

    def on_exit(self) -> None:
        """Each knob that found nothing to act on in the process that ran the model (once per job:
        in rank 0 where there are ranks)."""
        if self.model is None or os.environ.get("RANK", "0") != "0":
            return
        for knob, value in self.knobs.model_dump().items():
            label, missing = INTERCEPTIONS.get(knob, (knob, None))
            if value in (None, False) or missing is None or knob in self.applied \
                    or NEUTRAL_KNOB_VALUES.get(knob) == value:
                continue
            shown = value if not isinstance(value, dict) else value.get("backend")
            _say(f"{PREFIX} warning: {knob}={shown} was not applied: the script {missing}, so {label} "
                 "kept the script's own value")


def _how(routes: list[KnobRoute] | None) -> str:
    kinds = {"interception": lambda r: r.detail, "compiler flag": lambda r: f"compiler flag in {r.detail}",
             "env var": lambda r: f"env {r.detail}", "script argument": lambda r: f"script argument {r.detail}",
             "launch": lambda r: f"launch: {r.detail}", "target": lambda r: r.detail}
    return ", ".join(kinds[r.kind](r) for r in routes or [])


def _carried_by(routes: dict[str, list[KnobRoute]], variable: str) -> str:
    from autotune.harness.knob_effects import route_variable

    names = [name for name, rs in routes.items() if any(route_variable(r) == variable for r in rs)]
    return f" ({', '.join(names)})" if names else ""


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _runs_script(script: str) -> bool:
    """Whether this process runs the study's script (by file name), as a script or a spawned worker of it."""
    main = sys.argv[0] if sys.argv else ""
    return bool(main) and Path(main).name == script


def _is_launcher() -> bool:
    """torchrun's agent (``torchrun``, ``python -m torch.distributed.run``): its ranks run the script."""
    main = Path(sys.argv[0]).name if sys.argv else ""
    if main in ("torchrun", "run.py", "launch.py") and "torch" in (sys.argv[0] or ""):
        return True
    # ``python -m torch.distributed.run``: while the interpreter starts, sys.argv[0] is only "-m".
    orig = getattr(sys, "orig_argv", [])
    return any(a == "-m" and b in ("torch.distributed.run", "torch.distributed.launch") for a, b in zip(orig, orig[1:]))


def _processes_of_this_run() -> int:
    """How many processes per node this run starts: a torchrun rank's local world size, the count an
    agent was given, else one."""
    if os.environ.get("LOCAL_WORLD_SIZE", "").isdigit():
        return int(os.environ["LOCAL_WORLD_SIZE"])
    if _is_launcher():
        for i, arg in enumerate(sys.argv):
            for flag in ("--nproc_per_node", "--nproc-per-node"):
                if arg == flag and i + 1 < len(sys.argv) and sys.argv[i + 1].isdigit():
                    return int(sys.argv[i + 1])
                if arg.startswith(flag + "=") and arg.split("=", 1)[1].isdigit():
                    return int(arg.split("=", 1)[1])
    return 1


def _in_loader_worker() -> bool:
    from torch.utils.data import get_worker_info

    return get_worker_info() is not None or threading.current_thread().name.startswith("pin_memory")


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback once a module has been executed, whoever imports it."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in self.callbacks:
            return None
        callbacks = self.callbacks.pop(fullname)
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        orig_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            orig_exec(module)
            for callback in callbacks:
                callback(module)

        loader.exec_module = exec_module
        return spec


_finder = _AfterImport()


def after_import(name: str, callback: Callable[[ModuleType], None]) -> None:
    """``callback(module)`` once ``name`` is imported: now if it is already."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    _finder.callbacks.setdefault(name, []).append(callback)


def install_from_env() -> None:
    """The hook's entry: apply the configuration in ``AUTOTUNE_APPLY`` to this process. A
    configuration that cannot be read is said in one line, and the process runs as it is."""
    try:
        spec = ApplySpec.model_validate_json(os.environ[APPLY_ENV])
    except Exception as exc:  # never break the user's process over a bad variable
        _say(f"{PREFIX} warning: {APPLY_ENV} could not be read ({type(exc).__name__}): nothing is applied")
        return
    ProductionRun(spec).install()
