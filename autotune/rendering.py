"""Human-readable renderings of results (rich), next to their JSON forms."""

from __future__ import annotations

import shlex

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from autotune.objectives import objective, speedup
from autotune.machine.pricing import Cost, Utilisation
from autotune.records import KnobEffect, TrialResult

def format_value(value: float, metric: str) -> str:
    """``850.8 samples/s`` for throughput, ``12.345 ms`` for a latency, ``0.912 accuracy`` for a
    metric the script reports."""
    return objective(metric).format(value)


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.1f} s"


def fmt_usd(usd: float | None) -> str:
    """US dollars with the digits that matter: ``$0.1053``, ``$12.98``."""
    if usd is None:
        return "-"
    return f"${usd:,.2f}" if usd >= 10 else f"${usd:.4g}"


def fmt_flops(flops: float | None) -> str:
    """``40.4 kFLOP``, ``1.3 TFLOP``: a count of floating-point operations with an SI prefix."""
    if flops is None:
        return "-"
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(flops) >= scale:
            return f"{flops / scale:.3g} {prefix}FLOP"
    return f"{flops:.3g} FLOP"


def utilisation_line(use: Utilisation) -> str:
    """The model's FLOPs per sample, the FLOP/s achieved, and the utilisation or why there is none."""
    share = (f"; {use.mfu:.2%} of the peak ({use.peak_source})" if use.mfu is not None else f"; {use.peak_source}")
    return f"{fmt_flops(use.flops_per_sample)} per sample, {fmt_flops(use.flops_per_second)}/s achieved{share}"


def cost_line(cost: Cost) -> str:
    """``$0.1053 per 1M samples on inf2.xlarge at $0.7582/h (catalogue: ...); 2 trials side by side``."""
    side = (f"; {cost.instance_samples_per_second:,.1f} samples/s for the instance: {cost.trials_side_by_side} "
            "trials side by side" if cost.trials_side_by_side > 1 else "")
    return (f"{fmt_usd(cost.usd_per_million_samples)} per 1M samples on {cost.instance_type or 'this instance'} "
            f"at ${cost.per_hour:g}/h ({cost.source}){side}")


def _stop_note(result: TrialResult) -> str:
    if not result.stopped_early:
        return ""
    if result.measurement is not None and result.measurement.pruned:
        return " (stopped the script: clearly behind the study's best)"
    if result.measurement is not None and result.measurement.converged:
        return " (stopped the script once the estimate converged)"
    return " (stopped the script at the measurement cap, not converged)"


def _knob_row(knob: KnobEffect) -> tuple[Text, Text]:
    """``batch_size=128  script argument: --batch_size 128: 128 samples per step measured``; a
    knob that never reached the script is a warning."""
    ways = ", ".join(dict.fromkeys(r.kind for r in knob.routes)) or "nothing to apply"
    text = Text(f"{knob.param}={knob.value}  ", style="bold")
    text.append(f"{ways}: ")
    if knob.took_effect is False:
        text.append(f"did not take effect: {knob.detail}", style="yellow")
        return Text("warning", style="bold yellow"), text
    text.append(knob.detail + ("" if knob.took_effect is None else " (took effect)"))
    return Text("knob"), text


