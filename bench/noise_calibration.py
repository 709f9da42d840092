"""Do the intervals a user reads cover the next run? Several configurations of two examples, each
measured K times, each time in a process of its own (as a study's trials are), alternating the
configurations so that a neighbour's load falls on all of them alike.

For every run it asks whether the run's interval covers the mean of the OTHER runs of the same
configuration (what a user who ran that configuration again would read), for

* ``within``: the trial's own 95% interval (``ci95_low``/``ci95_high``), from the steady windows of
  its one process;
* ``combined``: ``Runs((x,), (w,)).figure(noise)`` (:mod:`autotune.measurement.noise`), the run's
  figure with an interval that includes the between-run spread. ``noise`` is pooled over the
  repeats of the example's OTHER configurations, never the configuration judged: a study knows
  the spread from its baseline's repeats before it judges a challenger.

Target: ``combined`` covers at least 90%. It prints, per example and overall, both fractions, the
between-run spread measured over all the example's configurations (``RunNoise.spread``, its
degrees of freedom), and each configuration's runs. The spread is also split in two (:func:`rounds`):
a factor per round, a load that came and went on the machine for every configuration alike, and
the spread left within a round. The first is what a slow drift of a shared machine adds; a study
compares configurations measured minutes apart, so the two say how much of the spread a
comparison meets::

    OMP_NUM_THREADS=1 python bench/noise_calibration.py --out bench/results/noise_calibration.json
    python bench/noise_calibration.py --from bench/results/noise_calibration.json   # recompute

Defaults (3 configurations of each example, 5 runs each, measurements capped at 5 s after warm-up:
30 trials) take about 15 minutes on 2 cores. Exit code 0 when the target holds, 1 otherwise.

``--example xla-small`` measures the setting of the small xla landscape (``landscapes/xla-vit.jsonl``:
one epoch, its baseline, its known-good and the best of its surrogate) instead, the figure its
header's ``run_noise`` is taken from; ``--neighbour`` measures beside a process that burns one core
on and off (busy and idle for 1-4 s at random), the shared host of ``bench/next_run.py``::

    OMP_NUM_THREADS=1 python bench/noise_calibration.py --example xla-small --out quiet.json
    OMP_NUM_THREADS=1 python bench/noise_calibration.py --example xla-small --neighbour --out neighbour.json

``--min-seconds 10`` measures each run as a study does on a host whose runs it found to vary
(:data:`autotune.measurement.noise.RUN_SECONDS`): at least 10 s after warm-up, in up to 5
processes where the script ends sooner (:mod:`autotune.workers.run_parts`)::

    OMP_NUM_THREADS=1 python bench/noise_calibration.py --neighbour --min-seconds 10
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from autotune.measurement.noise import RunNoise, Runs  # noqa: E402
from bench.lib.neighbour import beside_a_neighbour  # noqa: E402

TARGET = 0.90


@dataclass(frozen=True)
class Example:
    name: str
    script: str
    target: str
    args: tuple[str, ...]
    #: The baseline, the space's known-good, then other configurations a study would measure.
    configs: tuple[dict[str, Any], ...]


EXAMPLES = (
    # The README's main job.
    Example("xla", "examples/vit_xla_train.py", "xla", (),
            ({}, {"batch_size": 64, "openxla": True}, {"batch_size": 32}, {"batch_size": 64})),
    # Three epochs, as its landscapes were recorded: one is too few steps at batch 64 to measure.
    Example("inductor", "examples/vit_train.py", "inductor", ("--epochs", "3"),
            ({}, {"mode": "default"}, {"batch_size": 64}, {"batch_size": 64, "mode": "default"})),
    # The small xla landscape's setting (landscapes/xla-vit.jsonl: one epoch, OMP_NUM_THREADS=1):
    # its baseline, its known-good and the best of its surrogate (the third fastest recorded).
    Example("xla-small", "examples/vit_xla_train.py", "xla", ("--epochs", "1"),
            ({}, {"batch_size": 64}, {"batch_size": 64, "precision": "bf16_autocast"}, {"batch_size": 32})),
)
#: What a run measures by default: the README's main job and the inductor example.
DEFAULT_EXAMPLES = ("xla", "inductor")


def measure(examples: list[Example], repeats: int, configs: int, max_seconds: float,
            min_seconds: float = 0.0) -> dict[str, Any]:
    """Every run of every configuration, alternating the configurations round by round."""
    from autotune.records import MeasurementProtocol
    from autotune.trial import prepare_trial, run_prepared
    from autotune.workers.launcher import TrialLimits

    protocol = MeasurementProtocol(max_measure_seconds=max(max_seconds, min_seconds), min_measure_seconds=min_seconds)
    limits = TrialLimits(timeout_s=600, memory_bytes=None)
    started = time.monotonic()
    runs_of: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="autotune-noise-") as tmp:
        for ex in examples:
            chosen = ex.configs[:configs]
            # A cache of this bench's own: the first run compiles, the later ones load the graphs
            # as a study's re-measurement of a compiled configuration does.
            prepared = [prepare_trial(REPO / ex.script, target=ex.target, sets=c, cache_root=f"{tmp}/cache")
                        for c in chosen]
            runs: list[list[dict[str, Any]]] = [[] for _ in chosen]
            for r in range(repeats):
                for i, (params, prep) in enumerate(zip(chosen, prepared)):
                    # A run made of several processes (--min-seconds) weighs their spread with the
                    # between-run noise measured so far, as a study's runs do with the study's.
                    noise = RunNoise.of([x["throughput"] for x in rs if "throughput" in x] for rs in runs)
                    asked = protocol.model_copy(update={"noise_squares": noise.squares, "noise_df": noise.df})
                    result = run_prepared(prep, list(ex.args), trial_dir=f"{tmp}/{ex.name}-{i}-{r}",
                                          limits=limits, protocol=asked)
                    m = result.measurement
                    if result.ok and m is not None:
                        run = {"throughput": m.throughput, "ci95_low": m.ci95_low, "ci95_high": m.ci95_high}
                        said = f"{m.throughput:,.1f} [{m.ci95_low:,.1f}, {m.ci95_high:,.1f}]"
                    else:
                        run = {"failed": result.failure.reason if result.failure else result.status}
                        said = f"failed: {run['failed']}"
                    runs[i].append(run)
                    print(f"[{time.monotonic() - started:6.0f} s] {ex.name} {json.dumps(params)} run {r + 1}/{repeats}: "
                          f"{said}", file=sys.stderr, flush=True)
            runs_of[ex.name] = {
                "script": ex.script, "target": ex.target, "args": list(ex.args),
                "configs": [{"params": p, "runs": rs} for p, rs in zip(chosen, runs)],
            }
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "env": {k: os.environ[k] for k in ("OMP_NUM_THREADS",) if k in os.environ},
        "max_measure_seconds": protocol.max_measure_seconds,
        "min_measure_seconds": min_seconds,
        "repeats": repeats,
        "examples": runs_of,
    }


def measured(config: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in config["runs"] if "throughput" in r]


def coverage(configs: list[dict[str, Any]]) -> dict[str, Any]:
    """For one example's configurations: how many runs' intervals cover the mean of the other runs
    of their configuration, within-run and combined, and the spread over all of them."""
    groups = [[r["throughput"] for r in measured(c)] for c in configs]
    judged = within = combined = 0
    for k, config in enumerate(configs):
        runs = measured(config)
        if len(runs) < 2:
            continue
        noise = RunNoise.of(g for j, g in enumerate(groups) if j != k)
        for i, run in enumerate(runs):
            others = statistics.fmean(r["throughput"] for j, r in enumerate(runs) if j != i)
            x, low, high = run["throughput"], run["ci95_low"], run["ci95_high"]
            figure = Runs((x,), ((high - low) / (2 * x),)).figure(noise)
            judged += 1
            within += low <= others <= high
            combined += figure.low <= others <= figure.high
    spread = RunNoise.of(groups)
    return {"runs": judged, "within": within, "combined": combined,
            "spread": spread.spread, "sigma": spread.sigma, "df": spread.df, **rounds(configs)}


def rounds(configs: list[dict[str, Any]]) -> dict[str, Any]:
    """The spread split in two, over the rounds in which every configuration ran (the runs
    alternate, so a round is a stretch of time): each round's factor (the geometric mean over its
    runs of each run over its configuration's mean), a load that came and went on the machine for
    all configurations alike; and ``sigma_in_round``, what is left of a run's log figure once its
    round's factor is taken out (the residual of configurations and rounds as two additive effects
    on the logarithms, ``df`` (configurations - 1) x (rounds - 1)). A study compares configurations
    measured minutes apart: a load that drifts over the calibration counts in ``sigma``, not here."""
    whole = [i for i in range(min(len(c["runs"]) for c in configs))
             if all("throughput" in c["runs"][i] for c in configs)]
    k, n = len(configs), len(whole)
    if k < 2 or n < 2:
        return {"round_factors": None, "sigma_in_round": None, "df_in_round": 0}
    logs = [[math.log(c["runs"][i]["throughput"]) for i in whole] for c in configs]
    config_mean = [statistics.fmean(row) for row in logs]
    grand = statistics.fmean(config_mean)
    round_effect = [statistics.fmean(row[j] for row in logs) - grand for j in range(n)]
    squares = sum((logs[c][j] - config_mean[c] - round_effect[j]) ** 2 for c in range(k) for j in range(n))
    df = (k - 1) * (n - 1)
    return {"round_factors": [math.exp(e) for e in round_effect], "sigma_in_round": math.sqrt(squares / df),
            "df_in_round": df}


def report(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"examples": {}}
    total = {"runs": 0, "within": 0, "combined": 0}
    for name, ex in data["examples"].items():
        c = coverage(ex["configs"])
        out["examples"][name] = c
        for key in total:
            total[key] += c[key]
    out["overall"] = total
    out["passed"] = total["runs"] > 0 and total["combined"] >= TARGET * total["runs"]
    return out


def _pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "-"


def render(data: dict[str, Any], result: dict[str, Any]) -> None:
    env = " ".join(f"{k}={v}" for k, v in data.get("env", {}).items()) or "no thread settings"
    beside = ", beside a neighbour burning a core on and off" if data.get("neighbour") else ""
    least, most = data.get("min_measure_seconds") or 0, data["max_measure_seconds"]
    seconds = f"{most:g} s" if least >= most else f"at least {least:g} s and at most {most:g} s" if least \
        else f"at most {most:g} s"
    print(f"measured until {data['date']}, {data['cpu_count']} cores, {env}{beside}, "
          f"{data['repeats']} runs per configuration, {seconds} measured each after warm-up")
    for name, ex in data["examples"].items():
        c = result["examples"][name]
        print(f"\n{name}: {ex['script']} {' '.join(ex['args'])} (target {ex['target']})")
        for config in ex["configs"]:
            runs = ", ".join(f"{r['throughput']:,.1f} [{r['ci95_low']:,.1f}, {r['ci95_high']:,.1f}]"
                             if "throughput" in r else f"failed ({r['failed']})" for r in config["runs"])
            print(f"  {json.dumps(config['params'])}: {runs}")
        spread = f"+-{100 * c['spread']:.1f}% (sigma of a run's log {c['sigma']:.3f}, df {c['df']})" \
            if c["spread"] is not None else "unknown (no configuration measured twice)"
        print(f"  between-run spread: {spread}")
        if c["sigma_in_round"] is not None:
            factors = ", ".join(f"x{f:.2f}" for f in c["round_factors"])
            print(f"    of it, round by round (a load on every configuration alike): {factors}; "
                  f"within a round: sigma {c['sigma_in_round']:.3f} (df {c['df_in_round']})")
        print(f"  covers the mean of the other runs: within-run {_pct(c['within'], c['runs'])}, "
              f"combined {_pct(c['combined'], c['runs'])}")
    t = result["overall"]
    print(f"\noverall: within-run {_pct(t['within'], t['runs'])}, combined {_pct(t['combined'], t['runs'])} "
          f"(target: combined at least {TARGET:.0%}): {'PASS' if result['passed'] else 'FAIL'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="runs of each configuration (default 5)")
    parser.add_argument("--configs", type=int, default=3,
                        help=f"configurations of each example (default 3, at most {min(len(e.configs) for e in EXAMPLES)})")
    parser.add_argument("--max-seconds", type=float, default=5.0,
                        help="cap on each run's measurement after warm-up (default 5)")
    parser.add_argument("--example", action="append", choices=[e.name for e in EXAMPLES],
                        help=f"measure this example (repeatable; default: {', '.join(DEFAULT_EXAMPLES)}); xla-small "
                             "is the small xla landscape's setting (one epoch)")
    parser.add_argument("--min-seconds", type=float, default=0.0,
                        help="each run measures at least this long after warm-up, in up to 5 processes where the "
                             "script ends sooner, as a study's runs do on a host it found noisy (10); default 0")
    parser.add_argument("--neighbour", action="store_true",
                        help="measure beside a process that burns one core on and off, as on a shared host")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--out", type=Path, help="save the raw runs here")
    parser.add_argument("--from", dest="source", type=Path, help="recompute from runs saved with --out")
    args = parser.parse_args(argv)
    if args.source is not None:
        data = json.loads(args.source.read_text())
    else:
        if args.min_seconds < 0 or args.max_seconds <= 0:
            parser.error("--min-seconds must be at least 0 and --max-seconds above 0")
        if args.repeats < 2 or not 1 <= args.configs <= min(len(e.configs) for e in EXAMPLES):
            parser.error("--repeats must be at least 2 and --configs between 1 and "
                         f"{min(len(e.configs) for e in EXAMPLES)}")
        chosen = [e for e in EXAMPLES if e.name in (args.example or DEFAULT_EXAMPLES)]
        with beside_a_neighbour(args.neighbour):
            data = measure(chosen, args.repeats, args.configs, args.max_seconds, args.min_seconds)
        data["neighbour"] = args.neighbour
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(data, indent=1) + "\n")
    result = report(data)
    if args.json:
        print(json.dumps(result))
    else:
        render(data, result)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
