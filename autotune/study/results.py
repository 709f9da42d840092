"""What a stored study says: its measured configurations ranked, the best and the baseline, the
numerics guard's verdict, and a summary of every trial. Read by the study as it runs, and by
``autotune best``, ``show``, the daemon and ``ensure`` afterwards."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.config import JobConfig
from autotune.measurement.noise import RUN_SECONDS, Figure, RunNoise, Runs, seen_text, spread_text
from autotune.pricing import Cost, Price, Utilisation, utilisation
from autotune.records import ApplySpec, TrialResult
from autotune.space import SearchSpace
from autotune.study.folded import Context, Folded, Group, folded_of
from autotune.study.numerics import loss_deviation
from autotune.study.outlook import FROM_THROUGHPUT, search_outlook
from autotune.study.options import EXIT_ALL_FAILED, EXIT_OK, StudyProgress, StudyResult
from autotune.objectives import speedup
from autotune.study.outputs import BestConfig, FrontPoint, Noise, RunFigure, TrialSummary
from autotune.study.racing import Standing, key, prior, standing, steady_seconds, study_noise
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
    names = attrs.objectives or [attrs.metric or "throughput"]
    # A study stored without its objectives' names (made by Optuna alone) names the others by place.
    return names + [f"value_{i}" for i in range(len(names), len(study.directions))]


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
            bisect.insort(group.runs, run_figure(t, result, context.objectives, value), key=lambda f: f.trial)
            if not again and (group.first is None or t.number < group.first.number):
                group.first = t
            return
    if again:
        group = fold.groups.setdefault(key, Group())
        group.flaky, group.standing = True, None


def run_figure(t: optuna.trial.FrozenTrial, result: TrialResult | None, names: tuple[str, ...] | list[str],
               value: float) -> RunFigure:
    """What one run (``t``, with its ``result``) measured: the preferred objective's ``value``."""
    m = result.measurement if result is not None else None
    return RunFigure(trial=t.number, value=value, throughput=m.throughput if m else None,
                     ci95_low=m.ci95_low if m else None, ci95_high=m.ci95_high if m else None,
                     seconds=steady_seconds(m), again=TrialAttrs.of(t).again, pruned=bool(m and m.pruned),
                     values=_named_values(list(names), t))


def runs_of(figures: tuple[RunFigure, ...] | list[RunFigure], name: str | None = None, *, timed: bool = True) -> Runs:
    """The runs of one figure of a configuration: an objective's (``name``), else the throughput;
    each with its own interval and seconds where ``timed`` (the harness timed the figure). Cost is
    the price over the throughput, so its mean is the throughput's turned over (all the runs'
    seconds over all their samples), not the mean of each run's cost."""
    if name is None:
        kept = [f for f in figures if f.throughput]
        return Runs(tuple(f.throughput or 0.0 for f in kept), tuple(_own(f) for f in kept),
                    tuple(f.seconds for f in kept))
    values = tuple(f.values.get(name, f.value) for f in figures)
    return Runs(values, tuple(_own(f) if timed else None for f in figures),
                tuple(f.seconds if timed else None for f in figures), turned=name == "cost")


def _own(f: RunFigure) -> float | None:
    """A run's own 95% interval of its throughput, as a relative half-width."""
    if not f.throughput or f.ci95_high is None:
        return None
    return (f.ci95_high - f.throughput) / f.throughput


def standings(study: optuna.Study) -> list[Standing]:
    """Each configuration measured successfully, in the order of its first trial: that trial, its
    runs of the preferred objective (with each run's own interval where the objective is timed by
    the harness), whether a re-measurement of it failed, and what each run measured. A run whose
    losses left the baseline's counts for nothing, and one with a parameter that never reached the
    script measured another configuration."""
    fold = _folded(study)
    context = fold.context
    assert context is not None  # the fold sets it

    def build() -> list[Standing]:
        groups = sorted(((k, g) for k, g in fold.groups.items() if g.first is not None),
                        key=lambda kg: kg[1].first.number)
        name = context.objectives[context.index]
        for k, g in groups:
            if g.standing is None:
                figures = tuple(g.runs)
                g.standing = Standing(g.first, runs_of(figures, name, timed=context.timed), g.flaky, figures, k)
        return [g.standing for _, g in groups]

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


