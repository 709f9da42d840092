"""How a trial's figure for a published script compares with the script's own, and what a short study finds.

For each script of the corpus (``tests/corpus/``: upstream example scripts kept as published,
run from a working directory that ``make_data.py`` fills with their data) this runs:

* a short study, ``autotune run --trials 6`` under the target's default space, on a local Ray
  with SQLite, the outputs and a fresh cache root in a temporary folder: its exit status, how
  many trials ran and failed, and the best configuration with its speedup over the baseline;
* the baseline configuration's trial, ``autotune trial`` (the script's own behaviour, measured
  until its estimate converges, ``--max-seconds`` at most), against a separate full run of the
  same script with the same arguments and plain ``python`` (no autotune in the process), whose
  own throughput is read from its output by the parser its ``corpus.toml`` declares (a figure
  it prints, or its progress lines stamped as they arrive, or the time it ran for the samples
  it says it did). Both are repeated ``--repeats`` times: the median, and the spread
  ((max - min) / median). Each repeat runs the trial and then the script back to back, so the
  ratio within a pair is also printed (their median, and the lowest and highest): on a shared
  machine whose speed drifts by 10 to 30% over the minutes a table takes, the drift moves both
  runs of a pair alike, and the medians of each column apart.

One row per script: the study's status and best, the trial's samples/s, the script's own, their
ratio and the spreads. A trial that cannot measure a script, or a script whose figure cannot be
read, shows its reason instead; nothing is raised. Not a test: timings need a quiet machine.

    python bench/corpus_fidelity.py --scripts vae,regression --threads 1
    python bench/corpus_fidelity.py --no-study --repeats 5          # the fidelity columns only

Both runs of a pair get the same environment; the script's own figure depends on it as much as the
trial's (an LSTM step on this 2-core machine: 2.7k samples/s with OMP_NUM_THREADS=1, 1.1k with 2).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
# The corpus (its entries, their working directories, their figure parsers) lives beside its tests.
sys.path.insert(0, str(REPO / "tests"))
from corpus import Entry, entries, read_trial  # noqa: E402

STUDY_TRIALS = 6
#: How far a trial's figure may be from the script's own.
FIDELITY = 0.05


@dataclass
class Repeated:
    """One figure measured several times: the values, and why the others gave none."""

    values: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return median(self.values) if self.values else None

    @property
    def spread(self) -> float | None:
        if len(self.values) < 2:
            return None
        return (max(self.values) - min(self.values)) / median(self.values)


@dataclass
class StudyOutcome:
    exit_code: int | None = None
    ran: int = 0
    failed: int = 0
    best_value: float | None = None
    speedup: float | None = None
    best_params: dict[str, object] = field(default_factory=dict)
    wall_seconds: float | None = None
    failure: str | None = None


@dataclass
class Row:
    name: str
    target: str
    study: StudyOutcome | None
    trial: Repeated
    own: Repeated
    samples_per_step: float | None = None
    #: trial / own of each repeat whose two runs both gave a figure.
    pairs: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        if self.trial.median and self.own.median:
            return self.trial.median / self.own.median
        return None


#: OMP_NUM_THREADS for every run, trial and plain alike (--threads); None: the caller's environment.
THREADS: int | None = None


def _env(e: Entry) -> dict[str, str]:
    env = e.run_env()
    env.setdefault("PJRT_DEVICE", "CPU")
    if THREADS:
        env["OMP_NUM_THREADS"] = str(THREADS)
    return env


def _tail(text: str, lines: int = 2) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


def run_study(e: Entry, root: Path, trials: int, timeout: float) -> StudyOutcome:
    """``autotune run --trials N`` of the script in a fresh working directory; never raises."""
    cwd = e.prepare(root / "study")
    command = [sys.executable, "-m", "autotune.cli", "run", e.script, "--trials", str(trials), "--target", e.target,
               "--storage", f"sqlite:///{root / 'study' / 'autotune.db'}", "--out", str(root / "study" / "out"),
               "--cache", str(root / "cache"), "--trial-timeout", str(timeout), "--json", *e.flag_options, "--", *e.args]
    started = time.monotonic()
    try:
        proc = subprocess.run(command, cwd=cwd, env=_env(e), capture_output=True, text=True,
                              timeout=trials * timeout + 300)
    except subprocess.TimeoutExpired:
        return StudyOutcome(failure="the study did not end in time")
    outcome = StudyOutcome(exit_code=proc.returncode, wall_seconds=time.monotonic() - started)
    text = proc.stdout.strip()
    try:
        result = json.loads(text[text.find("{"):text.rfind("}") + 1])
    except json.JSONDecodeError:
        outcome.failure = f"no result (exit {proc.returncode}): {_tail(proc.stderr)}"
        return outcome
    states = [t["state"] for t in result.get("trials", []) if t.get("confirms") is None]
    outcome.ran, outcome.failed = len(states), states.count("FAIL")
    best = result.get("best")
    if best:
        outcome.best_value, outcome.speedup = best.get("value"), best.get("speedup")
        baseline = next((t["params"] for t in result["trials"] if t["number"] == 0), {})
        outcome.best_params = {k: v for k, v in best["params"].items() if baseline.get(k) != v}
    elif result.get("failures_by_category"):
        outcome.failure = ", ".join(f"{k}: {v}" for k, v in result["failures_by_category"].items())
    return outcome


def run_trial(e: Entry, root: Path, max_seconds: float, timeout: float) -> tuple[float | None, float | None, str | None]:
    """The baseline's trial: (samples/s, samples per step, failure); never raises."""
    cwd = e.prepare(root)
    command = e.trial_command(root / "trial", max_seconds=max_seconds, timeout=timeout)
    try:
        proc = subprocess.run(command, cwd=cwd, env=_env(e), capture_output=True, text=True, timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        return None, None, "autotune trial did not end in time"
    result = read_trial(proc.stdout)
    if result is None:
        return None, None, f"no result (exit {proc.returncode}): {_tail(proc.stderr)}"
    if result.status != "ok" or result.measurement is None:
        reason = f"{result.failure.category.value}: {result.failure.reason}" if result.failure else result.status
        return None, None, reason
    return result.measurement.throughput, result.measurement.samples_per_step, None


def run_script(e: Entry, root: Path, timeout: float) -> tuple[float | None, str | None]:
    """The script with plain python, its lines stamped as they arrive: (its own samples/s, failure)."""
    cwd = e.prepare(root)
    env = dict(_env(e), PYTHONUNBUFFERED="1")
    lines: list[tuple[float, str]] = []
    proc = subprocess.Popen(e.figure.command(e.script, e.args), cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    # The script's own workers (spawned processes) are in its session: a timeout ends them all.
    timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.monotonic(), line))
        code = proc.wait()
    finally:
        timer.cancel()
    if code != 0:
        return None, f"exit {code}: {_tail(''.join(text for _, text in lines))}"
    figure = e.figure.read(lines)
    if figure is None:
        return None, f"no figure in its output ({e.figure.kind}: {e.figure.pattern!r})"
    return figure, None


