"""Faults of the machines a fleet runs on, under real studies: the database restarts, the disk fills.

Beside :mod:`bench.fault_matrix` (faults of a trial's own process). Each fault is played on a
study of ``tests/scripts/gated_train.py``, whose trials wait at a gate this benchmark opens: it acts
while trials are running, never at a moment it guesses.

- ``database restart``: two ``autotune run`` drivers share one study on a throw-away PostgreSQL;
  once each holds a running trial, the server is stopped, the trials are let go (they end while
  the database is down), and it is started again ``--outage`` seconds later.
- ``database restart, daemon``: the same under ``autotune serve`` and its job, which a client
  follows (``submit --wait``) all along; the daemon must go on too.
- ``full disk``: the cache root and the study's outputs on a tmpfs of 200 MB; once some trials
  are measured, a trial is held, the tmpfs is filled, the trial let go; then the space is freed and
  the same command run again.

Each prints the trials completed (counted in the study, out of ``--trials``), lost (measured, or
completed, and not in the study at the end) and measured twice (configurations measured more than
once). Needs root (mount) for the full disk and PostgreSQL's server programs for the restart.

Usage: python bench/fleet_faults.py [--short] [--fault database|daemon|disk] [--outage SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib.postgres import ThrowawayPostgres  # noqa: E402

GATED = ROOT / "tests" / "scripts" / "gated_train.py"
#: Nine configurations: the script's own batch size (32) and eight others.
SPACE = """
target: inductor
parameters:
  batch_size: {type: int, choices: [8, 16, 24, 48, 64, 96, 128, 256]}
  mode: {type: categorical, choices: [eager], default: eager}
"""
#: The size of the filesystem that fills up.
DISK = "200m"
FAULTS = ("database", "daemon", "disk")


@dataclass
class FaultOutcome:
    """What a study made of one fault."""

    fault: str
    trials: int
    #: Every driver (and a resumed run) exited 0.
    finished: bool
    completed: int
    lost: int
    measured_twice: int
    #: The studies' notes, and what each run printed on stderr when it failed.
    notes: list[str] = field(default_factory=list)
    #: The trials' failure categories (failed trials only), by trial number.
    failures: dict[int, str] = field(default_factory=dict)

    def row(self) -> str:
        return (f"{self.fault:25s} {str(self.finished):9s} {self.completed:>4d}/{self.trials:<4d} "
                f"{self.lost:>5d} {self.measured_twice:>14d}")


HEADER = f"{'fault':25s} {'finished':9s} {'completed':9s} {'lost':>5s} {'measured twice':>14s}"


# -- a driver, and what its trials left ------------------------------------------------------------

def driver(work: Path, name: str, *, trials: int, storage: str, gate: Path, study: str = "faults",
           ray_address: str | None = None, cache: Path | None = None, out: Path | None = None) -> subprocess.Popen:
    """``autotune run`` of the gated script in ``work/name``, its result on stdout as JSON."""
    cwd = work / name
    cwd.mkdir(parents=True, exist_ok=True)
    (work / "space.yaml").write_text(SPACE)
    cmd = [sys.executable, "-m", "autotune.cli", "run", str(GATED), "--trials", str(trials), "--target", "inductor",
           "--space", str(work / "space.yaml"), "--study", study, "--seed", "0", "--workers", "1", "--race", "0",
           "--trial-timeout", "120", "--json", "--env", f"AUTOTUNE_TEST_GATE={gate}"]  # to trials on any node
    if ray_address:
        cmd += ["--ray-address", ray_address]
    if cache:
        cmd += ["--cache", str(cache)]
    if out:
        cmd += ["--out", str(out)]
    env = {**os.environ, "AUTOTUNE_STORAGE": storage, "XDG_CACHE_HOME": str(cwd / "cache"), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ended(process: subprocess.Popen, timeout: float = 600) -> tuple[bool, dict | None, str]:
    """(exited 0, its JSON result, the end of its stderr)."""
    out, err = process.communicate(timeout=timeout)
    try:
        result = json.loads(out) if out.strip() else None
    except ValueError:
        result = None
    return process.returncode == 0, result, err[-3000:]


def measured_folders(out: Path) -> dict[Path, tuple[int, str]]:
    """Trial folders under ``out`` whose process wrote a measurement: folder -> (its trial's
    number, its configuration). ``trials/NNNN`` (or ``trials/NNNN/attempt-K``) is trial NNNN's."""
    found: dict[Path, tuple[int, str]] = {}
    for report in out.glob("trials/**/report.json"):
        try:
            measured = json.loads(report.read_text()).get("measurement") is not None
            params = json.loads((report.parent / "spec.json").read_text())["plan"]["params"]
        except (OSError, ValueError, KeyError):
            continue
        if measured:
            number = int(report.parent.relative_to(out / "trials").parts[0][:4])
            found[report.parent] = number, json.dumps(params, sort_keys=True)
    return found


def study_trials(storage: str, study: str) -> list:
    import optuna

    from autotune.storage.optuna_storage import rdb_storage

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna.load_study(study_name=study, storage=rdb_storage(storage)).get_trials()