def render_trial(result: TrialResult, console: Console) -> None:
    plan = result.plan
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column(overflow="fold")  # paths and flag strings are copied from here: never cut them
    t.add_row("target", plan.target)
    t.add_row("parameters", ", ".join(f"{k}={v}" for k, v in plan.params.items()) or "(the script's own)")
    for knob in result.knobs:
        t.add_row(*_knob_row(knob))
    if plan.script_flags:
        t.add_row("script args", shlex.join(result.script_args) or "(none)")
    for k, v in plan.env.items():
        t.add_row("env" if k == next(iter(plan.env)) else "", f"{k}={v}")
    knobs = {k: v for k, v in plan.knobs.model_dump().items() if v not in (None, False)}
    if knobs:
        t.add_row("runtime knobs", ", ".join(f"{k}={v}" for k, v in knobs.items()))
    if result.script_loader:
        t.add_row("script's DataLoader", ", ".join(f"{k} {' and '.join(str(v) for v in vs)}"
                                                   for k, vs in result.script_loader.items()))
    if plan.launch:
        batch = plan.knobs.batch_size
        t.add_row("launch", plan.launch + (f"  (batch {batch} per process, {batch * plan.nproc_per_node} "
                                            "in all)" if batch else ""))
    for note in plan.notes:
        t.add_row("note", note)
    status = Text("ok", style="green") if result.ok else Text(
        f"failed: {result.failure.category.value}" if result.failure else "failed", style="red")
    t.add_row("status", status)
    if result.failure is not None:
        t.add_row("reason", result.failure.reason)
    m = result.measurement
    c = result.compile
    t.add_row("compile time", fmt_seconds(c.compile_seconds))
    if m is not None:
        t.add_row("throughput", f"{m.throughput:,.1f} samples/s  "
                                f"(95% CI {m.ci95_low:,.1f} .. {m.ci95_high:,.1f}"
                                f"{'' if m.converged else ', pruned' if m.pruned else ', not converged'})")
        t.add_row("step time", f"median {fmt_seconds(m.step_time_median)}, p90 {fmt_seconds(m.step_time_p90)}")
        if m.flops_per_second is not None:
            t.add_row("model FLOPs", f"{fmt_flops(m.flops_per_sample)} per sample, "
                                     f"{fmt_flops(m.flops_per_second)}/s achieved")
        phases = (f", over {m.phases} phases of the run (each trains with an optimizer of its own)"
                  if m.phases > 1 else "")
        t.add_row("measured", f"{m.steps_measured} steps in {m.windows} windows after "
                              f"{m.warmup_steps} warm-up steps ({fmt_seconds(m.warmup_seconds)}){phases}")
    for r in result.ranks:
        own = f"{r.measurement.throughput:,.1f} samples/s" if r.measurement else "no measurement"
        t.add_row(f"rank {r.rank}", f"{own}, {r.steps_seen} steps" + (f", {r.failure.reason}" if r.failure else ""))
    storm = Text(" recompilation storm", style="yellow") if c.recompilation_storm else Text("")
    t.add_row("graphs compiled", Text(f"{c.graphs_compiled} ({c.graphs_after_warmup} after warm-up)") + storm)
    if c.cache_hits is not None:
        t.add_row("compile cache", f"{c.cache_hits} hits, {c.cache_misses} misses")
    for name, value in result.metrics.items():
        t.add_row(f"metric {name}", f"{value:g}")
    t.add_row("peak host memory", fmt_bytes(result.peak_host_memory_bytes))
    if result.losses:
        t.add_row("first losses", ", ".join(f"{v:.4g}" for v in result.losses[:6]))
    t.add_row("wall time", f"{fmt_seconds(result.wall_seconds)}"
                           f"{_stop_note(result)}")
    for note in result.notes:
        t.add_row("note", note)
    t.add_row("log", result.log_path or "-")
    console.print(t)
    if not result.ok and result.log_tail:
        console.print(Text("log tail:", style="bold"))
        console.print(Text("\n".join(result.log_tail.splitlines()[-15:]), style="dim"))


