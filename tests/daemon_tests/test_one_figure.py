"""One figure per configuration, wherever a study is read: a daemon's job of a real study, read
through every output it leaves (the daemon's job and best, the job's result, best.json,
trials.csv, ``autotune best`` and ``show``, the report's data). Each configuration's figure (the
mean over its runs) is the same number under every name; what one run measured appears only in the
per-run lists."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import optuna
import pytest

from autotune.report.data import study_report
from autotune.storage.optuna_storage import load_study

from .conftest import FAST, SCRIPTS, autotune


def _key(params: dict) -> str:
    return json.dumps({k: v for k, v in params.items() if v is not None}, sort_keys=True)


class Seen:
    """Every figure shown for each configuration, by where it was shown."""

    def __init__(self) -> None:
        self.value: dict[str, set[tuple[str, float]]] = {}
        self.interval: dict[str, set[tuple[str, float | None, float | None]]] = {}

    def add(self, where: str, params: dict, value: float | None, low: float | None = None,
            high: float | None = None, *, interval: bool = True) -> None:
        if value is None:
            return
        self.value.setdefault(_key(params), set()).add((where, value))
        if interval:
            self.interval.setdefault(_key(params), set()).add((where, low, high))

    def one_each(self) -> None:
        for key, shown in self.value.items():
            assert len({v for _, v in shown}) == 1, f"{key}: {sorted(shown)}"
        for key, shown in self.interval.items():
            assert len({(lo, hi) for _, lo, hi in shown}) == 1, f"{key}: {sorted(shown, key=str)}"


def _number(text: str) -> float | None:
    return float(text) if text else None


@pytest.mark.slow
def test_every_output_of_a_study_shows_one_figure_per_configuration(start_daemon, tmp_path: Path) -> None:
    d = start_daemon()
    # Five trials: the study measures its noise, races and measures the best and the baseline again.
    done = autotune("submit", SCRIPTS / "tiny_train.py", "--server", d.url, "--trials", "5", *FAST,
                    "--study", "one", "--wait", cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.splitlines()[0].strip()
    info = d.job(job_id)
    files = d.home / "jobs" / job_id
    result = json.loads((files / "result.json").read_text())
    best_json = json.loads((files / "out" / "best.json").read_text())
    rows = list(csv.DictReader((files / "out" / "trials.csv").open()))
    with d.http() as c:
        daemon_best = c.get(f"/jobs/{job_id}/best").json()
    cli_best = json.loads(autotune("best", "one", "--storage", d.storage, cwd=tmp_path).stdout)
    shown = json.loads(autotune("show", "one", "--storage", d.storage, "--json", cwd=tmp_path).stdout)
    report = study_report(load_study("one", d.storage), "one")

    again = [t for t in result["trials"] if t["confirms"] is not None]
    assert again, "the study measured some configuration again"
    seen = Seen()
    for where, best in (("best.json", best_json), ("daemon best", daemon_best), ("job result", result["best"]),
                        ("autotune best", cli_best), ("report", report.best.model_dump())):
        assert best["schema_version"] == 2, where
        seen.add(f"{where} value", best["params"], best["value"], best["value_ci95_low"], best["value_ci95_high"])
        seen.add(f"{where} throughput", best["params"], best["throughput"], best["ci95_low"], best["ci95_high"])
        seen.add(f"{where} objectives", best["params"], best["objectives"]["throughput"], interval=False)
        seen.add(f"{where} baseline", best["baseline_params"], best["baseline_value"], interval=False)
        assert best["runs"] == best_json["runs"], where
        assert best["cost"] is None or math.isclose(best["cost"]["trial_samples_per_second"], best["value"])
        use = best["utilisation"]
        assert use is not None, "the tiny MLP's FLOPs are counted"
        assert use["flops_per_second"] == pytest.approx(use["flops_per_sample"] * best["value"], rel=1e-9), where
    seen.add("daemon job", best_json["params"], info["best_value"], interval=False)
    seen.add("daemon job baseline", best_json["baseline_params"], info["baseline_value"], interval=False)
    for where, trials in (("job result", result["trials"]), ("autotune show", shown),
                          ("report", [t.model_dump() for t in report.trials])):
        for t in trials:
            seen.add(f"{where} trial {t['number']}", t["params"], t["value"], t["value_ci95_low"],
                     t["value_ci95_high"])
            seen.add(f"{where} trial {t['number']} throughput", t["params"], t["throughput"], t["ci95_low"],
                     t["ci95_high"])
    for r in rows:
        params = json.loads(r["params"])
        seen.add(f"trials.csv {r['number']}", params, _number(r["value"]), _number(r["value_ci95_low"]),
                 _number(r["value_ci95_high"]))
        seen.add(f"trials.csv {r['number']} throughput", params, _number(r["throughput"]), _number(r["ci95_low"]),
                 _number(r["ci95_high"]))
    seen.one_each()

    # What each run measured is in the per-run lists alone, and the figure is their mean.
    runs = {r["trial"]: r for r in best_json["runs"]}
    assert len(runs) >= 2 and set(runs) == {int(r["number"]) for r in rows
                                            if r["run_value"] and _key(json.loads(r["params"])) ==
                                            _key(best_json["params"])}
    for r in rows:
        if int(r["number"]) in runs:
            assert float(r["run_value"]) == runs[int(r["number"])]["value"]
    seconds = [r["seconds"] for r in runs.values()]
    assert best_json["value"] == pytest.approx(
        sum(r["value"] * r["seconds"] for r in runs.values()) / sum(seconds), rel=1e-9)
    low, high = best_json["value_ci95_low"], best_json["value_ci95_high"]
    assert low < best_json["value"] < high
    study = optuna.load_study(study_name="one", storage=d.storage)
    assert len(study.trials) == len(rows)