def tally(fault: str, trials: int, finished: bool, storage: str, study: str, outs: list[Path],
          notes: list[str], completed_before: dict[int, float] | None = None) -> FaultOutcome:
    """Completed, lost and measured-twice trials of ``study``, from the database and the trial
    folders under ``outs``."""
    from autotune.storage.attrs import TrialAttrs

    stored = study_trials(storage, study)
    complete = {t.number: t for t in stored if t.state.name == "COMPLETE" and TrialAttrs.of(t).counted
                and t.user_attrs.get("duplicate_of") is None}
    folders = [found for out in outs for found in measured_folders(out).values()]
    lost = sum(1 for number, _ in folders if number not in complete)
    lost += sum(1 for n, value in (completed_before or {}).items() if n not in complete or complete[n].value != value)
    twice = sum(1 for n in Counter(config for _, config in folders).values() if n > 1)
    # Failed for a reason: a category, or a heartbeat gone stale (the trial then queued again).
    # Not a trial told as another's duplicate, or asked for once the study had its trials.
    stale = {t.system_attrs["failed_trial"] for t in stored if "failed_trial" in t.system_attrs}
    failures = {t.number: t.user_attrs.get("category") or "stale heartbeat" for t in stored
                if t.state.name == "FAIL" and (t.user_attrs.get("category") or t.number in stale)}
    return FaultOutcome(fault, trials, finished, len(complete), lost, twice, notes, failures)


def wait_for(ready: Callable[[], bool], what: str, timeout: float, alive: list[subprocess.Popen]) -> None:
    """Poll ``ready`` until it holds; an error naming ``what`` if a driver ended first or time ran out."""
    deadline = time.monotonic() + timeout
    while not ready():
        for p in alive:
            if p.poll() is not None:
                raise RuntimeError(f"a driver ended (exit {p.returncode}) before {what}:\n"
                                   f"{p.communicate()[1][-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:g} s")
        time.sleep(0.1)


def waiting(gate: Path) -> int:
    return len(list(gate.glob("waiting-*")))


# -- the faults ----------------------------------------------------------------------------------------

def database_restart(work: Path, pg: ThrowawayPostgres, *, trials: int, outage_s: float,
                     ray_address: str | None = None) -> FaultOutcome:
    """Two drivers on one study; PostgreSQL stopped for ``outage_s`` while each holds a trial
    that ends meanwhile."""
    storage = pg.create_database(f"restart{time.monotonic_ns()}")
    gate = work / "gate"
    gate.mkdir(parents=True)
    drivers = [driver(work, name, trials=trials, storage=storage, gate=gate, ray_address=ray_address)
               for name in ("a", "b")]
    try:
        wait_for(lambda: waiting(gate) == 2, "both drivers held a trial", 300, drivers)
        pg.stop()
        stopped = time.monotonic()
        try:
            (gate / "open").touch()  # the held trials end while the database is down
            wait_for(lambda: waiting(gate) == 0 or all(d.poll() is not None for d in drivers),
                     "the held trials went on", 60, [])
            time.sleep(max(0.0, stopped + outage_s - time.monotonic()))  # the outage itself
        finally:
            pg.start()
        outcomes = [ended(d) for d in drivers]
    finally:
        for d in drivers:
            if d.poll() is None:
                d.kill()
                d.wait()
    notes = [n for _, result, _ in outcomes if result for n in result.get("notes", [])]
    notes += [err for ok, _, err in outcomes if not ok]
    return tally("database restart", trials, all(ok for ok, _, _ in outcomes), storage, "faults",
                 [work / name / ".autotune" / "faults" for name in ("a", "b")], notes)


