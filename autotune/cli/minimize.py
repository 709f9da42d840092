"""``autotune minimize``: the smallest set of moved knobs that still fails the same way."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from autotune.cli import options as opt
from autotune.cli.app import app, err, with_progress
from autotune.cli.options import config_options
from autotune.config import RunConfig
from autotune.errors import AutotuneError, InvalidConfigError, ScriptError

if TYPE_CHECKING:
    from autotune.records import TrialResult


@app.command(context_settings={"help_option_names": ["-h", "--help"]})
@config_options(RunConfig, only=("target", "sets", "arg", "space", "platform", "memory_limit", "trial_timeout",
                                 "cache"),
                help={"sets": "A knob of the failing configuration, KEY=VALUE; repeatable.",
                      "cache": "Cache root whose remembered results and compiled graphs are reused "
                               "(default: ~/.cache/autotune)."})
def minimize(
    source: str = typer.Argument(..., metavar="SCRIPT|STUDY", help="The script (with --set), or a study (with "
                                                                   "--trial)."),
    script_args: Optional[list[str]] = opt.SCRIPT_ARGS,
    trial: Optional[int] = typer.Option(None, "--trial", help="The failed trial of study STUDY to reduce."),
    storage: Optional[str] = opt.STORAGE,
    budget: Optional[int] = typer.Option(None, "--budget", help="Stop after this many trials of the reduction (the "
                                                                "configuration's own aside) and say what was shown."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder of the bug report (default: "
                                                           ".autotune/minimize/<script>-<time>)."),
    json_out: bool = typer.Option(False, "--json", help="Print the smallest set and its proof as one JSON object."),
    *,
    config: RunConfig,
) -> None:
    """Reduce a failing configuration to the smallest set of its moved knobs (those away from the
    baseline) that fails with the same category and the same first line of the error (delta
    debugging). Results the cache root remembers answer without a trial.

    Prints the set and the trials it took, and writes a bug-report folder: the knobs, env vars and
    compiler flags, versions, the log's tail and the command that reproduces it. Exit code 0 when
    a set was found, 2 for bad input (a configuration that does not fail).
    """
    from autotune.cache import environment_of, model_of, open_cache, result_key
    from autotune.provenance import caller_env, provenance
    from autotune.records import PROTOCOL_VERSION, Failure, FailureCategory, TrialPlan, TrialResult
    from autotune.afterwards.minimal_failure import first_line, reduce_failure, write_bug_report
    from autotune.targets import resolve_target
    from autotune.trial import check_script, load_trial_space, prepare_trial, run_prepared
    from autotune.units import parse_size
    from autotune.workers.launcher import TrialLimits

    if budget is not None and budget < 1:
        raise InvalidConfigError("--budget must be at least 1 trial")
    stored = _stored_failure(source, trial, storage) if trial is not None else None
    if stored is not None:
        if config.sets or script_args:
            raise InvalidConfigError("with --trial the configuration and the arguments are the study's: "
                                     "drop --set and the arguments after --")
        script, args, target_name, space, flags, failed = stored
    else:
        script, args = check_script(source), list(script_args or [])
        if not config.sets:
            raise InvalidConfigError("give the failing configuration with --set KEY=VALUE (or a study and --trial N)")
        target_name, space, flags, failed = config.target, config.space, config.script_flags(), None
    target = resolve_target(target_name, script)
    # The space's own baseline, not the study's: a knob the study pinned with --set is moved too.
    baseline = load_trial_space(target, space, config.platform).with_flags(flags).defaults()
    cache = open_cache(config.cache)
    prov = provenance(target, script, args, env=caller_env(target))
    model, environment = model_of(prov), environment_of(prov)
    devices = 1 if target.device_resource else None
    limits = TrialLimits(timeout_s=config.trial_timeout,
                         memory_bytes=parse_size(config.memory_limit) if config.memory_limit else None)
    folder = out or Path(".autotune") / "minimize" / f"{script.stem}-{time.strftime('%Y%m%d-%H%M%S')}"

    def run(params: dict[str, Any], name: str) -> tuple[TrialResult, bool]:
        try:
            prepared = prepare_trial(script, target=target.name, sets=params, space=space, platform=config.platform,
                                     cache_root=str(cache.path), flags=flags)
        except InvalidConfigError as exc:  # a set whose knobs need others of the configuration
            return TrialResult(status="failed", plan=TrialPlan(target=target.name, params=params),
                               failure=Failure(category=FailureCategory.invalid_config, reason=str(exc))), False
        key = result_key(model=model, environment=environment, target=target.name, params=prepared.params,
                         protocol_version=PROTOCOL_VERSION, devices_per_trial=devices)
        remembered = cache.get_result(key)
        if remembered is not None:
            _said(name, remembered, "remembered", json_out)
            return remembered, False
        directory = folder / "trials" / name
        result = with_progress(f"trial of {name}", lambda: run_prepared(prepared, args, trial_dir=directory,
                                                                        limits=limits),
                               log=directory / "trial.log", quiet=json_out)
        cache.put_result(key, result)
        _said(name, result, "ran", json_out)
        return result, True

    if failed is None:
        # The knobs not given keep the baseline's values, as a study's configurations do.
        params = prepare_trial(script, target=target.name, sets={**baseline, **config.sets}, space=space,
                               platform=config.platform, flags=flags).params
        failed, reference_ran = run(params, "configuration")
        if failed.ok or failed.failure is None:
            figure = f"{failed.measurement.throughput:,.1f} samples/s" if failed.measurement else "a result"
            raise AutotuneError(f"the configuration did not fail (it measured {figure}): there is nothing to "
                                "minimize; give a configuration that fails")
    else:
        reference_ran = False
    assert failed.failure is not None
    if not json_out:
        err.print(f"reducing {failed.failure.category.value}: {first_line(failed.failure.reason)}", highlight=False)
    outcome = reduce_failure(failed.failure, baseline, failed.plan.params, run, reference_result=failed,
                             reference_ran=reference_ran, budget=budget)
    write_bug_report(folder, outcome, script=script, args=args, target=target.name, space=space, provenance=prov)
    if json_out:
        typer.echo(json.dumps({**outcome.summary(), "report": str(folder)}, default=str))
        return
    knobs = " ".join(f"{k}={v}" for k, v in outcome.knobs.items()) or "none: the baseline fails"
    r = outcome.reduction
    typer.echo(f"smallest failing set: {knobs} ({len(r.knobs)} of {len(outcome.moved)} moved knobs; "
               f"{outcome.trials} trials, {outcome.tested - outcome.trials} configurations answered from the cache)")
    typer.echo(outcome.proof())
    typer.echo(f"bug report: {folder}")


def _said(name: str, result: TrialResult, how: str, quiet: bool) -> None:
    if quiet:
        return
    from autotune.afterwards.minimal_failure import first_line

    failure = result.failure
    assert result.ok or failure is not None, "a failed result carries its failure"
    what = "ok" if result.ok or failure is None else f"{failure.category.value}: {first_line(failure.reason)[:100]}"
    err.print(f"  {name}: {what} ({how})", highlight=False)


def _stored_failure(study: str, number: int, storage: str | None,
                    ) -> tuple[Path, list[str], str, str | None, dict[str, str], TrialResult]:
    """A failed trial of a stored study: its script, arguments, target, space, the script's flags
    and the trial's result."""
    from autotune.records import TrialResult
    from autotune.storage.optuna_storage import load_study
    from autotune.trial import check_script
    from autotune.storage.attrs import StudyAttrs, TrialAttrs

    st = load_study(study, storage)
    found = next((t for t in st.get_trials(deepcopy=False) if t.number == number), None)
    if found is None:
        raise InvalidConfigError(f"study {study!r} has no trial {number}")
    attrs, stored = TrialAttrs.of(found), StudyAttrs.of(st)
    if attrs.result is None:
        raise InvalidConfigError(f"trial {number} of study {study!r} has no result ({attrs.reason or 'not run'})")
    result = TrialResult.model_validate_json(attrs.result)
    if result.ok or result.failure is None:
        raise InvalidConfigError(f"trial {number} of study {study!r} did not fail: choose a failed trial "
                                 "(autotune show lists them)")
    try:
        script = check_script(stored.script or "")
    except ScriptError:
        raise InvalidConfigError(f"the study's script {stored.script} is not here: minimize runs where the "
                                 "script is") from None
    flags = {f.param: f.flag for f in result.plan.script_flags}
    return script, list(stored.args or []), stored.target or "auto", stored.space, flags, result
