"""``autotune exec`` (run a job with a study's best configuration applied) and ``autotune verify``
(does the recorded gain still hold here and now?)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from autotune.cli import options as opt
from autotune.cli.app import app, err, measuring_here, with_progress
from autotune.config import RunConfig
from autotune.errors import InvalidConfigError

if TYPE_CHECKING:
    from autotune.afterwards.verify import VerifyRun
    from autotune.records import TrialResult
    from autotune.trial import PreparedTrial

_ARGS = {"help_option_names": ["-h", "--help"]}


@app.command("exec", context_settings=_ARGS)
def exec_(
    best: str = typer.Argument(..., metavar="STUDY|BEST_JSON", help="A study name, or the path of a best.json."),
    command: Optional[list[str]] = typer.Argument(None, metavar="-- COMMAND...", help="The job to run, after --."),
    storage: Optional[str] = opt.STORAGE,
) -> None:
    """Run COMMAND with the best configuration applied, as `source best.env` does, launch included.

    Every knob reaches every Python process the command starts (env vars, compiler flags, the
    DataLoader's batch size and workers, casts, torch.compile, batches_per_execution, the script's
    own flags). `python train.py` becomes the measured torchrun launch where the best ran on several
    processes; a command that is a launcher already is kept, with a warning where its process count
    differs. The exit code is COMMAND's; 2 for bad input.
    """
    from autotune.afterwards.production import load_best, run_production

    run_production(load_best(best, storage), command or [], lambda line: err.print(f"autotune: {line}", highlight=False, soft_wrap=True))


@app.command(context_settings=_ARGS)
def verify(
    best: str = typer.Argument(..., metavar="STUDY|BEST_JSON", help="A study name, or the path of a best.json."),
    repeats: int = typer.Option(3, "--repeats", "-k", help="Runs of each configuration (at least 2)."),
    storage: Optional[str] = opt.STORAGE,
    trial_timeout: float = typer.Option(RunConfig.model_fields["trial_timeout"].default, "--trial-timeout",
                                        help="Hard timeout of each run, in seconds."),
    cache: Optional[Path] = typer.Option(None, "--cache", help="Cache root of compiled artifacts "
                                                               "(default: ~/.cache/autotune)."),
    json_out: bool = typer.Option(False, "--json", help="Print the outcome as one JSON object."),
) -> None:
    """Measure the best configuration and the baseline again, here and now, alternating, K runs each:
    does the recorded gain still hold?

    Prints the speedup with its 95% interval beside the one recorded, and what changed since the
    study (compiler, torch and torch-xla versions, instance type, the script). Exit code 0 when the
    recorded gain holds within the noise, 1 when it does not, 2 for bad input. The check to run after
    an SDK upgrade.
    """
    from autotune.cache import open_cache
    from autotune.provenance import caller_env, provenance
    from autotune.afterwards.production import load_best
    from autotune.afterwards.verify import trial_directory, verify as verify_best
    from autotune.records import MeasurementProtocol
    from autotune.targets import resolve_target
    from autotune.trial import default_trial_dir, prepare_trial, run_prepared
    from autotune.workers.launcher import TrialLimits

    if trial_timeout <= 0:
        raise InvalidConfigError("--trial-timeout must be positive")
    config = load_best(best, storage)
    script = Path(config.provenance.get("script") or "")
    if not script.is_file():
        raise InvalidConfigError(f"the study's script {str(script) or '(not recorded)'} is not here: verify runs "
                                 "where the script is")
    args = list(config.provenance.get("script_args") or [])
    target = resolve_target(config.target, script)
    root_of_cache = open_cache(cache)
    cache_root = str(root_of_cache.path)
    flags = {f.param: f.flag for f in (config.apply.script_flags if config.apply else [])}
    root = default_trial_dir(Path(".autotune") / "verify" / config.study)
    limits = TrialLimits(timeout_s=trial_timeout)

    def prepare(params: dict[str, Any]) -> PreparedTrial:
        sets = {k: v for k, v in params.items() if v is not None}
        return prepare_trial(script, target=config.target, sets=sets, space=config.space, cache_root=cache_root,
                             nproc_per_node=config.nproc_per_node if config.launch else 1, flags=flags)

    # Both configurations are checked before anything runs.
    prepared = {"best": prepare(config.params), "baseline": prepare(config.baseline_params or {})}
    protocol, noisy = measuring_here(prepared["best"], args, root_of_cache, MeasurementProtocol())
    if noisy:
        err.print(f"note: {noisy}", highlight=False)

    def measure(which: str, _params: dict[str, Any], index: int) -> TrialResult:
        directory = trial_directory(root, which, index)
        return with_progress(f"run {index + 1} of the {which}",
                             lambda: run_prepared(prepared[which], args, trial_dir=directory, limits=limits,
                                                  protocol=protocol),
                             log=directory / "trial.log", quiet=json_out)

    def show(run: VerifyRun) -> None:
        if not json_out:
            figure = f"{run.value:,.1f} {unit}" if run.value is not None else f"{run.status}: {run.reason}"
            err.print(f"{run.configuration}: {figure}", highlight=False)

    unit = "samples/s" if config.metric in ("throughput", "cost") else config.metric
    err.print(f"verifying study {config.study}, trial {config.trial}: {repeats} runs each of the best and the "
              f"baseline, alternating; trials in {root}", highlight=False)
    now = provenance(target, script, args, env=caller_env(target))
    outcome = verify_best(config, repeats=repeats, measure=measure, provenance_now=now, on_run=show)
    if json_out:
        typer.echo(outcome.model_dump_json())
    else:
        if outcome.speedup is not None:
            typer.echo(f"speedup now {outcome.speedup:.2f}x [{outcome.ci95_low:.2f}, {outcome.ci95_high:.2f}] "
                       f"(best {outcome.best_mean:,.1f} against baseline {outcome.baseline_mean:,.1f} {unit}, "
                       f"{repeats} runs each); recorded {outcome.recorded_speedup:.2f}x")
        for key, (old, new) in outcome.changed.items():
            typer.echo(f"changed since the study: {key}: {old} -> {new}")
        typer.echo("the recorded gain holds" if outcome.holds else "the recorded gain does not hold:")
        for reason in outcome.reasons if not outcome.holds else []:
            typer.echo(f"  {reason}")
    raise typer.Exit(0 if outcome.holds else 1)
