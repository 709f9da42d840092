"""What makes an autotune study read well in optuna-dashboard.

optuna-dashboard shows a trial's user attributes as they are stored: autotune's keys
(:mod:`autotune.storage.attrs`) are a storage format, and its ``result`` is a JSON record. So each
trial also gets a note (optuna-dashboard's Markdown notes, kept in the study's system attributes)
saying in words what the trial measured or why it failed, with its log tail; the best trial's
note holds the ``best.env`` lines; the study's note summarises it; and the objective is named with
its unit. Notes are written only when their text changed, so that running this again, or every
few seconds while a study runs, costs a read.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from autotune.rendering import format_value
from autotune.report.data import StudyReport, study_report
from autotune.report.figures import value_axis
from autotune.report.write import require
from autotune.results.outputs import TrialSummary
from autotune.storage.attrs import StudyAttrs
from autotune.storage.trial_cache import trials_of

if TYPE_CHECKING:
    import optuna


def trial_note(report: StudyReport, t: TrialSummary) -> str:
    """A trial's note, in Markdown."""
    lines = [f"## Trial {t.number}"]
    if t.duplicate_of is not None:
        lines.append(f"Same configuration as trial {t.duplicate_of}: its result, not run again.")
    elif t.state == "FAIL":
        lines.append(f"**Failed: {t.category or 'unknown'}**. {t.reason or ''}".rstrip())
        if t.log_tail:
            lines += ["", "Log tail:", "", "```", t.log_tail.strip(), "```"]
    elif t.value is not None:
        lines.append(f"**{format_value(t.value, report.metric)}**"
                     + (f", 95% interval {low:,.1f} .. {high:,.1f}" if (low := t.interval()[0]) is not None
                        and (high := t.interval()[1]) is not None else ""))
        if report.baseline_value:
            lines.append(f"\n{t.value / report.baseline_value:.2f}x the baseline")
        if t.pruned:
            lines.append("\nPruned: stopped once clearly behind the best, so its interval is wider.")
        if t.numerics_violated:
            lines.append("\nIts first losses left the baseline's: never reported as the best.")
        if t.compile_seconds is not None:
            lines.append(f"\nCompile time {t.compile_seconds:.1f} s, trial wall time {t.wall_seconds or 0:.1f} s.")
    else:
        return ""
    if report.best is not None and report.best.trial == t.number:
        lines += ["", "### Best configuration", "", "```sh", report.best.env_file().strip(), "```"]
    return "\n".join(lines) + "\n"


def study_note(report: StudyReport) -> str:
    lines = [f"## autotune study {report.study}", "",
             f"Target {report.target or 'unknown'}, script `{report.script or 'unknown'}`."]
    if report.baseline_value is not None:
        lines.append(f"\nBaseline (every knob at its default): {format_value(report.baseline_value, report.metric)}.")
    if report.best is not None:
        speed = f", {report.best.speedup:.2f}x the baseline" if report.best.speedup else ""
        lines.append(f"\nBest: trial {report.best.trial}, {format_value(report.best.value, report.metric)}{speed}.")
    failures = report.failures_by_category()
    if failures:
        lines.append("\nFailures: " + ", ".join(f"{len(ts)} {c}" for c, ts in failures.items()) + ".")
    lines.append(f"\n`autotune report {report.study}` writes the HTML report.")
    return "\n".join(lines) + "\n"


def annotate(study: optuna.Study, name: str) -> int:
    """Name the objective and write the study's and its trials' notes where their text changed;
    the number of notes written. A study that autotune did not create (no target among its
    attributes) is left as it is: it shares the database, not the format."""
    import optuna

    require("optuna_dashboard", "notes for optuna-dashboard")
    from optuna_dashboard import get_note, save_note

    if StudyAttrs.of(study).target is None:
        return 0
    report = study_report(study, name)
    if study.metric_names is None and len(report.directions) == 1:
        with warnings.catch_warnings():  # experimental in Optuna, and stable in every version tested
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([value_axis(report)])
    written = 0
    body = study_note(report)
    if get_note(study) != body:
        save_note(study, body)
        written += 1
    kept = trials_of(study)
    for t in report.trials:
        body = trial_note(report, t)
        if not body:
            continue
        trial = optuna.trial.Trial(study, kept.trial_id(t.number))
        if get_note(trial) != body:
            save_note(trial, body)
            written += 1
    return written
