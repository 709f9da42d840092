"""Where a result was measured: package and compiler versions, device, instance type, script, and
the caller's env vars that change the target's results."""

from __future__ import annotations

import hashlib
import os
import platform
import socket
from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel, Field

from autotune.errors import DISTRIBUTION
from autotune.machine.host import host_device, instance_type as host_instance_type
from autotune.targets import all_targets
from autotune.targets.base import Target, package_version


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class Provenance(BaseModel):
    """Where a result was measured: what :func:`provenance` returns, as a dict."""

    autotune: str | None = Field(description="autotune's version.")
    python: str = Field(description="Python's version.")
    versions: dict[str, str | None] = Field(description=(
        "The versions of torch and of the target's packages and compilers, by package."))
    target: str = Field(description="The target: `neuron`, `xla` or `inductor`.")
    device: str = Field(description="The device the target measured on (`neuron`, `xla:CPU`, `cpu:<model>`).")
    host_device: str = Field(description=(
        "The machine's device by model (`cuda:<model>`, else `cpu:<model>`): the target's may not name it."))
    instance_type: str | None = Field(description=(
        "The EC2 instance type: `--instance-type`, else the machine's; null where none is known."))
    host: str = Field(description="The machine's host name.")
    cpu_count: int | None = Field(description="The machine's CPUs.")
    script: str = Field(description="The script's absolute path.")
    script_sha256: str = Field(description="The SHA-256 of the script's content, in hex.")
    script_args: list[str] = Field(description="The arguments the script was tuned with.")
    env: dict[str, str] = Field(description="The caller's env vars that change the target's results, and `--env`.")


def provenance(target: Target, script: str | Path, args: list[str], *,
               instance_type: str | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``instance_type`` is the one the user declared (``--instance-type``); without it, it is asked
    of the machine (:func:`autotune.machine.host.instance_type`). ``env``: the caller's variables of the
    target's :attr:`~autotune.targets.base.Target.environment`."""
    return Provenance(
        autotune=package_version(DISTRIBUTION), python=platform.python_version(),
        versions={"torch": package_version("torch"), **target.versions()}, target=target.name,
        device=target.device_description(), host_device=host_device(), instance_type=host_instance_type(instance_type),
        host=socket.gethostname(), cpu_count=os.cpu_count(), script=str(Path(script).resolve()),
        script_sha256=file_sha256(script), script_args=list(args), env=dict(env or {}),
    ).model_dump()


def caller_env(target: Target | None, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """The env vars each trial takes from its caller, as plain data that travels with it to a
    worker or a daemon: those of ``target``'s :attr:`~autotune.targets.base.Target.environment`
    (every target's, where the target is decided elsewhere) that this process has, then ``given``
    (``--env``)."""
    env: dict[str, str] = {}
    for t in [target] if target is not None else all_targets():
        env.update(t.result_env(os.environ))
    return {**env, **(given or {})}
