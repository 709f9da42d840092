"""The report's spend over time: each trial that ran is a step of its machine time, up to what the
study says it spent, under the cap it ran with."""

from __future__ import annotations

import optuna
import pytest

from autotune.landscapes.replay import replay_study
from autotune.report.write import report_html

from .conftest import MAIN_JOB


def test_the_report_shows_spend_over_time_under_the_cap(tmp_path) -> None:
    result, _ = replay_study(MAIN_JOB, trials=30, workdir=tmp_path, seed=3, budget_usd=0.02, price_per_hour=1.5)
    study = optuna.load_study(study_name=result.study, storage=result.storage)
    page, figs = report_html(study, result.study)
    assert "id='fig-spend'" in page or 'id="fig-spend"' in page
    line = figs["spend"].data[0]
    assert len(line.y) == result.spend.trials and list(line.y) == sorted(line.y)
    assert line.y[-1] == pytest.approx(result.spend.hours)
    assert line.text[-1] == f"<br>${result.spend.usd:.4g}"
    (cap,) = figs["spend"].layout.shapes
    assert cap.y0 == pytest.approx(0.02 / 1.5), "the dollar cap drawn in instance-hours at the study's price"
    assert result.spend.hours <= cap.y0 + result.spend.hours / result.spend.trials
