"""Search strategies compared on recorded landscapes: how fast each gets within 2% of the best.

Each landscape under ``landscapes/`` (``autotune landscape record``) is replayed with 30 seeds for

* ``grid``: every configuration in file order, what a person does by hand (one order: no seeds);
* ``random``: Optuna's ``RandomSampler``;
* ``tpe``: Optuna's ``TPESampler()`` as it comes (only seeded with the replay seed; no pruning);
* ``gp``: Optuna's ``GPSampler()`` as it comes (only seeded with the replay seed; no pruning), for
  information, in no target. Every parameter of these spaces has choices and so is suggested as a
  categorical, which GPSampler models as such (a 0/1 distance per parameter, no order); it samples
  at random until 10 trials have completed, and a conditional parameter (``thunk_runtime``,
  ``cpp_simdlen``) is always drawn by its RandomSampler, with Optuna's warning on stderr, because
  GPSampler does not support a dynamic search space;
* ``autotune``: what ``autotune run`` does by default: the baseline (trial 0) and the space's
  known-good configurations first, then :class:`autotune.search.strategy.AutotuneSampler`, each
  measurement stopped once it is clearly behind the best so far (``--prune``).

Every strategy goes through the study itself (:func:`bench.lib.simulate.simulate`:
:class:`autotune.study.study.Study` in Optuna's in-memory storage, its trials answered from the
landscape; its suggestion and duplicate rules, a configuration measured before is answered for
free and not counted) and the same simulated clock (recorded wall time per trial; a compile is charged at the
cached price only when the same graphs were compiled earlier in the replay and the target's cache
is read back across processes). For each strategy the table gives the median number of trials and
the median simulated wall time until a configuration within 2% of the landscape's best has been
measured, and the ratios autotune / default TPE and autotune / GPSampler. The targets: autotune
needs at most a quarter of the grid's trials and at most half of default TPE's simulated wall time,
on every landscape (GPSampler is in none).

``--ablations`` adds the variants the strategy was chosen from, each differing from ``autotune``
in one respect (what each showed is in :mod:`autotune.search.strategy`'s docstring). ``--jitter`` is a
robustness check: each seed replays a landscape whose throughputs are redrawn within their
recorded 95% intervals, so that a strategy is not judged on where the recorded noise happened to
put the best alone.

``--confirm`` asks another question: after a study of ``--budget`` trials, is the configuration it
reports as best really within 2% of the best, or one lucky measurement? Every measurement is then
a draw within its configuration's recorded 95% interval (the recorded value taken as the truth),
and the table compares reporting the best single measurement with measuring the best K again
(``autotune run --confirm K``) and reporting what the study then reports (its own standing,
:func:`autotune.repeats.racing.standing`: the best mean over runs, each mean drawn toward the
others' by as much as its runs are uncertain). That is a model of measurement noise built from the
recorded intervals, not a measurement::

    python bench/search_bench.py                 # the table, PASS/FAIL per target (seconds)
    python bench/search_bench.py --ablations     # and the variants of the strategy
    python bench/search_bench.py --jitter        # on perturbed landscapes
    python bench/search_bench.py --confirm       # the reported best, with and without --confirm
    python bench/search_bench.py --seeds 10 landscapes/xla-vit.jsonl

Exit code 0 when every target passes, 1 otherwise.
"""

from __future__ import annotations

import os

# The samplers' linear algebra is small: BLAS threads only fight each other on a busy machine.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import functools  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, NamedTuple  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import warnings  # noqa: E402

import optuna  # noqa: E402

from autotune.landscapes.landscape import Landscape, load_landscape, summary  # noqa: E402
from autotune.landscapes.replay import CompileCacheModel, interval_sigma  # noqa: E402
from autotune.measurement.windows import PRUNE_MARGIN  # noqa: E402
from autotune.search.configurations import enumerate_space, starting_points  # noqa: E402
from bench.lib.simulate import simulate  # noqa: E402

WITHIN = 0.02
SEEDS = 30
# ``group=True`` of the TPE that autotune run builds is experimental in Optuna; said once is enough.
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


@dataclass(frozen=True)
class Strategy:
    name: str
    #: ``(space, seed) -> sampler``
    sampler: Callable[[Any, int], Any]
    #: ``"none"``, ``"baseline"`` (the baseline first), ``"study"`` (baseline and known-good first,
    #: as autotune run does) or ``"grid"``.
    start: str = "none"
    seeded: bool = True  # False: one run, whatever the seed count (the grid)
    #: Simulate stopping a trial's measurement once it cannot come within this of the best.
    early_stop: float | None = None


