"""How a trial measures (:class:`MeasurementProtocol`) and what it is sent: a request from the
driver to a worker, a compile job's, and the spec a trial's process reads."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from autotune.records.plan import TrialPlan
from autotune.records.result import PROTOCOL_VERSION


class MeasurementProtocol(BaseModel):
    """When a trial's estimate is good enough to stop the user's loop."""

    version: int = PROTOCOL_VERSION
    #: Stop once the 95% CI half-width is under this fraction of the mean.
    rel_ci: float = 0.02
    min_windows: int = 5
    #: A window lasts at least this long, so that timer and sync overheads stay negligible.
    min_window_seconds: float = 0.25
    max_measure_steps: int = 1000
    max_measure_seconds: float = 30.0
    #: Measure at least this many seconds of steady windows, however soon the interval is narrow:
    #: on a host whose runs vary from one to the next (a neighbour that takes a core for a few
    #: seconds at a time), a run that short reads whichever second it fell in. Set by the study
    #: from the between-run noise measured here (:func:`autotune.measurement.noise.measure_seconds`).
    min_measure_seconds: float = 0.0
    #: The between-run spread measured here so far (:class:`autotune.measurement.noise.RunNoise`: the
    #: squared deviations of runs' log figures from their configuration's mean, and their degrees of
    #: freedom). A run made of several processes (:mod:`autotune.workers.run_parts`) weighs its
    #: processes' spread with it, not on their own one or two degrees of freedom. Set by the study.
    noise_squares: float = 0.0
    noise_df: int = 0
    #: Warm-up ends after this many consecutive steps without a new compile.
    quiet_steps: int = 2
    #: Losses recorded from the first training steps.
    losses_recorded: int = 10
    #: Let the script run to its end instead of stopping it once the estimate has converged.
    run_to_end: bool = False
    #: Stop measuring once the 95% interval's upper end is below this throughput (samples/s):
    #: the trial cannot come near the study's best. Set per trial by the study; None: never.
    stop_below: float | None = None
    #: A compile job: run the script until its warm-up has compiled every graph, then stop
    #: without measuring (the graphs are in the target's compile cache for the measure job).
    compile_only: bool = False


class TrialRequest(BaseModel):
    """One trial as the driver hands it to a worker: what crosses the Ray boundary (as JSON)."""

    plan: TrialPlan
    script: str
    args: list[str] = Field(default_factory=list)
    #: The working directory of the trial process (the driver's, so relative paths mean the same).
    cwd: str | None = None
    trial_dir: str
    #: Hard timeout of the trial process tree, seconds.
    timeout_s: float
    #: Host-memory limit of the trial's process tree; ``None``: 80% of the worker's machine.
    memory_bytes: int | None = None
    protocol: MeasurementProtocol = Field(default_factory=MeasurementProtocol)
    seed: int = 0


class CompileRequest(BaseModel):
    """A compile job (``--compile-workers``) as the driver hands it to a compile worker."""

    trial: TrialRequest
    #: Names the configuration's graphs in the cache root's manifests and locks
    #: (:mod:`autotune.published`): the same for every configuration that compiles the same graphs.
    artifact_key: str
    cache_root: str
    #: Stop compiling while a measurement runs on this node (trials that measure on the host's CPUs).
    pause_while_measuring: bool = False


class NodeRole(BaseModel):
    """One node's part of a trial that spans several (``--nnodes``): which node it is, and where the
    nodes' torchruns meet. Node 0 picks the ports on its own host, before any node starts."""

    index: int = Field(ge=0)
    nodes: int = Field(ge=2)
    #: Node 0's address, as every node reaches it (torchrun's ``--master_addr``).
    master_addr: str
    #: torchrun's ``--master_port`` on node 0: its rendezvous, and the store the ranks share.
    master_port: int
    #: A second free port on node 0, for a target runtime's own collectives (Neuron's root communicator).
    runtime_port: int

    def first_rank(self, nproc_per_node: int) -> int:
        """The global rank of this node's local rank 0."""
        return self.index * nproc_per_node

    def folder(self, trial_dir: str | Path) -> Path:
        """This node's folder of the trial: node 0's is the trial's own, each other's is inside it
        (where every node sees one file system, no two write the same spec, log or reports)."""
        return Path(trial_dir) / f"node-{self.index}" if self.index else Path(trial_dir)


class TrialSpec(BaseModel):
    """Everything the trial process needs, written by the launcher and read by the harness."""

    plan: TrialPlan
    script: str
    args: list[str] = Field(default_factory=list)
    cwd: str
    result_path: str
    protocol: MeasurementProtocol = Field(default_factory=MeasurementProtocol)
    seed: int = 0
    #: Env vars of each local rank of a multi-process trial, set before the script starts (the
    #: NeuronCores a rank sees), keyed by ``LOCAL_RANK``.
    rank_env: dict[str, dict[str, str]] = Field(default_factory=dict)
    #: The folder where every process of a multi-process trial writes its own report, and whose
    #: ``stop`` file tells every rank to end the measurement at one step.
    ranks_dir: str | None = None
    #: How long ``torch.distributed.init_process_group`` may wait for the other ranks: a rank that
    #: never comes is then a failure of its own category, not a hang until the trial's timeout.
    rendezvous_timeout_s: float | None = None
    #: This node's part of a trial that spans several; ``None`` for a trial of one node.
    node: NodeRole | None = None