def daemon_database_restart(work: Path, pg: ThrowawayPostgres, *, trials: int, outage_s: float) -> FaultOutcome:
    """A daemon and its job on PostgreSQL, stopped for ``outage_s`` while the job's trial runs and
    ends; a client follows the job all along (``submit --wait``)."""
    import httpx

    storage = pg.create_database(f"daemon{time.monotonic_ns()}")
    gate = work / "gate"
    gate.mkdir(parents=True)
    (work / "space.yaml").write_text(SPACE)
    port = _free_port()
    env = {**os.environ, "AUTOTUNE_STORAGE": storage, "AUTOTUNE_TEST_GATE": str(gate),
           "XDG_CONFIG_HOME": str(work / "config"), "XDG_CACHE_HOME": str(work / "cache"), "PYTHONPATH": str(ROOT)}
    with open(work / "serve.log", "wb") as log:
        serve = subprocess.Popen([sys.executable, "-m", "autotune.cli", "serve", "--no-token", "--port", str(port),
                                  "--jobs-dir", str(work / "jobs"), "--cache", str(work / "cache")], cwd=work, env=env,
                                 stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    client = None
    try:
        wait_for(lambda: _answers(httpx, url), "the daemon answered", 120, [serve])
        client = subprocess.Popen([sys.executable, "-m", "autotune.cli", "submit", str(GATED), "--server", url,
                                   "--trials", str(trials), "--target", "inductor", "--space", str(work / "space.yaml"),
                                   "--study", "faults", "--seed", "0", "--race", "0", "--workers", "1", "--wait"],
                                  cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: waiting(gate) == 1, "the job held a trial", 300, [serve, client])
        pg.stop()
        stopped = time.monotonic()
        try:
            (gate / "open").touch()
            wait_for(lambda: waiting(gate) == 0, "the held trial went on", 60, [serve])
            time.sleep(max(0.0, stopped + outage_s - time.monotonic()))  # the outage itself
        finally:
            pg.start()
        waited, err = client.communicate(timeout=600)
        job = waited.strip().splitlines()[0] if waited.strip() else ""
        alive = serve.poll() is None
    finally:
        for p in (client, serve):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(timeout=30)
    said = (work / "serve.log").read_text(errors="replace")
    notes = [line for line in said.splitlines() if "database" in line or "job runner" in line]
    if client.returncode != 0:
        notes.append(f"submit --wait exited with {client.returncode}: {err[-1500:]}")
    if not alive:
        notes.append("the daemon ended")
    outs = [work / "jobs" / job / "out"] if job else []
    return tally("database restart, daemon", trials, client.returncode == 0 and alive, storage, "faults", outs, notes)


def _answers(httpx, url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def full_disk(work: Path, *, trials: int, before: int) -> FaultOutcome:
    """One driver whose cache root and outputs fill their filesystem after ``before`` trials;
    then the space is freed and the same command run again."""
    disk = work / "disk"
    disk.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(disk)], check=True,
                   capture_output=True, text=True)
    try:
        storage = f"sqlite:///{work / 'autotune.db'}"
        gate = work / "gate"
        gate.mkdir()
        for i in range(before):
            (gate / f"ticket-{i:03d}").touch()
        run = lambda: driver(work, "run", trials=trials, storage=storage, gate=gate,  # noqa: E731
                             cache=disk / "cache", out=disk / "out")
        first = run()
        try:
            wait_for(lambda: waiting(gate) == 1, "a trial waited at the gate", 300, [first])
            completed_before = {t.number: t.value for t in study_trials(storage, "faults")
                                if t.state.name == "COMPLETE"}
            fill(disk / "filler")
            (gate / "open").touch()
            ok, result, err = ended(first)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
        notes = list((result or {}).get("notes", [])) + ([] if result else [err])
        broken = unreadable_json(disk) + [p for p in [disk / "out" / "best.json"] if not p.exists()]
        notes += [f"missing or unreadable after the disk filled: {p}" for p in broken]
        (disk / "filler").unlink()
        again_ok, again, again_err = ended(run())
        notes += [f"resumed: {n}" for n in (again or {}).get("notes", [])] + ([] if again_ok else [again_err])
        outcome = tally("full disk", trials, again_ok and not broken, storage, "faults", [disk / "out"], notes,
                        completed_before)
        return outcome
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=False, capture_output=True)


def fill(path: Path) -> None:
    """Write ``path`` until its filesystem has no space left."""
    block = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(block)
        except OSError:
            pass
        try:  # the last partial block's worth
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass


def unreadable_json(root: Path) -> list[Path]:
    """The JSON files under ``root`` that do not parse (a best.json, a manifest, a cached result
    cut short), and the half-written copies left beside them (``.NAME.PID.tmp``)."""
    broken = [path for path in root.rglob(".*.tmp")]
    for path in root.rglob("*.json"):
        try:
            json.loads(path.read_text())
        except (OSError, ValueError):
            broken.append(path)
    return broken


def mount_refused() -> str | None:
    """Why no tmpfs can be mounted here (not root, a container without the capability), or ``None``."""
    folder = Path(tempfile.mkdtemp(prefix="autotune-mount-"))
    try:
        tried = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True,
                               text=True)
        if tried.returncode != 0:
            return f"mount -t tmpfs: {tried.stderr.strip()[:200] or tried.returncode}"
        subprocess.run(["umount", str(folder)], check=True, capture_output=True)
        return None
    except FileNotFoundError:
        return "no mount program"
    finally:
        folder.rmdir()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="4 trials instead of 8 (what the test runs)")
    parser.add_argument("--fault", choices=FAULTS, action="append", help="only this fault (repeatable; default: all)")
    parser.add_argument("--outage", type=float, default=10.0, help="seconds the database is down")
    args = parser.parse_args()
    trials = 4 if args.short else 8
    print(HEADER)
    for fault in args.fault or FAULTS:
        work = Path(tempfile.mkdtemp(prefix=f"autotune-{fault}-"))
        if fault == "disk":
            outcome = full_disk(work, trials=trials, before=trials // 2)
        else:
            pg = ThrowawayPostgres()
            try:
                restart = database_restart if fault == "database" else daemon_database_restart
                outcome = restart(work, pg, trials=trials, outage_s=args.outage)
            finally:
                pg.remove()
        print(outcome.row(), flush=True)
        for note in outcome.notes:
            print(f"  note: {note.strip()[:600]}")
        for number, category in sorted(outcome.failures.items()):
            print(f"  trial {number} failed: {category}")


if __name__ == "__main__":
    main()