def _random(space: Any, seed: int) -> Any:
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


def _tpe_default(space: Any, seed: int) -> Any:
    import optuna

    return optuna.samplers.TPESampler(seed=seed)


def _gp_default(space: Any, seed: int) -> Any:
    import optuna

    # Its only change: not to warn, once per trial, that it samples a conditional parameter at random.
    return optuna.samplers.GPSampler(seed=seed, warn_independent_sampling=False)


def _tpe_study(space: Any, seed: int) -> Any:
    """The sampler ``autotune run --sampler tpe`` builds (autotune/search/samplers.py)."""
    import optuna

    return optuna.samplers.TPESampler(multivariate=True, group=True, constant_liar=True, seed=seed,
                                      n_startup_trials=5)


def _autotune_sampler(space: Any, seed: int, **kwargs: Any) -> Any:
    from autotune.search.strategy import AutotuneSampler

    return AutotuneSampler(space, seed=seed, **kwargs)


def _autotune(**kwargs: Any) -> Callable[[Any, int], Any]:
    return functools.partial(_autotune_sampler, **kwargs)


#: autotune run prunes a measurement once it is clearly behind the best (PRUNE_MARGIN).
PRUNED = PRUNE_MARGIN

MAIN = [
    Strategy("grid", _random, start="grid", seeded=False),
    Strategy("random", _random),
    Strategy("tpe", _tpe_default),
    Strategy("gp", _gp_default),
    Strategy("autotune", _autotune(), start="study", early_stop=PRUNED),
]
#: Each differs from ``autotune`` in one respect (see docs/reference/search.md, "autotune's sampler", for what each means).
ABLATIONS = [
    Strategy("tpe as autotune run --sampler tpe uses it", _tpe_study, start="study", early_stop=PRUNED),
    # Optuna's GP in autotune's place, with the same starting points and pruning: what the
    # hand-written model itself adds over it.
    Strategy("GPSampler after the same starting points", _gp_default, start="study", early_stop=PRUNED),
    Strategy("autotune, baseline only (no known-good)", _autotune(), start="baseline", early_stop=PRUNED),
    Strategy("autotune, no starting points", _autotune(), early_stop=PRUNED),
    Strategy("autotune, no pruning", _autotune(), start="study"),
    Strategy("autotune, cost^0.25", _autotune(cost_power=0.25), start="study", early_stop=PRUNED),
    Strategy("autotune, cost^0.5", _autotune(cost_power=0.5), start="study", early_stop=PRUNED),
    Strategy("autotune, cost^1 (EI per second)", _autotune(cost_power=1.0), start="study", early_stop=PRUNED),
    Strategy("autotune, no trend term", _autotune(trend=False), start="study", early_stop=PRUNED),
    Strategy("autotune, categorical kernel", _autotune(ordinal=False, trend=False), start="study",
             early_stop=PRUNED),
    Strategy("autotune, no failure model", _autotune(failure_model=False), start="study", early_stop=PRUNED),
    Strategy("autotune, theta prior 1", _autotune(theta_prior=1.0), start="study", early_stop=PRUNED),
]


@dataclass
class Outcome:
    trials: float
    seconds: float


def perturbed(land: Landscape, seed: int) -> Landscape:
    """The landscape with each throughput redrawn within its recorded 95% interval (log-normal,
    seeded): another landscape as likely as the recorded one, to check that a strategy did not
    merely learn where the recorded noise put the best."""
    import dataclasses
    import random

    rng = random.Random(seed)
    records = []
    for r in land.records:
        if r.ok and interval_sigma(r) > 0:
            r = dataclasses.replace(r, throughput=r.throughput * math.exp(rng.gauss(0.0, interval_sigma(r))))
        records.append(r)
    return Landscape(land.header, records, land.path)


def _one(args: tuple[str, Strategy, int, bool]) -> Outcome:
    path, strategy, seed, jitter = args
    land = load_landscape(path)
    if jitter:
        land = perturbed(land, 1000 + seed)
    space = land.space
    goal = (1 - WITHIN) * land.best().throughput
    if strategy.start == "grid":
        points = enumerate_space(space)
    elif strategy.start == "study":
        points = starting_points(space)
    elif strategy.start == "baseline":
        points = starting_points(space)[:1]
    else:
        points = []
    trace = simulate(land, strategy.sampler(space, seed), starting_points=points, stop_at=goal,
                     early_stop=strategy.early_stop)
    hit = trace.reach(goal)
    return Outcome(*hit) if hit else Outcome(math.inf, math.inf)


