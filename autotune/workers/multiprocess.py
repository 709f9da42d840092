"""A trial of several processes, from the launcher's side: how it is started, what each rank's
environment holds, how the ranks' reports make one, and which rank failed when one did.

With a process count in its configuration the trial process is torch's elastic launcher (``python -m
torch.distributed.run``, what ``torchrun`` runs), each rank running the harness. ``--standalone``
gives every trial its own rendezvous on a free port, so parallel trials on one machine never meet;
``--tee`` prefixes each rank's lines in the trial's log, so a failing rank's tail can be cut out.
A script that spawns its own workers needs none of this: the hook on the trial's ``PYTHONPATH``
(``hook/sitecustomize.py``) makes them ranks.
"""

from __future__ import annotations

import math
import os
import re
import socket
import sys
from pathlib import Path
from typing import Iterable

from autotune.measurement.ranks import combined_windows
from autotune.measurement.windows import Window, estimate
from autotune.harness.apply import HOOK_DIR
from autotune.records import CompileStats, HarnessReport, Measurement, NodeRole, RankResult, TrialPlan, TrialSpec
from autotune.harness.ranks import SPEC_ENV



def trial_command(plan: TrialPlan, spec_path: Path, node: NodeRole | None = None) -> list[str]:
    """The trial process's command line: the harness, or torchrun running it on each rank; on one
    ``node`` of a trial that spans several, its torchrun, which meets the others' at node 0."""
    harness = ["-m", "autotune.harness", str(spec_path)]
    if plan.launch is None:
        return [*plan.wrapper, sys.executable, *harness]
    return [*plan.wrapper, sys.executable, "-m", "torch.distributed.run", *rendezvous_args(node),
            f"--nproc-per-node={plan.nproc_per_node}", "--max-restarts=0", "--tee=3", *harness]


def rendezvous_args(node: NodeRole | None) -> list[str]:
    """How torchrun's ranks meet: a rendezvous of their own on this host, or ``node``'s at node 0."""
    if node is None:
        return ["--standalone"]
    return [f"--nnodes={node.nodes}", f"--node-rank={node.index}", f"--master-addr={node.master_addr}",
            f"--master-port={node.master_port}"]


def hook_env(env: dict[str, str], spec_path: Path) -> None:
    """Make every Python process the trial starts pick up the trial's spec through the hook."""
    env[SPEC_ENV] = str(spec_path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HOOK_DIR), env.get("PYTHONPATH", "")) if p)


