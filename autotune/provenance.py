"""Where a result was measured: package and compiler versions, device, instance type, script, and
the caller's env vars that change the target's results."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
from pathlib import Path
from typing import Any, Mapping

from autotune.errors import DISTRIBUTION
from autotune.machine.host import host_device, instance_type as host_instance_type
from autotune.targets import all_targets
from autotune.targets.base import Target, package_version


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def provenance(target: Target, script: str | Path, args: list[str], *,
               instance_type: str | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``instance_type`` is the one the user declared (``--instance-type``); without it, it is asked
    of the machine (:func:`autotune.machine.host.instance_type`). ``env``: the caller's variables of the
    target's :attr:`~autotune.targets.base.Target.environment`."""
    return {
        "autotune": package_version(DISTRIBUTION),
        "python": platform.python_version(),
        "versions": {"torch": package_version("torch"), **target.versions()},
        "target": target.name,
        "device": target.device_description(),
        # The target's device may not name its model (xla:CPU): the machine's does.
        "host_device": host_device(),
        "instance_type": host_instance_type(instance_type),
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "script": str(Path(script).resolve()),
        "script_sha256": file_sha256(script),
        "script_args": list(args),
        "env": dict(env or {}),
    }


def caller_env(target: Target | None, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """The env vars each trial takes from its caller, as plain data that travels with it to a
    worker or a daemon: those of ``target``'s :attr:`~autotune.targets.base.Target.environment`
    (every target's, where the target is decided elsewhere) that this process has, then ``given``
    (``--env``)."""
    env: dict[str, str] = {}
    for t in [target] if target is not None else all_targets():
        env.update(t.result_env(os.environ))
    return {**env, **(given or {})}