def run(paths: list[str], strategies: list[Strategy], seeds: int, jobs: int,
        jitter: bool = False) -> dict[tuple[str, str], list[Outcome]]:
    work = [(p, s, seed, jitter) for p in paths for s in strategies
            for seed in (range(seeds) if s.seeded or jitter else [0])]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        outcomes = list(pool.map(_one, work, chunksize=1))
    table: dict[tuple[str, str], list[Outcome]] = {}
    for (p, s, _, _), o in zip(work, outcomes):
        table.setdefault((p, s.name), []).append(o)
    return table


CONFIRM_KS = (0, 2, 3)
#: A share of studies moves in steps of 1/seeds: --confirm needs more seeds than the medians.
CONFIRM_SEEDS = 400


@dataclass
class Reported:
    #: The reported best's recorded throughput over the landscape's best, per K re-measured.
    ratio: dict[int, float]
    #: Simulated seconds the re-measurements added, per K.
    extra: dict[int, float]


def _confirm_one(args: tuple[str, int, int]) -> Reported:
    """One seed of ``--confirm``: autotune's default study of ``budget`` trials on noisy measurements."""
    import random

    path, seed, budget = args
    land = load_landscape(path)
    truth = {r.key: r for r in land.records}
    first = perturbed(land, 1000 + seed)  # each configuration's first measurement
    trace = simulate(first, _autotune()(first.space, seed), starting_points=starting_points(first.space),
                     max_trials=budget, early_stop=PRUNED)
    ranked = sorted(((s.key, s.value) for s in trace.steps if s.value is not None), key=lambda kv: -kv[1])
    best = max(r.throughput for r in land.records if r.ok)
    rng = random.Random(2000 + seed)
    again: dict[str, float] = {}
    cost: dict[str, float] = {}
    for key, _ in ranked[:max(CONFIRM_KS)]:
        r = truth[key]
        again[key] = r.throughput * math.exp(rng.gauss(0.0, interval_sigma(r)))
        model = CompileCacheModel(land)
        model.charge(r)  # compiled once by the study: a second run pays the cached price, if any
        cost[key] = model.charge(r).seconds
    ratio, extra = {}, {}
    for k in CONFIRM_KS:
        pick = _reported(ranked, again, k, truth, order=[s.key for s in trace.steps])
        ratio[k] = truth[pick].throughput / best
        extra[k] = sum(cost[key] for key, _ in ranked[:k])
    return Reported(ratio, extra)


class _Trial(NamedTuple):
    """What the study's standing reads of a configuration's first trial: its place in the study."""

    number: int


def _reported(first_runs: list[tuple[str, float]], again: dict[str, float], k: int, truth: dict[str, Any], *,
              order: list[str]) -> str:
    """The configuration the study reports once the best ``k`` of ``first_runs`` were measured again:
    the study's own rule (:func:`autotune.results.ranking.ranked`), every run with its recorded
    interval, the noise pooled over the configurations measured twice."""
    from autotune.measurement.noise import RunNoise, Runs
    from autotune.results.ranking import Standing, ranked, study_noise

    measured = []
    for i, (key, value) in enumerate(first_runs):
        values = (value, again[key]) if i < k else (value,)
        r = truth[key]
        # A run reads within its configuration's recorded interval, and says so as a trial does.
        within = (r.ci95_high - r.ci95_low) / 2 / r.throughput if r.ci95_low and r.ci95_high else None
        measured.append(Standing(_Trial(order.index(key)), Runs(values, (within,) * len(values)), flaky=False))
    noise = study_noise([s for s in measured if s.runs.n > 1], RunNoise())
    best = ranked(measured, noise, maximize=True)[0]
    return order[best.trial.number]


