"""Cost figures: a real study recorded with ``--instance-type``, its best.json, trials.csv and table,
and ``autotune compare`` of two studies recorded on different instance types, whose arithmetic is
checked against the formula from the measured throughput."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autotune.records import Measurement, TrialPlan, TrialResult
from autotune.study.study import tune
from autotune.results.outputs import BestConfig, trials_csv
from autotune.results.best import best_config
from autotune.results.summaries import study_summaries
from autotune.storage.attrs import StudyAttrs, trial_attrs, write

from study_tests.test_study import SCRIPTS

CATALOGUE = "catalogue: us-east-1 on-demand, 2026-11-23"
ONE_POINT_SPACE = """
target: inductor
parameters:
  batch_size: {type: int, choices: [32]}
  mode: {type: categorical, choices: [eager], default: eager}
"""


def _one_point(directory: Path) -> Path:
    space = directory / "one.yaml"
    space.write_text(ONE_POINT_SPACE)
    return space


def _per_million(samples_per_second: float, per_hour: float) -> float:
    return 1e6 / samples_per_second * per_hour / 3600


def _measured(throughput: float) -> str:
    return TrialResult(status="ok", plan=TrialPlan(target="neuron", params={"x": "a"}), measurement=Measurement(
        throughput=throughput, ci95_low=throughput * 0.98, ci95_high=throughput * 1.02, step_time_median=0.01,
        step_time_p90=0.012, samples_per_step=8, steps_measured=100, windows=5, converged=True, warmup_steps=3,
        warmup_seconds=1.0)).model_dump_json()


def test_a_trial_on_two_of_thirty_two_neuroncores_stands_for_sixteen() -> None:
    """What the study stores (instance type, price, devices per trial) becomes best.json's cost
    and trials.csv's column: 16 trials of 2 cores fit a trn1.32xlarge side by side."""
    study = optuna.create_study(direction="maximize")
    write(study, target="neuron", provenance={"instance_type": "trn1.32xlarge"}, devices_per_trial=2,
          price={"per_hour": 21.5, "source": CATALOGUE})
    dist = {"x": optuna.distributions.CategoricalDistribution(["a"])}
    study.add_trial(optuna.trial.create_trial(params={"x": "a"}, distributions=dist, value=100.0,
                                              user_attrs=trial_attrs(config_key="a", counted=True,
                                                                     result=_measured(100.0))))
    cost = best_config(study, "s").cost
    assert (cost.trials_side_by_side, cost.instance_samples_per_second) == (16, 1600.0)
    assert cost.usd_per_million_samples == pytest.approx(_per_million(1600.0, 21.5))
    assert (cost.instance_type, cost.per_hour, cost.source) == ("trn1.32xlarge", 21.5, CATALOGUE)
    (row,) = csv.DictReader(trials_csv(study_summaries(study), None).splitlines())
    assert float(row["usd_per_million_samples"]) == pytest.approx(_per_million(1600.0, 21.5))


def test_without_a_price_there_is_no_cost() -> None:
    study = optuna.create_study(direction="maximize")
    write(study, target="neuron", provenance={"instance_type": "trn2.48xlarge"}, devices_per_trial=1)
    dist = {"x": optuna.distributions.CategoricalDistribution(["a"])}
    study.add_trial(optuna.trial.create_trial(params={"x": "a"}, distributions=dist, value=100.0,
                                              user_attrs=trial_attrs(config_key="a", counted=True,
                                                                     result=_measured(100.0))))
    assert best_config(study, "s").cost is None
    assert study_summaries(study)[0].usd_per_million_samples is None


