"""What a run of the study gives back (:class:`~autotune.study.options.StudyResult`): its trials,
the best, the failures by category, the notes on what its figures do not say by themselves, and
whether a longer study would likely find more; and the progress line's figures as it runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.measurement.noise import spread_text
from autotune.results.best import best_config
from autotune.results.outlook import search_outlook
from autotune.results.outputs import TrialSummary
from autotune.results.standings import _best, baseline_value, maximizes, objective_names, trial_counts
from autotune.results.summaries import study_summaries
from autotune.space import SearchSpace
from autotune.study.options import EXIT_ALL_FAILED, EXIT_OK, StudyProgress, StudyResult

if TYPE_CHECKING:
    import optuna


def update_progress(progress: StudyProgress, study: optuna.Study, running: int) -> None:
    """``progress`` as ``study`` stands, with ``running`` trials in flight in this driver."""
    progress.running = running
    progress.done, _ = trial_counts(study, exclude=set())
    progress.baseline_value = baseline_value(study)
    best = _best(study)
    if best is not None:
        progress.best_value, progress.best_params = best[1].value.mean, best[0].params


#: A best measured once whose 95% interval is wider than this (half-width over throughput) gets a
#: note suggesting --confirm (docs/results/search.md has the recorded landscapes' intervals).
WIDE_INTERVAL = 0.10


def study_result(study: optuna.Study, *, name: str, storage: str, target: str, out: Path, provenance: dict[str, Any],
                 notes: list[str], ran: int, reused: int, space: SearchSpace | None = None,
                 expected_gain: float | None = None, exhausted: bool = False,
                 stopped: str | None = None) -> StudyResult:
    """What a run of the study gives back: its trials, the best, the failures by category, notes
    on what the figures do not say by themselves, and (given the study's ``space``) whether a
    longer study would likely find more (``expected_gain``: what autotune's sampler expects from
    the next trial, where it ran; ``stopped``: why the study asked for no more trials)."""
    trials = study_summaries(study)
    best = best_config(study, name, provenance)
    by_cat: dict[str, int] = {}
    for t in trials:
        if t.state == "FAIL" and t.category and t.duplicate_of is None:
            by_cat[t.category] = by_cat.get(t.category, 0) + 1
    notes = list(notes)
    infeasible = [t for t in trials if t.violated]
    if best is None and infeasible:
        broken = sorted({c for t in infeasible for c in t.violated})
        notes.append(f"every configuration measured breaks a constraint ({', '.join(broken)}): there is no "
                     "best; loosen the bound or search other configurations")
    # The interval the best line shows (with the between-run noise where the study measured it),
    # by its upper side: on the logarithms it is wider upwards.
    low, high = (best.value_ci95_low, best.value_ci95_high) if best is not None else (None, None)
    upper = high / best.value - 1 if best is not None and high is not None and best.value else None
    if best is not None and len(best.runs) < 2 and upper is not None and upper > WIDE_INTERVAL:
        notes.append(f"trial {best.trial}'s 95% interval is {low:,.1f} .. {high:,.1f} ({spread_text(upper)} of its "
                     "value): one measurement may be a lucky draw; --confirm 2 measures the two best configurations "
                     "again")
    hit_rate = cache_hit_rate(trials)
    if hit_rate is not None and hit_rate < 1:
        notes.append(f"the compile cache answered {hit_rate:.0%} of the measure jobs' graphs: the others were "
                     "compiled again by the measurement (see each trial's measure_compile_seconds)")
    metric = best.metric if best else objective_names(study)[0]
    # One objective's trials say whether its search converged; a Pareto front is another question.
    outlook = search_outlook(trials, space, best, metric=metric, maximize=maximizes(study),
                             expected_gain=expected_gain, exhausted=exhausted, stopped=stopped) \
        if space is not None and len(study.directions) == 1 else None
    return StudyResult(study=name, storage=storage, target=target, out_dir=str(out),
                       metric=metric, maximize=maximizes(study),
                       best=best, baseline_value=baseline_value(study), trials=trials, failures_by_category=by_cat,
                       ran=ran, reused=reused, notes=notes, cache_hit_rate=hit_rate, outlook=outlook,
                       exit_code=EXIT_OK if best is not None else EXIT_ALL_FAILED)


def cache_hit_rate(trials: list[TrialSummary]) -> float | None:
    """Of the graphs that measure jobs after a compile stage looked up in the compile cache, the
    share it answered; ``None`` where no such job ran or the compiler does not count its lookups."""
    hits = lookups = 0
    for t in trials:
        if t.compile_stage_seconds is not None and t.cache_hits is not None and t.cache_misses is not None:
            hits += t.cache_hits
            lookups += t.cache_hits + t.cache_misses
    return hits / lookups if lookups else None
