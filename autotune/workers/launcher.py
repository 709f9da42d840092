"""Runs one trial in its own process group, with a hard timeout and a host-memory limit.

The trial process is ``python -m autotune.harness SPEC.json`` (or torchrun running it on
each of ``nproc_per_node`` ranks, :mod:`.multiprocess`); it starts with the plan's env vars and
writes its report next to the spec, each rank of a multi-process trial its own under ``ranks/``. Whatever happens to it (a segfault, ``os._exit``, an
abort inside a compiler, a hang, a memory blow-up) ends here as a :class:`TrialResult` with a
failure category and the tail of its log: this function does not raise for a failed trial.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import psutil

from autotune.disk_space import full, no_space_reason, out_of_space
from autotune.log_tail import log_tail as log_tail_of
from autotune.measurement.failures import classify
from autotune.process_tree import die_with_parent
from autotune.records import (
    Failure,
    FailureCategory,
    HarnessReport,
    MeasurementProtocol,
    NodeRole,
    TrialPlan,
    TrialResult,
    TrialSpec,
)
from autotune.targets import failure_patterns, get_target
from autotune.workers import multiprocess, run_parts
from autotune.workers.process_watch import TrialPause, WatchedTree
from autotune.harness.knob_effects import knob_effects

#: What a failed trial's result keeps of its log: the last lines, at most so many characters.
LOG_TAIL_LINES = 40
LOG_TAIL_CHARS = 6000
#: The lines of its log that the note on a script that exited with an error code quotes.
LATE_EXIT_LINES = 3


@dataclass(frozen=True)
class TrialLimits:
    timeout_s: float
    #: Resident memory of the whole process tree; ``None`` means 80% of this machine's memory,
    #: divided among the ``sharing`` trials that run on it at once.
    memory_bytes: int | None = None
    poll_s: float = 0.1
    #: How long the ranks of a multi-process trial wait for each other in ``init_process_group``;
    #: ``None``: a third of the timeout, at most 10 minutes.
    rendezvous_s: float | None = None
    sharing: int = 1

    def memory_limit(self) -> int:
        return self.memory_bytes or int(psutil.virtual_memory().total * 0.8 / max(1, self.sharing))

    def rendezvous(self) -> float:
        return self.rendezvous_s or min(600.0, self.timeout_s / 3)


def run_trial(
    plan: TrialPlan,
    script: str | Path,
    args: list[str] | None = None,
    *,
    trial_dir: str | Path,
    cwd: str | Path | None = None,
    limits: TrialLimits,
    protocol: MeasurementProtocol | None = None,
    seed: int = 0,
    base_env: dict[str, str] | None = None,
    pause: Callable[[], bool] | None = None,
    devices: Mapping[str, str] | None = None,
    node: NodeRole | None = None,
    stop: threading.Event | None = None,
) -> TrialResult:
    """Run one trial and return its result (:func:`_run_process`). Where the script ended before it
    measured the seconds ``protocol`` asks of a noisy host, it runs again, each process in
    ``processes/<k>`` of ``trial_dir``, up to :data:`.pooling.MAX_PROCESSES` (where so many reach
    those seconds) and within the timeout, and the result is their measurements pooled
    (:func:`.pooling.pooled`).

    ``node``: this node's part of a trial that spans several, in its folder of the trial; it runs
    once, since its torchrun cannot start again without the other nodes'. ``stop``, once set, ends
    the trial's processes (the driver stops a node's part when another node's ended without a result)."""
    protocol = protocol or MeasurementProtocol()
    trial_dir = node.folder(trial_dir) if node is not None else Path(trial_dir)

    def process(directory: Path, timeout_s: float) -> TrialResult:
        try:
            return _run_process(plan, script, args, trial_dir=directory, cwd=cwd,
                                limits=dataclasses.replace(limits, timeout_s=timeout_s), protocol=protocol, seed=seed,
                                base_env=base_env, pause=pause, devices=devices, node=node, stop=stop)
        except OSError as exc:  # its folder, its spec or its log could not be written
            if not out_of_space(exc):
                raise
            return TrialResult(status="failed", plan=plan, failure=_no_space(directory))

    result = process(trial_dir, limits.timeout_s)
    if node is not None or not result.ok or \
            not run_parts.short(result.measurement, protocol, stopped_early=result.stopped_early):
        return result
    assert result.measurement is not None
    if not run_parts.reachable(result.measurement, protocol):
        result.notes.append(
            f"the script ended after {result.measurement.seconds:.1f} s of steady steps, and this host's runs vary "
            f"from one to the next: {run_parts.MAX_PROCESSES} processes of it would not measure the "
            f"{protocol.min_measure_seconds:.0f} s asked, so it ran once")
        return result
    parts = [result.measurement]
    walls = [result.wall_seconds]
    while len(parts) < run_parts.MAX_PROCESSES and sum(m.seconds for m in parts) < protocol.min_measure_seconds:
        left = limits.timeout_s - sum(walls)
        if left < max(walls):
            break
        again = process(trial_dir / "processes" / str(len(parts) + 1), left)
        walls.append(again.wall_seconds)
        if not again.ok or again.measurement is None or again.measurement.seconds <= 0:
            result.notes.append(f"process {len(parts) + 1} of the run failed and is left out: "
                                f"{again.failure.reason if again.failure else 'it measured nothing'} "
                                f"(its log: {again.log_path})")
            break
        parts.append(again.measurement)
        result.peak_host_memory_bytes = max(result.peak_host_memory_bytes or 0,
                                            again.peak_host_memory_bytes or 0) or None
        result.ended_at = again.ended_at
    result.measurement = run_parts.pooled(parts, protocol)
    result.wall_seconds = sum(walls)
    if len(parts) > 1:
        result.notes.append(
            f"the script ended after {parts[0].seconds:.1f} s of steady steps, and this host's runs "
            f"vary from one to the next: measured over {len(parts)} processes of it, "
            f"{sum(m.seconds for m in parts):.1f} s in all (at least {protocol.min_measure_seconds:.0f} s asked)")
    return result


