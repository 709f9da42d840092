"""Compile targets, one module each: ``xla``, ``inductor`` and ``neuron``."""

from __future__ import annotations

import ast
from importlib.util import find_spec
from pathlib import Path

from autotune.errors import MissingPackageError, TargetError
from autotune.measurement.failures import DISK_PATTERNS, HOST_PATTERNS, FailurePattern
from autotune.targets.base import Target
from autotune.targets.gpus import GPU_RESOURCE
from autotune.targets.inductor import InductorTarget
from autotune.targets.neuron import NeuronTarget, neuron_present
from autotune.targets.neuron.cores import CORES_RESOURCE
from autotune.targets.xla import TORCH_XLA_INSTALL, XlaTarget

TARGETS: dict[str, type[Target]] = {
    "neuron": NeuronTarget,
    "xla": XlaTarget,
    "inductor": InductorTarget,
}
#: Every Ray resource a target's trials may hold.
DEVICE_RESOURCES: tuple[str, ...] = (CORES_RESOURCE, GPU_RESOURCE)

def imports_torch_xla(source: str) -> bool:
    """Whether the script imports torch_xla anywhere (``import os, torch_xla`` included)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch_xla" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch_xla":
            return True
    return False


def failure_patterns() -> tuple[FailurePattern, ...]:
    """A full disk's strings, every target's failure strings, then the host's: a trial's log is read
    against all of them, since a script may fail in a compiler other than its target's (an XLA
    script that also uses torch.compile, say)."""
    return DISK_PATTERNS + tuple(fp for cls in TARGETS.values() for fp in cls.failure_patterns) + HOST_PATTERNS


def all_targets() -> list[Target]:
    return [cls() for cls in TARGETS.values()]


def get_target(name: str, gpus_per_trial: int | None = None) -> Target:
    """The target ``name``; ``gpus_per_trial`` (``--gpus-per-trial``) where the run chose it."""
    try:
        cls = TARGETS[name]
    except KeyError:
        raise TargetError(f"unknown target {name!r}; choose one of auto, {', '.join(TARGETS)}") from None
    return cls(gpus_per_trial)


def detect_target(script: str | Path) -> str:
    """``--target auto``: neuron where a Neuron device or torch_neuronx is present, else xla when
    the script imports torch_xla, else inductor."""
    if neuron_present():
        return "neuron"
    try:
        source = Path(script).read_text(errors="replace")
    except OSError:
        source = ""
    if imports_torch_xla(source):
        if find_spec("torch_xla") is None:
            raise MissingPackageError("torch-xla", f"{Path(script).name} (it imports torch_xla)", TORCH_XLA_INSTALL)
        return "xla"
    return "inductor"


def resolve_target(name: str, script: str | Path, gpus_per_trial: int | None = None) -> Target:
    """The target a run asks for (``auto``: :func:`detect_target`), its packages checked."""
    target = get_target(detect_target(script) if name == "auto" else name, gpus_per_trial)
    target.require()
    return target


__all__ = ["DEVICE_RESOURCES", "TARGETS", "Target", "all_targets", "get_target", "detect_target", "resolve_target"]
