"""``autotune dashboard``: optuna-dashboard on the study storage, spoken to over real HTTP."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .conftest import StoredStudy


@pytest.fixture
def dashboard(main_job_study: StoredStudy, tmp_path: Path):
    """A dashboard on a copy of the main job's database (it writes notes there); its URL."""
    db = tmp_path / "copy.db"
    shutil.copy(main_job_study.home / "replay.db", db)
    import optuna

    other = optuna.create_study(study_name="not-autotune", storage=f"sqlite:///{db}")
    other.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    proc = subprocess.Popen([sys.executable, "-m", "autotune.cli", "dashboard", "--storage", f"sqlite:///{db}",
                             "--port", "0"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ.copy())
    try:
        line = proc.stdout.readline()
        assert line.startswith("optuna-dashboard: http://127.0.0.1:"), line + proc.stderr.read()
        yield line.split()[1]
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_dashboard_serves_the_studies_and_their_trials(dashboard: str, main_job_study: StoredStudy, open_page,
                                                       tmp_path: Path) -> None:
    base = dashboard.removesuffix("/dashboard")
    show = json.loads(main_job_study.cli("show", main_job_study.name, "--storage", main_job_study.storage,
                                         "--json").stdout)
    best = json.loads(main_job_study.cli("best", main_job_study.name, "--storage", main_job_study.storage).stdout)
    with httpx.Client(base_url=base, timeout=30) as http:
        assert http.get("/dashboard").status_code == 200
        studies = http.get("/api/studies").json()["study_summaries"]
        assert [s["study_name"] for s in studies] == [main_job_study.name, "not-autotune"]
        study_id, other_id = studies[0]["study_id"], studies[1]["study_id"]
        deadline = time.monotonic() + 60
        while True:  # the notes are written by a thread that starts with the server
            detail = http.get(f"/api/studies/{study_id}").json()
            notes = {t["number"]: t["note"]["body"] for t in detail["trials"]}
            if all(notes.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        other = http.get(f"/api/studies/{other_id}").json()
    assert [(t["number"], t["state"].upper()) for t in detail["trials"]] == [(t["number"], t["state"]) for t in show]
    assert [t["values"][0] if t.get("values") else None for t in detail["trials"]] == \
        [t["value"] if t["state"] == "COMPLETE" else None for t in show]
    assert detail["objective_names"] == ["throughput (samples/s)"]
    assert other["note"]["body"] == "" and not any(t["note"]["body"] for t in other["trials"]), \
        "a study autotune did not create gets no notes"
    assert f"Best: trial {best['trial']}" in detail["note"]["body"]
    assert "### Best configuration" in notes[best["trial"]] and "export XLA_FLAGS=" in notes[best["trial"]]
    failed = [t["number"] for t in show if t["state"] == "FAIL"]
    assert failed and all("**Failed: crash**" in notes[n] for n in failed)
    assert "95% interval" in notes[0] and "1.00x the baseline" in notes[0]

    # optuna-dashboard's own page, in a browser: the first trial's note shows in words
    opened = open_page(f"{dashboard}/studies/{study_id}/trials")
    opened.page.get_by_text("1.00x the baseline").wait_for()
    opened.page.screenshot(path=str(tmp_path / "dashboard-trials.png"))
    assert opened.errors == []


def test_dashboard_on_a_missing_database_is_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "autotune.cli", "dashboard", "--storage",
                           f"sqlite:///{tmp_path / 'none.db'}"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "no study database at" in done.stderr, done.stderr
    assert not (tmp_path / "none.db").exists()
