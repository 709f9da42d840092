"""A trial that spans several nodes, as one result: each node's torchrun ran its ranks and gave its
part (:meth:`autotune.workers.ray_worker.TrialWorker.run_node`); the trial's figure is the sum over
the nodes' figures, each node's ranks added up on its own clock first (:mod:`.multiprocess`), since
two hosts' monotonic clocks cannot be laid side by side.
"""

from __future__ import annotations

from autotune.records import CompileStats, KnobEffect, TrialResult
from autotune.workers.multiprocess import summed

#: The placement key that lists the Ray nodes of a trial that spans several, node 0's first.
RAY_NODES = "ray_nodes"


def joined(parts: list[TrialResult], cause: int | None = None) -> TrialResult:
    """The trial whose node ``i`` gave ``parts[i]``: ok where every part is, its measurement their
    sum; else failed as part ``cause`` failed (the first to end without a result: the others' ranks
    lost their partners, or were stopped), or as the first part that failed."""
    first = parts[0]
    failed = [i for i, p in enumerate(parts) if not p.ok]
    culprit = cause if cause is not None else failed[0] if failed else None
    shown = parts[culprit] if culprit is not None else first
    result = first.model_copy(deep=True, update={
        "wall_seconds": max(p.wall_seconds for p in parts),
        "stopped_early": any(p.stopped_early for p in parts),
        "peak_host_memory_bytes": max((p.peak_host_memory_bytes or 0 for p in parts), default=0) or None,
        "started_at": min((p.started_at for p in parts if p.started_at is not None), default=None),
        "ended_at": max((p.ended_at for p in parts if p.ended_at is not None), default=None),
        "ranks": sorted((r for p in parts for r in p.ranks), key=lambda r: r.rank),
        "compile": _compiled([p.compile for p in parts]),
        "knobs": _took_effect(parts),
        "log_path": shown.log_path, "log_tail": shown.log_tail,
        "notes": list(dict.fromkeys(note for p in parts for note in p.notes)),
    })
    result.placement[RAY_NODES] = ",".join(p.placement.get("ray_node", "?") for p in parts)
    for p in parts[1:]:
        for knob, values in p.script_loader.items():
            seen = result.script_loader.setdefault(knob, [])
            seen.extend(v for v in values if v not in seen)
        result.metrics = {**p.metrics, **result.metrics}
    if culprit is not None:
        failure = parts[culprit].failure
        result.status = "failed"
        result.measurement = None
        result.failure = failure.model_copy(update={"reason": f"node {culprit} of {len(parts)}: {failure.reason}"}) \
            if failure is not None else None
        return result
    measured = [p.measurement for p in parts if p.measurement is not None]
    result.measurement = summed(measured) if len(measured) == len(parts) else None
    return result


def _compiled(stats: list[CompileStats]) -> CompileStats:
    """What the nodes compiled: the most graphs any compiled, the cache's hits and misses of all."""
    hits = [s.cache_hits for s in stats if s.cache_hits is not None]
    misses = [s.cache_misses for s in stats if s.cache_misses is not None]
    seconds = [s.compile_seconds for s in stats if s.compile_seconds is not None]
    return CompileStats(graphs_compiled=max(s.graphs_compiled for s in stats),
                        graphs_after_warmup=max(s.graphs_after_warmup for s in stats),
                        compile_seconds=max(seconds) if seconds else None,
                        cache_hits=sum(hits) if hits else None, cache_misses=sum(misses) if misses else None)


def _took_effect(parts: list[TrialResult]) -> list[KnobEffect]:
    """Node 0's knobs, each shown to act where it acted on any node (a node's ranks that never
    reached what a knob changes say nothing of the others')."""
    acted = {k.param for p in parts for k in p.knobs if k.took_effect}
    return [k.model_copy(update={"took_effect": True}) if k.param in acted else k for k in parts[0].knobs]
