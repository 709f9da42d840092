"""``autotune report``: one self-contained HTML file, opened offline in a real Chromium, whose every
number is one of the stored trials' (as ``autotune show --json`` prints them)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.report.page import SECTIONS

from .conftest import StoredStudy

#: The figures of a one-objective study, by their element id.
FIGURES = ["fig-history", "fig-knob_effects", "fig-importances", "fig-compile_time", "fig-spend"]


def write(study: StoredStudy, out: Path) -> dict:
    """``autotune report --format png --json``: the paths written."""
    done = study.cli("report", study.name, "--storage", study.storage, "--out", out, "--format", "png", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def written(main_job_study: StoredStudy) -> dict:
    return write(main_job_study, main_job_study.home / ".autotune" / main_job_study.name)


def check_opens_offline(written: dict, open_page, screenshot: Path) -> Any:
    """The report opens from its file with every request beyond it blocked, shows every section,
    and plotly drew each figure (its SVG, and a point or bar of data); the page, once checked."""
    opened = open_page(Path(written["report"]).as_uri(), offline=True)
    page = opened.page
    for key, title in SECTIONS.items():
        assert page.locator(f"section#{key} > h2").inner_text() == title
    figures = [Path(p).stem for p in written["figures"]]
    assert figures[:2] == ["history", "knob_effects"] and "compile_time" in figures
    assert page.locator(".js-plotly-plot").count() == len(figures)
    for fig in figures:
        assert page.locator(f"#fig-{fig} .main-svg").count() >= 1, fig
        assert page.locator(f"#fig-{fig} .point, #fig-{fig} .bars path").count() >= 1, fig
        assert Path(written["figures"][figures.index(fig)]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", fig
    assert "One objective" in page.locator("section#pareto").inner_text()
    assert "unknown" in page.locator("section#cost").inner_text()
    assert page.locator("#best-env").inner_text().startswith("# autotune: best configuration of study")
    page.screenshot(path=str(screenshot), full_page=True)
    assert opened.errors == [] and opened.outside_requests == []
    return page


def test_the_main_jobs_report_opens_offline_and_shows_every_section(written, open_page, tmp_path: Path) -> None:
    assert Path(written["report"]).name == "report.html"
    page = check_opens_offline(written, open_page, tmp_path / "report.png")
    assert [Path(p).stem for p in written["figures"]] == [f[4:] for f in FIGURES]
    assert "crash" in page.locator("section#failures").inner_text()


def test_the_report_of_the_main_job_as_the_readme_runs_it(main_job_run: StoredStudy | None, open_page,
                                                          tmp_path: Path) -> None:
    """The study that ``autotune run examples/vit_xla_train.py`` (the README's command) left, where
    it has run: in CI, right before the tests."""
    if main_job_run is None:
        pytest.skip("the main job has not run here (.ci/run runs it, and sets AUTOTUNE_MAIN_JOB_DIR)")
    check_opens_offline(write(main_job_run, tmp_path / "report"), open_page, tmp_path / "main-job-report.png")


def test_every_number_in_the_report_is_a_stored_one(written, open_page, main_job_study: StoredStudy) -> None:
    show = main_job_study.cli("show", main_job_study.name, "--storage", main_job_study.storage, "--json")
    best = main_job_study.cli("best", main_job_study.name, "--storage", main_job_study.storage)
    env = main_job_study.cli("best", main_job_study.name, "--storage", main_job_study.storage, "--format", "env")
    trials = {t["number"]: t for t in json.loads(show.stdout)}
    best = json.loads(best.stdout)
    page = open_page(Path(written["report"]).as_uri(), offline=True).page

    history = page.evaluate("document.getElementById('fig-history').data")
    points = {}
    for trace in history:
        if trace["name"] == "best so far" or trace["name"].startswith("failed"):
            continue
        for n, y in zip(trace["x"], trace["y"]):
            points[n] = y
            t = trials[n]
            assert trace["name"].startswith("pruned") == t["pruned"]
    measured = {n: t["value"] for n, t in trials.items() if t["value"] is not None and t["duplicate_of"] is None}
    assert points == measured and len(measured) >= 10
    failed = {n for tr in history if tr["name"].startswith("failed") for n in tr["x"]}
    assert failed == {n for n, t in trials.items() if t["state"] == "FAIL"} and failed
    running = [max(v for m, v in measured.items() if m <= n) for n in sorted(measured)]
    steps = next(tr for tr in history if tr["name"] == "best so far")
    assert steps["y"] == running and steps["y"][-1] == best["value"]
    baseline = page.evaluate("document.getElementById('fig-history').layout.shapes[0].y0")
    assert baseline == best["baseline_value"]

    compile_time = page.evaluate("document.getElementById('fig-compile_time').data[0]")
    assert dict(zip(compile_time["x"], compile_time["y"])) == {trials[n]["compile_seconds"]: v
                                                               for n, v in measured.items()}
    for n, t in trials.items():
        shown = page.locator(f"tr[data-trial='{n}'] td.value").inner_text()
        assert shown == (f"{t['value']:,.1f}" if t["value"] is not None else "-"), n
    assert page.locator("#best-env").inner_text().strip() == env.stdout.strip()
    summary = page.locator("section#summary").inner_text()
    assert f"{best['baseline_value']:,.1f} samples/s" in summary
    assert f"{best['value']:,.1f} samples/s (trial {best['trial']}, {best['speedup']:.2f}x the baseline)" in summary
    ran = [t for t in trials.values() if t["duplicate_of"] is None and not t["cached"]]
    wall, compiled = sum(t["wall_seconds"] or 0 for t in ran), sum(t["compile_seconds"] or 0 for t in ran)
    assert f"{wall:.1f} s wall, of which {compiled:.1f} s compiling" in page.locator("section#cost").inner_text()


def test_a_study_of_two_objectives_shows_its_pareto_front(tmp_path: Path) -> None:
    """Studies of several objectives (a cost objective beside throughput, say) get Optuna's own
    Pareto-front plot; the rest of the report reads the first objective."""
    import optuna

    from autotune.report import write_report
    from autotune.storage.attrs import trial_attrs

    study = optuna.create_study(directions=["maximize", "minimize"], storage=f"sqlite:///{tmp_path / 'two.db'}",
                                study_name="two")
    for i, (throughput, cost) in enumerate([(100.0, 5.0), (200.0, 9.0), (150.0, 4.0), (90.0, 8.0)]):
        study.add_trial(optuna.trial.create_trial(
            params={"batch_size": 8 * (i + 1)}, values=[throughput, cost],
            distributions={"batch_size": optuna.distributions.CategoricalDistribution([8, 16, 24, 32])},
            user_attrs=trial_attrs(counted=True)))
    page = write_report(study, "two", tmp_path / "out")[0].read_text()
    assert "id=\"fig-pareto_front\"" in page and "Trials on the front: 1, 2." in page
    assert "Several objectives: the Pareto front above" in page
    assert {t.number for t in study.best_trials} == {1, 2}


def test_report_without_plotly_names_the_install_command(main_job_study: StoredStudy) -> None:
    """On a machine without the report extra (plotly hidden from the import system)."""
    hide = ("import sys; sys.modules['plotly'] = None; from autotune.cli import main; "
            f"sys.argv = ['autotune', 'report', {main_job_study.name!r}, '--storage', {main_job_study.storage!r}]; main()")
    done = subprocess.run([sys.executable, "-c", hide], cwd=main_job_study.home, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and 'pip install "torch-autotune[report]"' in lines[0], done.stderr


def test_images_without_a_browser_are_a_clear_error(main_job_study: StoredStudy, tmp_path: Path) -> None:
    """kaleido renders images in a Chrome or Chromium; with none to be found it cannot, and the
    error says what to install (nothing is written in place of the image)."""
    if shutil.which("chromium") is None:
        pytest.skip("needs a Chromium to hide: this machine has none")
    done = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "report", main_job_study.name, "--storage", main_job_study.storage,
         "--out", str(tmp_path), "--format", "svg"],
        cwd=main_job_study.home, capture_output=True, text=True, timeout=120,
        env={"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path), "BROWSER_PATH": str(tmp_path / "none")})
    assert done.returncode == 2, done.stderr
    assert "apt-get install chromium" in done.stderr and not (tmp_path / "figures" / "history.svg").exists()
