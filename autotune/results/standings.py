"""What a stored study says: its measured configurations ranked, the best and the baseline, the
numerics guard's verdict, and a summary of every trial. Read by the study as it runs, and by
``autotune best``, ``show``, the daemon and ``ensure`` afterwards."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.config import JobConfig
from autotune.measurement.noise import Figure, RunNoise, Runs
from autotune.records import TrialResult
from autotune.storage.folded import Context, Folded, Group, folded_of
from autotune.storage.trial_cache import trials_of
from autotune.measurement.numerics import loss_deviation
from autotune.results.outlook import FROM_THROUGHPUT
from autotune.results.outputs import RunFigure
from autotune.results.ranking import Standing, key, prior, ranked, steady_seconds, study_noise
from autotune.storage.attrs import StudyAttrs, TrialAttrs

if TYPE_CHECKING:
    import optuna


def _baseline_losses(study: optuna.Study) -> list[float]:
    """The losses of the baseline's first complete trial, which the numerics guard judges the others by."""
    return list(_folded(study).base_losses)


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
    """The study's sums (:mod:`autotune.storage.folded`) with every trial finished by now taken in
    (``trials``: the study's, where the caller has read them)."""
    kept, fold = folded_of(study)
    context = _context(study)
    if trials is None:
        kept.trials()
    else:
        kept.take_in(trials)
    with fold.lock:
        if context != fold.context:
            fold.reset(context)
        new = fold.newly_finished(kept)
        base = _first_baseline(new, context)
        if base is not None and (fold.base_losses_trial is None or base.number < fold.base_losses_trial.number):
            if fold.version:  # the trials folded before were judged without these losses (or by others)
                fold.reset(context)
                new = fold.newly_finished(kept)
                base = _first_baseline(new, context)
            fold.base_losses_trial = base
            fold.base_losses = (TrialResult.model_validate_json(TrialAttrs.of(base).result or "").losses
                                if base is not None else [])
        for t in new:
            _fold(fold, t, context)
        fold.mark()
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
    """The measured configurations best first (:func:`autotune.repeats.racing.standing`): by the
    mean over their runs, a configuration measured once ahead of one measured more often only
    beyond the between-run noise, those whose re-measurement failed last."""
    measured = standings(study)
    noise = noise_of(study)
    fold = _folded(study)
    with fold.lock:
        return list(fold.derived("ranked", lambda: ranked(measured, noise, maximize=maximizes(study))))


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
    its runs or the noise changed (:class:`autotune.storage.folded.Group` keeps it)."""

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


def _named_values(names: list[str], trial: optuna.trial.FrozenTrial) -> dict[str, float]:
    return dict(zip(names, trial.values or []))


def trial_counts(study: optuna.Study, exclude: set[int]) -> tuple[int, int]:
    """Trials that count towards ``--trials`` so far (in any run of the study), and trials running
    in other drivers (those not in ``exclude``)."""
    kept = trials_of(study)
    trials = kept.trials()
    with kept.lock:
        return kept.counted, sum(t.number not in exclude for t in kept.running(trials))
