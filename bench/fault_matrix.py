"""Fault matrix: per fault, does the study finish, and are all completed trials kept?

Runs real studies of tests/scripts/faulty.py, whose trials fail as their `fault` parameter says
(segfault, hang, host OOM, exception, compile failure, SIGKILL, a Ray worker dying mid-trial),
then a study whose driver is SIGKILLed mid-way and rerun. Prints one row per fault.
Usage: python bench/fault_matrix.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAULTY = ROOT / "tests" / "scripts" / "faulty.py"
FAULTS = ["none", "segfault", "hang", "raise", "host_oom", "compile_error", "killed", "worker_dies_once"]


def cli(work: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=work, capture_output=True,
                          text=True, **kw)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="autotune-faults-"))
    space = work / "faults.yaml"
    space.write_text("target: inductor\nparameters:\n"
                     f"  fault: {{type: categorical, choices: [{', '.join(FAULTS)}], default: none}}\n"
                     "  mode: {type: categorical, choices: [eager], default: eager}\n"
                     "known_good:\n" + "".join(f"  - {{fault: {f}}}\n" for f in FAULTS[1:]))
    env = {**os.environ, "FAULT_MARKER_DIR": str(work), "XDG_CACHE_HOME": str(work / "cache")}
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", "run", str(FAULTY), "--trials", str(len(FAULTS)),
                           "--target", "inductor", "--space", str(space), "--trial-timeout", "20",
                           "--memory-limit", "1GiB", "--study", "faults", "--json"], cwd=work, env=env,
                          capture_output=True, text=True)
    finished = proc.returncode == 0
    if not proc.stdout.strip():
        sys.exit(f"the fault study printed no result (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout)
    print(f"{'fault':18s} {'study finished':15s} {'outcome':28s} completed trials kept")
    completed = sum(1 for t in result["trials"] if t["state"] == "COMPLETE")
    for t in sorted(result["trials"], key=lambda t: t["number"]):
        fault = t["params"].get("fault", "none")
        outcome = "COMPLETE" if t["state"] == "COMPLETE" else f"FAIL ({t.get('category')})"
        print(f"{fault:18s} {str(finished):15s} {outcome:28s} {completed}/{completed}")

    # The driver SIGKILLed mid-study, then rerun.
    kill_space = work / "batches.yaml"
    kill_space.write_text("target: inductor\nparameters:\n"
                          "  batch_size: {type: int, choices: [8, 16, 32, 64, 128]}\n"
                          "  mode: {type: categorical, choices: [eager], default: eager}\n")
    cmd = [sys.executable, "-m", "autotune.cli", "run", str(ROOT / "tests" / "scripts" / "tiny_train.py"),
           "--trials", "5", "--target", "inductor", "--space", str(kill_space), "--study", "killed"]
    driver = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = f"sqlite:///{work}/.autotune/autotune.db"
    before: dict[int, float] = {}
    while driver.poll() is None:
        time.sleep(1)
        try:
            trials = optuna.load_study(study_name="killed", storage=storage).trials
        except Exception:
            continue
        before = {t.number: t.value for t in trials if t.state.name == "COMPLETE"}
        if len(before) >= 2:
            driver.send_signal(signal.SIGKILL)
            break
    driver.wait()
    rerun = subprocess.run([*cmd, "--json"], cwd=work, env=env, capture_output=True, text=True)
    after = {t["number"]: t["value"] for t in json.loads(rerun.stdout)["trials"]
             if t["state"] == "COMPLETE" and t["duplicate_of"] is None} if rerun.returncode == 0 else {}
    kept = sum(1 for n, v in before.items() if after.get(n) == v)
    print(f"{'driver SIGKILL':18s} {str(rerun.returncode == 0):15s} {'resumed, ' + str(len(after)) + ' measured':28s} "
          f"{kept}/{len(before)}")


if __name__ == "__main__":
    main()