def render_trials(study: str, trials: list, baseline: float | None, best, console: Console, *,
                  metric: str = "throughput", maximize: bool = True, top: int = 10, all_trials: bool = False) -> None:
    ok = [t for t in trials if t.state == "COMPLETE" and t.duplicate_of is None and t.confirms is None
          and not t.numerics_violated and not t.violated and t.value is not None]
    ok.sort(key=lambda t: -t.value if maximize else t.value)
    table = Table(title=f"{study}: {'all trials' if all_trials else f'top {min(top, len(ok))} configurations'}")
    unit = objective(metric).unit
    value_col = f"{metric} ({unit})" if unit else metric
    priced = any(t.usd_per_million_samples is not None for t in trials)
    ci_col = "95% CI"
    flops = any(t.flops_per_second is not None for t in trials)
    mfu = any(t.mfu is not None for t in trials)
    # Each row is a configuration: its figure is the mean over its runs.
    for col in ("trial", value_col, ci_col, "runs", "speedup", *(["$ / 1M samples"] if priced else []),
                *(["model FLOP/s"] if flops else []), *(["MFU"] if mfu else []), "parameters"):
        table.add_column(col, justify="left" if col in (ci_col, "parameters") else "right")
    rows = sorted(trials, key=lambda t: t.number) if all_trials else ok[:top]
    for t in rows:
        low, high = t.interval()
        ci = f"{low:,.1f} .. {high:,.1f}" if low is not None and high is not None else ""
        if t.pruned:
            ci += " pruned"
        if t.state == "COMPLETE" and (t.numerics_violated or t.violated):
            why = "diverged" if t.numerics_violated else f"breaks {', '.join(t.violated)}"
            value = Text(f"{_number(t.value)} {why}", style="yellow")
            speed = ""
        elif t.state == "COMPLETE":
            value = _number(t.value)
            ratio = speedup(t.value, baseline, maximize)
            speed = f"{ratio:.2f}x" if ratio is not None else ""
        else:
            value, speed = Text(t.category or t.state.lower(), style="red"), ""
        params = ", ".join(f"{k}={v}" for k, v in t.params.items()) or "(baseline: the script's own)"
        if t.duplicate_of is not None:
            params += f"  [same as trial {t.duplicate_of}]"
        if t.confirms is not None:
            params += f"  [trial {t.confirms} measured again" + (f": {t.again}]" if t.again else "]")
        cost = [fmt_usd(t.usd_per_million_samples)] if priced else []
        compute = ([f"{fmt_flops(t.flops_per_second)}/s" if t.flops_per_second is not None else ""]
                   if flops else []) + ([f"{t.mfu:.1%}" if t.mfu is not None else ""] if mfu else [])
        table.add_row(str(t.number), value, ci, str(t.runs) if t.runs else "", speed, *cost, *compute,
                      Text(params))  # no markup: "[same as trial 3]"
    print_whole(table, console)
    failed = [t for t in trials if t.state == "FAIL" and t.duplicate_of is None and t.category]
    if failed:
        by_cat: dict[str, list] = {}
        for t in failed:
            by_cat.setdefault(t.category, []).append(t)
        console.print(Text("failures by category:", style="bold"))
        for cat, ts in sorted(by_cat.items()):
            console.print(f"  {cat}: {len(ts)} (trials {', '.join(str(t.number) for t in ts)})")
            if all_trials:
                for t in ts:
                    console.print(Text(f"    trial {t.number}: {t.reason or ''}", style="dim"))
                    if t.log_tail:
                        tail_lines = t.log_tail.strip().splitlines()[-5:]
                        console.print(Text("\n".join("      " + ln for ln in tail_lines), style="dim"))
    if best is not None:
        console.print(f"[bold green]best:[/bold green] {best_line(best)}", highlight=False)
        if best.noise is not None:
            console.print(f"[bold]noise:[/bold] {noise_line(best.noise)}", highlight=False)
        if best.front:
            render_front(best, console)
        if best.compiler_flags:
            console.print(f"  {best.flags_env}={best.compiler_flags}")
        if best.cost is not None:
            console.print(f"  cost: {cost_line(best.cost)}", highlight=False)
        if best.utilisation is not None:
            console.print(f"  compute: {utilisation_line(best.utilisation)}", highlight=False)
        if best.launch:
            batch = f" (batch {best.params['batch_size']} per process, {best.global_batch_size} in all)" \
                if best.global_batch_size else ""
            console.print(f"  launch: {best.launch}{batch}")


def best_line(best) -> str:
    """``trial 14, 1,164.0 samples/s [1,090.2, 1,238.4] over 4 runs (1,171.3, ...; 2.90x the baseline, 3 runs)``."""
    runs = len(best.runs)
    interval = f" [{best.value_ci95_low:,.1f}, {best.value_ci95_high:,.1f}]" \
        if best.value_ci95_low is not None and best.value_ci95_high is not None else ""
    over = f" over {runs} runs" if runs > 1 else " (one run)"
    said = [", ".join(f"{r.value:,.1f}" for r in best.runs)] if runs > 1 else []
    if best.speedup:
        base = len(best.baseline_runs)
        said.append(f"{best.speedup:.2f}x the baseline" + (f", {base} runs" if base > 1 else ""))
    return f"trial {best.trial}, {format_value(best.value, best.metric)}{interval}{over}" \
        + (f" ({'; '.join(said)})" if said else "")


def noise_line(noise) -> str:
    """``one run of 10 s here reads within ±9% of its configuration's mean, 95% of the time (measured
    on 6 runs)``; where too few runs were measured again for a spread, what they read."""
    if noise.spread is None:
        return f"too few runs measured again to say how far runs vary here: {noise.seen}"
    from autotune.measurement.noise import spread_text

    earlier = " and by earlier studies here" if noise.earlier_df else ""
    return (f"one run of {noise.run_seconds:.0f} s here reads {spread_text(noise.spread)} of its configuration's "
            f"mean, 95% of the time (measured on {noise.repeats} runs{earlier})")


def print_whole(table: Table, console: Console) -> None:
    """A table that fits a terminal's width there; elsewhere (a file, a pipe, a CI log) as wide as its
    widest row needs, so that no configuration's knobs are cut (``batches_per_exec…``) or split."""
    if console.is_terminal:
        console.print(table)
        return
    natural = Measurement.get(console, console.options.update(max_width=1_000_000), table).maximum
    width = console.width
    console.width = max(width, natural)  # print's own width= cannot exceed the console's
    try:
        console.print(table, crop=False)
    finally:
        console.width = width


