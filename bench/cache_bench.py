"""Cache benchmark: what a second run and a --fresh run cost against a cold one.

For the inductor example on this machine's CPU it runs, each in a fresh working directory with
one shared cache root:

1. a cold study (empty cache root, empty database): every trial compiles;
2. the identical study again with a new database: every result is answered from the cache root;
3. the same study with --fresh: every trial runs again, loading its compiled graphs.

Prints the wall time of (2) over (1) (target: under 0.1) and the mean compile time of (3)'s
trials over (1)'s (target: under 0.35). Usage: python bench/cache_bench.py [--trials N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "vit_train.py"
# Compiled configurations only, so that compile time is there to save.
SPACE = """
target: inductor
parameters:
  batch_size: {type: int, choices: [16, 32]}
  mode: {type: categorical, choices: [default, max-autotune-no-cudagraphs], default: default}
"""


def study(work: Path, cache: Path, space: Path, trials: int, *extra: str) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "autotune.cli", "run", str(EXAMPLE), "--trials", str(trials),
           "--target", "inductor", "--space", str(space), "--cache", str(cache), "--seed", "0",
           "--study", "bench", "--json", *extra]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"autotune run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, json.loads(proc.stdout)


def mean_compile(result: dict) -> float:
    values = [t["compile_seconds"] for t in result["trials"] if t.get("compile_seconds")]
    return statistics.mean(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="autotune-cache-bench-"))
    cache, space = base / "cache", base / "space.yaml"
    space.write_text(SPACE)
    runs = {}
    for name, extra, keep_db in (("cold", (), False), ("second", (), False), ("fresh", ("--fresh",), True)):
        work = base / "work"
        if not keep_db and work.exists():
            shutil.rmtree(work)
        work.mkdir(exist_ok=True)
        runs[name] = study(work, cache, space, args.trials, *extra)
        wall, res = runs[name]
        print(f"{name:7s} wall {wall:7.1f} s  ran {res['ran']}  reused {res['reused']}  "
              f"mean compile {mean_compile(res):6.2f} s", flush=True)
    wall_ratio = runs["second"][0] / runs["cold"][0]
    compile_ratio = mean_compile(runs["fresh"][1]) / mean_compile(runs["cold"][1])
    print()
    print(f"second run wall / cold run wall      = {wall_ratio:.3f}  (target < 0.1: "
          f"{'PASS' if wall_ratio < 0.1 else 'FAIL'})")
    print(f"--fresh mean compile / cold compile  = {compile_ratio:.3f}  (target < 0.35: "
          f"{'PASS' if compile_ratio < 0.35 else 'FAIL'})")
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
