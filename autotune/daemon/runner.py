"""Runs the queued jobs: one ``autotune run`` process per job, started, watched, stopped.

Each job is its own process group (``python -m autotune.cli.job_process ... run ...``), built
as an argv list; its stdout (the study's JSON result) and stderr go to files in the job's
directory, and it writes its exit code to a file when it ends. The storage URL, which may hold a
password, is on no command line (``ps`` shows those to every user of the machine) and in no
environment: the job reads it from a pipe it inherits (:data:`STORAGE_FD_ENV` names the
descriptor). A job does not depend on the daemon that started it: a daemon that is killed and
started again *adopts* the job processes that are still alive (same pid, same start time, same
command line), finalises those that ended while it was down, and queues again those whose process
is gone; rerunning ``autotune run`` on the same study resumes it with its measured trials kept
(stale trials are failed and re-queued by Optuna's heartbeats). A job that runs on another host (a daemon moved to another machine, the old one
killed) is never queued again while its process still writes its heartbeat in the job's row: it
is watched through that heartbeat until it stops.

Fair share: the cluster offers ``slots`` trials at once (:func:`trial_slots`). A job that starts
while ``n`` jobs share the daemon (running ones, plus queued ones that may start now, at most
``--max-concurrent-jobs``) gets ``--workers max(1, slots // n)``, capped by the ``--workers`` its
submitter asked for. A job's share is fixed when it starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil

from autotune.daemon.job_files import ATTEMPT_LINE, DaemonSettings, JobFiles, job_argv, job_workdir, start_job_process
from autotune.daemon.jobs import JOB_STALE_S, JobRecord, JobStore
from autotune.daemon.messages import EXIT_CANCELLED, JobState
from autotune.errors import AutotuneError
from autotune.execution.scheduler import cpu_trial_slots
from autotune.machine.host import host_identity
from autotune.log_tail import log_tail
from autotune.process_tree import kill_tree
from autotune.targets import DEVICE_RESOURCES, detect_target, get_target

#: Attempts of a job whose process dies (killed, out of memory, machine lost) before it is failed.
MAX_ATTEMPTS = 3
#: How long a cancelled job gets to stop its trials and Ray itself before everything is killed.
CANCEL_GRACE_S = 10.0
TICK_S = 0.5


# -- slots and shares ----------------------------------------------------------------------------

def trial_slots(resources: dict[str, float], device_resource: str | None = None, devices_per_trial: int = 1) -> int:
    """Trials the cluster runs at once: its devices // a trial's where its trials hold the Ray
    resource ``device_resource`` (``neuron_cores``, ``GPU``: the target's) and the cluster declares
    it; otherwise a study's CPU rule (:func:`autotune.execution.scheduler.cpu_trial_slots`)."""
    devices = int(resources.get(device_resource, 0)) if device_resource else 0
    if devices:
        return max(1, devices // max(1, devices_per_trial))
    return cpu_trial_slots(int(resources.get("CPU", 1)))


def job_devices(job: JobRecord, files: JobFiles) -> tuple[str | None, int]:
    """What each trial of ``job`` holds, as its target says: the Ray resource and how many of it
    (``None``: the host's CPUs). A job whose target cannot be told here (a package it needs is
    missing) counts as a CPU job; its own process says what is wrong."""
    run = job.spec.run
    script, _ = job_workdir(job, files)
    try:
        target = get_target(detect_target(script) if run.target == "auto" else run.target, run.gpus_per_trial)
    except AutotuneError:
        return None, 0
    # A trial of several nodes holds its share on each.
    return target.device_resource, target.devices_per_trial(run.cores_per_trial, run.nproc_per_node) * run.nnodes


def fair_share(slots: int, sharing: int, wanted: int | None = None) -> int:
    """Workers for one of ``sharing`` jobs on ``slots`` slots; at least one, at most ``wanted``."""
    share = max(1, slots // max(1, sharing))
    return min(share, wanted) if wanted else share


class Slots:
    """The cluster's resources: fixed by ``--slots``, read from the Ray cluster at ``ray_address``
    (refreshed every minute: nodes come and go), or this machine's CPUs for jobs that each start
    a local Ray."""

    REFRESH_S = 60.0

    def __init__(self, fixed: int | None, ray_address: str | None) -> None:
        self.fixed = fixed
        self.ray_address = ray_address
        self._resources: dict[str, float] = {"CPU": float(os.cpu_count() or 1)}
        self._read_at = -1e9
        if fixed is None and ray_address:
            from autotune.execution.scheduler import connect

            connect(ray_address)  # an AutotuneError with the fix when the cluster is unreachable
            self._refresh()

    def _refresh(self) -> None:
        import ray

        try:
            self._resources = dict(ray.cluster_resources())
        except Exception:  # a cluster that is briefly unreachable keeps its last known size
            pass
        self._read_at = time.monotonic()

    def for_job(self, device_resource: str | None = None, devices_per_trial: int = 1) -> int:
        """Trials at once of a job whose trials hold ``devices_per_trial`` of ``device_resource``."""
        if self.fixed is not None:
            return self.fixed
        if self.ray_address and time.monotonic() - self._read_at > self.REFRESH_S:
            self._refresh()
        return trial_slots(self._resources, device_resource, devices_per_trial)

    def overall(self) -> int:
        """The slots the daemon shows: trials of one device each, of the first kind of device the
        cluster declares (NeuronCores, GPUs), else the CPU rule's."""
        declared = next((r for r in DEVICE_RESOURCES if self._resources.get(r)), None)
        return self.for_job(declared)


# -- a job's files and command line ---------------------------------------------------------------


# -- the processes ----------------------------------------------------------------------------

@dataclass
class _JobProcess:
    """A job's process: one this daemon started, or one it adopted after a restart."""

    pid: int
    popen: subprocess.Popen[bytes] | None = None
    stopping: bool = False
    #: Another host's: alive while its heartbeat in the job's row is fresh.
    host: str | None = None

    def alive(self, job: JobRecord | None = None) -> bool:
        if self.host is not None:
            return job is not None and beating(job)
        if self.popen is not None:
            return self.popen.poll() is None
        try:
            return psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def signal_number(self) -> int | None:
        """The signal that ended a process this daemon started (None if it exited, or unknown)."""
        rc = self.popen.returncode if self.popen is not None else None
        return -rc if rc is not None and rc < 0 else None


def beating(job: JobRecord) -> bool:
    """Whether the job's process wrote its heartbeat within ``JOB_STALE_S``."""
    return job.heartbeat_at is not None and time.time() - job.heartbeat_at < JOB_STALE_S


def process_of(job: JobRecord, files: JobFiles) -> _JobProcess | None:
    """The live process of ``job`` as recorded, if it is still that process (pids are reused:
    the start time and the command line must match too)."""
    if job.pid is None or job.pid_started is None:
        return None
    try:
        p = psutil.Process(job.pid)
        same = abs(p.create_time() - job.pid_started) < 1.0 and str(files.exit_code) in p.cmdline()
        if same and p.status() != psutil.STATUS_ZOMBIE:
            return _JobProcess(job.pid)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    return None


def stop_process_tree(pid: int, grace_s: float = CANCEL_GRACE_S) -> None:
    """SIGINT to the job (``autotune run`` then stops its pool and Ray), then SIGKILL to whatever
    is left of its process tree and group: the local Ray, its workers, trial processes in their
    own groups."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
        root.send_signal(signal.SIGINT)
    except psutil.NoSuchProcess:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            if root.status() == psutil.STATUS_ZOMBIE:
                break
            tree.extend(root.children(recursive=True))
        except psutil.NoSuchProcess:
            break
        time.sleep(0.2)
    kill_tree(pid, tree)  # the job leads a session of its own: its group, and what left it


# -- the runner ------------------------------------------------------------------------------

class JobRunner:
    """Starts queued jobs while there is room, watches running ones, stops cancelled ones."""

    def __init__(self, store: JobStore, settings: DaemonSettings, slots: Slots, max_concurrent_jobs: int,
                 log: Callable[[str], None] = lambda line: None) -> None:
        self.store = store
        self.settings = settings
        self.slots = slots
        self.max_concurrent_jobs = max(1, max_concurrent_jobs)
        self.log = log
        self._procs: dict[str, _JobProcess] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def recover(self) -> None:
        """After a (re)start: adopt live job processes, watch those alive on another host,
        settle the rest."""
        here = host_identity()
        for job in self.store.find([JobState.running]):
            files = JobFiles(Path(job.directory))
            elsewhere = job.host not in (None, here)
            if elsewhere and beating(job):
                self._procs[job.id] = _JobProcess(job.pid or 0, host=job.host)
                self.log(f"job {job.id}: runs on {job.host} (pid {job.pid}), watched through its heartbeat")
                continue
            proc = None if elsewhere else process_of(job, files)
            if proc is not None:
                self._procs[job.id] = proc
                self.log(f"job {job.id}: still running (pid {job.pid}), adopted")
            elif files.read_exit_code() is not None or job.attempts >= MAX_ATTEMPTS:
                self._settle(job, _JobProcess(job.pid or 0, host=job.host if elsewhere else None))
            else:
                self.store.requeue(job.id, "its process was gone when the daemon started again: resumed")
                self._append_log(files, "the job process was gone when the daemon started again; it is queued "
                                        "again to resume its study")
                self.log(f"job {job.id}: its process is gone; queued again to resume its study")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="autotune-job-runner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching; the jobs go on running, and the next daemon adopts them."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # a database hiccup must not end the runner
                self.log(f"job runner: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")
            self._stop.wait(TICK_S)

    # -- one round ---------------------------------------------------------------------------
    def tick(self) -> None:
        running = {job.id: job for job in self.store.find([JobState.running])}
        for job_id, proc in list(self._procs.items()):
            job = running.get(job_id)
            if proc.alive(job):
                if job is not None and job.cancel_requested and not proc.stopping:
                    proc.stopping = True
                    if proc.host is not None:  # its pid means nothing here; it stops itself (job_process)
                        self.log(f"job {job_id}: cancel asked of its process on {proc.host}")
                        continue
                    self.log(f"job {job_id}: cancelling")
                    threading.Thread(target=stop_process_tree, args=(proc.pid,), daemon=True).start()
                continue
            del self._procs[job_id]
            if job is not None:
                self._settle(job, proc)
        for job in running.values():
            if job.id not in self._procs and job.cancel_requested:  # claimed, but no process ever started
                self.store.finish(job.id, JobState.cancelled, EXIT_CANCELLED, "cancelled")
        self._start_queued()

    def _start_queued(self) -> None:
        free = self.max_concurrent_jobs - len(self._procs)
        if free <= 0:
            return
        queued = self.store.find([JobState.queued])
        if not queued:
            return
        sharing = min(self.max_concurrent_jobs, len(self._procs) + len(queued))
        for job in queued[:free]:
            slots = self.slots.for_job(*job_devices(job, JobFiles(Path(job.directory))))
            self._start(job, fair_share(slots, sharing, job.spec.run.workers))

    def _start(self, job: JobRecord, workers: int) -> None:
        if not self.store.claim(job.id, workers):
            return  # cancelled meanwhile
        job = self.store.get(job.id) or job
        files = JobFiles(Path(job.directory))
        files.exit_code.unlink(missing_ok=True)
        _, workdir = job_workdir(job, files)
        argv = job_argv(job, self.settings, workers)
        try:
            with open(files.log, "ab") as log, open(files.result, "wb") as result:
                shown = ["run", f"--storage={self.store.redacted_url}", *argv[5:]]
                log.write(f"[{_now()}] {ATTEMPT_LINE.format(job.attempts)}{workers} worker(s): "
                          f"autotune {' '.join(shown)}\n".encode())
                log.flush()
                popen = start_job_process(argv, self.settings.storage, job.id, cwd=workdir, stdout=result, stderr=log)
        except OSError as exc:
            self.store.finish(job.id, JobState.failed, 1, f"the job could not start: {exc.strerror or exc}")
            self.log(f"job {job.id}: could not start: {exc}")
            return
        try:
            started = psutil.Process(popen.pid).create_time()
        except psutil.NoSuchProcess:
            started = time.time()
        self.store.set_process(job.id, popen.pid, started)
        self._procs[job.id] = _JobProcess(popen.pid, popen)
        self.log(f"job {job.id}: started (study {job.study}, {workers} worker(s), attempt {job.attempts})")

    def _settle(self, job: JobRecord, proc: _JobProcess) -> None:
        """A job's process ended: record how, or queue the job again if it died."""
        files = JobFiles(Path(job.directory))
        code = files.read_exit_code()
        sig = proc.signal_number()
        if job.cancel_requested:
            state, code, message = JobState.cancelled, EXIT_CANCELLED, "cancelled"
        elif code is None:
            why = (f"killed by signal {sig}" if sig else f"silent on {proc.host} for {JOB_STALE_S:g} s" if proc.host
                   else "ended without an exit code")
            if job.attempts < MAX_ATTEMPTS:
                self.store.requeue(job.id, f"its process was {why}: resumed (attempt {job.attempts + 1})")
                self._append_log(files, f"the job process was {why}; it is queued again to resume its study")
                self.log(f"job {job.id}: process {why}; queued again")
                return
            state, code, message = JobState.failed, 1, f"its process was {why}, {job.attempts} times"
        elif code == 0:
            state, message = JobState.succeeded, job.message  # a note such as "resumed" stays
        else:
            state, message = JobState.failed, _last_error(files.log) or f"autotune run exited with {code}"
        if self.store.finish(job.id, state, code, message):
            self._append_log(files, f"the job ended: {state.value} (exit code {code})")
            self.log(f"job {job.id}: {state.value} (exit code {code})")

    @staticmethod
    def _append_log(files: JobFiles, line: str) -> None:
        try:
            with open(files.log, "a") as fh:
                fh.write(f"[{_now()}] autotune serve: {line}\n")
        except OSError:
            pass


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _last_error(log: Path) -> str | None:
    """The job's own error line (``error: ...`` as the CLI prints it), or its last line."""
    lines = [line.strip() for line in log_tail(log, lines=200).splitlines()
             if line.strip() and "autotune serve:" not in line]
    for line in reversed(lines):
        if line.startswith("error:"):
            return line[:500]
    return lines[-1][:500] if lines else None