def render_front(best, console: Console) -> None:
    """A multi-objective study's Pareto front: one row per configuration no other beats in every objective."""
    names = list(best.front[0].values)
    table = Table(title=f"Pareto front ({len(best.front)} configurations; best.env holds trial {best.trial}, "
                        f"the best {best.metric})")
    table.add_column("trial", justify="right")
    for name in names:
        unit = objective(name).unit
        table.add_column(f"{name} ({unit})" if unit else name, justify="right")
    table.add_column("parameters")
    for point in sorted(best.front, key=lambda p: p.values[best.metric]):
        params = ", ".join(f"{k}={v}" for k, v in point.params.items()) or "(baseline: the script's own)"
        table.add_row(str(point.trial), *(_number(point.values[n]) for n in names), params)
    print_whole(table, console)


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.1f}"


def spend_line(spend) -> str:
    """``0.0123 instance-hours ($0.0093) over 8 trials, of a budget of 0.02 instance-hours``."""
    money = f" (${spend.usd:.4g})" if spend.usd is not None else ""
    caps = [f"{spend.budget_hours:g} instance-hours" if spend.budget_hours is not None else None,
            f"${spend.budget_usd:g}" if spend.budget_usd is not None else None]
    cap = " and ".join(c for c in caps if c)
    return (f"{spend.hours:.4g} instance-hours{money} over {spend.trials} trial{'s' if spend.trials != 1 else ''}"
            + (f", of a budget of {cap}" if cap else ""))


def render_study(result, console: Console) -> None:
    render_trials(result.study, result.trials, result.baseline_value, result.best, console, metric=result.metric,
                  maximize=result.maximize)
    if result.outlook is not None:
        console.print(f"[bold]search:[/bold] {escape(result.outlook.line)}", highlight=False)
    console.print(f"measured {result.ran} trial{'s' if result.ran != 1 else ''} now, reused {result.reused} "
                  f"earlier result{'s' if result.reused != 1 else ''}; "
                  f"files in {result.out_dir}/ (best.json, best.env, trials.csv)")
    staged = [t for t in result.trials if t.compile_stage_seconds is not None]
    if staged:
        ahead = sum(t.compile_stage_seconds for t in staged)
        still = sum(t.measure_compile_seconds or 0.0 for t in staged)
        hits = f"; the compile cache answered {result.cache_hit_rate:.0%} of their graphs" \
            if result.cache_hit_rate is not None else ""
        console.print(f"compile stage: {len(staged)} configurations, {fmt_seconds(ahead)} compiling ahead; their "
                      f"measure jobs still compiled for {fmt_seconds(still)}{hits}", highlight=False)
    if result.spend is not None and result.spend.trials:
        console.print(f"spent: {spend_line(result.spend)}", highlight=False)
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    if result.best is None:
        console.print("[red]every trial failed[/red]")


def render_comparison(rows: list, console: Console) -> None:
    """``autotune compare``'s table (rows: :class:`autotune.results.comparison.ComparisonRow`)."""
    table = Table(title="best configuration of each study; ratios to the first row")
    for col in ("study", "instance", "best configuration", "samples/s", "latency (ms)", "$ / hour (price used)",
                "$ / 1M samples", "samples/s vs first", "$ / 1M vs first"):
        table.add_column(col, justify="left" if col in ("study", "instance", "best configuration", "latency (ms)",
                                                        "$ / hour (price used)") else "right", overflow="fold")
    for r in rows:
        if r.configuration is None:
            table.add_row(r.study, r.instance_type or "unknown", Text("no successful trial", style="red"),
                          *["-"] * 6)
            continue
        sps = f"{r.instance_samples_per_second:,.1f}" if r.instance_samples_per_second else "-"
        if r.trials_side_by_side > 1:
            sps += f" ({r.trials_side_by_side} trials of {r.trial_samples_per_second:,.1f})"
        latency = (" / ".join(f"{k.removeprefix('latency_')} {v:.2f}" for k, v in r.latency_ms.items()) or
                   " / ".join(f"step {k.removeprefix('step_time_')} {v:.2f}" for k, v in r.step_time_ms.items()))
        price = f"${r.usd_per_hour:g} ({r.price_source})" if r.usd_per_hour is not None else "no price known"
        table.add_row(r.study, r.instance_type or "unknown",
                      ", ".join(f"{k}={v}" for k, v in r.configuration.items()) or "(the script's own)",
                      sps, latency or "-", price, fmt_usd(r.usd_per_million_samples),
                      f"{r.throughput_ratio:.2f}x" if r.throughput_ratio else "-",
                      f"{r.cost_ratio:.2f}x" if r.cost_ratio else "-")
    console.print(table)