def _run_process(
    plan: TrialPlan,
    script: str | Path,
    args: list[str] | None = None,
    *,
    trial_dir: str | Path,
    cwd: str | Path | None = None,
    limits: TrialLimits,
    protocol: MeasurementProtocol | None = None,
    seed: int = 0,
    base_env: dict[str, str] | None = None,
    pause: Callable[[], bool] | None = None,
    devices: Mapping[str, str] | None = None,
    node: NodeRole | None = None,
    stop: threading.Event | None = None,
) -> TrialResult:
    """Run the trial's process and return its result. ``pause``, polled with the memory, says when the trial
    must stop running for a while (a compile job while a measurement runs on its node): its process
    group is stopped (SIGSTOP) until it may go on (SIGCONT), and that time does not count against
    its timeout. ``devices``: the env vars that give the trial the devices its worker holds
    (``CUDA_VISIBLE_DEVICES``); they win over the plan's (a caller's exported value travels in it)
    and are recorded in the trial's ``spec.json``, while the result keeps the plan as planned."""
    trial_dir = Path(trial_dir)
    trial_dir.mkdir(parents=True, exist_ok=True)
    result_path = trial_dir / "report.json"
    result_path.unlink(missing_ok=True)
    log_path = trial_dir / "trial.log"
    ranks_dir = trial_dir / "ranks"
    shutil.rmtree(ranks_dir, ignore_errors=True)
    ranks_dir.mkdir()
    placed = plan.model_copy(update={"env": {**plan.env, **devices}}) if devices else plan
    env = trial_env(multiprocess.divide_threads(placed), base_env)
    spec = TrialSpec(plan=placed, script=str(Path(script).resolve()), args=plan.script_args(list(args or [])),
                     cwd=str(Path(cwd or os.getcwd()).resolve()), result_path=str(result_path),
                     protocol=protocol or MeasurementProtocol(), seed=seed, ranks_dir=str(ranks_dir))
    target = get_target(plan.target)
    rank_env = target.rank_envs(env, plan.nproc_per_node, multiprocess.free_port()) if node is None else \
        target.rank_envs(env, plan.nproc_per_node, node.runtime_port, master_addr=node.master_addr)
    spec = multiprocess.spec_for_ranks(spec, rank_env, limits.rendezvous()).model_copy(update={"node": node})
    spec_path = trial_dir / "spec.json"
    spec_path.write_text(spec.model_dump_json(indent=2))
    multiprocess.hook_env(env, spec_path)
    started_at = time.time()
    started = time.monotonic()
    watchdog: Failure | None = None
    peak = 0
    command = multiprocess.trial_command(plan, spec_path, node)
    first = node.first_rank(plan.nproc_per_node) if node is not None else 0
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(
                command, cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a kill reaches the children too
                preexec_fn=die_with_parent,  # and it ends with this process, even where it is stopped
            )
        except OSError as exc:  # the command a compile job runs under is not on this node
            return TrialResult(status="failed", plan=plan, log_path=str(log_path), started_at=started_at,
                               failure=Failure(category=FailureCategory.crash,
                                               reason=f"cannot start {command[0]} on this node: {exc.strerror}"))
        tree = WatchedTree(proc.pid)
        limit = limits.memory_limit()
        # Stopped for at most its own timeout in all: a measurement that never ends (or a mark
        # that never goes) delays a compile job, never stops it for good.
        held = TrialPause(tree, pause, cap_s=limits.timeout_s)
        try:
            while proc.poll() is None:
                used = tree.memory(limit)
                peak = max(peak, used)
                elapsed = time.monotonic() - started - held.poll()
                if used > limit:
                    watchdog = Failure(category=FailureCategory.host_oom,
                                       reason=f"the trial used {_gib(used)} of host memory, over its limit of "
                                              f"{_gib(limit)}")
                elif elapsed > limits.timeout_s:
                    watchdog = Failure(category=FailureCategory.timeout,
                                       reason=f"the trial ran longer than its timeout of {limits.timeout_s:g} s")
                elif stop is not None and stop.is_set():
                    watchdog = Failure(category=FailureCategory.crash,
                                       reason="stopped: another node of the trial ended without a result")
                if watchdog is not None:
                    held.release()
                    tree.kill()
                    proc.wait()
                    break
                time.sleep(limits.poll_s)
        finally:
            held.release()  # whatever ended the wait (an error here too): no stopped process is left
            tree.kill()  # children left behind by a finished trial (DataLoader workers, compilers)
    wall = time.monotonic() - started
    log_tail = log_tail_of(log_path, lines=LOG_TAIL_LINES)[-LOG_TAIL_CHARS:]
    ranks = multiprocess.read_rank_reports(ranks_dir)
    report = multiprocess.combine(_read_report(result_path), ranks)
    result = TrialResult(status="failed", plan=plan, script_args=spec.args, wall_seconds=wall,
                         log_path=str(log_path), log_tail=log_tail, peak_host_memory_bytes=peak or None,
                         started_at=started_at, ended_at=time.time(), ranks=multiprocess.rank_results(ranks))
    result.knobs = knob_effects(plan, report, ranks)
    if report is not None:
        result.measurement = report.measurement
        result.compile = report.compile
        result.losses = report.losses
        result.metrics = report.metrics
        result.stopped_early = report.stopped_early
        result.script_loader = report.script_loader
        result.notes.extend(report.notes)
    if watchdog is not None:
        watchdog.signal = "SIGKILL"
        result.failure = watchdog
    elif (died := _dead_rank(plan, ranks, log_path)) is not None:
        result.failure = died
    elif report is not None and report.failure is not None:
        result.failure = report.failure
    elif report is not None and (report.measurement is not None or report.metrics):
        result.status = "ok"
        if report.exit_code is not None:
            result.notes.append(_late_exit_note(report.exit_code, log_tail))
    elif report is not None and spec.protocol.compile_only and report.steps_seen:
        result.status = "ok"  # a compile job: its graphs are compiled, there was nothing to measure
    elif report is not None and report.steps_seen:
        result.failure = Failure(
            category=FailureCategory.script_error,
            reason=f"the script ended after {report.steps_seen} steps, all of them warm-up (compiling); "
                   "run it for more steps or epochs so that steady steps can be measured",
            exit_code=proc.returncode)
    elif report is not None:
        result.failure = Failure(
            category=FailureCategory.script_error,
            reason="no step was seen: the script iterated no DataLoader, took no optimizer step, called "
                   "no backward(), never called a module with parameters, reported no metric and never "
                   "called autotune.step()",
            exit_code=proc.returncode)
    else:  # where its report could not be written for lack of space, its log may say nothing of it
        result.failure = _no_space(trial_dir) if full(trial_dir) else _died(proc.returncode, log_tail)
    if plan.launch is not None and result.failure is not None:
        _blame_rank(result, ranks, log_path, first)
    return result


