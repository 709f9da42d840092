"""Where a result was measured: package and compiler versions, device, instance type, script."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
from pathlib import Path
from typing import Any

from autotune.targets.base import Target, package_version


def instance_type() -> str | None:
    """The EC2 instance type (``trn1.32xlarge``) where the machine says it, without a network call."""
    if os.environ.get("AUTOTUNE_INSTANCE_TYPE"):
        return os.environ["AUTOTUNE_INSTANCE_TYPE"]
    # Nitro instances expose their type as the DMI product name.
    try:
        name = Path("/sys/devices/virtual/dmi/id/product_name").read_text().strip()
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


def device_description(target: Target) -> str:
    if target.name == "neuron":
        return "neuron" if target.available() else "neuron (no device on this machine)"
    if target.name == "xla":
        return f"xla:{os.environ.get('PJRT_DEVICE', 'CPU')}"
    gpus = sorted(Path("/proc/driver/nvidia/gpus").glob("*/information"))
    if gpus:  # read without importing torch: a rerun answered from the cache should take seconds
        for line in gpus[0].read_text(errors="replace").splitlines():
            if line.startswith("Model:"):
                return f"cuda:{line.split(':', 1)[1].strip()}"
        return "cuda"
    return f"cpu:{cpu_model()}"


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def provenance(target: Target, script: str | Path, args: list[str]) -> dict[str, Any]:
    return {
        "autotune": package_version("autotune"),
        "python": platform.python_version(),
        "versions": {"torch": package_version("torch"), **target.versions()},
        "target": target.name,
        "device": device_description(target),
        "instance_type": instance_type(),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "script": str(Path(script).resolve()),
        "script_sha256": file_sha256(script),
        "script_args": list(args),
    }
