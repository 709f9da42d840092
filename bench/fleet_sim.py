"""One study on a 16-node trn1.32xlarge fleet (512 NeuronCores), on paper: trials per hour, the
load on the study database, and what breaks first. A model built from two measurements, not a
measurement of a fleet.

Measured here, by running the real driver (:func:`autotune.landscapes.replay.replay_study`: the
study loop, Optuna, SQLite; trials answered from a recorded landscape):

* the statements the driver sends per trial, counted with a SQLAlchemy event listener: writes
  (INSERT/UPDATE/DELETE) and reads (SELECT), and how many of the reads load the whole trial table;
* how long loading the whole trial table takes once the study holds N trials (Optuna's
  ``get_trials``, which the loop, the claims and the sampler call), with trials copied from the replay.

Assumed, and printed as such: the compile time of a Neuron trial (``--compile-minutes``, default 10:
"a compile that can take over ten minutes"), added to each configuration's recorded wall time; one
driver per study; heartbeats every ``HEARTBEAT_S`` per running trial (one write each).

    python bench/fleet_sim.py [--landscape landscapes/xla-vit.jsonl] [--compile-minutes 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import optuna
import sqlalchemy as sa

from autotune.landscapes.landscape import load_landscape
from autotune.landscapes.replay import replay_study
from autotune.study.storage import HEARTBEAT_S

ROOT = Path(__file__).resolve().parents[1]
NODES, CORES_PER_NODE = 16, 32


def statements_per_trial(landscape: Path, trials: int) -> tuple[dict[str, float], Path]:
    """Statements per trial of a replayed study, by kind; and the study's database."""
    counts: Counter[str] = Counter()

    def count(_conn, _cursor, statement: str, *_args) -> None:
        verb = statement.lstrip().split(None, 1)[0].upper()
        counts["write" if verb in ("INSERT", "UPDATE", "DELETE") else "read" if verb == "SELECT" else "other"] += 1
        if verb == "SELECT" and "FROM trials" in statement and "WHERE trials.study_id" in statement \
                and "trials.trial_id =" not in statement:
            counts["whole table"] += 1

    work = Path(tempfile.mkdtemp(prefix="autotune-fleet-sim-"))
    sa.event.listen(sa.engine.Engine, "before_cursor_execute", count)
    try:
        result, _ = replay_study(landscape, trials=trials, workdir=work, seed=0)
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", count)
    done = max(1, len(result.trials))
    return {k: v / done for k, v in counts.items()}, work / "replay.db"


def load_seconds(database: Path, sizes: list[int]) -> dict[int, float]:
    """Seconds to load every trial of a study of each size (trials copied from ``database``)."""
    source = optuna.load_study(study_name=optuna.get_all_study_names(f"sqlite:///{database}")[0],
                               storage=f"sqlite:///{database}")
    finished = [t for t in source.get_trials() if t.state.is_finished()]
    out: dict[int, float] = {}
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            study = optuna.create_study(storage=f"sqlite:///{tmp}/big.db", direction="maximize")
            study.add_trials([finished[i % len(finished)] for i in range(n)])
            started = time.perf_counter()
            study.get_trials(deepcopy=False)
            out[n] = time.perf_counter() - started
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landscape", default=str(ROOT / "landscapes" / "xla-vit.jsonl"))
    parser.add_argument("--compile-minutes", type=float, default=10.0)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)

    land = load_landscape(args.landscape)
    recorded = [r.wall_seconds for r in land.records if r.wall_seconds]
    trial_s = args.compile_minutes * 60 + statistics.mean(recorded)
    per_trial, database = statements_per_trial(Path(args.landscape), trials=min(24, len(land.records)))
    print(f"landscape {land.name}: {len(recorded)} configurations, recorded wall time per trial mean "
          f"{statistics.mean(recorded):.1f} s; assumed Neuron compile {args.compile_minutes:g} min "
          f"-> {trial_s / 60:.1f} min per trial")
    print("measured, per trial of the real driver: " + ", ".join(f"{v:.1f} {k}" for k, v in sorted(per_trial.items())))
    print()
    print(f"{'cores/trial':>11} {'slots':>6} {'trials/h':>9} {'heartbeat writes/s':>19} {'report writes/s':>16} "
          f"{'trials after 24 h':>18}")
    for cores in (1, 2, 8, 32):
        slots = NODES * CORES_PER_NODE // cores
        per_hour = slots * 3600 / trial_s
        print(f"{cores:>11} {slots:>6} {per_hour:>9.0f} {slots / HEARTBEAT_S:>19.1f} "
              f"{per_hour / 3600 * per_trial.get('write', 0):>16.2f} {per_hour * 24:>18.0f}")
    loads = per_trial.get("whole table", 0)
    print()
    measured = load_seconds(database, [100, 1000, 5000])
    for n, seconds in measured.items():
        print(f"loading all {n} trials (get_trials, SQLite here): {seconds:.2f} s; the driver does it "
              f"{loads:.0f} times per trial: {1 / (loads * seconds):.2f} trials/s at most")
    # Load time grows about linearly with the study; the driver keeps up while the loads of one
    # trial take less than the time between two trials of the fleet.
    per_trial_load = measured[5000] / 5000
    for cores in (2, 8):
        slots = NODES * CORES_PER_NODE // cores
        rate = slots / trial_s
        print(f"{cores} cores per trial ({rate * 3600:.0f} trials/h): one driver falls behind at about "
              f"{1 / (rate * loads * per_trial_load):.0f} trials in the study; its first wave of "
              f"{slots} trials takes {loads * per_trial_load * slots ** 2 / 2:.0f} s to dispatch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
