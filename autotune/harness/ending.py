"""How the script of a trial process ended, as its report says it, and the report written.

Shared by the harness's own process and by the workers a script spawns (:mod:`.spawned`).
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Protocol

from autotune.atomic_file import write_atomic
from autotune.measurement.failures import classify
from autotune.records import Failure, FailureCategory, HarnessReport
from autotune.targets import failure_patterns
from autotune.harness.timing.step_clock import NumericsFailure, TrialComplete, WorkerComplete

#: Of an exception's message, the characters a failure's reason quotes.
MESSAGE_CHARS = 160


def record_end(report: HarnessReport, exc: BaseException) -> None:
    """What the way the script ended says about the trial."""
    if isinstance(exc, (TrialComplete, WorkerComplete)):  # the latter: a spawned worker's, passed on
        report.finished = True
        report.stopped_early = True
    elif isinstance(exc, NumericsFailure):
        report.failure = Failure(category=FailureCategory.numerics, reason=str(exc))
    elif isinstance(exc, SystemExit):
        code = exc.code
        if code in (0, None):
            report.finished = True
        else:
            # A failure unless the trial was measured before (see TrialRuntime.finalize).
            report.exit_code = code if isinstance(code, int) else 1
            report.error = f"SystemExit({code!r})"
            report.failure = Failure(category=FailureCategory.script_error,
                                     reason=f"the script exited with {code!r}", exit_code=report.exit_code)
    else:  # anything the script raised becomes a categorised failure
        text = "".join(traceback.format_exception(exc))
        sys.stderr.write(text)
        report.error = f"{type(exc).__name__}: {exc}"[:2000]
        default = FailureCategory.host_oom if isinstance(exc, MemoryError) else FailureCategory.script_error
        report.failure = classify(text, failure_patterns(), default=default, default_reason=raised(exc))


def raised(exc: BaseException) -> str:
    """What a script raised, as a failure's reason: the exception's type and the first line of its
    message (a trial's log holds the rest)."""
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    if len(first) > MESSAGE_CHARS:
        first = first[:MESSAGE_CHARS - 3] + "..."
    return f"the script raised {type(exc).__name__}" + (f": {first}" if first else "")


class ReportingTrial(Protocol):
    """A trial whose report is written (the harness's :class:`~autotune.harness.trial_process.TrialRuntime`)."""

    report: HarnessReport

    def finalize(self) -> HarnessReport:
        """Put what the trial measured into its report."""
        ...


def write_report(trial: ReportingTrial, path: Path) -> None:
    report = trial.report
    try:
        trial.finalize()
    except BaseException as exc:
        report.error = report.error or f"harness finalize failed: {exc!r}"
    write_atomic(path, report.model_dump_json())
    sys.stdout.flush()
    sys.stderr.flush()
