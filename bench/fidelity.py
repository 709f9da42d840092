"""How closely a trial's measurement matches what the script itself sees, and what it saves in time.

For a few configurations of ``examples/vit_xla_train.py`` (batch size x precision) this runs

* the reference: ``autotune trial ... --full-run``, which lets the script run all its steps (about
  300) under the configuration; the script prints its own ``steady-state throughput:`` figure, which
  is read back from the trial's log. Going through autotune is what makes a reference possible for
  configurations the script has no flag for (``precision=bf16_model``);
* the trial as a study runs it: ``autotune trial ...`` without ``--full-run``, which stops the script
  once its estimate has converged; its ``measurement.throughput`` and ``wall_seconds`` are compared
  with the reference;
* for fp32, the script run directly with plain ``python`` (no autotune in the process at all), as a
  check that the harness does not slow the script down (``--no-direct`` skips it).

The trial's throughput should be within 5% of the script's own figure, in a fraction of the time.
Failures are reported with their category, never raised. Not a test: timings need a quiet machine.

    python bench/fidelity.py            # 4 configurations, about 300 steps each
    python bench/fidelity.py --quick    # 2 configurations, about 120 steps
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from autotune.records import TrialResult

REPO = Path(__file__).resolve().parents[1]
SCRIPT = "examples/vit_xla_train.py"
#: The size of the example's dataset: its epochs are this many samples (drop_last).
SAMPLES_PER_EPOCH = 2048
TOLERANCE = 0.05
THROUGHPUT_LINE = re.compile(r"steady-state throughput:\s*([0-9.eE+-]+)\s*samples/s")


@dataclass(frozen=True)
class Config:
    batch_size: int
    precision: str

    @property
    def label(self) -> str:
        return f"bs={self.batch_size} {self.precision}"


FULL_CONFIGS = [Config(16, "fp32"), Config(32, "fp32"), Config(16, "bf16_model"), Config(32, "bf16_model")]
QUICK_CONFIGS = [Config(16, "fp32"), Config(32, "bf16_model")]


@dataclass
class RunOutcome:
    """One run: a throughput and its wall time, or why there is none."""

    throughput: float | None = None
    wall_seconds: float | None = None
    failure: str | None = None
    detail: dict[str, object] = field(default_factory=dict)


@dataclass
class Row:
    config: Config
    epochs: int
    reference: RunOutcome
    trial: RunOutcome
    direct: RunOutcome | None

    @property
    def ratio(self) -> float | None:
        if self.trial.throughput and self.reference.throughput:
            return self.trial.throughput / self.reference.throughput
        return None

    @property
    def same_run_ratio(self) -> float | None:
        harness = self.reference.detail.get("harness_throughput")
        if harness and self.reference.throughput:
            return float(harness) / self.reference.throughput
        return None

    @property
    def wall_ratio(self) -> float | None:
        if self.trial.wall_seconds and self.reference.wall_seconds:
            return self.trial.wall_seconds / self.reference.wall_seconds
        return None


def epochs_for(steps: int, batch_size: int) -> int:
    return max(1, math.ceil(steps / (SAMPLES_PER_EPOCH // batch_size)))


def script_throughput(text: str) -> float | None:
    """The last ``steady-state throughput:`` figure the script printed."""
    found = THROUGHPUT_LINE.findall(text)
    return float(found[-1]) if found else None


def bench_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PJRT_DEVICE", "CPU")
    return env


def run_trial(config: Config, epochs: int, *, full_run: bool, timeout: float, trial_dir: Path) -> RunOutcome:
    """``autotune trial`` of the example under ``config``; never raises."""
    command = [sys.executable, "-m", "autotune.cli", "trial", SCRIPT, "--target", "xla",
               "--set", f"batch_size={config.batch_size}", "--set", f"precision={config.precision}",
               "--json", "--trial-timeout", str(timeout), "--trial-dir", str(trial_dir)]
    script_args = ["--epochs", str(epochs)]
    if full_run:
        command.append("--full-run")
        script_args += ["--batch-size", str(config.batch_size)]
    command += ["--", *script_args]
    started = time.monotonic()
    try:
        # The trial enforces its own timeout; this one only guards against the CLI itself hanging.
        proc = subprocess.run(command, cwd=REPO, env=bench_env(), capture_output=True, text=True,
                              timeout=timeout + 120)
    except subprocess.TimeoutExpired:
        return RunOutcome(failure=f"cli timed out after {timeout + 120:.0f} s")
    elapsed = time.monotonic() - started
    result = parse_trial_json(proc.stdout)
    if result is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return RunOutcome(wall_seconds=elapsed, failure=f"no result (exit {proc.returncode}): {' | '.join(tail)}")
    outcome = RunOutcome(wall_seconds=result.wall_seconds, detail={"log_path": result.log_path})
    if not result.ok:
        category = result.failure.category.value if result.failure else "unknown"
        reason = result.failure.reason if result.failure else ""
        outcome.failure = f"{category}: {reason}"
        return outcome
    if full_run:
        # A relative log path is relative to the CLI's working directory, the repository.
        log_text = (REPO / result.log_path).read_text(errors="replace") if result.log_path else ""
        outcome.throughput = script_throughput(log_text)
        if result.measurement is not None:
            # The harness measured this same run: comparing the two isolates the measurement
            # from the run-to-run noise of a shared machine.
            outcome.detail["harness_throughput"] = result.measurement.throughput
        if outcome.throughput is None:
            outcome.failure = f"no 'steady-state throughput:' line in {result.log_path}"
    elif result.measurement is None:
        outcome.failure = "trial ok but without a measurement"
    else:
        m = result.measurement
        outcome.throughput = m.throughput
        outcome.detail.update(ci95_rel=m.ci95_half_width / m.throughput, converged=m.converged,
                              steps_measured=m.steps_measured, warmup_steps=m.warmup_steps)
    return outcome


def parse_trial_json(stdout: str) -> TrialResult | None:
    """The TrialResult that ``autotune trial --json`` printed, or None."""
    text = stdout.strip()
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        return TrialResult.model_validate(json.loads(text[start:end + 1]))
    except (json.JSONDecodeError, ValidationError):
        return None


def run_direct(config: Config, epochs: int, timeout: float) -> RunOutcome:
    """The example run with plain python, no autotune involved (fp32 only: bf16 has no script flag)."""
    command = [sys.executable, SCRIPT, "--epochs", str(epochs), "--batch-size", str(config.batch_size)]
    started = time.monotonic()
    try:
        proc = subprocess.run(command, cwd=REPO, env=bench_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return RunOutcome(failure=f"timed out after {timeout:.0f} s")
    outcome = RunOutcome(wall_seconds=time.monotonic() - started)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-2:]
        outcome.failure = f"exit {proc.returncode}: {' | '.join(tail)}"
        return outcome
    outcome.throughput = script_throughput(proc.stdout)
    if outcome.throughput is None:
        outcome.failure = "no 'steady-state throughput:' line"
    return outcome


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _ci_text(outcome: RunOutcome) -> str:
    if "ci95_rel" not in outcome.detail:
        return "-"
    converged = "" if outcome.detail.get("converged") else " (not converged)"
    return f"±{float(outcome.detail['ci95_rel']):.1%}{converged}"


def render(rows: list[Row], console: Console) -> None:
    table = Table(title=f"fidelity of trials on {SCRIPT} (target: trial within {TOLERANCE:.0%} of the script)")
    for name in ("config", "steps", "script's own\nsamples/s", "same run\nharness/own", "trial\nsamples/s",
                 "trial\n95% CI", "ratio",
                 "direct run\nsamples/s", "trial\nwall s", "full run\nwall s", "wall\nratio"):
        table.add_column(name, justify="left" if name == "config" else "right")
    for row in rows:
        ratio = row.ratio
        ratio_text = "-" if ratio is None else (
            f"[{'green' if abs(ratio - 1) <= TOLERANCE else 'red'}]{ratio:.3f}[/]")
        table.add_row(
            row.config.label, str(row.epochs * (SAMPLES_PER_EPOCH // row.config.batch_size)),
            _num(row.reference.throughput, ".1f"), _num(row.same_run_ratio, ".3f"),
            _num(row.trial.throughput, ".1f"), _ci_text(row.trial), ratio_text,
            _num(row.direct.throughput, ".1f") if row.direct else "-",
            _num(row.trial.wall_seconds, ".1f"), _num(row.reference.wall_seconds, ".1f"),
            _num(row.wall_ratio, ".2f"),
        )
    console.print(table)
    for row in rows:
        for name, outcome in (("full run", row.reference), ("trial", row.trial), ("direct run", row.direct)):
            if outcome is not None and outcome.failure:
                console.print(f"[red]{row.config.label} {name} failed[/red]: {outcome.failure}")
    ratios = [r.ratio for r in rows if r.ratio is not None]
    if ratios:
        worst = max(ratios, key=lambda r: abs(r - 1))
        verdict = "within" if abs(worst - 1) <= TOLERANCE else "OUTSIDE"
        console.print(f"worst ratio {worst:.3f}: {verdict} {TOLERANCE:.0%} ({len(ratios)} of {len(rows)} configs compared)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 configurations and about 120 steps each")
    parser.add_argument("--steps", type=int, help="steps of the reference run (default 300, 120 with --quick)")
    parser.add_argument("--no-direct", action="store_true", help="skip the plain-python run of fp32 configs")
    parser.add_argument("--timeout", type=float, default=900.0, help="per-run timeout, seconds")
    parser.add_argument("--output", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()

    configs = QUICK_CONFIGS if args.quick else FULL_CONFIGS
    steps = args.steps or (120 if args.quick else 300)
    # Rich wraps a table to 80 columns when the output is not a terminal; this one needs more.
    console = Console(width=None if sys.stdout.isatty() else 150)
    trials_root = Path(tempfile.mkdtemp(prefix="autotune-fidelity-"))
    console.print(f"trial directories and logs under {trials_root}")
    rows: list[Row] = []
    for config in configs:
        epochs = epochs_for(steps, config.batch_size)
        console.print(f"[bold]{config.label}[/bold], {epochs} epochs: full run...")
        name = f"bs{config.batch_size}-{config.precision}"
        reference = run_trial(config, epochs, full_run=True, timeout=args.timeout,
                              trial_dir=trials_root / f"{name}-full")
        console.print("  trial...")
        trial = run_trial(config, epochs, full_run=False, timeout=args.timeout, trial_dir=trials_root / f"{name}-trial")
        direct = None
        if config.precision == "fp32" and not args.no_direct:
            console.print("  direct run...")
            direct = run_direct(config, epochs, args.timeout)
        rows.append(Row(config, epochs, reference, trial, direct))
    render(rows, console)
    if args.output:
        args.output.write_text(json.dumps(
            [dict(asdict(r), ratio=r.ratio, same_run_ratio=r.same_run_ratio, wall_ratio=r.wall_ratio)
             for r in rows], indent=2))
    return 0 if all(r.ratio is not None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
