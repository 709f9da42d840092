"""The daemon's page (``GET /``): its jobs, their state and progress, each linking to its report;
and the page where a browser signs in with the daemon's token (``GET /login``).

Plain HTML written here, no script: a table is all it shows, and the browser's own refresh
(``<meta http-equiv="refresh">``) keeps it current while a job is queued or running.
"""

from __future__ import annotations

import html
import time
from pathlib import Path

from autotune.daemon.messages import JobInfo, JobState
from autotune.rendering import fmt_seconds, format_value

#: Seconds between two refreshes of the page while a job is queued or running.
REFRESH_S = 5

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; font-size: .9em; } td, th { border: 1px solid #ddd; padding: .3em .6em; }
th { background: #f4f4f4; text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #666; } progress { width: 8em; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _times(job: JobInfo, now: float) -> tuple[str, str]:
    """Elapsed, and an estimate of what is left at the pace so far."""
    elapsed, left = job.elapsed_s(now), job.remaining_s(now)
    if elapsed is None:
        return "-", "-"
    if left is None:
        return fmt_seconds(elapsed), "-" if job.state.final else "after the first trial"
    return fmt_seconds(elapsed), "about " + fmt_seconds(left)


def _row(job: JobInfo, now: float) -> str:
    elapsed, left = _times(job, now)
    # a queued job's study may not exist yet
    report = "-" if job.state == JobState.queued else f"<a href='jobs/{_e(job.id)}/report'>report</a>"
    best = format_value(job.best_value, job.metric) if job.best_value is not None else "-"
    if job.speedup:
        best += f" ({job.speedup:.2f}x baseline)"
    return (f"<tr data-job='{_e(job.id)}'><td>{_e(job.id)}</td><td class='state'>{_e(job.state.value)}</td>"
            f"<td>{_e(job.study)}</td><td>{_e(job.script.rsplit('/', 1)[-1])}</td>"
            f"<td class='num'><progress max='{job.trials}' value='{min(job.done, job.trials)}'></progress> "
            f"<span class='done'>{job.done}/{job.trials}</span></td>"
            f"<td class='num'>{job.running}</td><td class='num'>{job.failed}</td><td class='num best'>{_e(best)}</td>"
            f"<td class='num elapsed'>{elapsed}</td><td class='num left'>{_e(left)}</td>"
            f"<td>{report}</td></tr>")


def jobs_page(jobs: list[JobInfo], now: float | None = None) -> str:
    """The page listing ``jobs`` (newest first, as ``GET /jobs`` gives them)."""
    now = time.time() if now is None else now
    live = any(not j.state.final for j in jobs)
    refresh = f"<meta http-equiv='refresh' content='{REFRESH_S}'>" if live else ""
    head = ("<tr><th>job</th><th>state</th><th>study</th><th>script</th><th>trials done / asked</th>"
            "<th>running</th><th>failed</th><th>best so far</th><th>elapsed</th><th>estimate left</th>"
            "<th></th></tr>")
    rows = "".join(_row(j, now) for j in jobs) or "<tr><td colspan='11'>No job yet: autotune submit sends one.</td></tr>"
    note = f"Refreshed every {REFRESH_S} s while a job is queued or running." if live else "No job is running."
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>{refresh}<link rel='icon' href='data:,'><title>autotune jobs</title>"
            f"<style>{_STYLE}</style></head><body><h1>autotune jobs</h1>"
            f"<table id='jobs'>{head}{rows}</table><p class='note'>{note} "
            "The API is described by <a href='openapi.json'>its OpenAPI schema</a>.</p></body></html>")


def login_page(token_file: Path | None, wrong: bool = False) -> str:
    """A form for the daemon's token; the daemon answers it with a cookie for its pages."""
    where = f"in <code>{_e(token_file)}</code> on the daemon's machine" if token_file else "given to autotune serve"
    error = "<p class='error' role='alert'>That is not the daemon's token.</p>" if wrong else ""
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><link rel='icon' href='data:,'>"
            f"<title>autotune: sign in</title><style>{_STYLE} .error {{ color: #b00; }}</style></head><body>"
            f"<h1>autotune</h1>{error}<form method='post' action='login'>"
            f"<label>Token <input type='password' name='token' autocomplete='current-password' autofocus></label> "
            f"<button type='submit'>Sign in</button></form>"
            f"<p class='note'>The token is {where}. Signing in keeps it in a cookie that only this "
            "daemon's own pages send.</p></body></html>")
