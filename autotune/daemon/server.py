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
import secrets
import shutil
import signal
from pathlib import Path
from types import FrameType

from fastapi import Body, FastAPI, HTTPException, Path as PathParam, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response

import autotune
from autotune.daemon.archive import ArchiveError, extract_snapshot
from autotune.daemon.listening import (
    SESSION_COOKIE,
    RequestGuard,
    bind,
    check_exposure,
    form_field,
    host_names,
    session_value,
)
from autotune.daemon.messages import (
    NAME_PATTERN,
    DaemonHealth,
    EnsureReply,
    JobInfo,
    JobSpec,
    JobState,
    UploadInfo,
)
from autotune.daemon.job_files import JobFiles, attempt_lines
from autotune.daemon.service import LOG_LIMIT_BYTES, bytes_under, Daemon, DaemonConfig, log
from autotune.errors import AutotuneError
from autotune.log_tail import log_tail
from autotune.results.outputs import BestConfig


def _exit(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


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
    def login_form() -> Response:
        from autotune.daemon.page import login_page

        if token is None:
            return RedirectResponse("/", status_code=303)
        return HTMLResponse(login_page(config.token_file))

    @app.post("/login", include_in_schema=False)
    async def login(request: Request) -> Response:
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
                unpacked = bytes_under(dest)
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
        from autotune.results.best import best_config
        from autotune.storage.optuna_storage import stored_study

        job = daemon.job(job_id)
        try:
            study = daemon.study_of(job)
            cfg = best_config(stored_study(daemon.studies, study), study)
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
        from autotune.report import report_html
        from autotune.storage.optuna_storage import stored_study

        job = daemon.job(job_id)
        try:
            name = daemon.study_of(job)
            study = stored_study(daemon.studies, name)
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
