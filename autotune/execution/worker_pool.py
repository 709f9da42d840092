"""The pool of trial slots a study's trials run on (:class:`WorkerPool`): each slot one Ray actor
(or a gang of them, one on each node of a trial that spans several: :mod:`.trial_slots`), one trial
at a time. A worker that dies mid-trial is replaced, and its trial is run once more on another
worker before it is recorded as failed; each attempt in a folder of its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.execution.pool import Finished
from autotune.execution.scheduler import Placement
from autotune.records import CompileRequest, TrialRequest


#: Seconds a lost worker's replacement may take to be placed before the trials waiting for a
#: worker are failed, when no other worker is left to run them.
PLACE_TIMEOUT_S = 120.0


@dataclass
class _Running:
    request: TrialRequest | CompileRequest
    #: The trial slot that runs it (:mod:`.trial_slots`), and the references to its parts' replies.
    worker: Any
    refs: list[Any]
    attempts: int
    tag: Any
    #: Why an earlier attempt of this trial ended without a result (its worker or node was lost).
    lost: str | None = None
    #: Each part's reply (JSON), or the Ray error that came instead, by part, as they come.
    parts: dict[int, Any] = field(default_factory=dict)
    #: For a trial of several nodes: the part that ended first without a result, and whether the
    #: other parts were told to stop then.
    cause: int | None = None
    stopped: bool = False


def for_attempt(request: TrialRequest | CompileRequest, attempt: int) -> TrialRequest | CompileRequest:
    """``request`` run again as its ``attempt``-th attempt, in a folder of its own under the
    first's: whatever the lost attempt's processes still write there (its report, its log) is
    never read as this attempt's."""
    if isinstance(request, CompileRequest):
        return request.model_copy(update={"trial": for_attempt(request.trial, attempt)})
    return request.model_copy(update={"trial_dir": str(attempt_folder(request.trial_dir, attempt))})


def attempt_folder(trial_dir: str | Path, attempt: int) -> Path:
    """The folder of a trial's ``attempt`` (1: the first, its own folder)."""
    return Path(trial_dir) if attempt <= 1 else Path(trial_dir) / f"attempt-{attempt}"


def last_attempt(trial_dir: str | Path) -> int:
    """The last attempt of the trial whose folder is ``trial_dir`` that left a folder."""
    found = [int(p.name.removeprefix("attempt-")) for p in Path(trial_dir).glob("attempt-*")
             if p.name.removeprefix("attempt-").isdigit()]
    return max(found, default=1)


