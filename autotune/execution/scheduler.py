"""Placement of trials on Ray workers, kept apart from choosing them (that is the study's job):
joining the cluster, and how many workers, each holding what (:class:`Placement`); the workers
themselves are :mod:`.worker_pool`'s.

Where the target's trials hold devices, each worker holds a trial's share of the target's Ray
resource (``cores_per_trial`` NeuronCores of ``neuron_cores``; ``--gpus-per-trial`` GPUs of
``GPU``), so trials never share a core or a GPU. A trial that spans several nodes (``--nnodes``)
holds such a share on each of them, through a gang of workers (:mod:`.trial_slots`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from autotune.errors import AutotuneError
from autotune.targets.base import Target


#: The Ray resource of compile workers (``--compile-workers``): CPU nodes that compile declare
#: it (``ray start --resources='{"compile_slots": 8}'``); a local Ray declares as many as asked for.
COMPILE_RESOURCE = "compile_slots"


@dataclass
class Placement:
    workers: int
    #: The target whose trials the workers run.
    target: str
    #: Each worker holds this many of the Ray resource ``device_resource`` (``neuron_cores``, ``GPU``).
    devices_per_worker: int = 0
    device_resource: str | None = None
    cpus_per_worker: float = 1.0
    threads_per_trial: int | None = None
    notes: list[str] = field(default_factory=list)
    #: The workers run compile jobs (:class:`autotune.workers.ray_worker.CompileWorker`).
    compiles: bool = False
    #: The most of these workers that run at once on one node: each trial's default memory limit
    #: is that share of the node's (:class:`autotune.workers.launcher.TrialLimits`).
    per_node: int = 1
    #: The nodes each trial spans: a trial slot is then a gang of workers, one on each node.
    nodes_per_trial: int = 1

    def bundle(self) -> dict[str, float]:
        """What one worker holds of its node, as Ray resources."""
        held = {self.device_resource: float(self.devices_per_worker)} \
            if self.device_resource and self.devices_per_worker else {}
        return {**({"CPU": self.cpus_per_worker} if self.cpus_per_worker else {}), **held}


def connect(address: str | None, compile_slots: int = 0, notes: list[str] | None = None) -> bool:
    """Join the Ray cluster at ``address``, or start a local Ray sized to this machine, with
    ``compile_slots`` compile workers' places; a local Ray that runs without its token adds a line
    that says so to ``notes``.

    Returns whether this call started Ray (and so should stop it). A Ray already initialised in
    this process is used as it is.
    """
    import ray

    from autotune.workers.ray_worker import KEEP_NODE_DEVICES

    if ray.is_initialized():
        return False
    # Set before ray.init: a local Ray's workers inherit it, and Ray's warning about it is not printed.
    os.environ.update(KEEP_NODE_DEVICES)
    # Inside a Ray job (ray job submit) Ray names the job's cluster; a local Ray would be wrong there.
    address = address or os.environ.get("RAY_ADDRESS") or None
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
    if address:
        _check_reachable(address)
        try:
            ray.init(address=address, **kwargs)
        except Exception as exc:  # Ray raises ConnectionError, RuntimeError or its own types
            raise AutotuneError(f"cannot reach the Ray cluster at {address}: {str(exc).splitlines()[0][:200]}; "
                                "check --ray-address (host:port of the head node, or 'auto')") from None
    else:
        with _token_required():
            ray.init(num_cpus=os.cpu_count(), resources={COMPILE_RESOURCE: compile_slots} if compile_slots else None,
                     **kwargs)
        # Ray before 2.52 has no token; ray.init says it turned token mode on by setting the variable.
        if notes is not None and os.environ.get("RAY_AUTH_MODE") != "token":
            notes.append(f"Ray {ray.__version__} started without token authentication: a process that "
                         "reaches this machine's Ray ports can join it and run code as this user")
    return True


@contextlib.contextmanager
def _token_required() -> Iterator[None]:
    """A local Ray that only its owner can join.

    Ray 2.60 binds its GCS and raylets to every interface, whatever node address it is given
    (checked with ``ss -ltnp``): what keeps other users and hosts out is its token. So token mode
    is on, even where ``RAY_AUTH_MODE=disabled`` was exported, and the token file that Ray writes
    with the process's umask (``~/.ray/auth_token``, 0644) is readable by its owner alone."""
    # Unset, ray.init turns token mode on itself (and for this process too, which setting the
    # variable here after Ray's import would not do).
    if os.environ.get("RAY_AUTH_MODE") != "token":
        os.environ.pop("RAY_AUTH_MODE", None)
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    _owner_only(path)
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)
        _owner_only(path)


