"""Where a result was measured: package and compiler versions, device, instance type, script."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
from pathlib import Path
from typing import Any

from autotune.host import instance_type as host_instance_type
from autotune.targets.base import Target, package_version


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def provenance(target: Target, script: str | Path, args: list[str], *,
               instance_type: str | None = None) -> dict[str, Any]:
    """``instance_type`` is the one the user declared (``--instance-type``); without it, it is asked
    of the machine (:func:`autotune.host.instance_type`)."""
    return {
        "autotune": package_version("autotune"),
        "python": platform.python_version(),
        "versions": {"torch": package_version("torch"), **target.versions()},
        "target": target.name,
        "device": target.device_description(),
        "instance_type": host_instance_type(instance_type),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "script": str(Path(script).resolve()),
        "script_sha256": file_sha256(script),
        "script_args": list(args),
    }
