"""A job's files, its command line and how its process starts: one folder per job, an
``autotune run`` argv with no shell and no secret in it (the storage URL reaches the job through a
pipe), and the lines of one attempt in the job's log."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO


from autotune.daemon.jobs import JobRecord
from autotune.execution.worker_pool import attempt_folder, last_attempt
from autotune.storage.database import STORAGE_ENV


#: The variable that tells a job which inherited file descriptor holds its storage URL.
STORAGE_FD_ENV = "AUTOTUNE_JOB_STORAGE_FD"


@dataclass(frozen=True)
class JobFiles:
    """The layout of one job's directory."""

    root: Path

    @property
    def src(self) -> Path:  # the uploaded snapshot; the job's working directory
        return self.root / "src"

    @property
    def out(self) -> Path:  # autotune run --out: best.json, best.env, trials.csv, trials/NNNN/
        return self.root / "out"

    @property
    def space(self) -> Path:
        return self.root / "space.yaml"

    @property
    def log(self) -> Path:  # the job's stderr, and the daemon's lines about it
        return self.root / "job.log"

    @property
    def result(self) -> Path:  # the job's stdout: the study's result as JSON
        return self.root / "result.json"

    @property
    def exit_code(self) -> Path:
        return self.root / "exit_code"

    def trial_log(self, number: int, attempt: int | None = None) -> Path:
        """Trial ``number``'s log: of its ``attempt`` (1 is the first; a trial whose worker was
        lost runs again), by default of its last."""
        folder = self.out / "trials" / f"{number:04d}"
        return attempt_folder(folder, attempt or last_attempt(folder)) / "trial.log"

    def read_exit_code(self) -> int | None:
        try:
            return int(self.exit_code.read_text().strip())
        except (OSError, ValueError):
            return None


@dataclass(frozen=True)
class DaemonSettings:
    """What every job of a daemon shares."""

    storage: str
    cache: Path
    jobs_dir: Path
    ray_address: str | None = None


def job_workdir(job: JobRecord, files: JobFiles) -> tuple[Path, Path]:
    """(script, working directory) of a job: inside its snapshot, or on shared storage."""
    if job.spec.upload:
        return files.src / job.spec.script, files.src
    script = Path(job.spec.script)
    return script, script.parent


def job_argv(job: JobRecord, settings: DaemonSettings, workers: int) -> list[str]:
    """The job's command line, one argv element per value (``--key=value`` so that no value can
    be read as an option of its own); never a shell string. Without ``--storage``: the job reads
    its storage from the pipe :data:`STORAGE_FD_ENV` names."""
    files = JobFiles(Path(job.directory))
    r = job.spec.run
    script, _ = job_workdir(job, files)
    argv = [sys.executable, "-m", "autotune.cli.job_process", str(files.exit_code),
            "run", str(script), f"--study={job.study}", f"--cache={settings.cache}", f"--out={files.out}",
            f"--workers={workers}", "--json",
            *r.argv(skip=("study", "workers", "space", "fresh"))]
    if settings.ray_address:
        argv.append(f"--ray-address={settings.ray_address}")
    if r.space_yaml is not None:
        argv.append(f"--space={files.space}")
    elif r.space:
        argv.append(f"--space={r.space}")
    if r.fresh and job.attempts <= 1:  # a resumed job continues the study its first attempt began
        argv.append("--fresh")
    return [*argv, "--", *job.spec.args]


def start_job_process(argv: list[str], storage: str, job_id: str, *, cwd: Path, stdout: IO[bytes],
                      stderr: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start a job's process (``argv``: :func:`job_argv`) in a session of its own. Its storage URL
    goes through a pipe it inherits: the reading end of a pipe that holds ``storage`` and is
    closed for writing, so that the job reads it once and nothing of it stays on disk."""
    read, write = os.pipe()
    try:
        os.write(write, storage.encode())  # far below a pipe's buffer: it never blocks
    finally:
        os.close(write)
    # Not the daemon's own AUTOTUNE_STORAGE either: Ray and the trials would inherit it.
    env = {**{k: v for k, v in os.environ.items() if k != STORAGE_ENV}, "AUTOTUNE_JOB_ID": job_id,
           STORAGE_FD_ENV: str(read), "PYTHONUNBUFFERED": "1"}
    try:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                start_new_session=True, close_fds=True, pass_fds=(read,))
    finally:
        os.close(read)


def read_storage_pipe(fd: int) -> str:
    """The storage URL :func:`start_job_process` gave the job, read by the job."""
    with os.fdopen(fd, "rb") as pipe:
        return pipe.read().decode()


#: The line of a job's log that opens each attempt (the job queued again after its process died).
ATTEMPT_LINE = "autotune serve: attempt {}, "


def attempt_lines(log: str, attempt: int) -> str | None:
    """The lines of a job's log that its ``attempt`` wrote (from the line that opens it to the one
    that opens the next); ``None`` if it never started."""
    lines = log.splitlines(keepends=True)
    opens = [i for i, line in enumerate(lines) if ATTEMPT_LINE.format(attempt) in line]
    if not opens:
        return None
    ends = [i for i, line in enumerate(lines) if ATTEMPT_LINE.format(attempt + 1) in line]
    return "".join(lines[opens[0]:ends[0] if ends else len(lines)])
