"""What a stored study says: its measured configurations ranked, the best and the baseline, the
numerics guard's verdict, and a summary of every trial. Read by the study as it runs, and by
``autotune best``, ``show``, the daemon and ``ensure`` afterwards."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.config import JobConfig
from autotune.measurement.noise import RunNoise, Runs, spread_text
from autotune.pricing import Cost, Price, Utilisation, utilisation
from autotune.records import ApplySpec, TrialResult
from autotune.space import SearchSpace
from autotune.study.folded import Context, Folded, Group, folded_of
from autotune.study.numerics import loss_deviation
from autotune.study.outlook import FROM_THROUGHPUT, search_outlook
from autotune.study.options import EXIT_ALL_FAILED, EXIT_OK, StudyProgress, StudyResult
from autotune.objectives import speedup
from autotune.study.outputs import BestConfig, FrontPoint, Noise, TrialSummary
from autotune.study.racing import Standing, prior, standing, steady_seconds, study_noise, within
from autotune.trial_attrs import StudyAttrs, TrialAttrs

if TYPE_CHECKING:
    import optuna


def _baseline_losses(study: optuna.Study) -> list[float]:
    """The losses of the baseline's first complete trial, which the numerics guard judges the others by."""
    return list(_folded(study).base_losses)


def numerics_violated(study: optuna.Study, trial: optuna.trial.FrozenTrial, base: list[float] | None = None,
                      attrs: StudyAttrs | None = None) -> bool:
    """Whether ``trial``'s first losses left the baseline's by more than the study's tolerance.

    Decided from the stored losses, so that a trial told before its baseline finished is judged
    all the same. ``attrs``: the study's attributes, where the caller has read them (on an RDB
    storage each read is a query; a caller that judges every trial reads them once).
    """
    attrs = attrs or StudyAttrs.of(study)
    return _violates_numerics(TrialAttrs.of(trial), _baseline_losses(study) if base is None else base, attrs)


def _violates_numerics(told: TrialAttrs, base: list[float], attrs: StudyAttrs,
                       result: TrialResult | None = None) -> bool:
    """Whether the trial's first losses left the baseline's; ``result``: its result, where the
    caller has read it already."""
    if attrs.numerics_guard is False or told.result is None or told.config_key == attrs.baseline_key:
        return False
    if not base:  # no baseline losses to leave
        return False
    deviation = loss_deviation((result or TrialResult.model_validate_json(told.result)).losses, base)
    tolerance = attrs.loss_tolerance
    if tolerance is None:
        tolerance = JobConfig.model_fields["loss_tolerance"].default
    return deviation is not None and deviation > tolerance


def _trial_env(result: TrialResult) -> dict[str, str]:
    """The env a trial ran with: its plan's, and the NeuronCores its placement gave it."""
    return {**result.plan.env, **{k: v for k, v in result.placement.items() if k.startswith("NEURON_")}}


def objective_names(study: optuna.Study, attrs: StudyAttrs | None = None) -> list[str]:
    """The study's objectives, in the order of Optuna's values (``attrs``: the study's, where the caller has read them)."""
    attrs = attrs or StudyAttrs.of(study)
    return attrs.objectives or [attrs.metric or "throughput"]


def _preferred(study: optuna.Study, attrs: StudyAttrs | None = None) -> int:
    """The index of the objective that ranks configurations: ``--prefer``, else the first."""
    attrs = attrs or StudyAttrs.of(study)
    names = objective_names(study, attrs)
    return names.index(attrs.prefer) if attrs.prefer in names else 0


def maximizes(study: optuna.Study, index: int | None = None) -> bool:
    import optuna

    return study.directions[_preferred(study) if index is None else index] == optuna.study.StudyDirection.MAXIMIZE


def _value(trial: optuna.trial.FrozenTrial, index: int) -> float | None:
    """The trial's value of the objective at ``index`` (the study's :func:`_preferred`, read once
    by the caller: the study's attributes are a query on an RDB storage)."""
    return trial.values[index] if trial.values else None


def _sign(study: optuna.Study) -> float:
    """-1 when the study maximises the preferred objective (so that sorting ascending puts the best
    first), else 1."""
    return -1.0 if maximizes(study) else 1.0


