"""The compile stage on this machine: what a measure job still compiles after its compile job.

Runs the inductor ViT example (``examples/vit_train.py``, compiled configurations only):

1. a study with ``--compile-workers 1`` and an empty cache root: a compile job compiles each
   configuration's graphs ahead, its measure job loads them;
2. each configuration that study measured, once more as ``autotune trial`` with an empty cache root
   of its own: its cold compile (a study's later trials share kernels with its earlier ones, so
   only an empty cache gives a configuration's whole compile).

and prints, per configuration, the cold compile time, the compile job's wall and compiler time
and the compile time its measure job still paid, with its ratio to the cold compile (target: at
most 0.10), and the study's cache hit rate. Then what a compile beside a measurement does to it:
each configuration's throughput in its trial of its own (nothing beside it), in the study (the next
configuration's compile job stopped while it measured), and, for the first configuration, in a
trial with a compile of another configuration running beside it unstopped (one thread, as a
compile job). Then the xla ViT example (``examples/vit_xla_train.py``) with ``--compile-workers
1``: on PJRT_DEVICE=CPU the study says why it compiles in its trials instead (torch-xla 2.9 cannot
read back XLA:CPU's persistent cache), and the compile time each trial paid is printed as it is.

Usage: python bench/compile_stage.py [--trials N] [--no-xla]
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

ROOT = Path(__file__).resolve().parent.parent
SPACE = """
target: inductor
parameters:
  batch_size: {type: int, choices: [16, 32]}
  mode: {type: categorical, choices: [default, max-autotune-no-cudagraphs], default: default}
"""


def study(base: Path, name: str, example: str, target: str, trials: int, *extra: str) -> tuple[float, dict]:
    work = base / name
    work.mkdir()
    cmd = [sys.executable, "-m", "autotune.cli", "run", str(ROOT / "examples" / example), "--trials", str(trials),
           "--target", target, "--cache", str(work / "cache"), "--seed", "0", "--study", "bench", "--json", *extra]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"autotune run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, json.loads(proc.stdout)


def trial_command(work: Path, params: dict, space: Path) -> list[str]:
    """``autotune trial`` of the inductor ViT example under ``params``, on the cache root ``work/cache``."""
    sets = [a for k, v in params.items() for a in ("--set", f"{k}={v}")]
    return [sys.executable, "-m", "autotune.cli", "trial", str(ROOT / "examples" / "vit_train.py"), "--target",
            "inductor", "--space", str(space), *sets, "--cache", str(work / "cache"), "--json"]


def alone(work: Path, params: dict) -> dict:
    """A configuration in a trial of its own, on the cache root ``work/cache`` (empty the first time)."""
    work.mkdir(exist_ok=True)
    proc = subprocess.run(trial_command(work, params, work.parent / "space.yaml"), cwd=work, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        sys.exit(f"autotune trial failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def beside_a_compile(work: Path, params: dict) -> dict:
    """``params`` measured (its graphs cached) while another configuration compiles beside it on one
    thread, as a compile job does, not stopped."""
    other = {"batch_size": 16, "mode": "max-autotune-no-cudagraphs"}
    (work / "other").mkdir(exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    compiling = subprocess.Popen(trial_command(work / "other", other, work.parent / "space.yaml"),
                                 cwd=work / "other", env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(8)  # past its start-up: compiling
        return alone(work, params)
    finally:
        compiling.kill()
        compiling.wait()


def _key(t: dict) -> str:
    return json.dumps(t["params"], sort_keys=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--no-xla", action="store_true", help="leave out the xla example")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="autotune-compile-stage-"))
    space = base / "space.yaml"
    space.write_text(SPACE)
    farm_wall, farm = study(base, "farm", "vit_train.py", "inductor", args.trials, "--space", str(space),
                            "--compile-workers", "1")
    print(f"inductor, examples/vit_train.py, {args.trials} trials with --compile-workers 1: study wall "
          f"{farm_wall:.0f} s (one machine: compiles stop while a trial measures)")
    print(f"{'configuration':58s} {'cold compile':>13s} {'compile job':>12s} {'(compiler)':>11s} "
          f"{'measure compile':>16s} {'measure / cold':>15s}")
    ratios, rows = [], []
    for t in farm["trials"]:
        if t["state"] != "COMPLETE":
            continue
        own = alone(base / f"alone-{t['number']}", t["params"])
        cold_s = own["compile"]["compile_seconds"]
        stage = t.get("compile_stage") or {}
        ratio = t["measure_compile_seconds"] / cold_s if cold_s else float("nan")
        ratios.append(ratio)
        rows.append((t, own))
        compiler = stage.get("compile_seconds")
        print(f"{_key(t):58s} {cold_s:11.1f} s {t['compile_stage_seconds']:10.1f} s "
              f"{compiler if compiler is not None else float('nan'):9.1f} s {t['measure_compile_seconds']:14.1f} s "
              f"{ratio:15.3f}", flush=True)
    rate = farm.get("cache_hit_rate")
    worst = max(ratios) if ratios else float("nan")
    print(f"cache hit rate of the measure jobs: {rate:.0%}" if rate is not None else "cache hit rate: not counted")
    print(f"measure-stage compile / cold compile: median {statistics.median(ratios):.3f}, worst {worst:.3f} "
          f"(target <= 0.10: {'PASS' if worst <= 0.10 else 'FAIL'})")
    print()
    print(f"{'configuration':58s} {'alone':>15s} {'compiles stopped':>17s} {'beside a compile':>17s}")
    for i, (t, own) in enumerate(rows):
        solo = own["measurement"]["throughput"]
        line = f"{_key(t):58s} {solo:9.1f} sam/s {t['throughput'] / solo:16.3f}x"
        if i == 0:
            disturbed = beside_a_compile(base / f"alone-{t['number']}", t["params"])["measurement"]["throughput"]
            line += f" {disturbed / solo:16.3f}x"
        print(line, flush=True)
    print("(ratios to the throughput alone; the interval of each trial is in its --json)")
    if not args.no_xla:
        print()
        wall, xla = study(base, "xla", "vit_xla_train.py", "xla", 2, "--compile-workers", "1")
        paid = [t["compile_seconds"] for t in xla["trials"] if t.get("compile_seconds")]
        print(f"xla, examples/vit_xla_train.py, 2 trials with --compile-workers 1 ({wall:.0f} s):")
        for note in xla["notes"]:
            print(f"  note: {note}")
        print(f"  compile time each trial paid: {', '.join(f'{s:.1f} s' for s in paid)}; no measure-stage "
              "ratio: the compile stage cannot run on this device")


if __name__ == "__main__":
    main()
