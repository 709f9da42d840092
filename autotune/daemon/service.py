"""The daemon's state behind its HTTP API (:mod:`.server`): its settings, the job queue and its
runner, the uploads waiting for their jobs, what a job's study measured so far, and ``ensure``'s
answer from a stored study or a job that tunes it."""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import HTTPException

from autotune.daemon.jobs import DaemonLease, JobRecord, JobStore
from autotune.daemon.messages import (
    EnsureReply,
    JobInfo,
    JobSpec,
    JobState,
)
from autotune.daemon.job_files import DaemonSettings, JobFiles
from autotune.daemon.runner import JobRunner, Slots
from autotune.errors import AutotuneError
from autotune.storage.optuna_storage import rdb_storage, stored_study
from autotune.storage.trial_cache import TrialCache


#: Uploads that no job claimed within this time are removed.
UPLOAD_TTL_S = 3600.0


#: Uploads waiting for their job, at most: each ``submit`` claims its own at once, so more are a
#: client gone wrong or someone filling the disk. Together they hold at most this many times
#: ``--max-upload``.
MAX_PENDING_UPLOADS = 16


PENDING_UPLOAD_FACTOR = 4


LOG_LIMIT_BYTES = 2 * 1024 ** 2


@dataclass
class DaemonConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    storage: str | None = None
    ray_address: str | None = None
    cache: Path | None = None
    jobs_dir: Path | None = None
    token: str | None = None
    #: Where the token was read, for the line that tells a browser's user how to sign in.
    token_file: Path | None = None
    #: Names a request's Host may give besides the addresses it listens on.
    allow_hosts: tuple[str, ...] = ()
    max_concurrent_jobs: int | None = None
    slots: int | None = None
    max_upload_bytes: int = 64 * 1024 ** 2


