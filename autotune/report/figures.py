"""The report's figures, drawn with plotly from a :class:`~autotune.report.data.StudyReport`.

Plotly rather than hand-drawn SVG: it is what ``optuna.visualization`` draws with (the Pareto front
here is Optuna's own plot), its figures are interactive in the HTML report (hover shows a trial's
configuration) and the same figures export as PNG or SVG.
"""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING, Any

from autotune.objectives import objective
from autotune.records import FailureCategory as C
from autotune.report.data import StudyReport
from autotune.results.outputs import TrialSummary
from autotune.storage.attrs import StudyAttrs

if TYPE_CHECKING:
    import optuna
    import plotly.graph_objects as go

#: Failure categories get one marker colour each, always the same (a crash is red in every report).
CATEGORY_COLOURS: dict[C, str] = {
    C.compile_error: "#d62728", C.crash: "#8c1c13", C.device_oom: "#ff7f0e", C.host_oom: "#e377c2",
    C.timeout: "#9467bd", C.script_error: "#7f7f7f", C.numerics: "#bcbd22", C.invalid_config: "#17becf",
    C.device_unavailable: "#8c564b", C.rendezvous: "#aec7e8", C.missing_data: "#c7c7c7", C.disk_full: "#dbdb8d",
}


def _colour(category: str) -> str:
    """A failure category's colour; black for one this version does not know."""
    named = C.named(category)
    return CATEGORY_COLOURS[named] if named is not None else "#000"


def value_axis(report: StudyReport) -> str:
    """``throughput (samples/s)``, ``latency_p99 (ms)``; a metric the script reports is named as it is
    (its unit is its own)."""
    unit = objective(report.metric).unit
    return f"{report.metric} ({unit})" if unit else report.metric


def _hover(t: TrialSummary) -> str:
    return f"trial {t.number}<br>" + "<br>".join(html.escape(f"{k}={v}") for k, v in t.params.items())


def _interval(ts: list[TrialSummary]) -> dict[str, Any]:
    """Error bars of the 95% interval, asymmetric around each value (0 where none was stored)."""
    bounds = [t.interval() for t in ts]
    return dict(type="data", symmetric=False,
                array=[(high - t.value) if high is not None and t.value is not None else 0
                       for t, (_, high) in zip(ts, bounds)],
                arrayminus=[(t.value - low) if low is not None and t.value is not None else 0
                            for t, (low, _) in zip(ts, bounds)])


def history(report: StudyReport) -> go.Figure:
    """Each trial's value with its 95% interval, the best so far, the baseline, and the failed
    trials along the bottom by category."""
    import plotly.graph_objects as go

    fig = go.Figure()
    measured = report.measured()
    groups = [("measured", [t for t in measured if not t.pruned and not t.numerics_violated], "circle", "#1f77b4"),
              ("pruned (stopped early: wider interval)", [t for t in measured if t.pruned and not t.numerics_violated],
               "circle-open", "#1f77b4"),
              ("losses left the baseline's (never best)", [t for t in measured if t.numerics_violated],
               "diamond-open", "#bcbd22")]
    for name, ts, symbol, colour in groups:
        if ts:
            fig.add_trace(go.Scatter(x=[t.number for t in ts], y=[t.value for t in ts], mode="markers", name=name,
                                     marker=dict(symbol=symbol, size=9, color=colour), error_y=_interval(ts),
                                     text=[_hover(t) for t in ts], hovertemplate="%{text}<br>%{y:,.1f}<extra></extra>"))
    steps = report.best_so_far()
    if steps:
        fig.add_trace(go.Scatter(x=[n for n, _ in steps], y=[v for _, v in steps], mode="lines", name="best so far",
                                 line=dict(shape="hv", color="#2ca02c", width=2)))
    if report.baseline_value is not None:
        fig.add_hline(y=report.baseline_value, line=dict(dash="dash", color="#555"),
                      annotation_text=f"baseline {report.baseline_value:,.1f}", annotation_position="bottom right")
    for category, ts in report.failures_by_category().items():
        fig.add_trace(go.Scatter(x=[t.number for t in ts], y=[0] * len(ts), mode="markers",
                                 name=f"failed: {category}",
                                 marker=dict(symbol="x", size=11, color=_colour(category)),
                                 text=[f"{_hover(t)}<br>{html.escape(t.reason or '')}" for t in ts],
                                 hovertemplate="%{text}<extra>" + category + "</extra>"))
    fig.update_layout(title="Optimisation history", xaxis_title="trial (number)", yaxis_title=value_axis(report),
                      legend=dict(orientation="h", y=-0.2))
    return fig


