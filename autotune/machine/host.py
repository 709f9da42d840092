"""What this machine is: the EC2 instance type, the CPU model and a GPU where the driver lists one,
read without a process or an import of torch.

A rerun answered from the cache should take seconds, and these facts key the cache: the one
network call (the EC2 metadata service) is capped at a fraction of a second and asked once per
process (:mod:`autotune.machine.instance_metadata`).
"""

from __future__ import annotations

import functools
import os
import platform
import socket
from pathlib import Path

from autotune.machine.instance_metadata import imds_instance_type, is_instance_type

#: On EC2 (Nitro) the DMI product name is the instance type, e.g. ``trn1.32xlarge``: the answer
#: where the metadata service is out of reach (a container beyond IMDSv2's default hop limit).
DMI_PRODUCT_NAME = Path("/sys/devices/virtual/dmi/id/product_name")
_NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
#: What tells two machines (or two boots of one) apart where their host names are the same, and
#: which processes this one can see: the kernel's boot id (else the machine id) and the PID namespace.
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
MACHINE_ID = Path("/etc/machine-id")
PID_NAMESPACE = Path("/proc/self/ns/pid")


def instance_type(declared: str | None = None) -> str | None:
    """The EC2 instance type: ``declared`` (``--instance-type``), else ``AUTOTUNE_INSTANCE_TYPE``,
    else the instance metadata service's answer, else the DMI product name where it is one, else
    ``None``."""
    if declared:
        return declared
    if os.environ.get("AUTOTUNE_INSTANCE_TYPE"):
        return os.environ["AUTOTUNE_INSTANCE_TYPE"]
    asked = imds_instance_type()
    if asked is not None:
        return asked
    try:
        name = DMI_PRODUCT_NAME.read_text(errors="replace").strip()
    except OSError:
        return None
    return name if is_instance_type(name) else None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def nvidia_gpus() -> int:
    """How many GPUs the NVIDIA driver lists on this machine (0 without the driver)."""
    return len(list(_NVIDIA_GPUS.glob("*/information")))


def host_device() -> str:
    """``cuda:<model>`` where the NVIDIA driver lists a GPU, else ``cpu:<model>``."""
    gpus = sorted(_NVIDIA_GPUS.glob("*/information"))
    if gpus:
        for line in gpus[0].read_text(errors="replace").splitlines():
            if line.startswith("Model:"):
                return f"cuda:{line.split(':', 1)[1].strip()}"
        return "cuda"
    return f"cpu:{cpu_model()}"


@functools.cache
def host_identity() -> str:
    """This host as a daemon and its jobs record it (``tuner [boot 38e574d6, pids 4026531836]``):
    the host name, which containers share where they are given the same one, with the kernel's
    boot id (else the machine id) and the PID namespace. Two processes that record the same see
    each other's pids: the one that finds a daemon's or a job's record may look for its process."""
    parts = []
    for path, label in ((BOOT_ID, "boot"), (MACHINE_ID, "machine")):
        try:
            found = path.read_text().strip().replace("-", "")[:8]
        except OSError:
            continue
        if found:
            parts.append(f"{label} {found}")
            break
    try:
        parts.append("pids " + os.readlink(PID_NAMESPACE).partition("[")[2].rstrip("]"))
    except OSError:
        pass
    name = socket.gethostname()
    return f"{name} [{', '.join(parts)}]" if parts else name
