"""Warm starts: a new study begins where earlier studies of the same script ended.

Every SDK upgrade, instance change or model edit measures a study of its own (its results must
not answer this one's configurations), yet the best of the last study is the best first guess.
The earlier studies are those named with ``--warm-start``, and (``--warm``, the default) the
other studies of the same script (by file name) and target in the same storage that optimise
the same objective. Two things come of them:

* the best configuration of each is measured right after the baseline, before the space's
  known-good configurations; a known-good configuration whose every knob an earlier best moved
  too is not measured first at all (:func:`after_baseline`);
* their results inform autotune's sampler as a prior
  (:meth:`autotune.search.strategy.AutotuneSampler.warm`): observations that weigh less than
  this study's own measurements. They are never this study's trials, its results or its best.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from autotune.errors import AutotuneError, InvalidConfigError
from autotune.space import SearchSpace, config_key

if TYPE_CHECKING:
    import optuna

#: The target's check of a configuration: raises :class:`InvalidConfigError` for one it refuses.
Check = Callable[[dict[str, Any]], object]


@dataclass
class WarmStart:
    """What earlier studies give a new one."""

    #: The studies it read, by name.
    studies: list[str] = field(default_factory=list)
    #: Their results: (configuration, value or ``None`` where it failed).
    results: list[tuple[dict[str, Any], float | None]] = field(default_factory=list)
    #: The best configuration of each, as a configuration of the new study's space (those that are one).
    bests: list[dict[str, Any]] = field(default_factory=list)


def earlier_studies(storage: optuna.storages.BaseStorage, name: str | None, *, script: Path, target: str, objectives: list[str],
                    named: list[str], same_script: bool) -> list[str]:
    """The studies that seed study ``name``: those ``named`` (each must exist and optimise the same
    objectives), then with ``same_script`` the others of ``script``'s file name and ``target``
    that optimise ``objectives``, by name."""
    import optuna

    summaries = {s.study_name: s for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    out: list[str] = []
    for other in named:
        if other not in summaries:
            raise AutotuneError(f"--warm-start {other!r}: no such study in this storage; "
                                "`autotune show` lists the stored studies")
        attrs = summaries[other].user_attrs
        theirs = attrs.get("objectives") or [attrs.get("metric")]
        if theirs != objectives:
            raise AutotuneError(f"--warm-start {other!r} optimised {', '.join(map(str, theirs))}, not "
                                f"{', '.join(objectives)}: its results do not say what this study looks for")
        if other != name and other not in out:
            out.append(other)
    if same_script:
        for other, summary in sorted(summaries.items()):
            attrs = summary.user_attrs
            if other == name or other in out or attrs.get("target") != target or not attrs.get("script"):
                continue
            if Path(attrs["script"]).name == script.name and \
                    (attrs.get("objectives") or [attrs.get("metric")]) == objectives:
                out.append(other)
    return out


def read_warm_start(storage: optuna.storages.BaseStorage, names: list[str], space: SearchSpace, check: Check) -> WarmStart:
    """The results of studies ``names`` and the best configuration of each that is one of
    ``space`` and passes ``check`` (the target's check of a configuration)."""
    import optuna

    from autotune.search.strategy import measured_history

    warm = WarmStart()
    for other in names:
        study = optuna.load_study(study_name=other, storage=storage)
        if len(study.directions) != 1:
            continue  # a Pareto front has no one best to start from
        maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
        history, _ = measured_history(study)
        if not history:
            continue
        warm.studies.append(other)
        results = [(config, value) for config, value, _ in history]
        warm.results += results
        fits = best_of(results, space, check, maximize=maximize)
        if fits is not None and fits not in warm.bests:
            warm.bests.append(fits)
    return warm


def best_of(results: list[tuple[dict[str, Any], float | None]], space: SearchSpace, check: Check, *,
            maximize: bool = True) -> dict[str, Any] | None:
    """The best of an earlier study's ``results`` that is a configuration of ``space`` (:func:`of_space`),
    in canonical form; ``None`` where none is."""
    ranked = sorted((r for r in results if r[1] is not None), key=lambda r: r[1] or 0.0, reverse=maximize)
    for config, _ in ranked:
        fits = of_space(config, space, check)
        if fits is not None:
            return fits
    return None


def of_space(config: dict[str, Any], space: SearchSpace, check: Check) -> dict[str, Any] | None:
    """``config`` (an earlier study's) as a configuration of ``space``, in canonical form; ``None``
    where it is not one: it sets a parameter the space lacks, one ``--set`` holds at another value,
    or a value the space or the target refuses."""
    if any(name not in space.parameters and value is not None for name, value in config.items()):
        return None
    if any(name in config and config[name] != value for name, value in space.fixed.items()):
        return None
    try:
        # A parameter the earlier configuration leaves out ran at the script's own value: the default.
        fits = space.validate({**space.defaults(), **config, **space.fixed})
        check(fits)
    except InvalidConfigError:
        return None
    return fits


def after_baseline(points: list[dict[str, Any]], bests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The study's starting points (the baseline first, then the space's known-good
    configurations) with ``bests`` right after the baseline, each configuration once.

    A known-good configuration is a guess for a study that knows nothing of the script. Where an
    earlier best moved every knob it moves (each away from the baseline), an earlier study of this
    script chose those knobs by measuring, and its best is measured in the guess's place; the guess
    stays a configuration the sampler may propose, with the earlier results as its prior. One
    that moves a knob no earlier best moved (a knob the earlier space lacked) is still measured:
    nothing replaced it. Measuring the guess after the earlier best as well cost trials
    (docs/results/search.md#warm-starts).
    """
    if not points:
        return list(bests)
    baseline, known_good = points[0], points[1:]

    def moved(config: dict[str, Any]) -> set[str]:
        return {name for name in {*config, *baseline} if config.get(name) != baseline.get(name)}

    by_earlier: set[str] = set().union(*map(moved, bests))
    known_good = [c for c in known_good if not moved(c) <= by_earlier]
    out: list[dict[str, Any]] = []
    for config in [baseline, *bests, *known_good]:
        if config_key(config) not in {config_key(c) for c in out}:
            out.append(config)
    return out


def describe(warm: WarmStart) -> str | None:
    """A note for the study's user: what seeded it."""
    if not warm.studies:
        return None
    told = sum(v is not None for _, v in warm.results)
    return (f"warm start from {', '.join(warm.studies)}: {len(warm.bests)} earlier best configuration(s) measured "
            f"after the baseline, {told} earlier result(s) inform the sampler (not this study's results); "
            "--no-warm starts cold")

