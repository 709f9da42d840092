"""What a compile farm buys on Neuron, on paper: study wall time and device-slot utilisation with
0, 4, 8, 16 and 32 CPU compile workers in front of 2 device slots. A simulation driven by the
recorded landscapes, not a measurement of a Neuron machine.

Each landscape's configurations keep their recorded compile and rest (wall time less compile:
start-up, warm-up, measurement), scaled so that the means are Neuron-like: a 10-minute cold compile
and a 1-minute rest (:func:`bench.lib.farm.neuron_jobs`). A study runs ``--trials``
configurations (every one if the landscape has fewer) in an order drawn by a seed; each figure is
the median over ``--seeds`` orders. The two designs (:mod:`bench.lib.farm`):

* 0 workers, today's design: each slot compiles the next configuration, then measures it; a
  compile hits the cache (warm price) where the landscape's target reads its cache back and an
  earlier configuration had the same graphs; a failed configuration holds its slot until it fails.
* K workers, the farm: the study's own compile stage (``--compile-workers K``) on a simulated
  clock. Up to ``--ahead`` (default K + slots) configurations are compiling or compiled ahead of
  the slots, each handed over only when a worker is free; equal graphs compile once, a second
  compile job holding its worker while it waits on the first's lock; a slot takes the oldest
  compiled configuration, loads its artifact and measures it; a failed compile never reaches a
  slot. The load is the landscape's recorded warm compile where it has one (its warm/cold ratio),
  else 5% of the cold compile, an assumption (``--load-fraction`` sets it for every landscape).

How to read a table: a row per K. "study wall" is the simulated study; "slots busy" the share of
D x wall during which the slots did anything (today's design keeps them busy compiling);
"slots measuring" the share during which they ran a compiled configuration (its load, start-up,
warm-up and measurement), the useful part, on which the target is judged; "wall / today" the study
against today's on the same order. The targets: slots measuring at least 85% of the study for
every K >= 8, and a study wall at most 1/4 of today's at K = 16. Under each table, the steady-state
arithmetic: per trial, W seconds of compiling (on the workers) and M of measuring (on the slots);
K workers supply K/W configurations a second and D slots take D/M, so the slots measure about
K·M/(D·W) of the time until K reaches D·W/M, and 85% needs K >= 0.85·D·W/M. The first configurations
are compiled while every slot waits, and the last measured while the workers have nothing left,
so a study of 50 trials needs more than that; the smallest K that reaches 85% in the simulation is
printed too. Whatever K, the farm's study takes about M/T of today's at best, T being today's
slot seconds per trial.

What the figures said, and which targets they pass: docs/results/fleet.md#a-compile-farm-on-paper.

Usage::

    python bench/compile_farm.py [landscapes ...] [--slots 2] [--workers 0,4,8,16,32] [--ahead N]
        [--trials 50] [--seeds 10] [--compile-minutes 10] [--measure-minutes 1] [--load-fraction F] [--json]

Exit code 0 when every target passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autotune.landscapes.landscape import Landscape, load_landscape  # noqa: E402
from bench.lib.farm import (  # noqa: E402
    ASSUMED_LOAD_FRACTION,
    FarmJob,
    NeuronScale,
    StudyTimeline,
    neuron_jobs,
    simulate_study,
    study_order,
)
MEASURING_TARGET, FROM_WORKERS = 0.85, 8
WALL_TARGET, AT_WORKERS = 0.25, 16
SEARCH_WORKERS = 128  # the most compile workers tried when looking for the smallest K that reaches 85%


@dataclass
class Row:
    workers: int
    ahead: int | None
    wall_s: float
    busy: float
    measuring: float
    wall_ratio: float
    measuring_pass: bool | None  # None: not judged on this row
    wall_pass: bool | None


def runs(jobs: list[FarmJob], land: Landscape, args: argparse.Namespace, workers: int) -> list[StudyTimeline]:
    return [simulate_study(study_order(jobs, args.trials, seed), args.slots, workers, ahead=args.ahead,
                           cache_persists=land.compile_cache_persists) for seed in range(args.seeds)]


def table(jobs: list[FarmJob], land: Landscape, args: argparse.Namespace) -> tuple[list[Row], dict[str, float]]:
    today = runs(jobs, land, args, 0)
    rows, farm = [], None
    for k in args.workers:
        sims = runs(jobs, land, args, k)
        farm = sims if k else farm
        measuring = statistics.median(s.measuring for s in sims)
        ratio = statistics.median(s.wall_s / t.wall_s for s, t in zip(sims, today))
        rows.append(Row(k, None if k == 0 else args.ahead or k + args.slots,
                        statistics.median(s.wall_s for s in sims), statistics.median(s.busy for s in sims),
                        measuring, ratio, measuring >= MEASURING_TARGET if k >= FROM_WORKERS else None,
                        ratio <= WALL_TARGET if k == AT_WORKERS else None))
    farm = farm or runs(jobs, land, args, 1)
    n = min(args.trials, len(jobs))
    steady = {
        "compile_s_per_trial": statistics.median(s.compile_s for s in farm) / n,
        "measuring_s_per_trial": statistics.median(s.measuring_s for s in farm) / n,
        "today_slot_s_per_trial": statistics.median(s.busy_s for s in today) / n,
        "smallest_workers_85pct": next((k for k in range(1, SEARCH_WORKERS + 1) if statistics.median(
            s.measuring for s in runs(jobs, land, args, k)) >= MEASURING_TARGET), None),
    }
    return rows, steady


def _hours(s: float) -> str:
    return f"{s / 3600:.2f} h"


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else "PASS" if ok else "FAIL"


def describe(land: Landscape, jobs: list[FarmJob], scale: NeuronScale, trials: int) -> str:
    failed = sum(not j.ok for j in jobs)
    load = {"recorded": f"the recorded warm compile (median warm/cold ratio {scale.load_fraction:.1%})",
            "assumed": f"{scale.load_fraction:.0%} of the cold compile (assumed: no warm compile recorded)",
            "given": f"{scale.load_fraction:.0%} of the cold compile (--load-fraction)"}[scale.load_source]
    return (f"{land.name}: {len(jobs)} configurations ({failed} fail before measuring), "
            f"{len({j.compile_key for j in jobs})} compile keys, {min(trials, len(jobs))} trials; "
            f"recorded compile x{scale.compile_factor:.1f}, rest x{scale.rest_factor:.2f}; "
            f"load = {load}; compile cache read back today: {'yes' if land.compile_cache_persists else 'no'}")


def print_table(rows: list[Row], steady: dict[str, float], slots: int) -> None:
    print(f"  {'workers':>7} {'ahead':>5} {'study wall':>10} {'slots busy':>10} {'slots measuring':>15} "
          f"{'wall / today':>12} {'>=85% measuring (K>=8)':>22} {'wall <=1/4 (K=16)':>17}")
    for r in rows:
        print(f"  {r.workers if r.workers else '0 today':>7} {r.ahead if r.ahead is not None else '-':>5} "
              f"{_hours(r.wall_s):>10} {r.busy:>10.1%} {r.measuring:>15.1%} {r.wall_ratio:>12.2f} "
              f"{_verdict(r.measuring_pass):>22} {_verdict(r.wall_pass):>17}")
    w, m, t = steady["compile_s_per_trial"], steady["measuring_s_per_trial"], steady["today_slot_s_per_trial"]
    smallest = steady["smallest_workers_85pct"]
    print(f"  per trial: W = {w:.0f} s compiling, M = {m:.0f} s measuring (today: T = {t:.0f} s of slot time); "
          f"compile-bound below K = D*W/M = {slots * w / m:.1f}, 85% measuring needs K >= {0.85 * slots * w / m:.1f} "
          f"in steady state; simulated: "
          + (f"K = {smallest}" if smallest else f"not reached with up to {SEARCH_WORKERS} workers"))
    print(f"  at best, the farm's study takes about M/T = {m / t:.2f} of today's, whatever K")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("landscapes", nargs="*", help="landscape files (default: landscapes/*.jsonl)")
    parser.add_argument("--slots", type=int, default=2, help="device slots D (default 2)")
    parser.add_argument("--workers", default="0,4,8,16,32", help="compile worker counts K, comma-separated "
                        "(0: today's compile-then-measure design; default 0,4,8,16,32)")
    parser.add_argument("--ahead", type=int, default=None,
                        help="configurations compiling or compiled ahead of the slots (default K + D)")
    parser.add_argument("--trials", type=int, default=50, help="trials per study (default 50, or every configuration)")
    parser.add_argument("--seeds", type=int, default=10, help="orders drawn per row; figures are medians (default 10)")
    parser.add_argument("--compile-minutes", type=float, default=10.0, help="mean cold compile (default 10)")
    parser.add_argument("--measure-minutes", type=float, default=1.0,
                        help="mean start-up, warm-up and measurement (default 1)")
    parser.add_argument("--load-fraction", type=float, default=None,
                        help="a measure job's artifact load as a fraction of the cold compile (default: the "
                             f"landscape's warm/cold compile ratio, else {ASSUMED_LOAD_FRACTION:g})")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead")
    args = parser.parse_args()
    args.workers = sorted({int(k) for k in args.workers.split(",")} | {0})
    paths = args.landscapes or sorted(str(p) for p in (ROOT / "landscapes").glob("*.jsonl"))
    if not paths:
        print("no landscapes: record one with autotune landscape record", file=sys.stderr)
        return 2
    ok, report = True, []
    if not args.json:
        print(f"Compile farm on recorded landscapes, Neuron-like figures: compile {args.compile_minutes:g} min, "
              f"measure (start-up, warm-up, measurement) {args.measure_minutes:g} min, as means; "
              f"{args.slots} device slots; median of {args.seeds} seeds (study orders)")
        print("slots busy: share of slots x study wall doing anything (today: compiling too); slots measuring: "
              "running a compiled configuration (loading it, start-up, warm-up, measurement), judged by the target\n")
    for path in paths:
        land = load_landscape(path)
        jobs, scale = neuron_jobs(land, args.compile_minutes * 60, args.measure_minutes * 60, args.load_fraction)
        rows, steady = table(jobs, land, args)
        ok = ok and all(v is not False for r in rows for v in (r.measuring_pass, r.wall_pass))
        if args.json:
            report.append({"landscape": land.name, "scale": asdict(scale), "rows": [asdict(r) for r in rows],
                           "steady_state": steady})
            continue
        print(describe(land, jobs, scale, args.trials))
        print_table(rows, steady, args.slots)
        print()
    if args.json:
        print(json.dumps({"slots": args.slots, "seeds": args.seeds, "trials": args.trials, "landscapes": report,
                          "pass": ok}, indent=2))
    else:
        print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