def ranked_trials(study: optuna.Study) -> list[Any]:
    """The first trial of each configuration measured, best first by that first measurement."""
    sign = -1.0 if maximizes(study) else 1.0
    index = _preferred(study)
    return sorted((s.trial for s in standings(study) if not s.flaky),
                  key=lambda t: (sign * t.values[index], t.number))


@dataclass(frozen=True)
class Headline:
    """A configuration's figures, each the mean over its runs: the preferred objective's with its
    95% interval, the throughput's with its own, and every objective's."""

    value: Figure
    throughput: Figure | None
    values: dict[str, float]
    runs: tuple[RunFigure, ...]


def headline(s: Standing, noise: RunNoise, context: Context) -> Headline:
    """What ``s``'s runs give its configuration: one figure per name, wherever it is shown."""
    throughput = runs_of(s.figures) if any(f.throughput for f in s.figures) else None
    values = {name: runs_of(s.figures, name, timed=name in FROM_THROUGHPUT).mean for name in context.objectives}
    value = s.runs.figure(noise)
    thr = throughput.figure(noise) if throughput is not None else None
    if all(f.pruned for f in s.figures):
        # Stopped once clearly behind: its figure is a rough one, and no interval says how rough.
        value = Figure(value.mean, None, None, value.runs)
        thr = Figure(thr.mean, None, None, thr.runs) if thr is not None else None
    return Headline(value, thr, values, s.figures)


class _Headlines:
    """The :class:`Headline` of each measured configuration by its key, each made again only once
    its runs or the noise changed (:class:`autotune.study.folded.Group` keeps it)."""

    def __init__(self, fold: Folded, noise: RunNoise) -> None:
        self.fold, self.noise = fold, noise
        context = fold.context
        assert context is not None  # the fold sets it
        self.context = context

    def get(self, key: str) -> Headline | None:
        group = self.fold.groups.get(key)
        if group is None or group.standing is None:
            return None
        kept = group.head
        if kept is None or kept[0] is not group.standing or kept[1] != self.noise:
            kept = group.head = (group.standing, self.noise, headline(group.standing, self.noise, self.context))
        return kept[2]


def _headlines(study: optuna.Study) -> _Headlines:
    """Each measured configuration's :class:`Headline`, by its key."""
    standings(study)  # each group's standing made
    return _Headlines(_folded(study), noise_of(study))


def _key(t: optuna.trial.FrozenTrial) -> str:
    return TrialAttrs.of(t).config_key or f"#{t.number}"


def _best(study: optuna.Study) -> tuple[Any, Headline] | None:
    """The best configuration's first trial and its figures."""
    ranked = _ranked(study)
    if not ranked:
        return None
    head = _headlines(study).get(key(ranked[0]))
    assert head is not None  # a ranked configuration has runs
    return ranked[0].trial, head


def baseline_trial(study: optuna.Study) -> Any | None:
    """The completed trial that measured the baseline configuration, if any."""
    return _folded(study).baseline


def _baseline(study: optuna.Study) -> Headline | None:
    """The baseline configuration's figures, if it completed."""
    base = baseline_trial(study)
    if base is None:
        return None
    kept = _headlines(study).get(_key(base))
    if kept is not None:
        return kept
    context = _folded(study).context
    assert context is not None  # the fold sets it
    return _single(base, context, noise_of(study))


def baseline_value(study: optuna.Study) -> float | None:
    """The baseline configuration's figure: the mean over its runs, if it completed."""
    base = _baseline(study)
    return base.value.mean if base is not None else None


def _single(t: optuna.trial.FrozenTrial, context: Context, noise: RunNoise) -> Headline | None:
    """The figures of a configuration measured once by ``t`` and not ranked (it broke a constraint,
    the numerics guard, or a knob never reached the script)."""
    value = _value(t, context.index) if t.state.name == "COMPLETE" else None
    if value is None:
        return None
    result = TrialResult.model_validate_json(TrialAttrs.of(t).result or "") if TrialAttrs.of(t).result else None
    figure = run_figure(t, result, context.objectives, value)
    return headline(Standing(t, runs_of((figure,), context.objectives[context.index], timed=context.timed), False,
                             (figure,)), noise, context)