def _context(study: optuna.Study) -> Context:
    import optuna

    attrs = StudyAttrs.of(study)
    index = _preferred(study, attrs)
    return Context(index=index, maximize=study.directions[index] == optuna.study.StudyDirection.MAXIMIZE,
                   timed=objective_names(study, attrs)[index] in FROM_THROUGHPUT,
                   baseline_key=attrs.baseline_key, numerics_guard=attrs.numerics_guard,
                   loss_tolerance=attrs.loss_tolerance,
                   noise_prior=tuple(attrs.noise_prior) if attrs.noise_prior else None,
                   objectives=tuple(objective_names(study, attrs)), price=attrs.price,
                   devices_per_trial=attrs.devices_per_trial, provenance=attrs.provenance, attrs=attrs)


def _folded(study: optuna.Study, trials: list[optuna.trial.FrozenTrial] | None = None) -> Folded:
    """The study's sums (:mod:`autotune.study.folded`) with every trial finished by now taken in
    (``trials``: the study's, where the caller has read them)."""
    fold = folded_of(study)
    context = _context(study)
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    with fold.lock:
        if context != fold.context:
            fold.reset(context)
        new = fold.newly_finished(trials)
        base = _first_baseline(new, context)
        if base is not None and (fold.base_losses_trial is None or base.number < fold.base_losses_trial.number):
            if fold.version:  # the trials folded before were judged without these losses (or by others)
                fold.reset(context)
                new = fold.newly_finished(trials)
                base = _first_baseline(new, context)
            fold.base_losses_trial = base
            fold.base_losses = TrialResult.model_validate_json(TrialAttrs.of(base).result or "").losses
        for t in new:
            _fold(fold, t, context)
        fold.mark(new)
    return fold


def _first_baseline(trials: list[optuna.trial.FrozenTrial], context: Context) -> Any | None:
    """The first of ``trials`` that measured the baseline configuration with a result."""
    for t in trials:
        told = TrialAttrs.of(t)
        if told.config_key == context.baseline_key and told.result is not None and t.state.name == "COMPLETE":
            return t
    return None


def _fold(fold: Folded, t: optuna.trial.FrozenTrial, context: Context) -> None:
    """What one finished trial adds to the study's sums."""
    told = TrialAttrs.of(t)
    complete = t.state.name == "COMPLETE"
    if told.counted:
        fold.counted += 1
    if complete and told.config_key == context.baseline_key and told.duplicate_of is None \
            and (fold.baseline is None or t.number < fold.baseline.number):
        fold.baseline = t
    if told.duplicate_of is not None:
        return
    key = told.config_key or f"#{t.number}"
    again = told.confirms is not None
    value = _value(t, context.index) if complete else None
    if value is not None and not told.violated and not told.idle:
        result = TrialResult.model_validate_json(told.result) if told.result is not None else None
        if not _violates_numerics(told, fold.base_losses, context.attrs, result):
            group = fold.groups.setdefault(key, Group())
            group.standing = None
            m = result.measurement if result is not None and context.timed else None
            bisect.insort(group.runs, (t.number, value, steady_seconds(m)))
            if not again and (group.first is None or t.number < group.first.number):
                group.first = t
                group.within = within(m)
            return
    if again:
        group = fold.groups.setdefault(key, Group())
        group.flaky, group.standing = True, None


def _measured(study: optuna.Study) -> list[tuple[Any, list[float], bool]]:
    """Each configuration measured successfully: its first trial, the values of all its
    measurements (re-measurements included; one whose losses left the baseline's counts for
    nothing, and one with a parameter that never reached the script measured another
    configuration), and whether a re-measurement of it failed."""
    return [(s.trial, list(s.runs.values), s.flaky) for s in standings(study)]


def standings(study: optuna.Study) -> list[Standing]:
    """Each configuration measured successfully, in the order of its first trial: that trial, its
    runs (with the first run's own interval where the preferred objective is timed by the harness), and
    whether a re-measurement of it failed (see :func:`_measured`)."""
    fold = _folded(study)

    def build() -> list[Standing]:
        groups = sorted((g for g in fold.groups.values() if g.first is not None), key=lambda g: g.first.number)
        for g in groups:
            if g.standing is None:
                g.standing = Standing(g.first, Runs(tuple(v for _, v, _ in g.runs), (g.within,) * len(g.runs),
                                                    tuple(s for _, _, s in g.runs)), g.flaky)
        return [g.standing for g in groups]

    with fold.lock:
        return list(fold.derived("standings", build))


