"""Cost figures: what a study stores becomes best.json's cost and trials.csv's column."""

from __future__ import annotations

import csv

import optuna
import pytest

from autotune.records import Measurement, TrialPlan, TrialResult
from autotune.study.outputs import trials_csv
from autotune.study.results import best_config, study_summaries
from autotune.trial_attrs import trial_attrs, write

CATALOGUE = "catalogue: us-east-1 on-demand, 2026-11-23"


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