class WorkerPool:
    """Trial slots that run trial requests; :meth:`wait` yields finished ones. A slot is a Ray actor,
    or, for trials that span several nodes, a gang of them (:mod:`.trial_slots`).

    A worker lost mid-trial (its process or its whole node died) is infrastructure, not the
    configuration's fault: the trial runs again on another worker, and its result says so in
    ``placement["lost"]``. The lost worker's replacement takes trials only once Ray has placed it
    (the node may be gone, and Ray may not know yet): until then, and for good when the cluster no
    longer has room for it, the trial waits for a worker that is free. A part of a trial of several
    nodes that ends without a result (its node lost, its ranks failed) stops the other parts at
    once: their ranks would wait in a collective for partners that are gone.
    """

    def __init__(self, placement: Placement) -> None:
        from autotune.workers.ray_worker import worker_class

        self.placement = placement
        devices: dict[str, float] | None = ({placement.device_resource: placement.devices_per_worker}
                                            if placement.device_resource and placement.devices_per_worker else None)
        self._cls = worker_class(resources=devices, num_cpus=placement.cpus_per_worker, compiles=placement.compiles)
        self._next_id = 0
        self.idle: list[Any] = [self._spawn() for _ in range(placement.workers)]
        #: Each running job's parts' references -> the job.
        self.running: dict[Any, _Running] = {}
        #: Trials whose worker was lost, waiting for a free one.
        self.queued: list[_Running] = []
        #: Replacements of lost workers, until Ray has placed them: a ready reference -> (the
        #: worker, when it was asked for).
        self.starting: dict[Any, tuple[Any, float]] = {}

    def _spawn(self) -> Any:
        from autotune.execution.trial_slots import NodeGang, OneWorker

        self._next_id += 1
        # A compile worker's compile_slots are no devices of the target's.
        held = None if self.placement.compiles else self.placement.device_resource
        args = (self._next_id, self.placement.target, self.placement.per_node, held)
        if self.placement.nodes_per_trial > 1:
            return NodeGang(self._cls, self.placement.bundle(), self.placement.nodes_per_trial, *args)
        return OneWorker(self._cls.remote(*args))

    @property
    def free(self) -> int:
        return max(0, len(self.idle) - len(self.queued))

    def submit(self, request: TrialRequest | CompileRequest, tag: Any, attempts: int = 1,
               lost: str | None = None) -> None:
        worker = self.idle.pop()
        job = _Running(request, worker, worker.run(request.model_dump_json()), attempts, tag, lost)
        for ref in job.refs:
            self.running[ref] = job

    def wait(self, timeout: float) -> list[Finished]:
        """The jobs that finished; a lost worker's trial is run again once."""
        import ray
        from ray.exceptions import RayError

        self._place_started()
        if not self.running:
            time.sleep(min(timeout, 0.2))
            self._run_queued()
            return self._unrunnable()
        ready, _ = ray.wait(list(self.running), num_returns=len(self.running), timeout=timeout)
        jobs: dict[int, _Running] = {}
        for ref in ready:
            job = self.running.pop(ref)
            try:
                job.parts[job.refs.index(ref)] = ray.get(ref)
            except RayError as exc:
                job.parts[job.refs.index(ref)] = exc
            jobs[id(job)] = job
        done: list[Finished] = []
        for job in jobs.values():
            self._cut_short(job)
            if len(job.parts) == len(job.refs):
                done.extend(self._finish(job))
        self._run_queued()
        return done + self._unrunnable()

    def _cut_short(self, job: _Running) -> None:
        """Stop the other parts of a trial of several nodes once one has ended without a result;
        the first of those to end is the cause of the trial's failure."""
        from autotune.records import TrialResult

        if len(job.refs) == 1 or job.stopped:
            return
        ended = {i: TrialResult.model_validate_json(p) if isinstance(p, str) else p for i, p in job.parts.items()}
        failed = {i: p for i, p in ended.items() if not isinstance(p, TrialResult) or not p.ok}
        if not failed:
            return
        results = {i: p for i, p in failed.items() if isinstance(p, TrialResult)}
        job.cause = min(results, key=lambda i: results[i].ended_at or 0.0) if results else None
        job.stopped = True
        if len(job.parts) < len(job.refs):
            job.worker.stop(_trial_dir(job.request))

    def _finish(self, job: _Running) -> list[Finished]:
        """The finished job whose every part has replied; a lost worker's trial is queued again once."""
        from ray.exceptions import RayActorError, RayError

        errors = [p for p in job.parts.values() if isinstance(p, RayError)]
        lost = next((e for e in errors if isinstance(e, RayActorError)), None)
        if lost is not None:
            self._replace(job.worker)
            if job.attempts < 2:
                job.attempts, job.lost = job.attempts + 1, _first_line(lost)
                job.parts, job.cause, job.stopped = {}, None, False
                self.queued.append(job)
                return []
            return [Finished(job.tag, error=f"the worker running this trial died twice: {_first_line(lost)}")]
        self.idle.append(job.worker)
        if errors:
            return [Finished(job.tag, error=f"the worker failed: {_first_line(errors[0])}")]
        replies = [job.parts[i] for i in range(len(job.refs))]
        if len(replies) == 1:
            return [_finished(job.tag, replies[0], job.lost)]
        from autotune.records import TrialResult
        from autotune.workers.nodes import joined

        result = joined([TrialResult.model_validate_json(r) for r in replies], job.cause)
        if job.lost is not None:
            result.placement["lost"] = job.lost
        return [Finished(job.tag, result=result)]

    def _run_queued(self) -> None:
        while self.queued and self.idle:
            job = self.queued.pop(0)
            self.submit(for_attempt(job.request, job.attempts), job.tag, attempts=job.attempts, lost=job.lost)

    def _unrunnable(self) -> list[Finished]:
        """Waiting trials that no worker is left to run: every worker is lost, and no replacement
        was placed within ``PLACE_TIMEOUT_S`` (the cluster has no room left for one)."""
        now = time.monotonic()
        if not self.queued or self.idle or self.running or \
                any(now - asked < PLACE_TIMEOUT_S for _, asked in self.starting.values()):
            return []
        done = [Finished(job.tag, error=f"no worker is left to run this trial: {job.lost}") for job in self.queued]
        self.queued = []
        return done

    def _place_started(self) -> None:
        import ray

        if not self.starting:
            return
        from ray.exceptions import RayError

        ready, _ = ray.wait(list(self.starting), num_returns=len(self.starting), timeout=0)
        for ref in ready:
            worker, _ = self.starting.pop(ref)
            try:
                ray.get(ref)
                self.idle.append(worker)
            except RayError:
                pass  # lost before it took a trial

    def _replace(self, dead: Any) -> None:
        dead.kill()
        worker = self._spawn()
        self.starting[worker.ready()] = (worker, time.monotonic())

    def shutdown(self) -> None:
        for worker in [*self.idle, *{id(j.worker): j.worker for j in self.running.values()}.values(),
                       *(w for w, _ in self.starting.values())]:
            worker.kill()
        self.idle, self.running, self.queued, self.starting = [], {}, [], {}


def _trial_dir(request: TrialRequest | CompileRequest) -> str:
    return (request.trial if isinstance(request, CompileRequest) else request).trial_dir


def _finished(tag: Any, reply: str, lost: str | None) -> Finished:
    """A worker's reply (JSON, which any Ray version carries) as the job it finished, with why an
    earlier attempt ended in its placement (``lost``)."""
    from autotune.records import CompileOutcome, TrialResult

    if '"stage"' in reply[:20]:
        outcome = CompileOutcome.model_validate_json(reply)
        if lost is not None:
            outcome.stage.placement["lost"] = lost
        return Finished(tag, compiled=outcome)
    result = TrialResult.model_validate_json(reply)
    if lost is not None:
        result.placement["lost"] = lost
    return Finished(tag, result=result)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