class Daemon:
    """The daemon's state: its settings, the job queue, the runner, a reader of the studies."""

    def __init__(self, config: DaemonConfig, url: str = "") -> None:
        """``url``: where it listens, named to a second daemon that finds this one on the database."""
        import optuna

        from autotune.cache import open_cache
        from autotune.storage.database import default_storage

        self.config = config
        jobs_dir = (config.jobs_dir or Path(".autotune") / "jobs").resolve()
        try:
            (jobs_dir / ".uploads").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise AutotuneError(f"cannot write to {jobs_dir}: {exc.strerror}; choose another --jobs-dir") from None
        storage = config.storage or default_storage()
        self.store = JobStore(storage)  # it makes a SQLite file's folder (autotune.storage.optuna_storage)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            self.studies = TrialCache(rdb_storage(storage))
        except Exception as exc:  # SQLAlchemy raises many types for a bad URL
            raise AutotuneError(f"cannot open storage {self.store.redacted_url}: {str(exc).splitlines()[0][:200]}") from None
        self.settings = DaemonSettings(storage=storage, cache=open_cache(config.cache).path, jobs_dir=jobs_dir,
                                       ray_address=config.ray_address)
        self.slots = Slots(config.slots, config.ray_address)
        max_jobs = config.max_concurrent_jobs or min(4, self.slots.overall())
        self.runner = JobRunner(self.store, self.settings, self.slots, max_jobs, log=log)
        self._ensure_lock = threading.Lock()
        # Last, so that a start that fails holds nothing; before anything touches the jobs.
        self.lease = DaemonLease(self.store, url)
        self.lease.acquire()
        self.prune_uploads()

    @property
    def uploads_dir(self) -> Path:
        return self.settings.jobs_dir / ".uploads"

    # -- uploads -------------------------------------------------------------------------------
    def upload_dir(self, upload_id: str) -> Path:
        return self.uploads_dir / upload_id

    def prune_uploads(self) -> None:
        """Remove uploads that no job claimed within ``UPLOAD_TTL_S``."""
        now = time.time()
        for p in self.uploads_dir.iterdir():
            try:
                if now - p.stat().st_mtime <= UPLOAD_TTL_S:
                    continue
            except FileNotFoundError:  # claimed meanwhile
                continue
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)

    def pending_uploads(self, besides: str | None = None) -> tuple[int, int]:
        """How many uploads wait for their job (``besides`` this one), and the bytes they hold: an
        upload being received counts as its archive so far, one being unpacked as the most it may
        hold."""
        count = held = 0
        for p in self.uploads_dir.iterdir():
            if besides is not None and p.name.startswith(besides):
                continue
            count += 1
            try:
                held += int((p / "bytes").read_text()) if p.is_dir() else p.stat().st_size
            except (OSError, ValueError):
                held += self.config.max_upload_bytes
        return count, held

    def check_room_for_upload(self, upload_id: str | None = None, adding: int = 0) -> None:
        """An :class:`HTTPException` when the uploads waiting for their job are too many for
        another, or hold too much for ``adding`` more bytes (those of ``upload_id``, unpacked)."""
        count, held = self.pending_uploads(besides=upload_id)
        if upload_id is None and count >= MAX_PENDING_UPLOADS:
            raise HTTPException(429, f"{count} uploads are waiting for their job (at most {MAX_PENDING_UPLOADS}; "
                                     f"an unclaimed upload is removed after {UPLOAD_TTL_S / 3600:g} h): submit "
                                     "their jobs, or try again later")
        limit = PENDING_UPLOAD_FACTOR * self.config.max_upload_bytes
        if held + adding > limit or held >= limit:
            raise HTTPException(413, f"the uploads waiting for their job would hold {(held + adding) / 1024 ** 2:.1f} "
                                     f"MiB, over the daemon's limit of {limit / 1024 ** 2:g} MiB for all of them: "
                                     "submit their jobs, or try again later")

    def script_of(self, spec: JobSpec) -> Path:
        """The script a spec names, checked: inside its upload, or an existing absolute path."""
        if spec.upload:
            root = self.upload_dir(spec.upload) / "src"
            if not root.is_dir():
                raise AutotuneError(f"no upload {spec.upload} (uploads not used within {UPLOAD_TTL_S / 3600:g} h "
                                    "are removed); submit again")
            rel = Path(spec.script)
            if rel.is_absolute() or ".." in rel.parts:
                raise AutotuneError(f"script {spec.script!r}: give a path inside the snapshot")
            script = root / rel
            if not script.resolve().is_relative_to(root.resolve()):
                raise AutotuneError(f"script {spec.script!r} is outside the snapshot")
        else:
            script = Path(spec.script)
            if not script.is_absolute():
                raise AutotuneError(f"script {spec.script!r}: without an upload, give its absolute path on "
                                    "storage that the daemon and the Ray nodes share")
        if not script.is_file():
            raise AutotuneError(f"script {spec.script!r} not found on the daemon's side")
        return script

    # -- jobs ----------------------------------------------------------------------------------
    def create_job(self, spec: JobSpec, study: str | None = None, ensure_key: str | None = None) -> JobRecord:
        self.script_of(spec)
        job_id = f"job-{secrets.token_hex(4)}"
        files = JobFiles(self.settings.jobs_dir / job_id)
        files.root.mkdir(parents=True)
        if spec.upload:
            (self.upload_dir(spec.upload) / "src").rename(files.src)
            shutil.rmtree(self.upload_dir(spec.upload), ignore_errors=True)
        if spec.run.space_yaml is not None:
            files.space.write_text(spec.run.space_yaml)
        job = JobRecord(id=job_id, state=JobState.queued, study=study or spec.run.study or job_id, spec=spec,
                        directory=str(files.root), created_at=time.time(), ensure_key=ensure_key)
        self.store.add(job)
        log(f"job {job_id}: queued (study {job.study}, {spec.run.trials} trials of {spec.script})")
        return job

    def study_of(self, job: JobRecord) -> str:
        """The study the job measured: the one its run names in its result, which is another than the
        job asked for where its script, arguments or environment changed since that study was
        measured (the run then measures a study of its own)."""
        if job.state.final:
            try:
                study = json_object(JobFiles(Path(job.directory)).result.read_text()).get("study")
            except OSError:
                study = None
            if isinstance(study, str) and study:
                return study
        return job.study

    def info(self, job: JobRecord) -> JobInfo:
        info = JobInfo(id=job.id, state=job.state, study=self.study_of(job), script=job.spec.script,
                       trials=job.spec.run.trials, created_at=job.created_at, started_at=job.started_at,
                       ended_at=job.ended_at, exit_code=job.exit_code, message=job.message, workers=job.workers,
                       attempts=job.attempts, cancel_requested=job.cancel_requested)
        self._add_progress(info)
        if job.state.final:
            try:
                result = json_object(JobFiles(Path(job.directory)).result.read_text())
                info.ran = result.get("ran")
            except OSError:
                pass
        return info

    def _add_progress(self, info: JobInfo) -> None:
        import optuna

        from autotune.results.best import best_config
        from autotune.storage.attrs import StudyAttrs, TrialAttrs, counts
        from autotune.storage.trial_cache import trials_of

        try:
            study = stored_study(self.studies, info.study)
        except KeyError:
            return
        kept = trials_of(study)
        for t in kept.trials():
            if t.state == optuna.trial.TrialState.RUNNING:
                info.running += 1
            elif t.state == optuna.trial.TrialState.FAIL and counts(t) and TrialAttrs.of(t).duplicate_of is None:
                info.failed += 1
        info.done = kept.counted
        info.metric = StudyAttrs.of(study).metric or info.metric
        best = best_config(study, info.study)
        if best is not None:
            info.best_value, info.baseline_value, info.speedup = best.value, best.baseline_value, best.speedup

    def job(self, job_id: str) -> JobRecord:
        job = self.store.get(job_id)
        if job is None:
            raise LookupError(f"no job {job_id!r} on this daemon; autotune status lists them")
        return job

    def ensure(self, spec: JobSpec) -> EnsureReply:
        from autotune.daemon.ensure import ensure_key, ensure_study_name, space_identity, stored_best
        from autotune.targets import resolve_target

        script = self.script_of(spec)
        target = resolve_target(spec.run.target, script, spec.run.gpus_per_trial)
        key = ensure_key(script, spec.args, target, spec.run, space_identity(spec.run.space, spec.run.space_yaml))
        name = ensure_study_name(script, target.name, key)
        with self._ensure_lock:  # two pipelines asking at once share one job
            best = stored_best(self.studies, name, spec.run.trials)
            active = None if best is not None else self.store.active_for_study(name)
            if best is not None or active is not None:
                if spec.upload:
                    shutil.rmtree(self.upload_dir(spec.upload), ignore_errors=True)
                if best is not None:
                    return EnsureReply(source="stored", study=name, best=best)
            if active is not None:
                return EnsureReply(source="job", study=name, job=self.info(active))
            run = spec.run.model_copy(update={"target": target.name, "study": name, "fresh": False})
            job = self.create_job(spec.model_copy(update={"run": run}), study=name, ensure_key=key)
        return EnsureReply(source="job", study=name, job=self.info(job))


def bytes_under(root: Path) -> int:
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(root) for f in files)


def json_object(text: str) -> dict[str, Any]:
    import json

    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)
