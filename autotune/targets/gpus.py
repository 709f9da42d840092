"""GPUs a trial holds: Ray's ``GPU`` resource (an actor's ``num_gpus``), the ids Ray gave the
worker (``ray.get_gpu_ids()``), and ``CUDA_VISIBLE_DEVICES``, through which CUDA then sees those
GPUs alone.

Every rank of a torchrun trial sees all of the trial's GPUs, in the order Ray gave them: an
unmodified DDP script picks its own with ``cuda:LOCAL_RANK`` (``torch.cuda.set_device``), which a
rank that saw one GPU alone would fail with "invalid device ordinal". Ray Train shares a node's
GPUs among its workers the same way, and NCCL's peer-to-peer transfers need the ranks to see each
other's GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence

from autotune.machine.host import nvidia_gpus

#: The Ray resource of a GPU; an actor asks for it as ``num_gpus``.
GPU_RESOURCE = "GPU"
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


def cuda_gpus(environ: Mapping[str, str]) -> int:
    """The GPUs CUDA sees here: those the NVIDIA driver lists, as far as ``CUDA_VISIBLE_DEVICES``
    in ``environ`` leaves them (CUDA stops at the first entry that is negative: ``-1`` hides all)."""
    present = nvidia_gpus()
    value = environ.get(VISIBLE_DEVICES)
    if value is None:
        return present
    visible = 0
    for entry in value.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        visible += 1
    return min(present, visible)


def claim_gpus(environ: MutableMapping[str, str], ids: Sequence[str]) -> dict[str, str]:
    """The worker's GPUs (``ids``, from its Ray placement) as the ``CUDA_VISIBLE_DEVICES`` of
    every trial it starts; nothing where it holds none."""
    if not ids:
        return {}
    environ[VISIBLE_DEVICES] = ",".join(ids)
    return {VISIBLE_DEVICES: environ[VISIBLE_DEVICES]}