def pareto_front(study: optuna.Study) -> list[tuple[Any, dict[str, float]]]:
    """The configurations no other feasible one beats in every objective (better or equal in all,
    better in one), each as its first trial and its figures."""
    signs = [-1.0 if maximizes(study, i) else 1.0 for i in range(len(study.directions))]
    names = objective_names(study)
    heads = _headlines(study)
    points = [(s.trial, head.values) for s in standings(study)
              if not s.flaky and (head := heads.get(key(s))) is not None]
    scored = [(t, v, [sign * v[n] for sign, n in zip(signs, names)]) for t, v in points]
    return [(t, v) for t, v, p in scored if not any(all(a <= b for a, b in zip(q, p)) and q != p for _, _, q in scored)]


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
    best = _best(study)
    if best is None:
        return None
    t, head = best
    attrs, stored, names = TrialAttrs.of(t), StudyAttrs.of(study), objective_names(study)
    result = TrialResult.model_validate_json(attrs.result) if attrs.result is not None else None
    base = _baseline(study)
    base_value = base.value.mean if base is not None else None
    value = head.value.mean
    ratio = speedup(value, base_value, maximizes(study))
    plan = result.plan if result else None
    thr = head.throughput
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
        metric=names[_preferred(study)], value=value,
        value_ci95_low=head.value.low, value_ci95_high=head.value.high,
        throughput=thr.mean if thr else None, ci95_low=thr.low if thr else None, ci95_high=thr.high if thr else None,
        runs=list(head.runs), noise=noise_figure(measured, noise),
        objectives=head.values, constraints=list(stored.constraints or []),
        front=[FrontPoint(trial=p.number, params=_params(p), values=values) for p, values in pareto_front(study)]
        if len(study.directions) > 1 else [],
        baseline_value=base_value, baseline_runs=list(base.runs) if base is not None else [], speedup=ratio,
        provenance=attrs.provenance or prov or stored.provenance or {},
        cost=study_cost(stored, thr.mean if thr else None),
        utilisation=_utilisation(stored, result, thr.mean if thr else None, attrs.provenance or prov),
    )


def noise_figure(measured: list[Standing], noise: RunNoise) -> Noise | None:
    """What the study says of the noise: its spread for a run of
    :data:`~autotune.measurement.noise.RUN_SECONDS` where enough runs were measured again, else
    what those runs read (``None`` while nothing was measured more than once)."""
    again = [s for s in measured if s.runs.n > 1]
    own = RunNoise.of(s.runs for s in measured)
    if noise.spread is not None:
        return Noise(spread=noise.spread, run_seconds=RUN_SECONDS, repeats=sum(s.runs.n for s in again),
                     df=noise.df, earlier_df=noise.df - own.df)
    if not again:
        return None
    seen = "; ".join(f"{seen_text(s.runs.values)} (trial {s.trial.number})" for s in again)
    return Noise(seen=seen, run_seconds=RUN_SECONDS, repeats=sum(s.runs.n for s in again), df=noise.df,
                 earlier_df=noise.df - own.df)


def _utilisation(stored: StudyAttrs, result: TrialResult | None, throughput: float | None,
                 prov: dict[str, Any] | None = None) -> Utilisation | None:
    """The FLOP/s of ``throughput`` (a configuration's samples/s) of the model ``result`` counted,
    and their share of the peak of the devices it held."""
    m = result.measurement if result else None
    if m is None or result is None:
        return None
    return utilisation(m.flops_per_sample, throughput, prov or stored.provenance or {},
                       devices_per_trial=stored.devices_per_trial, processes=result.plan.nproc_per_node,
                       model_device=m.model_device)


def _named_values(names: list[str], trial: optuna.trial.FrozenTrial) -> dict[str, float]:
    return dict(zip(names, trial.values or []))


