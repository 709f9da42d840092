"""Does a study's best hold on the next run? The README's main job, then its best configuration
measured again in fresh processes with ``autotune trial``, as a user meets it afterwards.

For each study (``--studies``, each with its own storage and cache root, so that nothing one
measured answers the other) it prints the best as ``best.json`` has it (the mean over its runs and
the interval that includes the between-run noise), the mean of ``--repeats`` runs of it afterwards,
whether the interval covers that mean and how far the best read from it. With two studies, whether
their two bests, each re-measured, are within their combined noise of each other. ``--neighbour``
runs a process that burns one core on and off (busy and idle for 1-4 s at random), as a shared
host does, from the first study's start to the last re-measurement.

    python bench/next_run.py --trials 8 --repeats 4              # quiet machine, --race at its default
    python bench/next_run.py --trials 8 --repeats 4 --neighbour  # beside a noisy neighbour
    python bench/next_run.py --trials 8 --repeats 4 --studies 2  # two fresh studies agree?

Progress goes to stderr; ``--json`` prints the figures as one object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lib.neighbour import beside_a_neighbour  # noqa: E402

SCRIPT = ROOT / "examples" / "vit_xla_train.py"


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def autotune(*args: str, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", *args, "--json"], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"autotune {args[0]} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def study(i: int, work: Path, trials: int, repeats: int, race: float | None, env: dict[str, str]) -> dict:
    cache = work / f"cache{i}"
    started = time.monotonic()
    racing = [] if race is None else ["--race", str(race)]
    say(f"study {i}: autotune run {SCRIPT.name} --trials {trials} {' '.join(racing)}")
    result = autotune("run", str(SCRIPT), "--trials", str(trials), *racing, "--study", f"s{i}",
                      "--storage", f"sqlite:///{work / f's{i}.db'}", "--out", str(work / f"s{i}"),
                      "--cache", str(cache), env=env)
    seconds = time.monotonic() - started
    best = result["best"]
    again = [t for t in result["trials"] if t.get("confirms") is not None]
    say(f"study {i}: best trial {best['trial']}, {best['value']:,.1f} samples/s over {len(best['runs'])} "
        f"runs, {len(again)} re-measurements, {seconds:.0f} s")
    sets = [f"{k}={v}" for k, v in best["params"].items() if v is not None]
    runs = []
    for r in range(repeats):
        args = ["trial", str(SCRIPT), "--cache", str(cache), "--trial-dir", str(work / f"s{i}-again{r}")]
        for s in sets:
            args += ["--set", s]
        out = autotune(*args, env=env)
        value = (out.get("measurement") or {}).get("throughput")
        say(f"study {i}: best again, run {r + 1}/{repeats}: {value if value is None else f'{value:,.1f}'} samples/s")
        if value is not None:
            runs.append(value)
    mean = statistics.fmean(runs) if runs else None
    low, high = best.get("value_ci95_low"), best.get("value_ci95_high")
    return {
        "study": i, "seconds": round(seconds, 1), "best_trial": best["trial"], "params": best["params"],
        "value": best["value"], "throughput": best.get("throughput"), "runs": [r["value"] for r in best["runs"]],
        "run_seconds": [r["seconds"] for r in best["runs"]], "ci95": [low, high], "noise": best.get("noise"),
        "re_measurements": len(again), "repeats": runs, "repeats_mean": mean,
        "covers": None if mean is None or low is None else low <= mean <= high,
        "width": None if low is None or high is None or not low else high / low,
        "off_by": None if mean is None else best["value"] / mean - 1,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=4, help="runs of each best afterwards (default 4)")
    ap.add_argument("--studies", type=int, default=1, choices=(1, 2))
    ap.add_argument("--race", type=float, default=None, help="the studies' --race (default: the study's own)")
    ap.add_argument("--neighbour", action="store_true", help="burn one core on and off meanwhile")
    ap.add_argument("--workdir", type=Path, default=None, help="where the studies go (default: a temporary folder)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="autotune-next-run-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PJRT_DEVICE": os.environ.get("PJRT_DEVICE", "CPU"), "AWS_EC2_METADATA_DISABLED": "true"}
    with beside_a_neighbour(a.neighbour):
        rows = [study(i, work, a.trials, a.repeats, a.race, env) for i in range(1, a.studies + 1)]
    out: dict = {"trials": a.trials, "repeats": a.repeats, "race": a.race, "neighbour": a.neighbour, "studies": rows}
    if len(rows) == 2 and all(r["repeats"] for r in rows):
        from autotune.measurement.noise import RunNoise, Runs, ahead

        noise = RunNoise.of([rows[0]["repeats"], rows[1]["repeats"]])
        same = rows[0]["params"] == rows[1]["params"]
        apart = ahead(Runs(tuple(rows[0]["repeats"])), Runs(tuple(rows[1]["repeats"])), noise)
        out["agree"] = {"same_configuration": same, "within_noise": same or apart == 0,
                        "ratio": rows[0]["repeats_mean"] / rows[1]["repeats_mean"]}
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"main job, {a.trials} trials, --race {a.race if a.race is not None else 'at its default'}{', beside a neighbour burning a core' if a.neighbour else ''}")
    for r in rows:
        low, high = r["ci95"]
        interval = f"[{low:,.1f}, {high:,.1f}]" if low is not None else "(no interval)"
        width = f", high/low {r['width']:.2f}" if r["width"] else ""
        print(f"study {r['study']}: best trial {r['best_trial']}: {r['value']:,.1f} samples/s {interval}{width} over "
              f"{len(r['runs'])} runs of {', '.join(f'{s:.1f}' if s else '?' for s in r['run_seconds'])} s "
              f"({r['re_measurements']} re-measurements, study {r['seconds']:.0f} s)")
        if r["repeats_mean"] is not None:
            print(f"  {len(r['repeats'])} runs afterwards: {', '.join(f'{v:,.1f}' for v in r['repeats'])} "
                  f"(mean {r['repeats_mean']:,.1f}); interval covers it: {r['covers']}; best.json reads "
                  f"{r['off_by']:+.1%} (its throughput {r['throughput']:,.1f})")
    if "agree" in out:
        g = out["agree"]
        print(f"two studies: same configuration {g['same_configuration']}; re-measured, within their combined "
              f"noise: {g['within_noise']} (ratio {g['ratio']:.3f})")


if __name__ == "__main__":
    main()
