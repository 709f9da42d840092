"""``autotune landscape``: record a landscape, summarise one, replay a study on one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console

from autotune.cli import options as opt
from autotune.cli.app import app
from autotune.config import JobConfig
from autotune.errors import InvalidConfigError

landscape_app = typer.Typer(help="Record every configuration of a small space, or a sample of a large one (a "
                                 "landscape), and replay studies on it.", no_args_is_help=True)
# Recorded landscapes are how the search is measured (bench/), not a user's tool: kept out of the
# top-level help, still there by name.
app.add_typer(landscape_app, name="landscape", hidden=True)


@landscape_app.command("record", context_settings={"help_option_names": ["-h", "--help"]})
def record_cmd(
    script: Path = opt.SCRIPT,
    script_args: Optional[list[str]] = typer.Argument(None, help="Arguments for the script, after --."),
    target: str = typer.Option(..., "--target", "-t", help="xla, inductor or neuron."),
    space: Path = typer.Option(..., help="Search space YAML whose parameters all have choices."),
    out: Path = typer.Option(..., help="The landscape file (JSON lines); an existing one is continued."),
    trial_timeout: float = typer.Option(300.0, help="Hard timeout of each trial in seconds."),
    max_seconds: float = typer.Option(5.0, help="Cap on the time spent measuring after warm-up."),
    min_windows: int = typer.Option(4, help="Timing windows measured at least."),
    quiet_steps: int = typer.Option(4, help="Warm-up ends after this many steps in a row compile nothing."),
    cache: Optional[Path] = typer.Option(None, help="Cache root of the recording's compiled artifacts "
                                                    "and trial logs (default: .autotune/landscapes/NAME)."),
    limit: Optional[int] = typer.Option(None, help="Record at most this many new configurations."),
    sample: Optional[int] = typer.Option(None, help="Record N configurations of a space too large for every one: "
                                                    "the baseline and known-good ones first, then a "
                                                    "space-filling (Sobol) sample."),
    seed: int = typer.Option(0, help="Seed of --sample; continue a recording with the seed it began with."),
    refine: Optional[int] = typer.Option(None, help="After the sample, record N more, one at a time: each the "
                                                    "configuration not recorded yet that a surrogate fitted on "
                                                    "everything recorded so far predicts best (needs "
                                                    "scikit-learn)."),
    repeat: Optional[int] = typer.Option(None, help="Then measure again, one at a time, until the N configurations "
                                                    "with the highest mean figure have each been measured at "
                                                    "least twice."),
) -> None:
    """Run every configuration of SPACE once (or a sample of it, --sample N), one after the other,
    and store each as a line of OUT.

    Configurations already in OUT are skipped, so a killed recording continues where it stopped;
    a sample recorded again with the same seed and a larger N continues with the next ones.
    --refine puts measurements where a surrogate of the recording (bench/surrogate_bench.py) is
    least trusted and a search ends: at the best it predicts. --repeat measures the top again, so
    that a lucky single run falls back and the noise between runs is on record.
    """
    from autotune.landscapes.landscape import load_landscape, summary
    from autotune.landscapes.recording import RecordOptions, record, recorded_configurations
    from autotune.records import MeasurementProtocol
    from autotune.search.configurations import grid_size
    from autotune.space import load_space

    if trial_timeout <= 0 or max_seconds <= 0 or min_windows < 1:
        raise InvalidConfigError("--trial-timeout and --max-seconds must be positive, --min-windows at least 1")
    options = RecordOptions(script=script, target=target, space=space, out=out, args=list(script_args or []),
                            trial_timeout=trial_timeout, cache=cache, limit=limit, sample=sample, seed=seed,
                            refine=refine, repeat=repeat,
                            protocol=MeasurementProtocol(max_measure_seconds=max_seconds, min_windows=min_windows,
                                                         quiet_steps=quiet_steps))
    options.check()
    the_space = load_space(space)
    total = len(recorded_configurations(the_space, options))
    existing = load_landscape(out).records if out.exists() and out.stat().st_size else []
    before = len(existing)
    console = Console(stderr=True)
    of = f" (a sample, seed {seed}, of up to {grid_size(the_space):,})" if sample is not None else ""
    more = f", then {refine} chosen by a surrogate" if refine else ""
    more += f", then the {repeat} best measured twice each" if repeat else ""
    console.print(f"{total} configurations{of}{more}, {before} recorded already", highlight=False)

    seen = {r.key for r in existing}

    def show(rec, n: int) -> None:
        what = f"{rec.throughput:,.1f} samples/s" if rec.ok else f"failed ({rec.category})"
        again = " again" if rec.key in seen else ""
        seen.add(rec.key)
        console.print(f"[{rec.index + 1}/{n}{again}] {rec.key}  {what}  wall {rec.wall_seconds:.1f} s, "
                      f"compile {rec.compile_seconds:.1f} s", highlight=False, soft_wrap=True)

    landscape = record(options, on_config=show)
    typer.echo(json.dumps(summary(landscape), indent=2))


@landscape_app.command("show", context_settings={"help_option_names": ["-h", "--help"]})
def show_cmd(
    path: Path = typer.Argument(..., help="A landscape file."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Counts, failures by category and the best configuration of a recorded landscape."""
    from autotune.landscapes.landscape import by_configuration, load_landscape, summary

    landscape = load_landscape(path)
    s = summary(landscape)
    if json_out:
        typer.echo(json.dumps(s))
        return
    out = Console()
    again = f", {s['measurements']} measurements" if s["measurements"] > s["configurations"] else ""
    out.print(f"[bold]{path}[/bold]: {s['configurations']} configurations ({s['ok']} ok{again}), "
              f"failures {s['failures'] or 'none'}", highlight=False, soft_wrap=True)
    for r, runs in by_configuration(landscape)[:10]:
        again = f"  (mean of {len(runs)} runs: {', '.join(f'{v:,.1f}' for v in runs)})" if len(runs) > 1 else ""
        out.print(f"  {r.throughput:9.1f} samples/s  compile {r.compile_seconds:5.1f} s  wall {r.wall_seconds:5.1f} s"
                  f"  {r.key}{again}", highlight=False, soft_wrap=True)