def _params(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    result = TrialAttrs.of(trial).result
    return dict(TrialResult.model_validate_json(result).plan.params) if result else dict(trial.params)


def study_summaries(study: optuna.Study) -> list[TrialSummary]:
    """A summary of each trial, in number order, each with its configuration's figures. What a
    finished trial itself says is made once and kept with the study's sums (:func:`_folded`); its
    configuration's figures are joined to it where they changed."""
    trials = study.get_trials(deepcopy=False)
    fold = _folded(study, trials)
    noise = noise_of(study)
    heads = _headlines(study)
    out = []
    with fold.lock:
        context = fold.context
        assert context is not None  # the fold sets it
        for t in trials:
            kept = fold.summaries.get(t.number)
            if kept is None:
                kept = _Summary(*_summary(t, context, fold.base_losses), key=_own_key(t, trials))
                if t.state.is_finished():
                    fold.summaries[t.number] = kept
            out.append(kept.shown_with(heads.get(kept.key) or kept.alone(t, context, noise), context.attrs))
    return out


def _own_key(t: optuna.trial.FrozenTrial, trials: list[optuna.trial.FrozenTrial]) -> str:
    """The key of the configuration ``t`` measured (a duplicate's: the trial it repeats)."""
    told = TrialAttrs.of(t)
    if told.config_key is None and told.duplicate_of is not None and told.duplicate_of < len(trials):
        return _key(trials[told.duplicate_of])
    return _key(t)


@dataclass
class _Summary:
    """What a trial's summary says of the trial itself; the key of its configuration; and the
    summary last shown, with the figures it was shown with."""

    bare: TrialSummary
    #: What the FLOP/s of its figures need beside the FLOPs per sample: the processes and where
    #: the model ran.
    processes: int
    model_device: str | None
    key: str
    head: Headline | None = None
    shown: TrialSummary | None = None
    #: The trial's own figures, where it is not one of the ranked configurations' runs.
    _alone: tuple[RunNoise, Headline | None] | None = None

    def alone(self, t: optuna.trial.FrozenTrial, context: Context, noise: RunNoise) -> Headline | None:
        if self._alone is None or self._alone[0] != noise:
            self._alone = noise, _single(t, context, noise)
        return self._alone[1]

    def shown_with(self, head: Headline | None, stored: StudyAttrs) -> TrialSummary:
        """The summary with its configuration's figures (``head``; ``None``: it has none)."""
        if self.shown is not None and self.head is head:
            return self.shown
        figures: dict[str, Any] = {"value": None, "values": {}, "runs": 0, "value_ci95_low": None,
                                   "value_ci95_high": None, "throughput": None, "ci95_low": None, "ci95_high": None,
                                   "usd_per_million_samples": None, "flops_per_second": None, "mfu": None}
        if head is not None and self.bare.state == "COMPLETE":
            thr = head.throughput
            use = utilisation(self.bare.flops_per_sample, thr.mean if thr else None, stored.provenance or {},
                              devices_per_trial=stored.devices_per_trial, processes=self.processes,
                              model_device=self.model_device) \
                if self.bare.flops_per_sample else None
            figures.update(value=head.value.mean, values=head.values, runs=head.value.runs,
                           value_ci95_low=head.value.low, value_ci95_high=head.value.high,
                           throughput=thr.mean if thr else None, ci95_low=thr.low if thr else None,
                           ci95_high=thr.high if thr else None,
                           usd_per_million_samples=_usd_per_million(stored, thr.mean if thr else None),
                           flops_per_second=use.flops_per_second if use else None, mfu=use.mfu if use else None)
        self.head, self.shown = head, self.bare.model_copy(update=figures)
        return self.shown


def _summary(t: optuna.trial.FrozenTrial, context: Context,
             base: list[float]) -> tuple[TrialSummary, int, str | None]:
    """What a trial's summary says of the trial itself (all but its configuration's figures), and
    its processes and where its model ran."""
    stored, index = context.attrs, context.index
    attrs = TrialAttrs.of(t)
    result = TrialResult.model_validate_json(attrs.result) if attrs.result is not None else None
    m = result.measurement if result else None
    value = _value(t, index) if t.state.name == "COMPLETE" else None
    return TrialSummary(
        number=t.number, state=t.state.name,
        params=dict(result.plan.params) if result else {k: v for k, v in t.params.items() if v is not None},
        run=run_figure(t, result, context.objectives, value) if value is not None and attrs.duplicate_of is None
        else None,
        violated=attrs.violated or [], idle=attrs.idle or [],
        flops_per_sample=m.flops_per_sample if m else None,
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
    ), result.plan.nproc_per_node if result else 1, m.model_device if m else None


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
        progress.best_value, progress.best_params = best[1].value.mean, best[0].params


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
