"""A job's options reach its `autotune run` command line, and that command line parses."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.main import get_command

from autotune.cli import app
from autotune.daemon.jobs import JobRecord
from autotune.daemon.messages import JobSpec, JobState, RunOptions
from autotune.daemon.job_files import DaemonSettings, job_argv


def _run_params(tmp_path: Path, run: RunOptions) -> dict:
    job = JobRecord(id="0123abcd", state=JobState.queued, study="s1",
                    spec=JobSpec(script=str(tmp_path / "train.py"), args=["--epochs", "1"], run=run),
                    directory=str(tmp_path / "job"), created_at=0.0)
    settings = DaemonSettings(storage="sqlite:///x.db", cache=tmp_path / "cache", jobs_dir=tmp_path)
    argv = job_argv(job, settings, workers=2)
    rest = argv[argv.index("run") + 1:]
    ctx = get_command(app).commands["run"].make_context("run", rest)
    return ctx.params


def test_defaults_are_autotune_runs_defaults(tmp_path: Path) -> None:
    params = _run_params(tmp_path, RunOptions())
    assert params["sampler"] == "autotune"
    assert params["prune"] is True and params["numerics_guard"] is True
    assert params["confirm"] == 0
    assert list(params["script_args"]) == ["--epochs", "1"]


@pytest.mark.parametrize("field, value, param, expected", [
    ("sampler", "tpe", "sampler", "tpe"),
    ("prune", False, "prune", False),
    ("confirm", 3, "confirm", 3),
    ("numerics_guard", False, "numerics_guard", False),
    ("retry_failed", True, "retry_failed", True),
    ("trials", 7, "trials", 7),
])
def test_a_job_option_reaches_the_run(tmp_path: Path, field: str, value, param: str, expected) -> None:
    params = _run_params(tmp_path, RunOptions(**{field: value}))
    assert params[param] == expected
