"""The spending cap: ``--budget-hours`` and ``--budget-usd`` stop a study once one more trial would
pass them, and the study says what it spent (its result, its attributes, its final lines)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from rich.console import Console

from autotune.landscapes.replay import replay_study
from autotune.records import TrialResult
from autotune.rendering import render_study
from autotune.study.budget import spend_over_time
from autotune.study.study import tune

from .test_study import SCRIPTS

ROOT = Path(__file__).resolve().parents[2]
LANDSCAPE = ROOT / "landscapes" / "inductor-vit.jsonl"


def _ran_seconds(study: optuna.Study) -> list[float]:
    """The wall seconds of each trial that ran (not answered by an earlier one)."""
    out = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        if a.get("result") and not a.get("cached") and a.get("duplicate_of") is None:
            out.append(TrialResult.model_validate_json(a["result"]).wall_seconds)
    return out


def test_a_budget_of_hours_stops_a_replayed_study_within_one_trial_of_the_cap(tmp_path) -> None:
    cap = 0.05  # instance-hours: about 9 of the recording's trials (19 s each on average) of its 60
    result, _ = replay_study(LANDSCAPE, trials=40, workdir=tmp_path, seed=1, budget_hours=cap)
    study = optuna.load_study(study_name=result.study, storage=result.storage)
    seconds = _ran_seconds(study)
    assert 2 < len(seconds) < 40, "the cap stopped the study before its --trials"
    spent = sum(seconds) / 3600
    mean = spent / len(seconds)
    assert result.spend.hours == pytest.approx(spent) and result.spend.trials == len(seconds)
    assert spent <= cap + mean, "within one trial's cost of the cap"
    assert spent + mean > cap, "it stopped only once one more trial would pass the cap"
    assert result.spend.budget_hours == cap and "budget of 0.05 instance-hours stopped the study" in result.spend.stopped
    assert any("budget of 0.05 instance-hours" in n for n in result.notes)
    assert study.user_attrs["spend"]["hours"] == pytest.approx(spent)
    console = Console(record=True, width=400)
    render_study(result, console)
    assert f"spent: {spent:.4g} instance-hours over {len(seconds)} trials, of a budget of 0.05 instance-hours" \
        in console.export_text()
    timeline = spend_over_time(study)
    assert len(timeline) == len(seconds) and timeline[-1][1] == pytest.approx(spent)
    assert [h for _, h, _ in timeline] == sorted(h for _, h, _ in timeline)


def test_a_budget_in_dollars_counts_each_trials_share_of_the_instance(tmp_path) -> None:
    price = 2.0
    result, _ = replay_study(LANDSCAPE, trials=40, workdir=tmp_path, seed=1, budget_usd=0.1, price_per_hour=price)
    study = optuna.load_study(study_name=result.study, storage=result.storage)
    spent_usd = sum(_ran_seconds(study)) / 3600 * price
    mean = spent_usd / result.spend.trials
    assert result.spend.usd == pytest.approx(spent_usd)
    assert spent_usd <= 0.1 + mean < spent_usd + 2 * mean
    assert "budget of 0.1 USD stopped the study" in result.spend.stopped
    assert spend_over_time(study)[-1][2] == pytest.approx(spent_usd)


def test_no_cap_runs_every_trial_and_still_says_what_it_spent(tmp_path) -> None:
    result, _ = replay_study(LANDSCAPE, trials=6, workdir=tmp_path, seed=1)
    study = optuna.load_study(study_name=result.study, storage=result.storage)
    assert result.spend.stopped is None and result.spend.usd is None
    assert result.spend.hours == pytest.approx(sum(_ran_seconds(study)) / 3600)
    assert len([t for t in result.trials if t.state == "COMPLETE"]) >= 6


def test_a_budget_in_dollars_without_a_price_is_refused_in_one_line(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", "run", str(SCRIPTS / "tiny_train.py"),
                           "--target", "inductor", "--budget-usd", "5"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AUTOTUNE_IMDS_ENDPOINT": "http://127.0.0.1:9"})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--budget-usd needs the instance's price" in lines[0], proc.stderr
    assert "--price-per-hour" in lines[0]
    assert not (tmp_path / ".autotune" / "autotune.db").exists(), "nothing was written"


@pytest.mark.slow
def test_a_real_study_stops_at_its_budget_of_hours(ray_cluster, tmp_path, monkeypatch) -> None:
    """tiny_train.py in eager mode: a few seconds a trial; a cap of about three trials' time stops a
    study of 12. In this process, on the session's Ray: from the command line the study started a
    Ray of its own."""
    monkeypatch.chdir(tmp_path)
    cap = 12 / 3600
    result = tune(SCRIPTS / "tiny_train.py", target="inductor", sets={"mode": "eager"}, trials=12, seed=0,
                  budget_hours=cap)
    assert result.exit_code == 0, result.trials
    study = optuna.load_study(study_name=result.study, storage=f"sqlite:///{tmp_path / '.autotune' / 'autotune.db'}")
    seconds = _ran_seconds(study)
    spent = sum(seconds) / 3600
    mean = spent / len(seconds)
    assert len(seconds) < 12, f"{len(seconds)} trials ran: the cap did not stop the study"
    assert result.spend is not None and result.spend.hours == pytest.approx(spent)
    assert spent <= cap + mean and spent + mean > cap
    assert study.user_attrs["spend"]["stopped"].startswith("the budget of")