def divide_threads(plan: TrialPlan) -> TrialPlan:
    """The plan each rank runs: the trial's CPU threads divided among its ranks."""
    n = plan.nproc_per_node
    if n == 1 or not plan.knobs.threads:
        return plan
    knobs = plan.knobs.model_copy(update={"threads": max(1, plan.knobs.threads // n)})
    return plan.model_copy(update={"knobs": knobs})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on every interface of this host (the other nodes reach them)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def read_rank_reports(ranks_dir: Path) -> list[HarnessReport]:
    """The reports the ranks wrote, in rank order."""
    reports = []
    for path in sorted(ranks_dir.glob("rank-*.json")):
        try:
            reports.append(HarnessReport.model_validate_json(path.read_text()))
        except (OSError, ValueError):
            continue
    ordered = sorted(reports, key=lambda r: (r.rank is None, r.rank or 0, r.pid or 0))
    for i, report in enumerate(ordered):
        if report.rank is None:
            report.rank = i
    return ordered


def combine(main: HarnessReport | None, ranks: list[HarnessReport]) -> HarnessReport | None:
    """One report for the trial from its ranks' (and, for spawned workers, their parent's)."""
    measured = [r for r in ranks if r.steps_seen]
    if not ranks:
        return main
    out = HarnessReport() if main is None else main.model_copy(deep=True)
    if main is None:  # torchrun: the ranks are the whole trial
        out.finished = all(r.finished for r in ranks)
    out.stopped_early = out.stopped_early or any(r.stopped_early for r in ranks)
    if out.exit_code is None:
        out.exit_code = next((r.exit_code for r in ranks if r.exit_code is not None), None)
    for r in ranks:  # a knob was applied where any process found what it changes
        for knob, applied in r.knobs_applied.items():
            out.knobs_applied[knob] = out.knobs_applied.get(knob, False) or applied
        for knob, values in r.script_loader.items():
            seen = out.script_loader.setdefault(knob, [])
            seen.extend(v for v in values if v not in seen)
        out.notes.extend(note for note in r.notes if note not in out.notes)
    failed = next((r for r in ranks if r.failure is not None), None)
    if out.failure is None and failed is not None and failed.failure is not None:
        out.failure = failed.failure.model_copy(update={"reason": f"rank {failed.rank}: {failed.failure.reason}"})
        out.error = failed.error
    if not measured:
        return out
    first = measured[0]
    out.steps_seen = max(r.steps_seen for r in measured)
    out.measurement = first.measurement if len(measured) == 1 else combined_measurement(measured)
    out.compile = CompileStats(
        graphs_compiled=max(r.compile.graphs_compiled for r in ranks),
        graphs_after_warmup=max(r.compile.graphs_after_warmup for r in ranks),
        compile_seconds=max((r.compile.compile_seconds for r in ranks if r.compile.compile_seconds is not None),
                            default=None),
        cache_hits=_sum(r.compile.cache_hits for r in ranks),
        cache_misses=_sum(r.compile.cache_misses for r in ranks))
    out.losses = list(first.losses) or out.losses
    for r in reversed(measured):
        out.metrics.update(r.metrics)
    return out


def combined_measurement(ranks: list[HarnessReport]) -> Measurement | None:
    """The trial's measurement: every rank's samples in the time all of them were measuring.

    Ranks that never measured at the same time (they do not wait for each other, and one started
    late) have no common time: then their own throughputs add up, their intervals as independent
    errors do."""
    measured = [r.measurement for r in ranks if r.measurement is not None]
    if len(measured) < len(ranks):
        return None
    windows = [[Window(w.steps, w.samples, w.seconds, w.compiles, w.start) for w in r.windows] for r in ranks]
    slices = combined_windows(windows)
    est = estimate(slices)
    if est is None or not math.isfinite(est.ci_high):
        return summed(measured)
    used = slices[est.truncated:]
    return _joined(measured, est.throughput, est.ci_low, est.ci_high, sum(w.steps for w in used), len(used))


def summed(measured: list[Measurement]) -> Measurement:
    """Measurements of parts of one job that were never laid side by side in time (ranks that never
    measured at once; the nodes of a trial, whose clocks are their own) as one: their throughputs
    add up, their intervals as independent errors do."""
    throughput = sum(m.throughput for m in measured)
    half = math.sqrt(sum(m.ci95_half_width ** 2 for m in measured))
    return _joined(measured, throughput, max(0.0, throughput - half), throughput + half,
                   min(m.steps_measured for m in measured), min(m.windows for m in measured))


def _joined(measured: list[Measurement], throughput: float, low: float, high: float, steps: int,
            count: int) -> Measurement:
    """The job's measurement at ``throughput`` [``low``, ``high``], its other figures from its parts'."""
    return Measurement(
        throughput=throughput, ci95_low=low, ci95_high=high,
        # The slowest rank sets the pace of a job in lockstep.
        step_time_median=max(m.step_time_median for m in measured),
        step_time_p90=max(m.step_time_p90 for m in measured),
        samples_per_step=sum(m.samples_per_step for m in measured),
        steps_measured=steps, windows=count,
        converged=all(m.converged for m in measured),
        warmup_steps=max(m.warmup_steps for m in measured),
        warmup_seconds=max(m.warmup_seconds for m in measured),
        pruned=any(m.pruned for m in measured),
        # Per sample, the same model on every rank.
        flops_per_sample=next((m.flops_per_sample for m in measured if m.flops_per_sample is not None), None),
        model_device=next((m.model_device for m in measured if m.model_device is not None), None))


def rank_results(ranks: list[HarnessReport]) -> list[RankResult]:
    return [RankResult(rank=r.rank or 0, pid=r.pid, steps_seen=r.steps_seen, measurement=r.measurement,
                       compile=r.compile, failure=r.failure) for r in ranks]


#: One failed rank in torchrun's summary of a failed job ("Failures:" and "Root Cause").
_FAILED_RANK = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


def failed_ranks(log: str) -> list[tuple[int, int, int]]:
    """``(rank, local_rank, exit code)`` of each rank torchrun's summary names as failed."""
    return [(int(m.group(1)), int(m.group(2)), int(m.group(3))) for m in _FAILED_RANK.finditer(log)]


#: The prefix ``--tee`` puts before each piece of a rank's output it copies to the log.
_RANK_PREFIX = re.compile(r"\[default(\d+)\]:")


def rank_log(log: str, local_rank: int) -> str:
    """The lines of one local rank in a log written with ``--tee``, their prefix removed.

    torchrun copies what it has read of each rank's output, so a line a rank wrote in two pieces can
    reach the log with another rank's line between them: ``[default1]:[Gloo] Rank [default0]:...``,
    then ``[default1]:1 is connected``. Each piece goes to its own rank, and a rank's pieces are joined
    until its newline."""
    pieces = _RANK_PREFIX.split(log)  # text, rank, piece, rank, piece, ...
    # Up to and with its newline; after it come torchrun's own lines.
    own = (piece.partition("\n")[:2] for rank, piece in zip(pieces[1::2], pieces[2::2]) if int(rank) == local_rank)
    return "".join(text + newline for text, newline in own).removesuffix("\n")


def spec_for_ranks(spec: TrialSpec, rank_env: list[dict[str, str]], rendezvous_s: float) -> TrialSpec:
    """The spec every rank reads: its own env vars, and a pruning bar for one rank's share."""
    n = spec.plan.world_size
    protocol = spec.protocol
    if n > 1 and protocol.stop_below is not None:
        protocol = protocol.model_copy(update={"stop_below": protocol.stop_below / n})
    return spec.model_copy(update={
        "plan": divide_threads(spec.plan), "protocol": protocol, "rendezvous_timeout_s": rendezvous_s,
        "rank_env": {str(i): env for i, env in enumerate(rank_env) if env}})


def _sum(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None