def noise_of(study: optuna.Study, measured: list[Standing] | None = None) -> RunNoise:
    """The between-run noise the study's figures are judged with: its repeats and the earlier studies' here."""
    if measured is not None:
        return study_noise(measured, prior(study))
    measured = standings(study)
    fold = _folded(study)
    with fold.lock:
        # A configuration measured once says nothing of the noise: the rest are a few.
        return fold.derived("noise", lambda: study_noise([s for s in measured if s.runs.n > 1], prior(study)))


def _ranked(study: optuna.Study) -> list[Standing]:
    """The measured configurations best first (:func:`autotune.study.racing.standing`): by the
    mean over their runs, a configuration measured once ahead of one measured more often only
    beyond the between-run noise, those whose re-measurement failed last."""
    measured = standings(study)
    noise = noise_of(study)
    fold = _folded(study)
    with fold.lock:
        return list(fold.derived("ranked", lambda: standing(measured, noise, maximize=maximizes(study))))


def _ranked_configurations(study: optuna.Study) -> list[Any]:
    """The first trial of each configuration measured, best first by that first measurement."""
    sign = _sign(study)
    index = _preferred(study)
    return [t for t, _, _ in sorted(_measured(study), key=lambda m: (sign * m[0].values[index], m[0].number))]


def _best(study: optuna.Study) -> tuple[Any, float, list[float]] | None:
    """The best configuration's first trial, the mean of its measurements, and the measurements."""
    ranked = _ranked(study)
    if not ranked:
        return None
    return ranked[0].trial, ranked[0].runs.mean, list(ranked[0].runs.values)


def baseline_trial(study: optuna.Study) -> Any | None:
    """The completed trial that measured the baseline configuration, if any."""
    return _folded(study).baseline


def baseline_value(study: optuna.Study) -> float | None:
    """The measured value of the baseline configuration, if it completed: the mean over its runs."""
    runs = _baseline(study)
    return runs.mean if runs.n else None


def baseline_runs(study: optuna.Study) -> list[float]:
    """What each run of the baseline configuration measured (the study measures it in several
    processes early, to learn the between-run noise)."""
    return list(_baseline(study).values)


def _baseline(study: optuna.Study) -> Runs:
    measured = standings(study)
    fold = _folded(study)
    with fold.lock:
        context = fold.context
        assert context is not None  # the fold sets it
        return fold.derived("baseline runs", lambda: _runs_of(fold.baseline, measured, context.index))


def _runs_of(t: optuna.trial.FrozenTrial | None, measured: list[Standing], index: int) -> Runs:
    if t is None:
        return Runs(())
    key = TrialAttrs.of(t).config_key
    runs = next((s.runs for s in measured if TrialAttrs.of(s.trial).config_key == key), None)
    first = _value(t, index)
    return runs or (Runs((first,)) if first is not None else Runs(()))


def pareto_front(study: optuna.Study) -> list[Any]:
    """The first trials of the configurations no other feasible one beats in every objective
    (better or equal in all, better in one), by their first measurement."""
    signs = [-1.0 if maximizes(study, i) else 1.0 for i in range(len(study.directions))]
    points = [(t, [s * v for s, v in zip(signs, t.values)]) for t, _, _ in _measured(study)]
    return [t for t, p in points
            if not any(all(a <= b for a, b in zip(q, p)) and q != p for _, q in points)]
def study_cost(stored: StudyAttrs, throughput: float | None, price: Price | None = None) -> Cost | None:
    """What a million samples cost at ``throughput`` (one trial's samples/s) on the study's instance,
    at ``price`` or else the price of the study's last run; ``None`` without either."""
    if price is None and stored.price is not None:
        price = Price.model_validate(stored.price)
    if price is None or not throughput:
        return None
    return Cost.of(throughput, price, instance_type=(stored.provenance or {}).get("instance_type"),
                   devices_per_trial=stored.devices_per_trial)


