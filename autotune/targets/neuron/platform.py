"""Which Neuron machine this is: the platform family (trn1, inf2, trn2, ...) and its built-in space,
and whether a Neuron device or torch-neuronx is present at all."""

from __future__ import annotations

import os
import re
from importlib.util import find_spec

from autotune.errors import TargetError
from autotune.machine.host import instance_type

#: Platform families and the built-in space of each.
PLATFORM_SPACES: dict[str, str] = {
    "trn1": "neuron-trn1", "trn1n": "neuron-trn1", "inf2": "neuron-inf2",
    "trn2": "neuron-trn2", "trn3": "neuron-trn2",
}
PLATFORM_ENV = "AUTOTUNE_NEURON_PLATFORM"
_PLATFORM_FAMILY = re.compile(r"^(trn1n|trn1|inf2|trn2|trn3)")


def neuron_present() -> bool:
    """Whether this machine has a Neuron device or torch-neuronx; cheap, and never imports torch."""
    if os.path.exists("/dev/neuron0"):
        return True
    try:
        return find_spec("torch_neuronx") is not None
    except (ImportError, ValueError):
        return False


def platform_family(platform: str) -> str | None:
    """``trn1``, ``trn1n``, ``inf2``, ``trn2`` or ``trn3`` for a family or instance type, else None."""
    match = _PLATFORM_FAMILY.match(platform.strip().lower())
    return match.group(1) if match else None


def detect_platform() -> str:
    """The Neuron platform family of this machine: ``AUTOTUNE_NEURON_PLATFORM``, else that of its
    EC2 instance type (:func:`autotune.machine.host.instance_type`), else ``trn1``."""
    configured = os.environ.get(PLATFORM_ENV)
    if configured:
        family = platform_family(configured)
        if family is None:
            raise TargetError(
                f"{PLATFORM_ENV}={configured!r} is not a Neuron platform; "
                f"set it to one of {', '.join(PLATFORM_SPACES)}"
            )
        return family
    return platform_family(instance_type() or "") or "trn1"
