"""What holds one trial at a time for the pool (:class:`autotune.execution.worker_pool.WorkerPool`):
a worker on one node (:class:`OneWorker`), or, for trials that span several nodes (``--nnodes``),
a worker on each of them (:class:`NodeGang`).

A gang holds a Ray placement group of one bundle per node, ``STRICT_SPREAD`` (no two on a node),
each bundle what a worker of a one-node trial holds; its worker on node ``i`` runs node ``i``'s
torchrun. Node 0's worker picks where the nodes meet (its address, free ports there) as the trial
starts, and the others start once that is known, through a Ray reference, without the driver
waiting for it. The gang is one slot: its parts are dispatched, stopped and lost together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle


class OneWorker:
    """A trial slot that is one Ray actor (``actor``)."""

    def __init__(self, actor: ActorHandle) -> None:
        self.actor = actor

    def run(self, request_json: str) -> list[ObjectRef]:
        """Start a job: the references to its parts' replies (here one)."""
        return [self.actor.run.remote(request_json)]

    def stop(self, trial_dir: str) -> None:
        """A trial on one worker is never stopped by its pool: it ends alone."""

    def ready(self) -> ObjectRef:
        """A reference that resolves once Ray has placed the slot."""
        return self.actor.info.remote()

    def kill(self) -> None:
        import ray

        try:
            ray.kill(self.actor)
        except Exception:  # already gone with its node
            pass


class NodeGang:
    """A trial slot that is ``nodes`` workers of class ``cls``, one on each of as many nodes, each
    holding ``bundle`` there. Each takes a second call while it runs a part: the stop of that part
    (:meth:`autotune.workers.ray_worker.TrialWorker.stop`)."""

    def __init__(self, cls: Any, bundle: dict[str, float], nodes: int, *args: object) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        # A bundle must hold something: a worker that holds nothing (a cluster that declares none of
        # the target's devices) holds a sliver of a CPU, which keeps one bundle to a node all the same.
        self.group = placement_group([bundle or {"CPU": 0.001}] * nodes, strategy="STRICT_SPREAD")
        self.workers = [cls.options(max_concurrency=2, scheduling_strategy=PlacementGroupSchedulingStrategy(
            self.group, placement_group_bundle_index=i)).remote(*args) for i in range(nodes)]

    def run(self, request_json: str) -> list[ObjectRef]:
        meeting = self.workers[0].meeting_point.remote(len(self.workers))
        return [worker.run_node.remote(request_json, i, meeting) for i, worker in enumerate(self.workers)]

    def stop(self, trial_dir: str) -> None:
        """End every node's part of the trial in ``trial_dir``, those not yet begun included."""
        for worker in self.workers:
            worker.stop.remote(trial_dir)

    def ready(self) -> ObjectRef:
        return self.group.ready()

    def kill(self) -> None:
        """Remove the placement group, and with it its workers (whose trial processes die with them)."""
        import ray
        from ray.util.placement_group import remove_placement_group

        for worker in self.workers:
            try:
                ray.kill(worker)
            except Exception:
                pass
        try:
            remove_placement_group(self.group)
        except Exception:  # Ray has removed it, or lost its head
            pass