def best_config(study: optuna.Study, name: str, prov: dict[str, Any] | None = None) -> BestConfig | None:
    measured = standings(study)
    noise = noise_of(study)
    ranked = _ranked(study)
    if not ranked:
        return None
    t, value, values = ranked[0].trial, ranked[0].runs.mean, list(ranked[0].runs.values)
    figure = ranked[0].runs.figure(noise)
    attrs, stored, names = TrialAttrs.of(t), StudyAttrs.of(study), objective_names(study)
    result = TrialResult.model_validate_json(attrs.result) if attrs.result is not None else None
    base_runs = _baseline(study)
    base = base_runs.mean if base_runs.n else None
    ratio = speedup(value, base, maximizes(study))
    plan = result.plan if result else None
    m = result.measurement if result else None
    # The configuration's own env vars: its placement on the tuning machine (NeuronCores) stays out.
    env = dict(plan.env) if plan else {}
    script = Path(stored.script or (prov or stored.provenance or {}).get("script") or "script.py").name
    return BestConfig(
        study=name, trial=t.number, target=stored.target or "",
        params=dict(plan.params) if plan else dict(t.params),
        env=env,
        apply=ApplySpec.of(plan, study=name, trial=t.number, script=script, env=env, speedup=ratio) if plan else None,
        space=stored.space, baseline_params=_params(base_trial) if (base_trial := baseline_trial(study)) else None,
        flags_env=plan.flags_env if plan else None,
        compiler_flags=plan.compiler_flags if plan else None,
        knobs={k: v for k, v in (plan.knobs.model_dump() if plan else {}).items() if v not in (None, False)},
        launch=plan.launch if plan else None, nproc_per_node=plan.nproc_per_node if plan else 1,
        script_args=plan.script_args(list(stored.args or [])) if plan and plan.script_flags else None,
        metric=names[_preferred(study)], value=value, measurements=values,
        measurement_seconds=_rounded(ranked[0].runs.run_seconds()),
        value_ci95_low=figure.low if math.isfinite(figure.high) else None,
        value_ci95_high=figure.high if math.isfinite(figure.high) else None,
        noise=noise_figure(measured, noise),
        objectives=_named_values(names, t), constraints=list(stored.constraints or []),
        front=[FrontPoint(trial=p.number, params=_params(p), values=_named_values(names, p))
               for p in pareto_front(study)] if len(study.directions) > 1 else [],
        throughput=m.throughput if m else None, ci95_low=m.ci95_low if m else None,
        ci95_high=m.ci95_high if m else None, baseline_value=base, baseline_measurements=list(base_runs.values),
        baseline_measurement_seconds=_rounded(base_runs.run_seconds()), speedup=ratio,
        provenance=attrs.provenance or prov or stored.provenance or {},
        cost=study_cost(stored, m.throughput if m else None),
        utilisation=_utilisation(stored, result, attrs.provenance or prov),
    )


def _rounded(each: tuple[float | None, ...]) -> list[float | None]:
    return [None if s is None else round(s, 3) for s in each]


def noise_figure(measured: list[Standing], noise: RunNoise) -> Noise | None:
    """What the study says of the noise (``None`` while nothing was measured more than once)."""
    if noise.spread is None:
        return None
    own = RunNoise.of(s.runs.values for s in measured)
    return Noise(spread=noise.spread, repeats=sum(s.runs.n for s in measured if s.runs.n > 1), df=noise.df,
                 earlier_df=noise.df - own.df)


def _utilisation(stored: StudyAttrs, result: TrialResult | None,
                 prov: dict[str, Any] | None = None) -> Utilisation | None:
    """The trial's FLOP/s and their share of the peak of the devices it held, where it measured them."""
    m = result.measurement if result else None
    if m is None or result is None:
        return None
    return utilisation(m.flops_per_sample, m.throughput, prov or stored.provenance or {},
                       devices_per_trial=stored.devices_per_trial, processes=result.plan.nproc_per_node,
                       model_device=m.model_device)


def _named_values(names: list[str], trial: optuna.trial.FrozenTrial) -> dict[str, float]:
    return dict(zip(names, trial.values or []))