def confirm_table(paths: list[str], seeds: int, budget: int, jobs: int) -> None:
    print(f"The reported best after {budget} trials of autotune's default, each measurement a draw within its "
          f"recorded 95% interval ({seeds} seeds; a model of the noise, not a measurement)\n")
    for path in paths:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            rows = list(pool.map(_confirm_one, [(path, s, budget) for s in range(seeds)], chunksize=1))
        print(describe(load_landscape(path)))
        print(f"  {'re-measured':>11s} {'within 2%':>10s} {'mean of best':>13s} {'worst':>7s} {'added (s)':>10s}")
        for k in CONFIRM_KS:
            ratios = [r.ratio[k] for r in rows]
            print(f"  {k:>11d} {sum(x >= 1 - WITHIN for x in ratios) / len(ratios):>10.0%} "
                  f"{statistics.mean(ratios):>13.3f} {min(ratios):>7.3f} {statistics.mean(r.extra[k] for r in rows):>10.0f}")
        print()


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def _fmt(x: float, digits: int = 1) -> str:
    return "never" if math.isinf(x) else f"{x:,.{digits}f}"


def describe(land: Landscape) -> str:
    s = summary(land)
    fails = ", ".join(f"{v} {k}" for k, v in sorted(s["failures"].items())) or "none"
    return (f"{land.name}: {s['configurations']} configurations ({fails} failed), best "
            f"{s['best']['throughput']:,.1f} samples/s at {land.best().key}; {s['within_2pct']} within 2%")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("landscapes", nargs="*", help="landscape files (default: landscapes/*.jsonl)")
    parser.add_argument("--seeds", type=int, default=None,
                        help=f"seeds per strategy (default {SEEDS}; {CONFIRM_SEEDS} with --confirm)")
    parser.add_argument("--ablations", action="store_true", help="also the variants of autotune's strategy")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--jitter", action="store_true",
                        help="robustness check: each seed replays the landscape with every throughput redrawn "
                             "within its recorded 95%% interval (a different, equally likely best)")
    parser.add_argument("--confirm", action="store_true",
                        help="instead: how often the reported best is within 2%% of the best, with and without "
                             "measuring the best few again (measurements redrawn within their intervals)")
    parser.add_argument("--budget", type=int, default=12, help="trials per study with --confirm")
    args = parser.parse_args()
    paths = args.landscapes or sorted(str(p) for p in (REPO / "landscapes").glob("*.jsonl"))
    if not paths:
        print("no landscapes: record one with autotune landscape record", file=sys.stderr)
        return 2
    if args.confirm:
        confirm_table(paths, args.seeds or CONFIRM_SEEDS, args.budget, args.jobs)
        return 0
    args.seeds = args.seeds or SEEDS
    strategies = MAIN + (ABLATIONS if args.ablations else [])
    started = time.monotonic()
    table = run(paths, strategies, args.seeds, args.jobs, args.jitter)
    ok = True
    what = "landscapes redrawn within their recorded intervals, one per seed" if args.jitter \
        else "grid: file order, one run"
    print(f"Trials and simulated wall time to a configuration within {WITHIN:.0%} of the best "
          f"(median of {args.seeds} seeds; {what})\n")
    for path in paths:
        land = load_landscape(path)
        print(describe(land) + (" (as recorded)" if args.jitter else ""))
        print(f"  {'strategy':40s} {'trials':>8s} {'wall (s)':>10s} {'reached':>8s}")
        med: dict[str, Outcome] = {}
        for s in strategies:
            rows = table[(path, s.name)]
            med[s.name] = Outcome(_median([o.trials for o in rows]), _median([o.seconds for o in rows]))
            reached = sum(not math.isinf(o.trials) for o in rows)
            print(f"  {s.name:40s} {_fmt(med[s.name].trials):>8s} {_fmt(med[s.name].seconds, 0):>10s} "
                  f"{reached:>4d}/{len(rows):<3d}")
        a, t, g = med["autotune"], med["tpe"], med["grid"]
        print(f"  autotune / tpe: trials {a.trials / t.trials:.2f}x, wall {a.seconds / t.seconds:.2f}x")
        gp = med["gp"]
        print(f"  autotune / gp:  trials {a.trials / gp.trials:.2f}x, wall {a.seconds / gp.seconds:.2f}x")
        trials_ok = a.trials <= g.trials / 4
        wall_ok = a.seconds <= t.seconds / 2
        ok = ok and trials_ok and wall_ok
        print(f"  target trials <= grid/4: {_fmt(a.trials)} <= {g.trials / 4:.1f}  {'PASS' if trials_ok else 'FAIL'}")
        print(f"  target wall <= tpe/2:    {_fmt(a.seconds, 0)} <= {t.seconds / 2:,.0f}  "
              f"{'PASS' if wall_ok else 'FAIL'}\n")
    print(f"{'PASS' if ok else 'FAIL'} ({time.monotonic() - started:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
