"""``autotune trial``, ``run``, ``best`` and ``show``: one configuration, a study, a stored study."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Iterator, Optional

import typer
from rich.console import Console

from autotune.cli import options as opt
from autotune.cli.options import config_options
from autotune.config import RunConfig
from autotune.cli.app import EXIT_TRIAL_FAILED, app, err, measuring_here, with_progress
from autotune.errors import InvalidConfigError
from autotune.records import MeasurementProtocol

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.live import Live

    from autotune.study.options import StudyProgress


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
@config_options(RunConfig, only=("target", "sets", "arg", "space", "platform", "nproc_per_node", "memory_limit",
                                 "trial_timeout", "cache"),
                help={
    "trial_timeout": "Hard timeout of the trial in seconds (kills its children too).",
    "sets": "A parameter, KEY=VALUE; repeatable.",
    "space": "Search space (a YAML file or a built-in name) that defines the parameters; default: the target's.",
    "memory_limit": "Host-memory limit of the trial's process tree, e.g. 8GiB (default: 80% of this machine).",
    "cache": "Cache root whose compiled artifacts the trial uses (default: ~/.cache/autotune).",
})
def trial(
    script: Path = opt.SCRIPT,
    script_args: Optional[list[str]] = opt.SCRIPT_ARGS,
    json_out: bool = typer.Option(False, "--json", help="Print the result as one JSON object."),
    # The old name of --trial-timeout, which `run` has always called the per-trial limit (there
    # --timeout bounds the whole study).
    timeout: Optional[float] = typer.Option(None, "--timeout", hidden=True),
    full_run: bool = typer.Option(False, "--full-run", help="Let the script run to its end instead of "
                                                             "stopping it once the estimate has converged."),
    max_seconds: float = typer.Option(MeasurementProtocol.model_fields["max_measure_seconds"].default,
                                      help="Cap on the time spent measuring after warm-up."),
    max_steps: int = typer.Option(MeasurementProtocol.model_fields["max_measure_steps"].default,
                                  help="Cap on the steps measured after warm-up."),
    trial_dir: Optional[Path] = typer.Option(None, help="Where the trial's spec, report and log go "
                                                        "(default: .autotune/trials/<time>)."),
    *,
    config: RunConfig,
) -> None:
    """Run the script once under one configuration and measure it.

    Prints the configuration as applied, the compile time, the throughput with its 95% confidence
    interval, step times, graphs compiled, peak host memory, the first losses and the status.
    Exit code 0 when the trial succeeded, 1 when it failed, 2 for bad input.
    """
    from autotune.trial import default_trial_dir, prepare_trial, run_prepared
    from autotune.units import parse_size
    from autotune.workers.launcher import TrialLimits

    if timeout is not None:
        err.print("note: --timeout is deprecated here; use --trial-timeout, as autotune run does", highlight=False)
        config = RunConfig.checked(**{**dict(config), "trial_timeout": timeout})
    if max_seconds <= 0 or max_steps < 1:
        raise InvalidConfigError("--max-seconds and --max-steps must be positive")
    from autotune.cache import open_cache

    cache = open_cache(config.cache)
    prepared = prepare_trial(script, target=config.target, sets=config.sets, space=config.space,
                             platform=config.platform, cache_root=str(cache.path),
                             nproc_per_node=config.nproc_per_node, flags=config.script_flags())
    limits = TrialLimits(timeout_s=config.trial_timeout,
                         memory_bytes=parse_size(config.memory_limit) if config.memory_limit else None)
    protocol, noisy = measuring_here(prepared, script_args or [], cache, MeasurementProtocol(
        run_to_end=full_run, max_measure_seconds=max_seconds, max_measure_steps=max_steps))
    if noisy:  # on stderr, beside --json's object too
        err.print(f"note: {noisy}", highlight=False)
    directory = trial_dir or default_trial_dir()
    result = with_progress(
        f"trial of {script.name} on {prepared.target.name}",
        lambda: run_prepared(prepared, script_args or [], trial_dir=directory, limits=limits, protocol=protocol),
        log=Path(directory) / "trial.log", quiet=json_out,
    )
    if json_out:
        typer.echo(json.dumps(result.model_dump(mode="json")))
    else:
        from autotune.rendering import render_trial

        render_trial(result, Console())
    raise typer.Exit(0 if result.ok else EXIT_TRIAL_FAILED)


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
@config_options(RunConfig)
def run(
    script: Path = opt.SCRIPT,
    script_args: Optional[list[str]] = opt.SCRIPT_ARGS,
    json_out: bool = typer.Option(False, "--json", help="Print the study's result as one JSON object."),
    *,
    config: RunConfig,
) -> None:
    """Tune SCRIPT: Optuna proposes configurations, Ray workers measure them.

    Exit code 0 when a best configuration was found, 2 for bad input, 3 when every trial failed.
    """
    from autotune.study.study import Study
    from autotune.study.options import StudyOptions

    progress = _StudyDisplay(live=not json_out and err.is_terminal)
    options = StudyOptions(script=script, args=script_args or [], on_update=progress.update, **dict(config))
    runner = Study(options)
    with progress, _stdout_reserved(json_out):
        result = runner.run()
    if json_out:
        typer.echo(result.model_dump_json())
    else:
        from autotune.rendering import render_study

        render_study(result, Console())
    raise typer.Exit(result.exit_code)


@contextlib.contextmanager
def _stdout_reserved(reserve: bool) -> Iterator[None]:
    """With --json, stdout carries the JSON alone: Ray's raylet writes worker-death notices to the
    driver's stdout at the file-descriptor level, so fd 1 points at stderr while the study runs."""
    if not reserve:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


