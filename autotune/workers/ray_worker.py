"""The Ray actor that runs trials, one at a time, through the process launcher.

Each actor holds its share of the machine for the whole study: for a target whose trials hold
devices, a trial's worth of them through a Ray resource (Neuron: ``neuron_cores``; CUDA: ``GPU``,
which an actor asks for as ``num_gpus``). The target puts Ray's ids of them into the env var its
runtime reads (:meth:`autotune.targets.base.Target.claim_devices`: ``NEURON_RT_VISIBLE_CORES``,
``CUDA_VISIBLE_DEVICES``), and every trial process the actor starts sees those devices alone.
"""

from __future__ import annotations

import os
import socket
import stat
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import psutil

from autotune.machine.host import host_device
from autotune.targets import get_target
from autotune.targets.gpus import GPU_RESOURCE

if TYPE_CHECKING:
    from autotune.records import NodeRole, TrialRequest, TrialResult

#: Ray's switch that leaves a worker's device variables as its node has them where the worker
#: holds no devices of that kind. Ray 2.50 to 2.55 empty CUDA_VISIBLE_DEVICES (and
#: NEURON_RT_VISIBLE_CORES) there unless it is 0, and warn so at every start: a trial that shares
#: the node's GPUs without holding one (``--gpus-per-trial 0``, XLA with ``PJRT_DEVICE=CUDA``)
#: would see none. From Ray 2.56 on, 0 is the default.
KEEP_NODE_DEVICES = {"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}

#: The folder, under ``$XDG_RUNTIME_DIR`` (else the temporary folder), where the trials measuring
#: on a node say so, one file per measuring process: compile jobs on that node stop while one is
#: there (see :class:`CompileWorker`). Its name carries the user's id: each user's Ray workers
#: have their own, so that no other user can stop this user's compile jobs or fail its trials.
MEASURING_NAME = "autotune-measuring-{uid}"


class TrialWorker:
    """Runs trials of one target for the driver. Used as a Ray actor (see :func:`worker_class`)."""

    def __init__(self, worker_id: int, target: str, per_node: int = 1, device_resource: str | None = None) -> None:
        import ray

        self.worker_id = worker_id
        #: Trials of this study that may run at once on this node, each in its share of its memory.
        self.per_node = per_node
        #: The Ray resource of the devices this worker holds for its trials; ``None``: the host's CPUs.
        self.device_resource = device_resource
        context = ray.get_runtime_context()
        ids = context.get_accelerator_ids().get(device_resource, []) if device_resource else []
        #: The env vars through which each trial sees the devices this worker holds.
        self.devices = get_target(target).claim_devices(os.environ, [str(i) for i in ids])
        # Several Ray nodes can share a host name (or a machine): the node id tells them apart. The
        # machine's device and CPUs are this node's, which the driver's provenance does not describe.
        self.placement: dict[str, str] = {"node": socket.gethostname(), "ray_node": context.get_node_id(),
                                          "host_device": host_device(), "cpu_count": str(os.cpu_count()),
                                          "worker": str(worker_id), **self.devices}
        #: For a worker that is one node of trials spanning several: the stop of the part it runs,
        #: by the trial's folder, and the trials the driver stopped (perhaps before their part began).
        self._running: dict[str, threading.Event] = {}
        self._stopped: set[str] = set()

    def info(self) -> dict[str, str]:
        return dict(self.placement)

    def meeting_point(self, nodes: int) -> str:
        """Where the ``nodes`` nodes of a trial meet, picked here, on node 0, before any starts:
        this node's address and two ports free on it (a :class:`NodeRole` of node 0, as JSON)."""
        import ray

        from autotune.records import NodeRole
        from autotune.workers.multiprocess import free_ports

        master, runtime = free_ports(2)
        return NodeRole(index=0, nodes=nodes, master_addr=ray.util.get_node_ip_address(), master_port=master,
                        runtime_port=runtime).model_dump_json()

    def run_node(self, request_json: str, index: int, meeting_json: str) -> str:
        """Run node ``index``'s part of a trial that spans several nodes, which meet where
        ``meeting_json`` says (:meth:`meeting_point` of node 0's worker): its result, placed here."""
        from autotune.records import NodeRole, TrialRequest

        request = TrialRequest.model_validate_json(request_json)
        node = NodeRole.model_validate_json(meeting_json).model_copy(update={"index": index})
        stop = self._running[request.trial_dir] = threading.Event()
        if request.trial_dir in self._stopped:
            stop.set()
        try:
            with measuring(self.device_resource is None):
                return self._run(request, node=node, stop=stop).model_dump_json()
        finally:
            self._running.pop(request.trial_dir, None)
            self._stopped.discard(request.trial_dir)

    def stop(self, trial_dir: str) -> None:
        """End this node's part of the trial in ``trial_dir`` (or, where it has not begun, make it
        end as it begins): another node's part ended without a result, or its node was lost."""
        self._stopped.add(trial_dir)
        event = self._running.get(trial_dir)
        if event is not None:
            event.set()

    def run(self, request_json: str) -> str:
        """Run one trial: a :class:`TrialRequest` in, a :class:`TrialResult` out, both as JSON so
        that any Ray version carries them."""
        from autotune.records import TrialRequest

        request = TrialRequest.model_validate_json(request_json)
        # A trial that measures on the host's CPUs keeps this node's compile jobs stopped.
        with measuring(self.device_resource is None):
            return self._run(request).model_dump_json()

    def _run(self, request: TrialRequest, pause: Callable[[], bool] | None = None, node: NodeRole | None = None,
             stop: threading.Event | None = None) -> TrialResult:
        """Run ``request`` (a :class:`TrialRequest`) through the launcher (``node``: its part on this
        node of a trial that spans several); its result, placed here."""
        from autotune.workers.launcher import TrialLimits, run_trial

        result = run_trial(
            request.plan, request.script, request.args, trial_dir=request.trial_dir, cwd=request.cwd,
            limits=TrialLimits(timeout_s=request.timeout_s, memory_bytes=request.memory_bytes, sharing=self.per_node),
            protocol=request.protocol, seed=request.seed, pause=pause, devices=self.devices, node=node, stop=stop,
        )
        result.placement = dict(self.placement)
        return result


class CompileWorker(TrialWorker):
    """Runs compile jobs (``--compile-workers``): a configuration's graphs compiled into the cache
    root, published once (:mod:`autotune.published`). It holds the lock of the graphs while it
    compiles them, so a second job for the same graphs waits and then finds them published; a
    job killed midway publishes nothing, and the lock dies with its process.

    Compile jobs never disturb a measurement on the host's CPUs: while a trial measures on this
    node, the compile's processes are stopped (SIGSTOP) and go on when it ends."""

    def run(self, request_json: str) -> str:
        from autotune.disk_space import no_space_reason, out_of_space
        from autotune.published import LockTimeout, Published
        from autotune.records import CompileOutcome, CompileRequest, CompileStage, Failure, FailureCategory, TrialResult

        job = CompileRequest.model_validate_json(request_json)
        request, published = job.trial, Published(job.cache_root)
        try:
            with published.lock(job.artifact_key, timeout_s=request.timeout_s) as waited:
                if published.manifest(job.artifact_key) is not None:
                    stage = CompileStage(published_before=True, waited_seconds=waited, placement=dict(self.placement))
                    return CompileOutcome(stage=stage).model_dump_json()
                result = self._run(request, pause=measuring_here if job.pause_while_measuring else None)
                if result.ok:
                    try:
                        published.publish(job.artifact_key, {"seconds": round(result.wall_seconds, 3),
                                                             "params": request.plan.params, "placement": self.placement})
                    except OSError as exc:  # compiled, but unpublished: the measure job compiles it again
                        if not out_of_space(exc):
                            raise
                        result.status = "failed"
                        result.failure = Failure(category=FailureCategory.disk_full,
                                                 reason=no_space_reason(published.root))
                stage = CompileStage(seconds=result.wall_seconds, compile_seconds=result.compile.compile_seconds,
                                     waited_seconds=waited, placement=dict(self.placement))
                return CompileOutcome(stage=stage, result=result).model_dump_json()
        except LockTimeout as exc:
            failed = TrialResult(status="failed", plan=request.plan, placement=dict(self.placement),
                                 failure=Failure(category=FailureCategory.timeout, reason=str(exc)))
            stage = CompileStage(waited_seconds=request.timeout_s, placement=dict(self.placement))
            return CompileOutcome(stage=stage, result=failed).model_dump_json()


def measuring_dir() -> Path | None:
    """This user's folder of measuring marks, made with mode 0700; ``None`` where there is none to
    trust (another user made one of that name first, or nothing can be written): the trials then
    measure unmarked and the compile jobs run on, which costs a measurement's precision, never a
    trial."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and os.path.isdir(runtime) else Path(tempfile.gettempdir())
    path = base / MEASURING_NAME.format(uid=os.getuid())
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        st = path.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return path


def _started(pid: int) -> str:
    """When process ``pid`` started, as a mark holds it: a mark names its process by id and start,
    since a dead process's id is soon another's."""
    return repr(psutil.Process(pid).create_time())


@contextmanager
def measuring(on: bool = True) -> Iterator[None]:
    """Say, while the block runs, that this process measures on this node's CPUs."""
    folder = measuring_dir() if on else None
    mark = folder / str(os.getpid()) if folder is not None else None
    if mark is not None:
        try:
            mark.write_text(_started(os.getpid()))
        except OSError:
            mark = None
    try:
        yield
    finally:
        if mark is not None:
            mark.unlink(missing_ok=True)


def measuring_here() -> bool:
    """Whether a trial measures on this node's CPUs now (a mark left by a dead process is removed)."""
    folder = measuring_dir()
    try:
        marks = list(folder.iterdir()) if folder is not None else []
    except OSError:
        return False
    for mark in marks:
        try:
            if mark.read_text() == _started(int(mark.name)):
                return True
        except (OSError, ValueError, psutil.Error):
            pass
        mark.unlink(missing_ok=True)  # its process is gone, or the id is another process's now
    return False


def worker_class(*, resources: dict[str, float] | None = None, num_cpus: float = 1.0, compiles: bool = False) -> Any:
    """The Ray actor class holding ``resources`` (``{"neuron_cores": 2}``, ``{"GPU": 1}``; none for
    CPU targets); with ``compiles``, the compile worker's."""
    import ray

    custom = dict(resources or {})
    # Ray refuses GPU among custom resources: an actor asks for GPUs as num_gpus.
    gpus = custom.pop(GPU_RESOURCE, 0)
    # max_restarts=0: a dead worker is replaced by the driver, which also retries its trial once.
    # The runtime env reaches the workers of a cluster's nodes, whose environment is their own.
    return ray.remote(num_cpus=num_cpus, num_gpus=gpus, resources=custom, max_restarts=0,
                      runtime_env={"env_vars": KEEP_NODE_DEVICES})(CompileWorker if compiles else TrialWorker)
