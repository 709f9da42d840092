"""The report as one self-contained HTML file.

Plotly's JavaScript is inlined once (about 4.7 MB), so the file opens offline, from a mail or an
artifact store; everything else is plain HTML: the failures' log tails fold open with
``<details>``, without script.
"""

from __future__ import annotations

import datetime
import html
import json
from typing import TYPE_CHECKING, Any

from autotune.rendering import fmt_flops, format_value, fmt_seconds, utilisation_line
from autotune.report.data import StudyReport
from autotune.results.outputs import TrialSummary

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: The sections of a report, by their element id, in page order. A test checks that each renders.
SECTIONS = {
    "summary": "Summary",
    "history": "Optimisation history",
    "knobs": "Each knob's effect",
    "compile": "Compile time against the value",
    "failures": "Failures by category",
    "pareto": "Pareto front",
    "cost": "Cost and instance",
    "best": "Best configuration",
    "trials": "Every trial",
}

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: .9em; } td, th { border: 1px solid #ddd; padding: .25em .5em; }
th { background: #f4f4f4; text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f8fa; padding: .7em; overflow-x: auto; font-size: .85em; }
details > summary { cursor: pointer; color: #0645ad; } .note { color: #666; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in params.items()) or "-"


def _status(t: TrialSummary) -> str:
    if t.duplicate_of is not None:
        return f"same as trial {t.duplicate_of}"
    if t.state == "FAIL":
        return f"failed ({t.category or 'unknown'})"
    words = [t.state.lower()]
    words += ["pruned"] if t.pruned else []
    words += ["losses left the baseline's"] if t.numerics_violated else []
    words += ["remembered"] if t.cached else []
    words += [f"measures trial {t.confirms} again"] if t.confirms is not None else []
    return ", ".join(words)


def _figure(fig: go.Figure, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})


def _summary(report: StudyReport) -> str:
    states: dict[str, int] = {}
    for t in report.trials:
        states[t.state.lower()] = states.get(t.state.lower(), 0) + 1
    rows = [("study", report.study), ("target", report.target or "unknown"), ("script", report.script or "unknown"),
            ("objective", ", ".join(f"{d} {report.metric}" if i == 0 else d for i, d in enumerate(report.directions))),
            ("trials", ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "none")]
    if report.baseline_value is not None:
        rows.append(("baseline (trial with every knob at its default)", format_value(report.baseline_value, report.metric)))
    if report.best is not None:
        speed = f", {report.best.speedup:.2f}x the baseline" if report.best.speedup else ""
        rows.append(("best", f"{format_value(report.best.value, report.metric)} (trial {report.best.trial}{speed})"))
    return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"


def _failures(report: StudyReport) -> str:
    by = report.failures_by_category()
    if not by:
        return "<p>No trial failed.</p>"
    head = "<table><tr><th>category</th><th>trials</th></tr>" + "".join(
        f"<tr><td>{_e(c)}</td><td class='num'>{len(ts)}</td></tr>" for c, ts in by.items()) + "</table>"
    rows = []
    for category, ts in by.items():
        for t in ts:
            tail = t.log_tail.strip() if t.log_tail else ""
            log = (f"<details class='log'><summary>log tail</summary><pre>{_e(tail)}</pre></details>" if tail
                   else "<span class='note'>no log kept</span>")
            rows.append(f"<tr class='failure' data-trial='{t.number}'><td class='num'>{t.number}</td><td>{_e(category)}</td>"
                        f"<td>{_e(t.reason or '-')}</td>"
                        f"<td>{_e(_params(t.params))}</td><td>{log}</td></tr>")
    return (head + "<p></p><table><tr><th>trial</th><th>category</th><th>reason</th><th>parameters</th>"
            "<th>log</th></tr>" + "".join(rows) + "</table>")


def _cost(report: StudyReport) -> str:
    prov = report.provenance
    wall, compile_s = report.trial_seconds()
    rows = [("instance type", prov.get("instance_type") or "unknown (not an EC2 instance, or not stored)"),
            ("device", prov.get("device") or "unknown"),
            ("host", f"{prov.get('host') or 'unknown'}, {prov.get('cpu_count') or '?'} CPUs"),
            ("versions", ", ".join(f"{k} {v}" for k, v in (prov.get("versions") or {}).items() if v) or "unknown"),
            ("machine time of the trials that ran",
             f"{fmt_seconds(wall)} wall, of which {fmt_seconds(compile_s) if compile_s else 'nothing'} compiling"),
            *_price_rows(report), _compute_row(report)]
    return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"


def _price_rows(report: StudyReport) -> list[tuple[str, str]]:
    cost = report.best.cost if report.best is not None else None
    if cost is None:
        return [("price", "unknown: the run had no price per hour (--instance-type of a priced instance, "
                          "--price-per-hour or --prices), so no cost in money is shown")]
    return [("price", f"${cost.per_hour:g} per hour ({cost.source})"),
            ("cost of the best configuration",
             f"${cost.usd_per_million_samples:,.4f} per 1M samples at {cost.instance_samples_per_second:,.1f} "
             f"samples/s for the instance ({cost.trials_side_by_side} trial(s) side by side)")]


def _compute_row(report: StudyReport) -> tuple[str, str]:
    use = report.best.utilisation if report.best is not None else None
    return ("compute of the best configuration", utilisation_line(use) if use is not None else
            "not counted: the model's FLOPs were not counted in its trial (a model that cannot run on shapes "
            "alone, or a result recorded before they were counted)")


def _best(report: StudyReport) -> str:
    if report.best is None:
        if len(report.directions) > 1:
            return "<p>Several objectives: the Pareto front above holds the best trade-offs.</p>"
        return "<p>No successful trial yet.</p>"
    return ("<p>The lines of <code>best.env</code>, to copy into a job's environment "
            f"(<code>autotune best {_e(report.study)} --format env</code> prints them too):</p>"
            f"<pre id='best-env'>{_e(report.best.env_file())}</pre>")


def _trials(report: StudyReport) -> str:
    head = ("<tr><th>trial</th><th>status</th><th>value</th><th>95% interval</th><th>model FLOP/s</th>"
            "<th>MFU</th><th>compile (s)</th><th>wall (s)</th><th>parameters</th></tr>")
    rows = []
    for t in report.trials:
        # a failed trial may hold the windows it measured before it failed: not a value of the study
        low, high = t.interval()
        interval = f"{_num(low)} .. {_num(high)}" if t.value is not None and low is not None else "-"
        rows.append(f"<tr data-trial='{t.number}'><td class='num'>{t.number}</td><td>{_e(_status(t))}</td>"
                    f"<td class='num value'>{_num(t.value)}</td><td class='num'>{interval}</td>"
                    f"<td class='num'>{_flops(t)}</td>"
                    f"<td class='num'>{f'{t.mfu:.1%}' if t.mfu is not None and t.value is not None else '-'}</td>"
                    f"<td class='num'>{_num(t.compile_seconds)}</td><td class='num'>{_num(t.wall_seconds)}</td>"
                    f"<td>{_e(_params(t.params))}</td></tr>")
    unit = "samples/s" if report.metric == "throughput" else report.metric
    return f"<p class='note'>Values in {_e(unit)}.</p><table>{head}{''.join(rows)}</table>"


def _flops(t: TrialSummary) -> str:
    return f"{fmt_flops(t.flops_per_second)}/s" if t.flops_per_second is not None and t.value is not None else "-"


def render_page(report: StudyReport, figs: dict[str, go.Figure]) -> str:
    """The whole report as one HTML document (plotly's JavaScript inlined)."""
    from plotly.offline import get_plotlyjs

    knobs = _figure(figs["knob_effects"], "fig-knob_effects")
    knobs += _figure(figs["importances"], "fig-importances") if "importances" in figs \
        else f"<p class='note'>Parameter importances: {_e(report.importance_note or 'none')}</p>"
    on_front = (f"<p>Trials on the front: {', '.join(map(str, report.pareto_front))}.</p>"
                if report.pareto_front else "")
    pareto = on_front + _figure(figs["pareto_front"], "fig-pareto_front") if "pareto_front" in figs else (
        "<p class='note'>One objective: no Pareto front.</p>" if len(report.directions) == 1
        else f"<p class='note'>{len(report.directions)} objectives: Optuna draws the front for 2 or 3 only.</p>")
    body = {
        "summary": _summary(report),
        "history": _figure(figs["history"], "fig-history"),
        "knobs": knobs,
        "compile": _figure(figs["compile_time"], "fig-compile_time"),
        "failures": _failures(report),
        "pareto": pareto,
        "cost": _cost(report) + (_figure(figs["spend"], "fig-spend") if "spend" in figs else ""),
        "best": _best(report),
        "trials": _trials(report),
    }
    when = datetime.datetime.fromtimestamp(report.generated_at, tz=datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sections = "".join(f"<section id='{key}'><h2>{_e(title)}</h2>{body[key]}</section>"
                       for key, title in SECTIONS.items())
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><link rel='icon' href='data:,'><title>autotune: {_e(report.study)}</title>"
            f"<style>{_STYLE}</style><script>{get_plotlyjs()}</script></head><body>"
            f"<h1>autotune study {_e(report.study)}</h1><p class='note'>Read from the study's storage at {when}.</p>"
            f"{sections}</body></html>")
