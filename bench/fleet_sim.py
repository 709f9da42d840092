"""One study on a fleet of trn1.32xlarge nodes (``--nodes``, 32 NeuronCores each), on paper: trials
per hour, the load on the study database, and whether one driver keeps up as the study grows.
A model built from measurements of the real driver, not a measurement of a fleet.

Measured here, by running the real driver (:func:`autotune.landscapes.replay.replay_study`: the
study loop, its sampler, Optuna, SQLite; trials answered from a recorded landscape) on a study that
already holds 100, 1,000 and 10,000 trials (copies of a replay's trials, each under a configuration
key of its own, written straight into the database):

* the driver's CPU per trial: the CPU time of a run of ``2k`` trials less that of a run of ``k``
  (both from the same copy of the study), over ``k`` -- what a trial costs once the study is
  open, its trials loaded and the sampler started; and what the start cost (the run of ``k``
  less its ``k`` trials). The runs measure nothing again (``--race 0``), so that each adds its
  ``k`` trials and no more;
* the statements it sends per trial, counted with a SQLAlchemy event listener: writes
  (INSERT/UPDATE/DELETE), reads (SELECT), and how many of the reads are of the whole trial table
  (a read of the study's trials that is not limited to the unfinished ones or to some by id).

Assumed, and printed as such: the compile time of a Neuron trial (``--compile-minutes``, default 10:
"a compile that can take over ten minutes"), added to each configuration's recorded wall time;
heartbeats every ``HEARTBEAT_S`` per running trial (one write each); the driver's CPU per trial
between two measured study sizes on the straight line between them.

    python bench/fleet_sim.py [--nodes 64] [--landscape landscapes/xla-vit.jsonl] [--compile-minutes 10]
                              [--sampler random] [--trials-measured 8]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa
from sqlalchemy import event

from autotune.landscapes.landscape import load_landscape
from autotune.landscapes.replay import replay_study
from autotune.storage.optuna_storage import HEARTBEAT_S

ROOT = Path(__file__).resolve().parents[1]
CORES_PER_NODE = 32
SIZES = (100, 1_000, 10_000)


@dataclass(frozen=True)
class DriverCost:
    """What the real driver spent per trial on a study of ``size`` trials."""

    size: int
    cpu_s: float
    #: CPU of a driver's start on the study (opening it, loading its trials, its outputs at the end).
    start_s: float
    reads: float
    writes: float
    whole_table: float


class StatementCounter:
    """Counts the statements every SQLAlchemy engine of this process sends, by kind."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def __enter__(self) -> StatementCounter:
        event.listen(sa.engine.Engine, "before_cursor_execute", self._count)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(sa.engine.Engine, "before_cursor_execute", self._count)

    def _count(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        verb = statement.lstrip().split(None, 1)[0].upper()
        self.counts["write" if verb in ("INSERT", "UPDATE", "DELETE") else "read" if verb == "SELECT" else "other"] += 1
        # A read of a study's trials, limited to those not finished (``trials.state IN``) or to some
        # by id (``trials.trial_id IN`` / ``>``), or not: only the latter grows with the study. The
        # count that numbers a new trial returns one row.
        if verb == "SELECT" and "FROM trials" in statement and "WHERE trials.study_id" in statement \
                and "count(" not in statement and not any(
                    part in statement for part in ("trials.trial_id IN", "trials.trial_id >", "trials.state IN")):
            self.counts["whole table"] += 1


def seed_study(landscape: Path, work: Path, trials: int) -> Path:
    """A replayed study of ``trials`` trials in ``work``; its database."""
    replay_study(landscape, trials=trials, workdir=work, seed=0)
    return work / "replay.db"


def grow_study(database: Path, size: int) -> None:
    """Fill the study in ``database`` up to ``size`` finished trials: copies of its own, each with a
    configuration key of its own (so the driver counts each as a configuration measured), inserted
    with SQLAlchemy Core in one transaction (Optuna's ``add_trials`` takes minutes for 10,000)."""
    engine = sa.create_engine(f"sqlite:///{database}")
    meta = sa.MetaData()
    meta.reflect(engine)
    trials = meta.tables["trials"]
    children = [meta.tables[n] for n in ("trial_params", "trial_values", "trial_user_attributes",
                                         "trial_system_attributes", "trial_intermediate_values")]
    with engine.begin() as c:
        source = [dict(r._mapping) for r in c.execute(sa.select(trials).where(
            trials.c.state.in_(["COMPLETE", "FAIL", "PRUNED"]))).all()]
        rows = {t.name: {} for t in children}
        for t in children:
            for r in c.execute(sa.select(t)).all():
                rows[t.name].setdefault(r._mapping["trial_id"], []).append(dict(r._mapping))
        study_id = source[0]["study_id"]
        number = c.execute(sa.select(sa.func.count()).select_from(trials)
                           .where(trials.c.study_id == study_id)).scalar_one()
        for copy in range(size - number):
            src = source[copy % len(source)]
            new = {k: v for k, v in src.items() if k != "trial_id"} | {"number": number + copy}
            inserted = c.execute(trials.insert().values(**new)).inserted_primary_key
            assert inserted is not None  # an INSERT of one row
            trial_id = inserted[0]
            for t in children:
                pk = t.primary_key.columns.keys()[0]
                batch = [{k: v for k, v in r.items() if k != pk} | {"trial_id": trial_id}
                         for r in rows[t.name].get(src["trial_id"], [])]
                if t.name == "trial_user_attributes":
                    # Each copy is the first measurement of a configuration of its own, counted
                    # towards --trials: not a re-measurement or a duplicate of the trial it copies.
                    batch = [r for r in batch if r["key"] not in ("confirms", "again", "duplicate_of", "counted")]
                    batch.append({"trial_id": trial_id, "key": "counted", "value_json": json.dumps(True)})
                for r in batch:
                    if t.name == "trial_user_attributes" and r["key"] in ("config_key", "enqueued_key"):
                        r["value_json"] = _copied_key(r["value_json"], copy) if r["key"] == "config_key" \
                            else json.dumps(None)
                if batch:
                    c.execute(t.insert(), batch)
    engine.dispose()


def _copied_key(value_json: str, copy: int) -> str:
    key = json.loads(json.loads(value_json))
    return json.dumps(json.dumps(key | {"_copy": copy}, sort_keys=True))


def driver_cost(landscape: Path, study: Path, size: int, trials: int, sampler: str) -> DriverCost:
    """The real driver's cost per trial on a copy of the study in ``study`` (``size`` trials)."""
    runs: list[tuple[int, float, Counter[str]]] = []
    for k in (trials, 2 * trials):
        with tempfile.TemporaryDirectory(prefix="autotune-fleet-sim-") as tmp:
            shutil.copy(study, Path(tmp) / "replay.db")
            with StatementCounter() as counter:
                started = time.process_time()
                result, _ = replay_study(landscape, trials=size + k, workdir=tmp, seed=1, sampler=sampler, race=0.0)
                spent = time.process_time() - started
            runs.append((len(result.trials) - size, spent, counter.counts))
    (ran1, cpu1, n1), (ran2, cpu2, n2) = runs
    if ran2 <= ran1:
        raise RuntimeError(f"the driver ran {ran1} and then {ran2} trials on the study of {size}: no difference to measure")
    per = {kind: (n2[kind] - n1[kind]) / (ran2 - ran1) for kind in ("read", "write", "whole table")}
    cpu = max(0.0, (cpu2 - cpu1) / (ran2 - ran1))
    return DriverCost(size, cpu, cpu1 - ran1 * cpu, per["read"], per["write"], per["whole table"])


def cpu_at(costs: list[DriverCost], size: float) -> float:
    """The driver's CPU per trial at ``size``: on the line between the measured sizes around it
    (beyond the last, on the line through the last two)."""
    pairs = list(zip(costs, costs[1:]))
    lo, hi = next(((a, b) for a, b in pairs if size <= b.size), pairs[-1])
    return lo.cpu_s + (hi.cpu_s - lo.cpu_s) * (size - lo.size) / (hi.size - lo.size)


def falls_behind(costs: list[DriverCost], rate: float) -> float | None:
    """The study size at which one driver needs more CPU per trial than the fleet leaves it
    between two trials (``1 / rate``); ``None`` where it keeps up through the last size measured."""
    budget = 1 / rate
    if costs[0].cpu_s > budget:
        return 0.0
    for a, b in zip(costs, costs[1:]):
        if b.cpu_s > budget:
            return a.size + (budget - a.cpu_s) * (b.size - a.size) / (b.cpu_s - a.cpu_s)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16, help="trn1.32xlarge nodes (32 NeuronCores each)")
    parser.add_argument("--landscape", default=str(ROOT / "landscapes" / "xla-vit.jsonl"))
    parser.add_argument("--compile-minutes", type=float, default=10.0)
    parser.add_argument("--sampler", default="random",
                        help="the driver's sampler (as autotune run --sampler); random measures the loop and "
                             "the storage alone")
    parser.add_argument("--trials-measured", type=int, default=8,
                        help="k: trials the driver runs per measurement (2k in the second run)")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)

    land = load_landscape(args.landscape)
    recorded = [r.wall_seconds for r in land.records if r.wall_seconds]
    trial_s = args.compile_minutes * 60 + statistics.mean(recorded)
    cores_total = args.nodes * CORES_PER_NODE
    print(f"landscape {land.name}: {len(recorded)} configurations, recorded wall time per trial mean "
          f"{statistics.mean(recorded):.1f} s; assumed Neuron compile {args.compile_minutes:g} min "
          f"-> {trial_s / 60:.1f} min per trial")
    with tempfile.TemporaryDirectory(prefix="autotune-fleet-sim-") as tmp:
        seed = seed_study(Path(args.landscape), Path(tmp) / "seed", min(12, land.size))
        costs = []
        for size in SIZES:
            grow_study(seed, size)
            costs.append(driver_cost(Path(args.landscape), seed, size, args.trials_measured, args.sampler))
    print(f"measured, the real driver (sampler {args.sampler}, SQLite here) per trial, on a study already "
          f"holding N trials:")
    print(f"{'N':>7} {'driver CPU/trial':>17} {'reads':>7} {'writes':>7} {'whole-table reads':>18} "
          f"{'driver start (CPU)':>19}")
    for c in costs:
        print(f"{c.size:>7} {c.cpu_s:>15.3f} s {c.reads:>7.1f} {c.writes:>7.1f} {c.whole_table:>18.1f} "
              f"{c.start_s:>17.1f} s")
    print()
    print(f"{args.nodes} x trn1.32xlarge, {cores_total} NeuronCores:")
    print(f"{'cores/trial':>11} {'slots':>6} {'trials/h':>9} {'DB writes/s':>12} {'DB reads/s':>11}  one driver")
    for cores in (1, 2, 8):
        slots = cores_total // cores
        rate = slots / trial_s
        writes = slots / HEARTBEAT_S + rate * max(c.writes for c in costs)
        reads = rate * max(c.reads for c in costs)
        behind = falls_behind(costs, rate)
        if behind is None:
            verdict = (f"keeps up through {SIZES[-1]:,} trials (needs {cpu_at(costs, SIZES[-1]) * rate:.0%} "
                       f"of a core there)")
        else:
            needed = math.ceil(cpu_at(costs, SIZES[-1]) * rate)
            verdict = (f"falls behind at about {behind:,.0f} trials in the study; {needed} drivers keep up "
                       f"through {SIZES[-1]:,}")
        print(f"{cores:>11} {slots:>6} {rate * 3600:>9.0f} {writes:>12.1f} {reads:>11.1f}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