def _late_exit_note(code: int, log_tail: str) -> str:
    """What a script that exited with an error code after it was measured said last."""
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()][-LATE_EXIT_LINES:]
    said = "; its last lines: " + " | ".join(lines) if lines else ""
    return f"the script exited with code {code} after it was measured (the measurement stands){said}"


def _dead_rank(plan: TrialPlan, ranks: list[HarnessReport], log_path: Path) -> Failure | None:
    """The failure of a rank torchrun names as failed that died without its report (a crash, a
    kill): its lines in the log say what killed it. It comes first even where torchrun saw first
    a rank that failed because of it (a collective whose partner vanished)."""
    failed = multiprocess.failed_ranks(log_tail_of(log_path)) if plan.launch is not None else []
    reported = {r.rank for r in ranks}
    dead = next((f for f in failed if f[0] not in reported), None)
    if dead is None:
        return None
    rank, local_rank, code = dead
    failure = _died(code, _rank_tail(log_path, local_rank))
    return failure.model_copy(update={"reason": f"rank {rank}: {failure.reason}"})


def _blame_rank(result: TrialResult, ranks: list[HarnessReport], log_path: Path, first: int) -> None:
    """Point a multi-process trial's failure at a rank: the log tail becomes the lines of the rank
    that failed (or, where none reported a failure, of one that never reported), and the reason
    names the ranks that ended without a report (hung, killed, crashed). ``first``: the global rank
    of this node's local rank 0."""
    assert result.failure is not None
    reported = {r.rank for r in ranks}
    silent = [i for i in range(first, first + result.plan.nproc_per_node) if i not in reported]
    failed = next((r.rank for r in ranks if r.failure is not None), None)
    named = re.match(r"rank (\d+):", result.failure.reason)
    if silent and result.failure.category == FailureCategory.timeout:
        culprit: int | None = silent[0]  # a rank waited for one that hangs: the one that hangs failed
    else:
        culprit = int(named.group(1)) if named else failed if failed is not None else silent[0] if silent else None
    if culprit is not None:
        result.log_tail = _rank_tail(log_path, culprit - first) or result.log_tail
    if silent and not (named and int(named.group(1)) in silent):
        listed = ", ".join(map(str, silent))
        result.failure.reason += f"; rank{'s' if len(silent) > 1 else ''} {listed} ended without a report " \
                                 "(hung, killed or crashed)"


