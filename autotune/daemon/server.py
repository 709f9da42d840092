"""``autotune serve``: the HTTP API (FastAPI, served by uvicorn) over the persistent job queue.

Endpoints (the OpenAPI schema is at ``/openapi.json``)::

    GET  /                         a page of the jobs with their progress (HTML, refreshed while they run)
    GET  /login, POST /login       a browser signs in with the token (a cookie for the pages)
    GET  /health                   version, storage, slots, limits, jobs by state
    POST /uploads                  a tar.gz snapshot as the request body -> its upload id
    POST /jobs                     a JobSpec -> the queued job
    GET  /jobs                     jobs, newest first (?state=running&limit=50)
    GET  /jobs/{id}                one job, with its study's progress
    POST /jobs/{id}/cancel         cancel a queued job, or stop a running one
    GET  /jobs/{id}/best           the best configuration so far (BestConfig)
    GET  /jobs/{id}/logs           the job's log, or ?trial=N for a trial's (?tail=LINES, ?attempt=K)
    GET  /jobs/{id}/report         the report of the job's study (HTML, as ``autotune report`` writes)
    POST /ensure                   a JobSpec -> the stored best configuration, or the job tuning it

Every request passes :class:`~autotune.daemon.listening.RequestGuard` first: its Host, its
Origin, its token (``Authorization: Bearer <token>``, or a signed-in browser's cookie), its body's
type and size. There is no ``/docs``: Swagger's page would load its script from a CDN into the
daemon's origin, where the token's cookie lives.
"""

from __future__ import annotations

import hmac
import os
import secrets
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Body, FastAPI, HTTPException, Path as PathParam, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse

import autotune
from autotune.daemon.archive import ArchiveError, extract_snapshot
from autotune.daemon.jobs import DaemonLease, JobRecord, JobStore
from autotune.daemon.listening import (
    SESSION_COOKIE,
    RequestGuard,
    bind,
    check_exposure,
    form_field,
    host_names,
    session_value,
)
from autotune.daemon.records import (
    NAME_PATTERN,
    DaemonHealth,
    EnsureReply,
    JobInfo,
    JobSpec,
    JobState,
    UploadInfo,
)
from autotune.daemon.runner import DaemonSettings, JobFiles, JobRunner, Slots, attempt_lines
from autotune.errors import AutotuneError
from autotune.log_tail import log_tail
from autotune.study.outputs import BestConfig
from autotune.study.storage import rdb_storage

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
        from autotune.study.options import default_storage

        self.config = config
        jobs_dir = (config.jobs_dir or Path(".autotune") / "jobs").resolve()
        try:
            (jobs_dir / ".uploads").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise AutotuneError(f"cannot write to {jobs_dir}: {exc.strerror}; choose another --jobs-dir") from None
        storage = config.storage or default_storage()
        self.store = JobStore(storage)  # it makes a SQLite file's folder (autotune.study.storage)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            self.studies = rdb_storage(storage)
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
                study = _json_object(JobFiles(Path(job.directory)).result.read_text()).get("study")
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
                result = _json_object(JobFiles(Path(job.directory)).result.read_text())
                info.ran = result.get("ran")
            except OSError:
                pass
        return info

    def _add_progress(self, info: JobInfo) -> None:
        import optuna

        from autotune.study.results import best_config
        from autotune.trial_attrs import StudyAttrs, TrialAttrs

        try:
            study = optuna.load_study(study_name=info.study, storage=self.studies)
        except KeyError:
            return
        for t in study.get_trials(deepcopy=False):
            if t.state == optuna.trial.TrialState.RUNNING:
                info.running += 1
            elif TrialAttrs.of(t).counted and t.state.is_finished():
                info.done += 1
                if t.state == optuna.trial.TrialState.FAIL and TrialAttrs.of(t).duplicate_of is None:
                    info.failed += 1
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


def _exit(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def _bytes_under(root: Path) -> int:
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(root) for f in files)


def _json_object(text: str) -> dict[str, Any]:
    import json

    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


# -- the app ---------------------------------------------------------------------------------