def _owner_only(path: Path) -> None:
    if path.exists() and path.stat().st_mode & 0o077:
        path.chmod(0o600)


def _check_reachable(address: str) -> None:
    """Fail in seconds, not minutes: ray.init retries an unreachable GCS for a long time."""
    import socket

    if address == "auto":
        return
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise AutotuneError(f"--ray-address {address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        with socket.create_connection((host, int(port)), timeout=3):
            pass
    except OSError as exc:
        raise AutotuneError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}; "
                            "check --ray-address (the head node's GCS address, e.g. 10.0.0.5:6379)") from None


def cpu_trial_slots(cpus: int) -> int:
    """Trials at once on ``cpus`` host CPUs when the trials share them: one per 8 CPUs, at least
    one, since parallel CPU trials disturb each other's timings."""
    return 1 if cpus <= 8 else cpus // 8


def alive_nodes() -> list[dict[str, float]]:
    """The resources of each live node of the Ray cluster this process is connected to."""
    import ray

    return [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]


def plan_placement(target: Target, *, workers: int | None, cores_per_trial: int, processes_per_trial: int = 1,
                   nodes_per_trial: int = 1, nodes: list[dict[str, float]] | None = None) -> Placement:
    """How many workers, and what each holds, from the resources of the cluster's ``nodes``.

    A target whose trials hold devices (:attr:`Target.device_resource`: ``neuron_cores``, ``GPU``)
    gets one worker per trial's share of them (:meth:`Target.devices_per_trial` of
    ``cores_per_trial`` and ``processes_per_trial``) on each node (a trial's processes and devices
    are on one node: a trial that needs more than the largest node has is an error, before any
    trial starts). The others get a share of one node's
    CPUs each, never the cluster's total: a worker that asks for more CPUs than any node has is
    never placed, and one that asks for all of a cluster's CPUs leaves no room for a second study.
    A trial of ``nodes_per_trial`` nodes holds one worker's share on each of as many nodes
    (:func:`spanning`).
    """
    nodes = alive_nodes() if nodes is None else nodes
    if nodes_per_trial > 1:
        one = plan_placement(target, workers=None, cores_per_trial=cores_per_trial,
                             processes_per_trial=processes_per_trial, nodes=nodes)
        return spanning(one, nodes_per_trial, workers, nodes)
    notes: list[str] = []
    resource, noun = target.device_resource, target.device_noun
    if resource is not None:
        per_node = [int(n.get(resource, 0)) for n in nodes]
        cores = sum(per_node)
        if cores == 0:
            notes.append(f"the Ray cluster declares no {resource}: trials run without {noun}")
            return Placement(workers=workers or 1, target=target.name, cpus_per_worker=0, notes=notes,
                             per_node=workers or 1)
        held = target.devices_per_trial(cores_per_trial, processes_per_trial)
        if held > max(per_node):
            raise AutotuneError(f"a trial of {processes_per_trial} process(es) needs {held} {noun} on one node; "
                                f"the largest node has {max(per_node)}: lower --nproc-per-node or {target.device_flag}")
        most = sum(c // held for c in per_node)
        if workers and workers > most:
            notes.append(f"{workers} workers asked for, but the cluster's {cores} {noun} hold only {most} "
                         f"trials of {held} {noun}: using {most}")
        # The devices are the scarce resource; compiling uses host CPUs that Ray does not ration.
        n = min(workers or most, most)
        return Placement(workers=n, target=target.name, devices_per_worker=held,
                         device_resource=resource, cpus_per_worker=0, notes=notes,
                         per_node=min(n, max(per_node) // held))
    # CPU targets: parallel trials on a small machine distort each other's measurements. The
    # default is what one node holds without that; more is asked for with --workers.
    node_cpus = [int(n.get("CPU", 0)) for n in nodes if n.get("CPU", 0) >= 1] or [os.cpu_count() or 1]
    largest = max(node_cpus)
    if processes_per_trial > largest:
        raise AutotuneError(f"--nproc-per-node {processes_per_trial} is more than the {largest} CPUs "
                            "of the largest node: a trial's processes run on one node")
    default = cpu_trial_slots(largest)
    n = workers or default
    if n > default * len(node_cpus):
        notes.append(f"{n} trials at once on {sum(node_cpus)} CPUs: their timings will disturb each other "
                     f"(default {default}); threads are split between them")
    n = max(1, min(n, sum(node_cpus)))
    # A worker's share: a slot of the default size, less when more workers than slots share the nodes.
    on_a_node = min(largest, max(default, -(-n // len(node_cpus))))
    cpus = largest / on_a_node
    threads = max(1, int(cpus))
    user_threads = os.environ.get("OMP_NUM_THREADS", "")
    if user_threads.isdigit() and int(user_threads) > 0:
        threads = min(threads, int(user_threads))  # the user has already limited threads: keep it
    return Placement(workers=n, target=target.name, cpus_per_worker=cpus, threads_per_trial=threads,
                     notes=notes, per_node=min(n, on_a_node))


def spanning(one: Placement, count: int, workers: int | None, nodes: list[dict[str, float]]) -> Placement:
    """``one``'s workers (a one-node trial's share each) as gangs of ``count``, each on ``count``
    nodes: as many as the nodes hold side by side, one share of a gang to a node (``workers`` of
    them at most, a CPU study's default at most where none is asked for)."""
    bundle = one.bundle()
    fits = [int(min((node.get(k, 0) / v for k, v in bundle.items()), default=1)) for node in nodes]
    able = sum(1 for f in fits if f >= 1)
    if able < count:
        held = ", ".join(f"{v:g} {k}" for k, v in bundle.items()) or "a worker"
        raise AutotuneError(f"a trial of {count} nodes holds {held} on each of {count} nodes; the Ray cluster has "
                            f"{able} such node{'s' if able != 1 else ''}: lower --nnodes, or start more nodes")
    # The most gangs k such that the nodes hold k * count shares, no node more than one of each gang.
    most = max(k for k in range(1, sum(fits) // count + 1) if sum(min(f, k) for f in fits) >= k * count)
    notes = list(one.notes)
    if workers and workers > most:
        notes.append(f"{workers} workers asked for, but the cluster's nodes hold only {most} trials of {count} nodes "
                     f"side by side: using {most}")
    n = min(workers or (most if one.device_resource else one.workers), most)
    return dataclasses.replace(one, workers=n, notes=notes, per_node=min(n, one.per_node), nodes_per_trial=count)


def plan_compile_placement(target: Target, *, workers: int | None,
                           nodes: list[dict[str, float]] | None = None) -> Placement:
    """The compile workers: one per ``compile_slots`` the cluster's nodes declare (``workers`` of
    them at most). Each holds one thread and no CPU of Ray's count, so that the measurements'
    places are unchanged; a compile job on a node where a trial measures on the host's CPUs is
    stopped while it measures (:class:`autotune.workers.ray_worker.CompileWorker`)."""
    nodes = alive_nodes() if nodes is None else nodes
    slots = sum(int(n.get(COMPILE_RESOURCE, 0)) for n in nodes)
    if slots == 0:
        raise AutotuneError(f"no node of the Ray cluster declares {COMPILE_RESOURCE}: start the nodes that compile "
                            f"with ray start --resources='{{\"{COMPILE_RESOURCE}\": 8}}' (8 compile jobs there), "
                            "or leave out --compile-ahead")
    notes = []
    if workers and workers > slots:
        notes.append(f"{workers} compile workers asked for, but the cluster declares {slots} {COMPILE_RESOURCE}: "
                     f"using {slots}")
    n = min(workers or slots, slots)
    return Placement(workers=n, target=target.name, devices_per_worker=1,
                     device_resource=COMPILE_RESOURCE, cpus_per_worker=0, threads_per_trial=1, notes=notes,
                     compiles=True, per_node=min(n, max(int(node.get(COMPILE_RESOURCE, 0)) for node in nodes)))
