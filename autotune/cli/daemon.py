"""The daemon's commands on the ``autotune`` CLI: ``serve``, ``submit``, ``status``, ``cancel``,
``logs``, ``ensure``, and ``best JOB --server URL``.

Registered on the app of :mod:`autotune.cli.app`; ``best --server`` is in :mod:`autotune.cli.commands`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape

from autotune.cli import options as opt
from autotune.cli.app import app
from autotune.cli.options import config_options
from autotune.config import JobConfig, RunConfig
from autotune.errors import InvalidConfigError, require
from autotune.rendering import fmt_seconds, format_value

if TYPE_CHECKING:
    from autotune.daemon.client import DaemonClient
    from autotune.daemon.messages import JobInfo, JobSpec, RunOptions
    from autotune.study.options import StudyProgress

err = Console(stderr=True, highlight=False, soft_wrap=True)
CONTEXT = {"help_option_names": ["-h", "--help"]}


@app.command(context_settings=CONTEXT)
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8765, help="Port to listen on."),
    storage: Optional[str] = typer.Option(None, envvar=opt.STORAGE_ENV, show_envvar=True,
                                          help="Database of the job queue and the studies "
                                               "(default: sqlite under .autotune/; postgresql://... for a fleet)."),
    ray_address: Optional[str] = typer.Option(None, help="The Ray cluster every job joins (default: each job "
                                                         "starts a local Ray)."),
    cache: Optional[Path] = typer.Option(None, help="Cache root the jobs share (default: ~/.cache/autotune)."),
    token_file: Optional[Path] = typer.Option(None, help="File holding the token that every request must carry "
                                                         "(made when missing, mode 0600; default: "
                                                         "~/.config/autotune/token)."),
    no_token: bool = typer.Option(False, "--no-token", help="Ask no token: any user of this machine may submit "
                                                            "jobs (127.0.0.1 only)."),
    allow_host: Optional[list[str]] = typer.Option(None, "--allow-host", help="A name the clients reach the "
                                                   "daemon by (a DNS alias, a load balancer) besides its "
                                                   "addresses; repeatable."),
    max_concurrent_jobs: Optional[int] = typer.Option(None, min=1, help="Jobs running at once (default: the "
                                                                        "cluster's trial slots, at most 4)."),
    slots: Optional[int] = typer.Option(None, min=1, help="Trials the cluster runs at once, shared by the running "
                                                          "jobs (default: from the Ray cluster's resources)."),
    jobs_dir: Optional[Path] = typer.Option(None, help="Where each job's snapshot, log and outputs go "
                                                       "(default: .autotune/jobs; shared storage for a multi-node cluster)."),
    max_upload: str = typer.Option("64MiB", help="Largest snapshot a client may upload, unpacked."),
) -> None:
    """Run the autotune daemon: an HTTP API over a persistent job queue, and at its root a page of
    the jobs (progress, best so far, each one's report) for a browser.

    A job runs the code it is given, with this process's rights: every request carries the token,
    which the clients of the same user on this machine read from its file by themselves. Stopping
    the daemon leaves its running jobs running; the next start adopts them, keeps queued jobs
    queued, and resumes jobs whose process is gone.
    """
    for package in ("fastapi", "uvicorn"):
        require(package, "autotune serve", "serve")
    from autotune.daemon.listening import check_exposure, default_token_file, ensure_token_file
    from autotune.daemon.service import DaemonConfig
    from autotune.daemon.server import serve as run_server
    from autotune.units import parse_size

    if no_token and token_file is not None:
        raise InvalidConfigError("--no-token and --token-file: give one of them")
    if no_token:
        check_exposure(host, None)
        token = None
    else:
        token_file = token_file or default_token_file()
        token = ensure_token_file(token_file)
    run_server(DaemonConfig(host=host, port=port, storage=storage, ray_address=ray_address, cache=cache,
                            jobs_dir=jobs_dir, token=token, token_file=token_file,
                            allow_hosts=tuple(allow_host or ()), max_concurrent_jobs=max_concurrent_jobs, slots=slots,
                            max_upload_bytes=parse_size(max_upload)))


def _run_options(config: JobConfig) -> tuple[RunOptions, Path | None]:
    """The job's :class:`RunOptions`, and the search-space file whose text travels in it."""
    from autotune.daemon.messages import RunOptions
    from autotune.provenance import caller_env

    values = dict(config)
    # The env vars of the caller's that a target reads travel with the job: the daemon's, where
    # the job runs, are not the caller's.
    values["env"] = [f"{k}={v}" for k, v in caller_env(None, config.trial_env()).items()]
    space_file = None
    space = values.pop("space")
    if space and (Path(space).suffix in (".yaml", ".yml") or Path(space).exists()):
        space_file = Path(space).resolve()
        try:
            values["space_yaml"] = space_file.read_bytes().decode()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidConfigError(f"--space {space}: cannot read it ({exc})") from None
        space = None
    return RunOptions.checked(space=space, **values), space_file


def _job_spec(client: DaemonClient, script: Path, args: list[str], run: RunOptions, *, no_upload: bool,
              directory: Path | None) -> JobSpec:
    """The job as the daemon receives it; uploads the snapshot unless the script is on shared storage."""
    from autotune.daemon.archive import make_snapshot
    from autotune.daemon.messages import JobSpec
    from autotune.trial import check_script

    script = check_script(script)
    if no_upload:
        return JobSpec(script=str(script), args=args, run=run)
    root = (directory or script.parent).resolve()
    if root not in script.parents:
        raise InvalidConfigError(f"{script} is not inside --dir {root}")
    archive, files, notes = make_snapshot(root, client.health().max_upload_bytes)
    for note in notes:
        err.print(f"note: {escape(note)}")
    upload = client.upload(archive)
    err.print(f"uploaded {root} ({files} files, {len(archive) / 1024:,.0f} KiB compressed)")
    return JobSpec(script=script.relative_to(root).as_posix(), args=args, upload=upload.upload, run=run)


def _progress_line(info: JobInfo) -> str:
    best = ""
    if info.best_value is not None:
        best = f" | best {format_value(info.best_value, info.metric)}" + (f" ({info.speedup:.2f}x baseline)"
                                                                   if info.speedup else "")
    if info.state.value == "queued":
        return f"{info.id} queued" + (f" ({info.message})" if info.message else "")
    line = (f"{info.id} {info.state.value}: {info.done}/{info.trials} trials done, {info.running} running, "
            f"{info.failed} failed{best}")
    now = time.time()
    elapsed, left = info.elapsed_s(now), info.remaining_s(now)
    if elapsed is not None:
        line += f" | {fmt_seconds(elapsed)} elapsed" + (f", about {fmt_seconds(left)} left" if left is not None else "")
    if info.state.final:
        line += f" (exit code {info.exit_code})" + (f": {info.message}" if info.message and
                                                     info.state.value != "succeeded" else "")
    return line


@app.command(context_settings=CONTEXT)
@config_options(JobConfig, help={
    "trials": "Measured trials the study should hold.",
    "space": "Search space: a YAML file (sent with the job) or a built-in name.",
    "workers": "At most this many trials at once (the daemon gives each job a fair share of the cluster).",
    "study": "Study name (default: the job id).",
    "fresh": "Start the study anew (the old one is kept under another name).",
})
def submit(
    script: Path = opt.SCRIPT,
    script_args: Optional[list[str]] = opt.SCRIPT_ARGS,
    server: str = opt.SERVER,
    token_file: Optional[Path] = opt.TOKEN_FILE,
    directory: Optional[Path] = typer.Option(None, "--dir", help="Directory to upload as the job's working "
                                                                 "directory (default: the script's)."),
    no_upload: bool = typer.Option(False, "--no-upload", help="Upload nothing: the script's path is on storage "
                                                              "that the daemon and its Ray nodes share."),
    wait: bool = typer.Option(False, "--wait", help="Follow the job's progress and exit with its exit code."),
    json_out: bool = typer.Option(False, "--json", help="Print the job as JSON instead of its id."),
    *,
    config: JobConfig,
) -> None:
    """Submit a tuning job to the daemon; prints its id (with --wait, follows it to the end).

    The options are those of autotune run; storage, cache, Ray cluster and output directory are the
    daemon's. The job runs the uploaded code on the daemon's machines.
    """
    run, _ = _run_options(config)
    with opt.daemon_client(server, token_file) as client:
        spec = _job_spec(client, script, script_args or [], run, no_upload=no_upload, directory=directory)
        info = client.submit(spec)
        if not json_out:
            typer.echo(info.id)
        if not wait:
            if json_out:
                typer.echo(info.model_dump_json())
            return
        info = client.wait(info.id, on_update=lambda i: err.print(_progress_line(i)))
    if json_out:
        typer.echo(info.model_dump_json())
    raise typer.Exit(info.exit_code if info.exit_code is not None else 1)


@app.command(context_settings=CONTEXT)
def status(
    job: Optional[str] = typer.Argument(None, help="A job id (default: the latest jobs)."),
    server: str = opt.SERVER,
    token_file: Optional[Path] = opt.TOKEN_FILE,
    limit: int = typer.Option(50, help="How many of the latest jobs to list."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show a job of the daemon, or list its latest jobs."""
    with opt.daemon_client(server, token_file) as client:
        if job is not None:
            info = client.job(job)
            if json_out:
                typer.echo(info.model_dump_json())
            else:
                _print_job(info)
            return
        jobs = client.jobs(limit=limit)
    if json_out:
        typer.echo(json.dumps([j.model_dump(mode="json") for j in jobs]))
        return
    from rich.table import Table

    table = Table(box=None)
    for column in ("job", "state", "study", "script", "trials", "best", "speedup", "age"):
        table.add_column(column, justify="right" if column in ("trials", "best", "speedup", "age") else "left",
                         no_wrap=column in ("job", "state"), overflow="fold")
    now = time.time()
    for j in jobs:
        table.add_row(j.id, j.state.value, j.study, j.script, f"{j.done}/{j.trials}",
                      f"{j.best_value:,.1f}" if j.best_value is not None else "-",
                      f"{j.speedup:.2f}x" if j.speedup else "-", _age(now - j.created_at))
    Console().print(table)


def _print_job(info: JobInfo) -> None:
    out = Console(highlight=False)
    out.print(_progress_line(info))
    rows = [("study", info.study), ("script", info.script), ("workers", info.workers), ("attempts", info.attempts),
            ("created", _clock(info.created_at)), ("started", _clock(info.started_at)),
            ("ended", _clock(info.ended_at)), ("message", info.message)]
    for label, value in rows:
        if value not in (None, ""):
            out.print(f"  {label:10s} {value}")


def _clock(t: float | None) -> str | None:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else None


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


@app.command(context_settings=CONTEXT)
def cancel(
    job: str = typer.Argument(..., help="The job id."),
    server: str = opt.SERVER,
    token_file: Optional[Path] = opt.TOKEN_FILE,
) -> None:
    """Cancel a queued job, or stop a running one (its measured trials stay in its study)."""
    from autotune.daemon.runner import CANCEL_GRACE_S

    with opt.daemon_client(server, token_file) as client:
        info = client.cancel(job)
        deadline = time.monotonic() + CANCEL_GRACE_S + 15
        while not info.state.final and time.monotonic() < deadline:
            time.sleep(0.5)
            info = client.job(job)
    typer.echo(f"{info.id} {info.state.value}" + ("" if info.state.final else " (stopping)"))


@app.command(context_settings=CONTEXT)
def logs(
    job: str = typer.Argument(..., help="The job id."),
    trial: Optional[int] = typer.Argument(None, help="A trial number: that trial's log instead of the job's."),
    tail: Optional[int] = typer.Option(None, help="Only the last N lines."),
    attempt: Optional[int] = typer.Option(None, min=1, help="One attempt (1 is the first): of a trial run again "
                                                            "after its worker was lost (default: its last), or "
                                                            "of a job queued again after its process died "
                                                            "(default: every attempt's lines)."),
    server: str = opt.SERVER,
    token_file: Optional[Path] = opt.TOKEN_FILE,
) -> None:
    """Print a job's log (the daemon's lines and autotune run's stderr), or one trial's log."""
    with opt.daemon_client(server, token_file) as client:
        typer.echo(client.logs(job, trial=trial, tail=tail, attempt=attempt), nl=False)


@app.command(context_settings=CONTEXT)
@config_options(RunConfig, exclude=("out", "study", "fresh"), help={
    "trials": "Measured trials a stored study must hold to answer (else it is tuned up to this number).",
    "space": "Search space: a YAML file or a built-in name.",
    "workers": "Trials at once when tuning.",
    "storage": "Without --server: the Optuna storage (default: sqlite under .autotune/).",
    "ray_address": "Without --server: the Ray cluster to tune on.",
    "cache": "Without --server: the cache root.",
})
def ensure(
    script: Path = opt.SCRIPT,
    script_args: Optional[list[str]] = opt.SCRIPT_ARGS,
    out: Path = typer.Option(Path("best.env"), "--out", "-o", help="The env file to write (best.json goes beside "
                                                                   "it), or a directory for both."),
    server: Optional[str] = typer.Option(None, "--server", envvar=opt.SERVER_ENV,
                                         help="Ask this daemon (or AUTOTUNE_SERVER); default: answer and tune here."),
    token_file: Optional[Path] = opt.TOKEN_FILE,
    directory: Optional[Path] = typer.Option(None, "--dir", help="With --server: the directory to upload "
                                                                 "(default: the script's)."),
    no_upload: bool = typer.Option(False, "--no-upload", help="With --server: the script is on shared storage."),
    json_out: bool = typer.Option(False, "--json", help="Print the outcome as JSON."),
    exec_: bool = typer.Option(False, "--exec", help="Then run the command given after -- (instead of the "
                                                     "script's arguments) with the result applied, as `autotune "
                                                     "exec` does; a command that runs SCRIPT gives its arguments "
                                                     "to the tuning too."),
    *,
    config: RunConfig,
) -> None:
    """Write the tuned configuration of this model in this environment: at once when it was tuned
    before, else after tuning it (through the daemon with --server, here otherwise).

    A pipeline's pre-step: exit code 0 and a usable env file either way; 3 when every trial
    failed. With --exec, the pipeline's next step too: `ensure train.py --exec -- python train.py`
    tunes if needed, then runs the job with every knob applied and exits with its code.
    """
    from autotune.daemon.ensure import EnsureFailed, EnsureResult, ensure_local, write_best
    from autotune.afterwards.production import check_command, run_production, script_arguments

    command: list[str] = []
    if exec_:
        # Checked before any tuning: a pipeline's typo must not cost a study first.
        command = check_command(list(script_args or []))
        script_args = script_arguments(script, command)

    run, space_file = _run_options(config.job_config())
    storage, ray_address, cache = config.storage, config.ray_address, config.cache
    started = time.monotonic()
    if server is None:
        result, code = ensure_local(script, script_args or [], run, out=out, storage=storage, space_file=space_file,
                                    ray_address=ray_address, cache=cache,
                                    on_update=None if json_out else _local_progress())
    else:
        with opt.daemon_client(server, token_file) as client:
            spec = _job_spec(client, script, script_args or [], run, no_upload=no_upload, directory=directory)
            reply = client.ensure(spec)
            if reply.source == "stored":
                assert reply.best is not None, "a stored reply carries its best"
                best, ran, job_id, code = reply.best, 0, None, 0
            else:
                assert reply.job is not None, "a job reply carries its job"
                job_id = reply.job.id
                err.print(f"tuning {reply.study} in job {job_id} on {server}")
                info = client.wait(job_id, on_update=None if json_out else lambda i: err.print(_progress_line(i)))
                if info.state.value != "succeeded":
                    raise EnsureFailed(f"job {job_id} {info.state.value}: {info.message or 'no best configuration'}; "
                                       f"see autotune logs {job_id}", info.exit_code or 1)
                best, ran, code = client.best(job_id), info.ran or 0, info.exit_code or 0
        env_file, json_file = write_best(best, out)
        result = EnsureResult(source="stored" if reply.source == "stored" else "tuned", study=reply.study, ran=ran,
                              job=job_id, env_file=str(env_file), json_file=str(json_file), best=best,
                              seconds=time.monotonic() - started)
    if json_out:
        typer.echo(result.model_dump_json())
    else:
        how = "stored result" if result.source == "stored" else f"tuned ({result.ran} trials run)"
        speed = f", {result.best.speedup:.2f}x the baseline" if result.best.speedup else ""
        err.print(f"{how}: study {result.study}, trial {result.best.trial}{speed} -> {result.env_file}")
    if exec_ and code == 0:
        run_production(result.best, command, lambda line: err.print(f"autotune: {line}", highlight=False))
    raise typer.Exit(code)


def _local_progress() -> Callable[[StudyProgress], None] | None:
    if not err.is_terminal:
        return None

    def show(p: StudyProgress) -> None:
        best = f"best {format_value(p.best_value, p.metric)}" if p.best_value is not None else "no result yet"
        err.print(f"{p.study}: {p.done}/{p.wanted} done, {p.running} running, {p.failed} failed | {best}")

    return show
