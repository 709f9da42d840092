"""Objectives other than throughput, constraints and Pareto fronts, on an unmodified forward-only
inference script (no DataLoader, no optimizer, no autotune import) measured for real."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autotune.errors import AutotuneError, InvalidConfigError
from autotune.objectives import Constraint, objective, speedup
from autotune.records import MeasurementProtocol, TrialResult
from autotune.study.study import tune
from autotune.results.outputs import BestConfig
from autotune.storage.attrs import TrialAttrs

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
INFER = SCRIPTS / "infer_only.py"
ARGS = ["--width", "1024", "--batch-size", "64", "--iters", "100000"]
#: Three configurations that change what a forward pass costs, without a compile.
PRECISIONS = """
target: inductor
parameters:
  precision:
    type: categorical
    choices: [fp32, bf16_autocast, fp16_autocast]
    default: fp32
  mode:
    type: categorical
    choices: [eager]
    default: eager
"""
QUICK = MeasurementProtocol(max_measure_steps=2000, max_measure_seconds=3.0)


# -- parsing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "name", "upper", "bound"), [
    ("latency_p99<=50", "latency_p99", True, 50.0),
    ("latency_p99 <= 0.05s", "latency_p99", True, 50.0),
    ("throughput>=200", "throughput", False, 200.0),
    ("peak_memory<=12GiB", "peak_memory", True, 12 * 1024 ** 3),
    ("cost<=$0.5", "cost", True, 0.5),
    ("accuracy>0.9", "accuracy", False, 0.9),
])
def test_constraints_parse_with_their_units(text: str, name: str, upper: bool, bound: float) -> None:
    c = Constraint.parse(text)
    assert (c.name, c.upper, c.bound) == (name, upper, bound)


@pytest.mark.parametrize(("text", "fragment"), [
    ("latency_p99", "expected NAME<=VALUE or NAME>=VALUE"),
    ("latency_p99<=fast", "'fast' is not a number of ms"),
    ("peak_memory<=lots", "is not a number of bytes"),
    ("throughput>=inf", "must be a finite number"),
    ("9lives>=1", "expected NAME<=VALUE"),
])
def test_malformed_constraints_say_what_is_wrong(text: str, fragment: str) -> None:
    with pytest.raises(InvalidConfigError, match=fragment):
        Constraint.parse(text)


def test_violation_is_relative_and_positive_when_broken() -> None:
    at_most = Constraint.parse("latency_p99<=50")
    assert at_most.violation(40.0) == pytest.approx(-0.2)
    assert at_most.violation(75.0) == pytest.approx(0.5)
    at_least = Constraint.parse("throughput>=200")
    assert at_least.violation(100.0) == pytest.approx(0.5)
    assert at_least.violation(None) > 0, "a figure the trial did not give breaks the bound"


def test_objectives_imply_their_direction_and_unit() -> None:
    assert objective("throughput").maximize and objective("throughput").unit == "samples/s"
    for name in ("cost", "latency_p50", "latency_p90", "latency_p99", "peak_memory"):
        assert not objective(name).maximize, name
    assert objective("accuracy", "maximize").maximize and not objective("loss", "minimize").maximize
    assert objective("latency_p99").format(12.3456) == "12.346 ms"
    assert speedup(10.0, 20.0, maximize=False) == 2.0 and speedup(30.0, 20.0) == 1.5
    with pytest.raises(InvalidConfigError, match="unknown objective 'p99 latency'"):
        objective("p99 latency")


# -- studies ------------------------------------------------------------------------------------


def _study(tmp_path: Path, **options) -> tuple:
    space = tmp_path / "space.yaml"
    space.write_text(PRECISIONS)
    result = tune(INFER, *ARGS, trials=3, target="inductor", space=str(space), seed=0, protocol=QUICK,
                  out=tmp_path / "out", storage=f"sqlite:///{tmp_path / 'db.sqlite'}", **options)
    study = optuna.load_study(study_name=result.study, storage=result.storage)
    results = {t.number: TrialResult.model_validate_json(TrialAttrs.of(t).result)
               for t in study.get_trials() if t.state.name == "COMPLETE" and TrialAttrs.of(t).duplicate_of is None}
    return result, results


@pytest.mark.slow
def test_latency_objective_with_a_throughput_constraint(ray_cluster, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result, results = _study(tmp_path, objective=["latency_p99"], constraint=["throughput>=1"])
    assert result.exit_code == 0, result.trials
    assert len(results) == 3, "a forward-only loop is measured: each call of the model is a step"
    for number, r in results.items():
        assert r.measurement.samples_per_step == 64, "the batch is the model's input"
        summary = next(t for t in result.trials if t.number == number)
        assert summary.values["latency_p99"] == pytest.approx(r.measurement.step_time_p99 * 1e3)
        assert summary.value == summary.values["latency_p99"] and not summary.violated
    best = result.best
    assert best.metric == "latency_p99" and not result.maximize
    assert best.value == min(t.value for t in result.trials if t.state == "COMPLETE"), "less is better"
    assert best.constraints == ["throughput>=1"]
    stored = BestConfig.model_validate_json((tmp_path / "out" / "best.json").read_text())
    assert stored.objectives == {"latency_p99": best.value}
    rows = list(csv.DictReader((tmp_path / "out" / "trials.csv").open()))
    assert {json.loads(r["values"])["latency_p99"] for r in rows if r["state"] == "COMPLETE"} == \
        {t.value for t in result.trials if t.state == "COMPLETE"}


@pytest.mark.slow
def test_a_constraint_no_configuration_keeps_leaves_no_best(ray_cluster, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result, results = _study(tmp_path, objective=["latency_p50"], constraint=["throughput>=1e12"])
    assert len(results) == 3
    assert all(t.violated == ["throughput>=1e12"] for t in result.trials if t.state == "COMPLETE")
    assert result.best is None and result.exit_code == 3
    assert any("breaks a constraint" in n for n in result.notes), result.notes
    for r in results.values():
        assert r.measurement.pruned, "a trial certainly below a throughput bound stops early"


@pytest.mark.slow
def test_two_objectives_give_a_pareto_front(ray_cluster, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result, _ = _study(tmp_path, objective=["throughput", "latency_p50"], prefer="latency_p50")
    assert result.exit_code == 0, result.trials
    assert any("uses Optuna's TPE" in n for n in result.notes)
    measured = {t.number: t.values for t in result.trials if t.state == "COMPLETE" and t.duplicate_of is None}
    front = {p.trial: p.values for p in result.best.front}
    assert front and set(front) <= set(measured)

    def dominates(a: dict, b: dict) -> bool:
        better_or_equal = a["throughput"] >= b["throughput"] and a["latency_p50"] <= b["latency_p50"]
        return better_or_equal and a != b

    for n, v in front.items():
        assert not any(dominates(w, v) for m, w in measured.items() if m != n), f"trial {n} is dominated"
    for n, v in measured.items():
        assert n in front or any(dominates(w, v) for w in front.values()), f"trial {n} should be on the front"
    assert result.best.metric == "latency_p50"
    assert result.best.value == min(v["latency_p50"] for v in front.values()), "--prefer picks the point"


@pytest.mark.slow
def test_cost_objective_follows_the_measured_throughput(ray_cluster, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result, results = _study(tmp_path, objective=["cost"], instance_type="inf2.xlarge")
    assert result.exit_code == 0, result.trials
    assert result.best.cost is not None and result.best.cost.per_hour == 0.7582
    for number, r in results.items():
        summary = next(t for t in result.trials if t.number == number)
        # $ per 1M samples = 1e6 / samples per second x price per hour / 3600 (one trial per CPU instance).
        expected = 1e6 / r.measurement.throughput * 0.7582 / 3600
        assert summary.values["cost"] == pytest.approx(expected, rel=1e-9)
    best = result.best
    assert best.metric == "cost" and not result.maximize
    cheapest = min(t.values["cost"] for t in result.trials if t.state == "COMPLETE")
    assert best.value == cheapest
    assert best.throughput == max(r.measurement.throughput for r in results.values()), "cheapest is fastest"
    assert best.cost.usd_per_million_samples == pytest.approx(best.value)
    from autotune.report.write import report_html

    page, _ = report_html(optuna.load_study(study_name=result.study, storage=result.storage), result.study)
    assert "$0.7582 per hour (catalogue: us-east-1 on-demand" in page
    assert f"${best.cost.usd_per_million_samples:,.4f} per 1M samples" in page, "the report shows the cost"


def test_cost_without_a_price_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(AutotuneError, match="--objective cost needs the instance's price"):
        tune(INFER, trials=1, target="inductor", objective=["cost"], out=tmp_path / "out",
             storage=f"sqlite:///{tmp_path / 'db.sqlite'}")


REPORTS_ACCURACY = """
import autotune, torch
model = torch.nn.Linear(8, 2)
for _ in range(400):
    model(torch.randn(16, 8))
autotune.report(accuracy=0.9, loss=0.1)
"""


def test_an_objective_the_script_never_reports_stops_the_study_at_its_first_trial(tmp_path, write_script) -> None:
    script = write_script("reports.py", REPORTS_ACCURACY)
    space = tmp_path / "space.yaml"
    space.write_text(PRECISIONS)
    cache = tmp_path / "cache"
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", "run", str(script), "--target", "inductor",
                           "--space", str(space), "--trials", "3", "--objective", "acuracy", "--cache", str(cache),
                           "--storage", f"sqlite:///{tmp_path / 'db.sqlite'}", "--out", str(tmp_path / "out")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert len(proc.stderr.strip().splitlines()) <= 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "--objective 'acuracy': the script reported accuracy, loss" in proc.stderr, proc.stderr
    assert "throughput" in proc.stderr, "the built-in objectives are named"
    study = optuna.load_study(study_name=optuna.get_all_study_names(f"sqlite:///{tmp_path / 'db.sqlite'}")[0],
                              storage=f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert len(study.trials) == 1 and study.trials[0].state.name == "FAIL", "one trial, none left running"
    assert not list((cache / "results").glob("*/*.json")), "nothing remembered of the typo"