def bench(e: Entry, root: Path, args: argparse.Namespace, console: Console) -> Row:
    study = None
    if not args.no_study:
        console.print(f"[bold]{e.name}[/bold]: autotune run --trials {args.trials} ...")
        study = run_study(e, root, args.trials, args.timeout)
    trial, own, per_step, pairs = Repeated(), Repeated(), None, []
    for i in range(args.repeats):
        console.print(f"[bold]{e.name}[/bold]: repeat {i + 1} of {args.repeats}: trial, then the script itself")
        measured, per_step, failure = run_trial(e, root / f"trial-{i}", args.max_seconds, args.timeout)
        (trial.values.append(measured) if measured is not None else trial.failures.append(failure or "?"))
        value, failure = run_script(e, root / f"script-{i}", args.timeout)
        (own.values.append(value) if value is not None else own.failures.append(failure or "?"))
        if measured is not None and value:
            pairs.append(measured / value)
    return Row(e.name, e.target, study, trial, own, per_step, pairs)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _pairs_text(pairs: list[float]) -> str:
    """``0.991 (0.962..1.020)``: the median ratio of the pairs, and their range."""
    if not pairs:
        return "-"
    if len(pairs) == 1:
        return f"{pairs[0]:.3f}"
    return f"{median(pairs):.3f} ({min(pairs):.3f}..{max(pairs):.3f})"


