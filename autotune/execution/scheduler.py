"""Placement of trials on Ray workers, kept apart from choosing them (that is the study's job).

A pool of actors, one trial per actor at a time. For Neuron targets each actor holds
``cores_per_trial`` NeuronCores (Ray's ``neuron_cores`` resource), so trials never share a core.
A worker that dies mid-trial is replaced, and its trial is run once more on another worker
before it is recorded as failed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from autotune.errors import AutotuneError
from autotune.records import TrialRequest
from autotune.targets.base import Target


@dataclass
class Placement:
    workers: int
    #: The target whose trials the workers run.
    target: str
    #: Each worker holds this many of the Ray resource ``device_resource`` (``neuron_cores``).
    devices_per_worker: int = 0
    device_resource: str | None = None
    cpus_per_worker: float = 1.0
    threads_per_trial: int | None = None
    notes: list[str] = field(default_factory=list)


def connect(address: str | None) -> bool:
    """Join the Ray cluster at ``address``, or start a local Ray sized to this machine.

    Returns whether this call started Ray (and so should stop it). A Ray already initialised in
    this process is used as it is.
    """
    import ray

    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
    if address:
        _check_reachable(address)
        try:
            ray.init(address=address, **kwargs)
        except Exception as exc:  # Ray raises ConnectionError, RuntimeError or its own types
            raise AutotuneError(f"cannot reach the Ray cluster at {address}: {str(exc).splitlines()[0][:200]}; "
                                "check --ray-address (host:port of the head node, or 'auto')") from None
    else:
        ray.init(num_cpus=os.cpu_count(), **kwargs)
    return True


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


def plan_placement(target: Target, *, workers: int | None, cores_per_trial: int,
                   processes_per_trial: int = 1) -> Placement:
    """How many workers, and what each holds, from the cluster's resources.

    A target whose trials hold devices (:attr:`Target.device_resource`, ``neuron_cores``) gets
    one worker per ``cores_per_trial`` of them for each of a trial's ``processes_per_trial``; the
    others share the host's CPUs. A trial's processes run on one node: a trial that needs more
    than the largest node has is an error, before any trial starts.
    """
    import ray

    resources = ray.cluster_resources()
    cpus = int(resources.get("CPU", os.cpu_count() or 1))
    notes: list[str] = []
    resource, noun = target.device_resource, target.device_noun
    if resource is not None:
        cores = int(resources.get(resource, 0))
        if cores == 0:
            notes.append(f"the Ray cluster declares no {resource}: trials run without {noun}")
            return Placement(workers=workers or 1, target=target.name, cpus_per_worker=0, notes=notes)
        per_node = _largest_node(resource)
        if cores_per_trial * processes_per_trial > per_node:
            raise AutotuneError(f"a trial of {processes_per_trial} process(es) x {cores_per_trial} {noun} needs "
                                f"{cores_per_trial * processes_per_trial} {noun} on one node; the largest node has "
                                f"{per_node}: lower --nproc-per-node or --cores-per-trial")
        cores_per_trial *= processes_per_trial
        most = cores // cores_per_trial
        if workers and workers > most:
            notes.append(f"{workers} workers asked for, but {cores} {noun} hold only {most} "
                         f"trials of {cores_per_trial} cores: using {most}")
        # The devices are the scarce resource; compiling uses host CPUs that Ray does not ration.
        return Placement(workers=min(workers or most, most), target=target.name, devices_per_worker=cores_per_trial,
                         device_resource=resource,
                         cpus_per_worker=0, notes=notes)
    # CPU targets: parallel trials on a small machine distort each other's measurements.
    if processes_per_trial > _largest_node("CPU"):
        raise AutotuneError(f"--nproc-per-node {processes_per_trial} is more than the {_largest_node('CPU')} CPUs "
                            "of the largest node: a trial's processes run on one node")
    default = cpu_trial_slots(cpus)
    n = workers or default
    if n > default:
        notes.append(f"{n} trials at once on {cpus} CPUs: their timings will disturb each other "
                     f"(default {default}); threads are split between them")
    n = max(1, min(n, cpus))
    threads = max(1, cpus // n)
    user_threads = os.environ.get("OMP_NUM_THREADS", "")
    if user_threads.isdigit() and int(user_threads) > 0:
        threads = min(threads, int(user_threads))  # the user has already limited threads: keep it
    return Placement(workers=n, target=target.name, cpus_per_worker=cpus / n, threads_per_trial=threads,
                     notes=notes)


def _largest_node(resource: str) -> int:
    """The most of ``resource`` one live node of the Ray cluster has."""
    import ray

    return max((int(n.get("Resources", {}).get(resource, 0)) for n in ray.nodes() if n.get("Alive")), default=0)


@dataclass
class _Running:
    request: TrialRequest
    worker: Any
    ref: Any
    attempts: int
    tag: Any


class WorkerPool:
    """Ray actors that run trial requests; :meth:`wait` yields finished ones."""

    def __init__(self, placement: Placement) -> None:
        from autotune.workers.ray_worker import worker_class

        self.placement = placement
        devices = ({placement.device_resource: placement.devices_per_worker}
                   if placement.device_resource and placement.devices_per_worker else None)
        self._cls = worker_class(resources=devices,
                                 num_cpus=placement.cpus_per_worker)
        self._next_id = 0
        self.idle: list[Any] = [self._spawn() for _ in range(placement.workers)]
        self.running: dict[Any, _Running] = {}

    def _spawn(self) -> Any:
        self._next_id += 1
        return self._cls.remote(self._next_id, self.placement.target)

    @property
    def free(self) -> int:
        return len(self.idle)

    def submit(self, request: TrialRequest, tag: Any, attempts: int = 1) -> None:
        worker = self.idle.pop()
        ref = worker.run.remote(request.model_dump_json())
        self.running[ref] = _Running(request, worker, ref, attempts, tag)

    def wait(self, timeout: float) -> list[tuple[Any, str | None, str | None]]:
        """Finished trials as ``(tag, result_json, error)``; a dead worker's trial is resubmitted once."""
        import ray

        if not self.running:
            time.sleep(min(timeout, 0.2))
            return []
        ready, _ = ray.wait(list(self.running), num_returns=len(self.running), timeout=timeout)
        done: list[tuple[Any, str | None, str | None]] = []
        for ref in ready:
            job = self.running.pop(ref)
            try:
                done.append((job.tag, ray.get(ref), None))
                self.idle.append(job.worker)
            except ray.exceptions.RayActorError as exc:
                self._replace(job.worker)
                if job.attempts < 2:
                    self.submit(job.request, job.tag, attempts=job.attempts + 1)
                else:
                    done.append((job.tag, None, f"the worker running this trial died twice: {_first_line(exc)}"))
            except ray.exceptions.RayError as exc:
                self.idle.append(job.worker)
                done.append((job.tag, None, f"the worker failed: {_first_line(exc)}"))
        return done

    def _replace(self, dead: Any) -> None:
        import ray

        try:
            ray.kill(dead)
        except Exception:
            pass
        self.idle.append(self._spawn())

    def shutdown(self) -> None:
        import ray

        for worker in [*self.idle, *(j.worker for j in self.running.values())]:
            try:
                ray.kill(worker)
            except Exception:
                pass
        self.idle, self.running = [], {}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