def trial_env(plan: TrialPlan, base_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a trial process: the caller's, then the plan's env vars."""
    env = dict(os.environ if base_env is None else base_env)
    env.update(plan.env)
    env["PYTHONUNBUFFERED"] = "1"
    if plan.knobs.threads:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = str(plan.knobs.threads)
    return env


def _rank_tail(log_path: Path, local_rank: int) -> str:
    """The end of one rank's own lines in the log of a multi-process trial."""
    lines = multiprocess.rank_log(log_tail_of(log_path), local_rank).splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:])[-LOG_TAIL_CHARS:]


def _no_space(trial_dir: Path) -> Failure:
    return Failure(category=FailureCategory.disk_full, reason=no_space_reason(trial_dir))


def _died(returncode: int | None, log_tail: str) -> Failure:
    """A trial process that ended without writing its report."""
    if returncode is not None and returncode < 0:
        name = _signal_name(-returncode)
        said: dict[int, str] = {signal.SIGABRT: "the trial aborted (SIGABRT)",
                                signal.SIGKILL: "the trial was killed (SIGKILL) from outside"}
        reason = said.get(-returncode, f"the trial died of {name}")
        return classify(log_tail, failure_patterns(), default=FailureCategory.crash, default_reason=reason,
                        signal=name)
    code = returncode if returncode is not None else -1
    reason = ("the trial aborted (exit 134)" if code == 134  # SIGABRT as a shell reports it
              else f"the trial exited with code {code} before writing its result")
    return classify(log_tail, failure_patterns(), default=FailureCategory.crash, default_reason=reason,
                    exit_code=code)


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _read_report(path: Path) -> HarnessReport | None:
    try:
        return HarnessReport.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


