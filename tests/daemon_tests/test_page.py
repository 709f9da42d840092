"""The daemon's page in a real Chromium, signed in with the daemon's token: the jobs with their
progress, refreshed while one runs, each linking to the report of its study."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from autotune.daemon.page import REFRESH_S
from autotune.report.page import SECTIONS

from .conftest import SCRIPTS, DaemonProcess, autotune

pytestmark = pytest.mark.slow

#: The baseline measures, the known-good configuration raises: one trial of each kind.
SPACE = """
target: inductor
parameters:
  fault: {type: categorical, choices: [none, raise], default: none}
  mode: {type: categorical, choices: [eager], default: eager}
known_good:
  - {fault: raise}
"""


def _signed_in(open_page, d: DaemonProcess):
    """The jobs page, opened in a new browser that signs in at the page it is sent to."""
    opened = open_page(d.url + "/")
    assert opened.page.url == d.url + "/login"
    opened.page.fill("input[name=token]", d.own_token())
    opened.page.click("button[type=submit]")
    opened.page.wait_for_url(d.url + "/")
    return opened


def test_the_page_follows_a_job_and_links_to_its_report(start_daemon, open_page, tmp_path: Path) -> None:
    d = start_daemon()
    space = tmp_path / "faults.yaml"
    space.write_text(SPACE)
    # Its trials wait at a gate of the test's until the page has been read while the job runs.
    gate = tmp_path / "gate"
    gate.mkdir()
    submitted = autotune("submit", SCRIPTS / "faulty.py", "--server", d.url, "--trials", "2", "--target", "inductor",
                         "--space", space, "--study", "faults", "--env", f"AUTOTUNE_TEST_GATE={gate}", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()

    d.wait_for(job_id, lambda i: i["state"] != "queued")
    live = _signed_in(open_page, d)
    row = live.page.locator(f"tr[data-job='{job_id}']")
    assert row.locator(".state").inner_text() == "running"
    assert re.fullmatch(r"[0-9.]+ m?s", row.locator("td.elapsed").inner_text())
    assert live.page.locator("meta[http-equiv='refresh']").count() == 1, "a running job refreshes the page"
    assert row.locator("progress").get_attribute("max") == "2"
    live.page.screenshot(path=str(tmp_path / "jobs-running.png"), full_page=True)
    (gate / "open").touch()

    info = d.wait_for(job_id, lambda i: i["state"] in ("succeeded", "failed", "cancelled"))
    assert info["state"] == "succeeded" and info["done"] == 2 and info["failed"] == 1, info
    # the page that was left open refreshes itself and shows the end
    expect(row.locator(".state")).to_have_text("succeeded", timeout=(REFRESH_S + 10) * 1000)
    done = _signed_in(open_page, d)
    row = done.page.locator(f"tr[data-job='{job_id}']")
    assert row.locator(".state").inner_text() == "succeeded" and row.locator(".done").inner_text() == "2/2"
    assert row.locator(".best").inner_text().startswith(f"{info['best_value']:,.1f} samples/s")
    assert done.page.locator("meta[http-equiv='refresh']").count() == 0, "nothing runs: no refresh"
    done.page.screenshot(path=str(tmp_path / "jobs.png"), full_page=True)

    row.locator("a", has_text="report").click()
    report = done.page
    report.wait_for_selector("#fig-history .main-svg")
    assert report.url == f"{d.url}/jobs/{job_id}/report"
    for key, title in SECTIONS.items():
        assert report.locator(f"section#{key} > h2").inner_text() == title
    failure = report.locator("section#failures tr.failure", has_text="script_error")
    assert failure.count() == 1
    tail = failure.locator("details.log pre")
    assert not tail.is_visible(), "the log tail is folded until clicked"
    failure.locator("details.log summary").click()
    assert tail.is_visible() and "deliberate failure" in tail.inner_text()
    report.screenshot(path=str(tmp_path / "job-report.png"), full_page=True)
    assert live.errors == [] and done.errors == []


def test_a_running_jobs_estimate_is_its_pace_so_far() -> None:
    """Two trials of six in 60 s: about 120 s left; a queued job has no report to link to yet."""
    from autotune.daemon.page import jobs_page
    from autotune.daemon.messages import JobInfo, JobState

    now = 1_000_000.0
    running = JobInfo(id="job-1", state=JobState.running, study="s", script="/x/train.py", trials=6, created_at=now - 90,
                      started_at=now - 60, done=2, running=1)
    queued = JobInfo(id="job-2", state=JobState.queued, study="t", script="train.py", trials=6, created_at=now)
    assert (running.elapsed_s(now), running.remaining_s(now)) == (60.0, 120.0)
    assert (queued.elapsed_s(now), queued.remaining_s(now)) == (None, None)
    page = jobs_page([queued, running], now=now)
    assert "<td class='num elapsed'>60.0 s</td><td class='num left'>about 120.0 s</td>" in page
    assert "href='jobs/job-1/report'" in page and "jobs/job-2/report" not in page
    assert "http-equiv='refresh'" in page