@landscape_app.command("surrogate", context_settings={"help_option_names": ["-h", "--help"]})
def surrogate_cmd(
    path: Path = typer.Argument(..., help="A landscape file."),
    folds: int = typer.Option(5, help="Folds of the held-out check."),
    seed: int = typer.Option(0, help="Seed of the models and of the folds."),
) -> None:
    """Fit a surrogate of a recorded landscape (models that answer every configuration of its
    space), print its error on recorded configurations it was not fitted on, and its best.

    Needs scikit-learn: pip install "torch-autotune[bench]".
    """
    from autotune.landscapes.landscape import load_landscape
    from autotune.landscapes.surrogate import SurrogateLandscape
    from autotune.landscapes.surrogate_error import held_out_error

    landscape = load_landscape(path)
    out = Console()
    out.print(held_out_error(landscape, folds=folds, seed=seed).line(), highlight=False, soft_wrap=True)
    surrogate = SurrogateLandscape(landscape, seed=seed)
    best, recorded = surrogate.best(), landscape.best()
    out.print(f"its best, over {surrogate.best_basis}: {best.throughput:,.1f} samples/s at {best.key}",
              highlight=False, soft_wrap=True)
    out.print(surrogate.best_line(), highlight=False, soft_wrap=True)
    out.print(f"the recording's best: {recorded.throughput:,.1f} samples/s at {recorded.key}", highlight=False,
              soft_wrap=True)


@landscape_app.command("replay", context_settings={"help_option_names": ["-h", "--help"]})
def replay_cmd(
    path: Path = typer.Argument(..., help="A landscape file."),
    trials: int = typer.Option(JobConfig.model_fields["trials"].default, help="Trials the replayed study should hold."),
    sampler: Optional[str] = typer.Option(None, help="The study's sampler (as autotune run --sampler; "
                                                     "default: the study's)."),
    seed: Optional[int] = typer.Option(None, help="Seed of the sampler."),
    workers: int = typer.Option(1, help="Trials at once on the simulated clock."),
    json_out: bool = typer.Option(False, "--json", help="Print the study's result as one JSON object."),
) -> None:
    """Run a study against a recorded landscape instead of real trials, on a simulated clock.

    The study is the real one (same driver, sampler and duplicate handling); each trial is
    answered with its recorded result and costs its recorded wall time, its compile charged only
    when the same graphs were not compiled earlier in the replay (and the target's cache persists).
    """
    from autotune.landscapes.landscape import load_landscape
    from autotune.landscapes.replay import replay_study

    landscape = load_landscape(path)
    chosen: dict[str, Any] = {"sampler": sampler} if sampler else {}
    result, pool = replay_study(landscape, trials=trials, workers=workers, seed=seed, **chosen)
    best = landscape.best()
    if json_out:
        typer.echo(json.dumps({"result": result.model_dump(mode="json"), "simulated_seconds": pool.clock,
                               "landscape_best": {"params": best.params, "throughput": best.throughput}}))
        return
    out = Console()
    found = result.best
    out.print(f"{len(pool.trials)} trials replayed in {pool.clock:,.0f} simulated seconds", highlight=False)
    if found is not None and found.throughput is not None:
        out.print(f"best found: {found.throughput:,.1f} samples/s ({found.throughput / best.figure:.1%} of the "
                  f"landscape's best) at {json.dumps(found.params, sort_keys=True)}", highlight=False, soft_wrap=True)
    out.print(f"landscape's best: {best.throughput:,.1f} samples/s at {best.key}", highlight=False, soft_wrap=True)
