"""What this machine is, read without a process, a network call or an import of torch: the EC2
instance type, the CPU model and a GPU where the driver lists one.

A rerun answered from the cache should take seconds, and these facts key the cache.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

#: On EC2 (Nitro) the DMI product name is the instance type, e.g. ``trn1.32xlarge``: a file read,
#: where neuron-ls or the instance metadata service would take a process or a network round trip.
DMI_PRODUCT_NAME = Path("/sys/devices/virtual/dmi/id/product_name")
_NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


def instance_type() -> str | None:
    """The EC2 instance type: ``AUTOTUNE_INSTANCE_TYPE``, else the DMI product name where it is one."""
    if os.environ.get("AUTOTUNE_INSTANCE_TYPE"):
        return os.environ["AUTOTUNE_INSTANCE_TYPE"]
    try:
        name = DMI_PRODUCT_NAME.read_text(errors="replace").strip()
    except OSError:
        return None
    return name if "." in name else None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_device() -> str:
    """``cuda:<model>`` where the NVIDIA driver lists a GPU, else ``cpu:<model>``."""
    gpus = sorted(_NVIDIA_GPUS.glob("*/information"))
    if gpus:
        for line in gpus[0].read_text(errors="replace").splitlines():
            if line.startswith("Model:"):
                return f"cuda:{line.split(':', 1)[1].strip()}"
        return "cuda"
    return f"cpu:{cpu_model()}"