def _study_text(study: StudyOutcome | None) -> str:
    if study is None:
        return "-"
    if study.failure:
        return f"exit {study.exit_code}: {study.failure}"
    params = ", ".join(f"{k}={v}" for k, v in study.best_params.items()) or "the baseline"
    return (f"exit {study.exit_code}, {study.ran - study.failed}/{study.ran} ok; best {_num(study.best_value, '.0f')}"
            f" (x{_num(study.speedup, '.2f')}): {params}")


def render(rows: list[Row], console: Console) -> None:
    table = Table(title="corpus: the baseline's trial against the script's own throughput (plain python)")
    for name in ("script", "target", "study (autotune run)", "trial\nsamples/s", "trial\nspread",
                 "samples\n/step", "script's own\nsamples/s", "own\nspread", "ratio\ntrial/own",
                 "pairs: ratio\nmedian (range)"):
        table.add_column(name, justify="left" if name in ("script", "target", "study (autotune run)") else "right")
    for row in rows:
        table.add_row(row.name, row.target, _study_text(row.study), _num(row.trial.median, ".1f"),
                      _num(row.trial.spread, ".1%"), _num(row.samples_per_step, ".1f"), _num(row.own.median, ".1f"),
                      _num(row.own.spread, ".1%"), _num(row.ratio, ".3f"), _pairs_text(row.pairs))
    console.print(table)
    for row in rows:
        if row.ratio is not None and abs(row.ratio - 1) > FIDELITY:
            console.print(f"[yellow]{row.name}[/yellow]: the ratio {row.ratio:.3f} is more than {FIDELITY:.0%} from 1"
                          f" (spreads: trial {_num(row.trial.spread, '.0%')}, own {_num(row.own.spread, '.0%')};"
                          f" pairs {_pairs_text(row.pairs)})",
                          highlight=False)
        for what, repeated in (("trial", row.trial), ("script", row.own)):
            for failure in dict.fromkeys(repeated.failures):
                console.print(f"[red]{row.name} {what}[/red]: {failure}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scripts", help="comma-separated corpus names (default: all of them)")
    parser.add_argument("--repeats", type=int, default=3, help="trial and plain run pairs per script")
    parser.add_argument("--trials", type=int, default=STUDY_TRIALS, help="trials of the short study")
    parser.add_argument("--no-study", action="store_true", help="skip the short study")
    parser.add_argument("--max-seconds", type=float, default=30.0, help="a trial's measuring time at most")
    parser.add_argument("--timeout", type=float, default=600.0, help="per run (and per study trial), seconds")
    parser.add_argument("--threads", type=int,
                        help="OMP_NUM_THREADS of every run (on a small, busy machine 1 is far less noisy: "
                             "a parallel region waits for a time slice for each of its threads)")
    parser.add_argument("--output", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    global THREADS
    THREADS = args.threads

    corpus = {e.name: e for e in entries()}
    names = args.scripts.split(",") if args.scripts else sorted(corpus)
    unknown = [n for n in names if n not in corpus]
    if unknown:
        parser.error(f"unknown script(s) {', '.join(unknown)}; the corpus has {', '.join(sorted(corpus))}")
    console = Console(width=None if sys.stdout.isatty() else 180)
    root = Path(tempfile.mkdtemp(prefix="autotune-corpus-fidelity-"))
    console.print(f"working directories, trials and studies under {root}")
    rows = [bench(corpus[name], root / name, args, console) for name in names]
    render(rows, console)
    if args.output:
        args.output.write_text(json.dumps([dict(asdict(r), ratio=r.ratio, trial_median=r.trial.median,
                                                own_median=r.own.median) for r in rows], indent=2))
    return 0 if all(r.ratio is not None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