def knob_effects(report: StudyReport) -> go.Figure:
    """Each parameter's levels against the values measured at them, one panel per parameter."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = report.parameters()
    cols = min(3, max(1, len(names)))
    rows = max(1, -(-len(names) // cols))
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names or ["no parameters"], shared_yaxes=True)
    measured = [t for t in report.measured() if not t.numerics_violated]
    for i, name in enumerate(names):
        ts = sorted(measured, key=lambda t: _level_order(t.params.get(name)))
        fig.add_trace(go.Box(x=[json.dumps(t.params.get(name)) for t in ts], y=[t.value for t in ts], name=name, boxpoints="all", jitter=0.3,
                             pointpos=0, showlegend=False, text=[_hover(t) for t in ts],
                             hovertemplate="%{text}<br>%{y:,.1f}<extra></extra>"),
                      row=i // cols + 1, col=i % cols + 1)
    for r in range(1, rows + 1):
        fig.update_yaxes(title_text=value_axis(report), row=r, col=1)
    fig.update_xaxes(type="category")
    fig.update_layout(title="Each knob's effect: value by level (null: the script's own setting)",
                      height=max(350, 300 * rows))
    return fig


def _level_order(value: object) -> tuple[int, float, str]:
    """Levels left to right: the script's own setting (null) first, numbers by size, then names."""
    if value is None:
        return (0, 0.0, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (1, float(value), "")
    return (2, 0.0, str(value))


def importances(report: StudyReport) -> go.Figure:
    import plotly.graph_objects as go

    names = list(report.importances)[::-1]  # most important at the top
    fig = go.Figure(go.Bar(x=[report.importances[n] for n in names], y=names, orientation="h",
                           hovertemplate="%{y}: %{x:.3f}<extra></extra>"))
    n = sum(1 for t in report.trials if t.state == "COMPLETE")
    fig.update_layout(title=f"Parameter importances (Optuna's PED-ANOVA evaluator, from {n} measured trials)",
                      xaxis_title="importance (fraction of 1)", height=max(300, 60 * len(names) + 150))
    return fig


def compile_vs_value(report: StudyReport) -> go.Figure:
    """Compile time against the value: is the fast configuration also slow to build?"""
    import plotly.graph_objects as go

    ts = [t for t in report.measured() if t.compile_seconds is not None]
    fig = go.Figure(go.Scatter(x=[t.compile_seconds for t in ts], y=[t.value for t in ts], mode="markers",
                               marker=dict(size=9, symbol=["circle-open" if t.pruned else "circle" for t in ts]),
                               error_y=_interval(ts), text=[_hover(t) for t in ts],
                               hovertemplate="%{text}<br>compile %{x:.1f} s<br>%{y:,.1f}<extra></extra>"))
    fig.update_layout(title="Compile time against " + report.metric, xaxis_title="compile time (s)",
                      yaxis_title=value_axis(report))
    if not ts:
        fig.add_annotation(text="no measured trial recorded a compile time (nothing compiled?)", showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


def pareto_front(study: optuna.Study, report: StudyReport) -> go.Figure | None:
    """Optuna's own Pareto-front plot, for a study of two or three objectives; None otherwise."""
    if not 2 <= len(report.directions) <= 3:
        return None
    import warnings

    import optuna

    from autotune.storage.optuna_versions import constrained

    with warnings.catch_warnings():  # Optuna 4 reads constraints_func here, yet warns it is deprecated
        warnings.simplefilter("ignore", FutureWarning)
        return optuna.visualization.plot_pareto_front(study, **constrained())


def spend(study: optuna.Study) -> go.Figure | None:
    """What the study spent over time in instance-hours (and dollars, on hover, where it had a
    price), a step for each trial or compile that ran, with the caps its last run kept; None where
    nothing ran."""
    import plotly.graph_objects as go

    from autotune.study.budget import spend_over_time

    steps = spend_over_time(study)
    if not steps:
        return None
    attrs = StudyAttrs.of(study)
    dollars = [f"<br>${usd:.4g}" if usd is not None else "" for _, _, usd in steps]
    fig = go.Figure(go.Scatter(x=[when for when, _, _ in steps], y=[hours for _, hours, _ in steps],
                               mode="lines+markers", line_shape="hv", name="spent", text=dollars,
                               hovertemplate="%{x}<br>%{y:.4g} instance-hours%{text}<extra></extra>"))
    caps = attrs.spend or {}
    if caps.get("budget_hours") is not None:
        fig.add_hline(y=caps["budget_hours"], line_dash="dash", line_color="#d62728",
                      annotation_text=f"--budget-hours {caps['budget_hours']:g}")
    if caps.get("budget_usd") is not None and attrs.price:
        fig.add_hline(y=caps["budget_usd"] / attrs.price["per_hour"], line_dash="dot", line_color="#d62728",
                      annotation_text=f"--budget-usd {caps['budget_usd']:g} at ${attrs.price['per_hour']:g}/h")
    fig.update_layout(title="Spend over time: machine time of the trials and compiles that ran, each at its share "
                            "of the instance", xaxis_title="when each ended", yaxis_title="spent (instance-hours)")
    return fig


def figures(report: StudyReport, study: optuna.Study) -> dict[str, go.Figure]:
    """Every figure of the report by its file stem, in the order the report shows them."""
    out = {"history": history(report), "knob_effects": knob_effects(report)}
    if report.importances:
        out["importances"] = importances(report)
    out["compile_time"] = compile_vs_value(report)
    front = pareto_front(study, report)
    if front is not None:
        out["pareto_front"] = front
    spent = spend(study)
    if spent is not None:
        out["spend"] = spent
    return out