class _StudyDisplay:
    """Progress of a study on stderr.

    On a terminal, one live line: a bar of the trials done, those running, the best so far and its
    speedup, the time elapsed and an estimate of the time left (at the pace so far). Anywhere
    else (a log file, a CI job, a Ray job, a pipeline) one line per finished trial, flushed at once,
    so that a long study is not silent until its final table.
    """

    def __init__(self, live: bool) -> None:
        self.live_wanted = live
        self.live: Live | None = None
        self.printed = 0
        self.progress: StudyProgress | None = None

    def __enter__(self) -> "_StudyDisplay":
        if self.live_wanted:
            from rich.live import Live

            # Live renders this object at each refresh (__rich__), so the elapsed time runs on
            # between two trials' ends.
            self.live = Live(self, console=err, refresh_per_second=4, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.live is not None:
            self.live.__exit__(kind, exc, tb)

    def __rich__(self) -> RenderableType:
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        from autotune.rendering import fmt_seconds

        p = self.progress
        if p is None:
            return "starting Ray and the study..."
        left = p.remaining_s
        until = ("estimate after the first trial" if left is None else "none left" if left == 0
                 else f"about {fmt_seconds(left)} left")
        line = Table.grid(padding=(0, 1))
        line.add_row(f"[bold]{p.study}[/bold]", ProgressBar(total=max(p.wanted, 1), completed=p.done, width=24),
                     f"{p.done}/{p.wanted} done, {p.running} running, {p.failed} failed, {p.reused} reused  |  "
                     f"{self._best(p)}  |  {fmt_seconds(p.elapsed_s)} elapsed, {until}  [dim]{p.last}[/dim]")
        return line

    @staticmethod
    def _best(p: StudyProgress) -> str:
        from autotune.rendering import format_value

        best = f"best {format_value(p.best_value, p.metric)}" if p.best_value is not None else "no result yet"
        return best + (f" ({p.speedup:.2f}x baseline)" if p.speedup else "")

    def update(self, p: StudyProgress) -> None:
        from autotune.rendering import format_value

        self.progress = p
        if self.live is not None:
            self.live.refresh()
            return
        for t in p.finished[self.printed:]:
            config = " ".join(f"{k}={v}" for k, v in t.changed.items()) or "baseline"
            value = format_value(t.value, p.metric) if t.value is not None else "-"
            sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] trial {t.number} ({p.done}/{p.wanted}): {value}, "
                             f"{t.status}; {config} | {self._best(p)}\n")
        sys.stderr.flush()
        self.printed = len(p.finished)


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def best(
    study: str = typer.Argument(..., help="Study name; with --server, a job id of that daemon."),
    format: str = typer.Option("json", "--format", "-f", help="json, env or flags."),
    storage: Optional[str] = opt.STORAGE,
    server: Optional[str] = typer.Option(None, "--server", help="Read the best configuration of job STUDY from "
                                                                "this daemon."),
    token_file: Optional[Path] = opt.TOKEN_FILE,
) -> None:
    """Print the best configuration of a stored study, or of a daemon's job (json, env lines, or the
    compiler flags)."""
    from autotune.results.best import best_config
    from autotune.storage.optuna_storage import load_study

    if format not in ("json", "env", "flags"):
        raise InvalidConfigError(f"--format {format!r}: choose json, env or flags")
    if server is not None:
        with opt.daemon_client(server, token_file) as client:
            cfg = client.best(study)
    else:
        cfg = best_config(load_study(study, storage), study)
    if cfg is None:
        err.print(f"study {study!r} has no successful trial yet")
        raise typer.Exit(3)
    if format == "json":
        typer.echo(cfg.model_dump_json(indent=2))
    elif format == "env":
        typer.echo(cfg.env_file(), nl=False)
    else:
        typer.echo(cfg.compiler_flags or "")


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
def show(
    study: str = typer.Argument(..., help="Study name."),
    storage: Optional[str] = opt.STORAGE,
    json_out: bool = typer.Option(False, "--json", help="Print the trials as JSON."),
) -> None:
    """Show every trial of a stored study: values, speedups, failures with category and log tail."""
    from autotune.results.standings import baseline_value, maximizes, objective_names
    from autotune.results.best import best_config
    from autotune.results.summaries import study_summaries
    from autotune.storage.optuna_storage import load_study

    st = load_study(study, storage)
    trials = study_summaries(st)
    if json_out:
        typer.echo(json.dumps([t.model_dump(mode="json") for t in trials]))
        return
    from autotune.rendering import render_trials

    best = best_config(st, study)
    render_trials(study, trials, baseline_value(st), best, Console(),
                  metric=best.metric if best else objective_names(st)[0], maximize=maximizes(st), all_trials=True)

