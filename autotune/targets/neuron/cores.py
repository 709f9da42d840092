"""NeuronCores a worker holds: Ray sets ``NEURON_RT_VISIBLE_CORES`` for an actor that asks for the
``neuron_cores`` resource, as a list (``"2,3"``); the Neuron runtime documents a range (``"2-3"``).
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import AutotuneError

#: The Ray resource of a NeuronCore, and the variable in which Ray gives a worker its cores.
CORES_RESOURCE = "neuron_cores"
VISIBLE_CORES = "NEURON_RT_VISIBLE_CORES"
#: Where the Neuron runtime's collectives of one job meet (``host:port``); torch-xla defaults it
#: to port 62182, on which two trials side by side would meet each other.
ROOT_COMM_ID = "NEURON_RT_ROOT_COMM_ID"
#: What every node of a job over several trn1/trn1n nodes sets, as the Neuron SDK's multi-node
#: training scripts do: libfabric over EFA, with the device's RDMA, safe across fork().
EFA_ENV = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1"}


@dataclass(frozen=True)
class NeuronCoreSlot:
    """A contiguous range of NeuronCores held by one worker."""

    first: int
    last: int

    @classmethod
    def parse(cls, text: str) -> NeuronCoreSlot:
        """``"2,3"`` (Ray), ``"2-3"`` (range) or ``"2"``; the cores must be contiguous."""
        ids: list[int] = []
        for part in text.replace(" ", "").split(","):
            if not part:
                continue
            lo, _, hi = part.partition("-")
            ids.extend(range(int(lo), int(hi or lo) + 1))
        ids = sorted(set(ids))
        if not ids:
            raise AutotuneError(f"{VISIBLE_CORES}={text!r} names no NeuronCore")
        if ids != list(range(ids[0], ids[-1] + 1)):
            raise AutotuneError(f"{VISIBLE_CORES}={text!r} is not a contiguous range of NeuronCores")
        return cls(ids[0], ids[-1])

    @property
    def range(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"

    @property
    def count(self) -> int:
        return self.last - self.first + 1


def rank_env(slot: NeuronCoreSlot | None, nproc: int, port: int, master_addr: str | None = None) -> dict[str, str]:
    """What every rank of a torchrun trial of ``nproc`` processes on ``slot`` gets; on one node of a
    trial that spans several, the collectives meet on node 0 at ``master_addr``, over EFA.

    torch-xla (``_internal/neuron.py``, 2.9) under torchrun keeps the trial's whole range in
    ``NEURON_RT_VISIBLE_CORES`` and remaps it itself to the core at ``LOCAL_RANK``; it refuses any
    range whose length is not ``LOCAL_WORLD_SIZE``, so a rank has one core and a range set per
    rank would be refused. The ranks' collectives meet at ``NEURON_RT_ROOT_COMM_ID``, by default
    a fixed port that two trials side by side would share: each trial gets its own.
    """
    if slot is not None and slot.count != nproc:
        raise AutotuneError(f"{nproc} processes need {nproc} NeuronCores, one each (torch-xla under torchrun), "
                            f"not {slot.count} ({slot.range}); use --cores-per-trial 1")
    env = {ROOT_COMM_ID: f"{master_addr or 'localhost'}:{port}", **(EFA_ENV if master_addr is not None else {})}
    if slot is not None:
        env[VISIBLE_CORES] = slot.range
    return env