def _params(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    result = TrialAttrs.of(trial).result
    return dict(TrialResult.model_validate_json(result).plan.params) if result else dict(trial.params)


def study_summaries(study: optuna.Study) -> list[TrialSummary]:
    """A summary of each trial, in number order. A finished trial's is made once and kept with the
    study's sums (:func:`_folded`); only its interval is drawn again where the noise it includes changed."""
    trials = study.get_trials(deepcopy=False)
    fold = _folded(study, trials)
    noise = noise_of(study)
    out = []
    with fold.lock:
        context = fold.context
        assert context is not None  # the fold sets it
        for t in trials:
            kept = fold.summaries.get(t.number)
            if kept is None:
                kept = _Summary(*_summary(t, context, fold.base_losses))
                if t.state.is_finished():
                    fold.summaries[t.number] = kept
            out.append(kept.with_interval(noise))
    return out


@dataclass
class _Summary:
    """A trial's summary but its interval, its own interval where the objective is timed by the
    harness, and the summary last shown with the noise it was shown with."""

    bare: TrialSummary
    own: float | None
    noise: RunNoise | None = None
    shown: TrialSummary | None = None

    def with_interval(self, noise: RunNoise) -> TrialSummary:
        """The summary with the 95% interval of its value that includes ``noise``."""
        if self.shown is not None and self.noise == noise:
            return self.shown
        value = self.bare.value
        figure = Runs((value,), (self.own,)).figure(noise) if value else None
        known = figure is not None and math.isfinite(figure.high)
        self.noise, self.shown = noise, self.bare.model_copy(update={
            "value_ci95_low": figure.low if figure is not None and known else None,
            "value_ci95_high": figure.high if figure is not None and known else None})
        return self.shown


def _summary(t: optuna.trial.FrozenTrial, context: Context, base: list[float]) -> tuple[TrialSummary, float | None]:
    """What a trial's summary says but its interval, and its own interval where the objective is timed."""
    stored, index = context.attrs, context.index
    names = list(context.objectives)
    attrs = TrialAttrs.of(t)
    result = TrialResult.model_validate_json(attrs.result) if attrs.result is not None else None
    m = result.measurement if result else None
    use = _utilisation(stored, result, attrs.provenance)
    value = _value(t, index) if t.state.name == "COMPLETE" else None
    return TrialSummary(
        number=t.number, state=t.state.name,
        params=dict(result.plan.params) if result else {k: v for k, v in t.params.items() if v is not None},
        value=value,
        values=_named_values(names, t) if t.state.name == "COMPLETE" and t.values else {},
        violated=attrs.violated or [], idle=attrs.idle or [],
        throughput=m.throughput if m else None,
        ci95_low=m.ci95_low if m else None, ci95_high=m.ci95_high if m else None,
        usd_per_million_samples=_usd_per_million(stored, m.throughput if m else None),
        flops_per_sample=use.flops_per_sample if use else None,
        flops_per_second=use.flops_per_second if use else None, mfu=use.mfu if use else None,
        pruned=bool(m and m.pruned),
        category=attrs.category, reason=attrs.reason,
        log_tail=result.log_tail if result and not result.ok else None,
        wall_seconds=result.wall_seconds if result else None,
        compile_seconds=result.compile.compile_seconds if result else None,
        duplicate_of=attrs.duplicate_of, confirms=attrs.confirms, again=attrs.again, env=attrs.env or {}, cached=attrs.cached,
        cache_hits=result.compile.cache_hits if result else None,
        cache_misses=result.compile.cache_misses if result else None,
        compile_stage_seconds=result.compile_stage.seconds if result and result.compile_stage else None,
        compile_stage=result.compile_stage if result else None,
        measure_compile_seconds=(result.compile.compile_seconds or 0.0)
        if result and result.compile_stage and result.ok else None,
        placement=result.placement if result else {},
        started_at=result.started_at if result else None, ended_at=result.ended_at if result else None,
        numerics_violated=t.state.name == "COMPLETE" and _violates_numerics(attrs, base, stored, result),
        losses=result.losses[:5] if result else [],
    ), within(m) if context.timed and value else None


def _usd_per_million(stored: StudyAttrs, throughput: float | None) -> float | None:
    cost = study_cost(stored, throughput)
    return cost.usd_per_million_samples if cost else None


def trial_counts(study: optuna.Study, exclude: set[int]) -> tuple[int, int]:
    """Trials measured so far (in any run of the study), and trials running in other drivers
    (those not in ``exclude``)."""
    trials = study.get_trials(deepcopy=False)
    fold = _folded(study, trials)
    with fold.lock:
        return fold.counted, sum(t.number not in exclude for t in fold.running(trials))


def update_progress(progress: StudyProgress, study: optuna.Study, running: int) -> None:
    """``progress`` as ``study`` stands, with ``running`` trials in flight in this driver."""
    progress.running = running
    progress.done, _ = trial_counts(study, exclude=set())
    progress.baseline_value = baseline_value(study)
    best = _best(study)
    if best is not None:
        progress.best_value, progress.best_params = best[1], best[0].params


#: A best measured once whose 95% interval is wider than this (half-width over throughput) gets a
#: note suggesting --confirm; the recorded landscapes' median is 6%.
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
    if best is not None and len(best.measurements) < 2 and upper is not None and upper > WIDE_INTERVAL:
        notes.append(f"trial {best.trial}'s 95% interval is {low:,.1f} .. {high:,.1f} ({spread_text(upper)}): one "
                     "measurement may be a lucky draw; --confirm 2 measures the two best configurations again")
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