def _compare(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", "compare", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.mark.slow
def test_compare_two_studies_recorded_on_different_instance_types(ray_cluster, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    common = dict(trials=1, target="inductor", space=str(_one_point(tmp_path)), seed=0)
    on_inf2 = tune(SCRIPTS / "tiny_train.py", study="on-inf2", instance_type="inf2.xlarge", **common)
    on_trn1 = tune(SCRIPTS / "tiny_train.py", study="on-trn1", instance_type="trn1.2xlarge", price_per_hour=0.5,
                   **common)
    assert on_inf2.exit_code == 0 and on_trn1.exit_code == 0, (on_inf2.trials, on_trn1.trials)

    # The cost study: its figures follow the formula from its measured throughput.
    best = BestConfig.model_validate_json((Path(on_inf2.out_dir) / "best.json").read_text())
    assert best.provenance["instance_type"] == "inf2.xlarge"
    assert (best.cost.instance_type, best.cost.per_hour, best.cost.source) == ("inf2.xlarge", 0.7582, CATALOGUE)
    assert best.cost.trials_side_by_side == 1, "an inductor trial holds no NeuronCores: it is the whole instance"
    assert best.cost.usd_per_million_samples == pytest.approx(_per_million(best.throughput, 0.7582))
    (row,) = csv.DictReader((Path(on_inf2.out_dir) / "trials.csv").open())
    assert float(row["usd_per_million_samples"]) == pytest.approx(_per_million(float(row["throughput"]), 0.7582))
    assert on_trn1.best.cost.source == "--price-per-hour" and on_trn1.best.cost.per_hour == 0.5

    rows = json.loads(_compare(tmp_path, "on-inf2", "on-trn1", "--json").stdout)
    assert [(r["study"], r["instance_type"]) for r in rows] == [("on-inf2", "inf2.xlarge"), ("on-trn1", "trn1.2xlarge")]
    first, second = rows
    for r, price, source, best in ((first, 0.7582, CATALOGUE, on_inf2.best), (second, 0.5, "--price-per-hour",
                                                                               on_trn1.best)):
        throughput = best.throughput
        assert (r["usd_per_hour"], r["price_source"]) == (price, source), "the price each study ran with"
        assert r["instance_samples_per_second"] == pytest.approx(throughput)
        assert r["usd_per_million_samples"] == pytest.approx(_per_million(throughput, price))
        assert r["configuration"] == best.params and r["trial"] == best.trial
        assert r["step_time_ms"]["step_time_median"] > 0
    assert first["cost_ratio"] == 1.0 and first["throughput_ratio"] == 1.0
    assert second["cost_ratio"] == pytest.approx(second["usd_per_million_samples"] / first["usd_per_million_samples"])
    assert second["throughput_ratio"] == pytest.approx(on_trn1.best.throughput / on_inf2.best.throughput)

    # The table shows the same figures, each price with its source.
    table = _compare(tmp_path, "on-inf2", "on-trn1").stdout
    flat = " ".join(table.split())
    for r in rows:
        assert f"${r['usd_per_million_samples']:.4g}" in flat and f"{r['instance_samples_per_second']:,.1f}" in flat
    assert f"{second['cost_ratio']:.2f}x" in flat and "inf2.xlarge" in flat and "trn1.2xlarge" in flat
    assert "--price-per-hour" in flat and "catalogue: us-east-1" in flat

    # A prices file overrides the price a study ran with; STORAGE#STUDY names a study anywhere.
    prices = tmp_path / "reserved.yaml"
    prices.write_text("inf2.xlarge: 0.2951\n")
    url = f"sqlite:///{tmp_path / '.autotune' / 'autotune.db'}"
    lines = list(csv.DictReader(_compare(tmp_path, f"{url}#on-inf2", "on-trn1", "--prices", str(prices),
                                         "--csv").stdout.splitlines()))
    assert lines[0]["price_source"] == f"prices file {prices}" and float(lines[0]["usd_per_hour"]) == 0.2951
    assert float(lines[0]["usd_per_million_samples"]) == pytest.approx(_per_million(on_inf2.best.throughput, 0.2951))
    assert lines[1]["price_source"] == "--price-per-hour", "not in the prices file: the study's own price"


@pytest.mark.slow
def test_a_neuron_study_stores_the_cores_a_trial_holds_and_its_price(ray_cluster, tmp_path, monkeypatch) -> None:
    """What the costs above are computed from, as a real study stores it. (Its trial fails here:
    no Neuron device; the arithmetic on those figures is the first test's.)"""
    monkeypatch.chdir(tmp_path)
    tune(SCRIPTS / "sleepy_train.py", trials=1, target="neuron", platform="trn1", cores_per_trial=2, seed=0,
         sets={"batches_per_execution": 1, "precision": "fp32"}, instance_type="trn1.32xlarge", study="n")
    stored = StudyAttrs.of(optuna.load_study(study_name="n", storage=f"sqlite:///{tmp_path}/.autotune/autotune.db"))
    assert stored.devices_per_trial == 2 and stored.provenance["instance_type"] == "trn1.32xlarge"
    assert stored.price == {"per_hour": 21.5, "source": CATALOGUE}
    inductor = tune(SCRIPTS / "tiny_train.py", trials=1, target="inductor", space=str(_one_point(tmp_path)), seed=0,
                    study="i", price_per_hour=0.096)
    stored = StudyAttrs.of(optuna.load_study(study_name="i", storage=f"sqlite:///{tmp_path}/.autotune/autotune.db"))
    assert stored.devices_per_trial is None, "an inductor trial holds no NeuronCores"
    assert inductor.best.cost.trials_side_by_side == 1 and inductor.best.cost.source == "--price-per-hour"