def create_app(daemon: Daemon, port: int) -> FastAPI:
    """The API of ``daemon``, behind its :class:`RequestGuard` for requests to ``port``."""
    app = FastAPI(title="autotune", version=autotune.__version__, docs_url=None, redoc_url=None,
                  description="Tuning jobs for the compiler flags and runtime knobs of PyTorch scripts. "
                              "A job runs the code it is given, with the daemon's rights.")
    config = daemon.config
    token = config.token
    app.add_middleware(RequestGuard, token=token, port=port,
                       names=host_names(config.host, config.allow_hosts))
    JobId = PathParam(..., pattern=NAME_PATTERN)

    @app.exception_handler(AutotuneError)
    async def _bad_input(_: Request, exc: AutotuneError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.exception_handler(LookupError)
    async def _not_found(_: Request, exc: LookupError) -> JSONResponse:
        return JSONResponse({"detail": str(exc.args[0] if exc.args else exc)}, status_code=404)

    @app.get("/", response_class=HTMLResponse)
    def page(limit: int = Query(50, ge=1, le=1000)) -> HTMLResponse:
        """The jobs, newest first, with their progress and a link to each one's report."""
        from autotune.daemon.page import jobs_page

        return HTMLResponse(jobs_page([daemon.info(j) for j in daemon.store.find(None, limit=limit,
                                                                                  newest_first=True)]))

    @app.get("/login", response_class=HTMLResponse, include_in_schema=False)
    def login_form() -> Any:
        from autotune.daemon.page import login_page

        if token is None:
            return RedirectResponse("/", status_code=303)
        return HTMLResponse(login_page(config.token_file))

    @app.post("/login", include_in_schema=False)
    async def login(request: Request) -> Any:
        """The form's token, checked: the page, with a cookie that only this site's own requests
        carry (SameSite=Strict) and no script can read (HttpOnly)."""
        from autotune.daemon.page import login_page

        if token is None:
            return RedirectResponse("/", status_code=303)
        given = form_field(await request.body(), "token").strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            return HTMLResponse(login_page(config.token_file, wrong=True), status_code=401)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(SESSION_COOKIE, session_value(token), httponly=True, samesite="strict", path="/")
        return response

    @app.get("/health", response_model=DaemonHealth)
    def health() -> DaemonHealth:
        return DaemonHealth(version=autotune.__version__, storage=daemon.store.redacted_url,
                            slots=daemon.slots.overall(), max_concurrent_jobs=daemon.runner.max_concurrent_jobs,
                            max_upload_bytes=daemon.config.max_upload_bytes, jobs=daemon.store.counts())

    @app.post("/uploads", response_model=UploadInfo, status_code=201,
              openapi_extra={"requestBody": {"required": True, "content": {"application/gzip": {
                  "schema": {"type": "string", "format": "binary"}}}}})
    async def upload(request: Request) -> UploadInfo:
        """A snapshot of the job's directory, as a gzipped tar of relative paths."""
        limit = daemon.config.max_upload_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise HTTPException(413, f"the snapshot is over the daemon's limit of {limit / 1024 ** 2:g} MiB")
        daemon.prune_uploads()
        daemon.check_room_for_upload()
        upload_id = secrets.token_hex(16)
        archive = daemon.uploads_dir / f"{upload_id}.tar.gz"
        size = 0
        try:
            with open(archive, "wb") as fh:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise HTTPException(413, f"the snapshot is over the daemon's limit of "
                                                 f"{limit / 1024 ** 2:g} MiB")
                    fh.write(chunk)
            dest = daemon.upload_dir(upload_id) / "src"
            try:
                files = await run_in_threadpool(extract_snapshot, archive, dest, limit)
                unpacked = _bytes_under(dest)
                daemon.check_room_for_upload(upload_id, unpacked)
            except (ArchiveError, HTTPException):
                shutil.rmtree(daemon.upload_dir(upload_id), ignore_errors=True)
                raise
            (daemon.upload_dir(upload_id) / "bytes").write_text(str(unpacked))
        finally:
            archive.unlink(missing_ok=True)
        return UploadInfo(upload=upload_id, bytes=size, files=files)

    @app.post("/jobs", response_model=JobInfo, status_code=201)
    def submit(spec: JobSpec = Body(...)) -> JobInfo:
        return daemon.info(daemon.create_job(spec))

    @app.get("/jobs", response_model=list[JobInfo])
    def jobs(state: list[JobState] | None = Query(None), limit: int = Query(50, ge=1, le=1000)) -> list[JobInfo]:
        return [daemon.info(j) for j in daemon.store.find(state, limit=limit, newest_first=True)]

    @app.get("/jobs/{job_id}", response_model=JobInfo)
    def job(job_id: str = JobId) -> JobInfo:
        return daemon.info(daemon.job(job_id))

    @app.post("/jobs/{job_id}/cancel", response_model=JobInfo)
    def cancel(job_id: str = JobId) -> JobInfo:
        job = daemon.job(job_id)
        if not job.state.final:
            job = daemon.store.request_cancel(job_id) or job
            log(f"job {job_id}: cancel requested")
        return daemon.info(job)

    @app.get("/jobs/{job_id}/best", response_model=BestConfig)
    def best(job_id: str = JobId) -> BestConfig:
        import optuna

        from autotune.study.results import best_config

        job = daemon.job(job_id)
        try:
            study = daemon.study_of(job)
            cfg = best_config(optuna.load_study(study_name=study, storage=daemon.studies), study)
        except KeyError:
            cfg = None
        if cfg is None:
            raise HTTPException(409, f"job {job_id} has no successful trial yet ({job.state.value})")
        return cfg

    @app.get("/jobs/{job_id}/logs", response_class=PlainTextResponse)
    def logs(job_id: str = JobId, trial: int | None = Query(None, ge=0), tail: int | None = Query(None, ge=1),
             attempt: int | None = Query(None, ge=1)) -> PlainTextResponse:
        """The job's log (all its attempts, or ``attempt``'s lines), or trial ``trial``'s (its
        last attempt's, or ``attempt``'s)."""
        files = JobFiles(Path(daemon.job(job_id).directory))
        path = files.log if trial is None else files.trial_log(trial, attempt)
        what = "job " + job_id if trial is None else f"trial {trial} of job {job_id}"
        if not path.is_file():
            raise LookupError(f"no log of {'attempt ' + str(attempt) + ' of ' if attempt else ''}{what} yet")
        if trial is None and attempt is not None:
            text = attempt_lines(path.read_text(errors="replace"), attempt)
            if text is None:
                raise LookupError(f"no attempt {attempt} of {what} yet")
            text = text[-LOG_LIMIT_BYTES:]
            if tail:
                text = "\n".join(text.splitlines()[-tail:])
        else:
            text = log_tail(path, max_bytes=LOG_LIMIT_BYTES, lines=tail)
        return PlainTextResponse(text + "\n" if tail else text)

    @app.get("/jobs/{job_id}/report", response_class=HTMLResponse)
    def report(job_id: str = JobId) -> HTMLResponse:
        """The report of the job's study as it stands (``autotune report``'s page), drawn when asked."""
        import optuna

        from autotune.report import report_html

        job = daemon.job(job_id)
        try:
            name = daemon.study_of(job)
            study = optuna.load_study(study_name=name, storage=daemon.studies)
        except KeyError:
            raise HTTPException(409, f"job {job_id} has no trial yet ({job.state.value}); "
                                     "its report exists once its study does") from None
        return HTMLResponse(report_html(study, name)[0])

    @app.post("/ensure", response_model=EnsureReply)
    def ensure(spec: JobSpec = Body(...)) -> EnsureReply:
        """The stored best configuration of this model in this environment, or the job tuning it."""
        return daemon.ensure(spec)

    return app


def serve(config: DaemonConfig) -> None:
    """Listen, recover the queue, run jobs until interrupted (running jobs are left running: the
    next daemon adopts them)."""
    import uvicorn

    check_exposure(config.host, config.token)
    sock = bind(config.host, config.port)
    port = sock.getsockname()[1]
    url = f"http://{f'[{config.host}]' if ':' in config.host else config.host}:{port}"
    daemon = Daemon(config, url)
    try:
        daemon.runner.recover()
        app = create_app(daemon, port)
    except BaseException:
        daemon.lease.release()
        raise
    daemon.runner.start()
    log(f"autotune serve: listening on {url} (storage {daemon.store.redacted_url}, {daemon.slots.overall()} "
        f"slot(s), at most {daemon.runner.max_concurrent_jobs} job(s) at once, "
        f"{'token required' if config.token else 'no token: any local user may submit jobs'})")
    if config.token:
        log(f"autotune serve: a browser signs in at {url}/login with the token in {config.token_file}")
    server = uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port, log_level="warning",
                                           access_log=False, lifespan="off"))

    def lost(why: str) -> None:
        log(f"autotune serve: {why}; stopping (its jobs go on, watched by the other daemon)")
        daemon.runner.stop()
        server.should_exit = True

    daemon.lease.keep(lost)
    # uvicorn stops on SIGTERM and then raises it again: as an exit, so that the database is given up.
    signal.signal(signal.SIGTERM, _exit)
    try:
        server.run(sockets=[sock])
    finally:
        daemon.runner.stop()
        daemon.lease.release()


__all__ = ["Daemon", "DaemonConfig", "create_app", "serve"]
