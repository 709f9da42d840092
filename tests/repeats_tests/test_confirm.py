"""--confirm: the best few configurations measured again, the best chosen on their means."""

from __future__ import annotations

import csv
from pathlib import Path

import optuna
import pytest

from autotune.results.outputs import BestConfig
from autotune.study.study import tune
from autotune.results.best import best_config
from autotune.storage.attrs import TrialAttrs, trial_attrs

from study_tests.test_study import SCRIPTS, TWO_POINT_SPACE


def _study_with(measurements: dict[str, list[float | None]]) -> optuna.Study:
    """A study whose configurations were measured these values, the first counted and the rest
    re-measurements of it (None: the re-measurement failed)."""
    study = optuna.create_study(direction="maximize")
    dist = {"x": optuna.distributions.CategoricalDistribution(list(measurements))}
    for name, values in measurements.items():
        study.add_trial(optuna.trial.create_trial(
            params={"x": name}, distributions=dist, value=values[0], user_attrs=trial_attrs(config_key=name, counted=True)))
        number = len(study.trials) - 1
        for v in values[1:]:
            study.add_trial(optuna.trial.create_trial(
                params={"x": name}, distributions=dist, value=v,
                state=optuna.trial.TrialState.COMPLETE if v is not None else optuna.trial.TrialState.FAIL,
                user_attrs=trial_attrs(config_key=name, confirms=number)))
    return study


def test_the_best_is_the_best_mean_among_the_configurations_measured_again() -> None:
    # a and b were the two best first measurements; a's second says it was lucky. c was measured
    # once: its 96 is not set against the finalists' means.
    study = _study_with({"a": [100.0, 80.0], "b": [97.0, 93.0], "c": [96.0], "d": [50.0]})
    best = best_config(study, "s")
    assert best.params == {"x": "b"}
    assert best.value == pytest.approx(95.0) and [r.value for r in best.runs] == [97.0, 93.0]


def test_a_configuration_that_fails_when_measured_again_is_not_the_best() -> None:
    study = _study_with({"a": [100.0, None], "b": [97.0, 93.0], "c": [90.0]})
    assert best_config(study, "s").params == {"x": "b"}
    study = _study_with({"a": [100.0, None], "c": [90.0]})
    assert best_config(study, "s").params == {"x": "c"}, "unconfirmed, but it ran"


def test_without_re_measurements_the_best_measurement_wins() -> None:
    best = best_config(_study_with({"a": [100.0], "b": [97.0]}), "s")
    assert best.params == {"x": "a"} and best.value == 100.0 and [r.value for r in best.runs] == [100.0]


@pytest.mark.slow
def test_a_real_study_measures_its_best_again(ray_cluster, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    space = tmp_path / "two.yaml"
    space.write_text(TWO_POINT_SPACE)
    result = tune(SCRIPTS / "tiny_train.py", trials=3, target="inductor", space=str(space), seed=0, confirm=1)
    assert result.exit_code == 0, result.trials
    assert (result.ran, result.measured_again) == (3, 1), "three trials and one re-measurement, not a trial"
    study = optuna.load_study(study_name=result.study, storage=result.storage)
    again = [t for t in study.trials if TrialAttrs.of(t).confirms is not None]
    counted = [t for t in study.trials if TrialAttrs.of(t).counted]
    assert len(again) == 1 and len(counted) == 3
    top = max((t for t in counted if t.state.name == "COMPLETE"), key=lambda t: t.value)
    assert TrialAttrs.of(again[0]).confirms == top.number
    assert TrialAttrs.of(again[0]).config_key == TrialAttrs.of(top).config_key
    out = Path(result.out_dir)
    best = BestConfig.model_validate_json((out / "best.json").read_text())
    assert best.trial == top.number and len(best.runs) == 2
    # The mean over the two runs, each weighed by the seconds it measured: their samples over their seconds.
    seconds = [r.seconds for r in best.runs]
    assert len(seconds) == 2 and all(s is not None and s > 0 for s in seconds), seconds
    assert best.value == pytest.approx(sum(r.value * r.seconds for r in best.runs) / sum(seconds), rel=1e-3)
    assert (out / "trials" / f"{top.number:04d}-again1").is_dir()
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert [r["confirms"] for r in rows if r["confirms"]] == [str(top.number)]

    resumed = tune(SCRIPTS / "tiny_train.py", trials=3, target="inductor", space=str(space), seed=0, confirm=1)
    assert resumed.ran == 0, "measured again once per study"
