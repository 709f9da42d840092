"""Who may reach ``autotune serve``, over real HTTP to a real daemon: a web page that points its
own name at 127.0.0.1 (DNS rebinding), a cross-site form or fetch, another user of the machine,
a client that fills the disk with uploads, a second daemon on the same database."""

from __future__ import annotations

import io
import os
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import httpx
import pytest

from autotune.daemon.jobs import JobRecord, JobStore
from autotune.daemon.listening import MAX_JSON_BYTES
from autotune.daemon.messages import JobSpec, JobState
from autotune.daemon.runner import MAX_ATTEMPTS
from autotune.daemon.service import MAX_PENDING_UPLOADS
from autotune.machine.host import host_identity

from .conftest import SCRIPTS, DaemonProcess, autotune, free_port


def _snapshot(size: int = 5) -> bytes:
    """A tar.gz of one file of ``size`` zero bytes (small once compressed)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = size
        tar.addfile(info, io.BytesIO(b"\0" * size))
    return buf.getvalue()


def _uploads(d: DaemonProcess) -> list[Path]:
    return sorted((d.home / "jobs" / ".uploads").iterdir())


def test_a_host_that_is_not_the_daemons_is_refused(start_daemon) -> None:
    """DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 sends
    ``Host: evil.example:PORT``; refused even by a daemon that asks no token."""
    d = start_daemon("--no-token")
    with d.http() as c:
        for host in (f"evil.example:{d.port}", "evil.example", f"127.0.0.1:{d.port + 1}", f"localhost.evil:{d.port}"):
            r = c.get("/health", headers={"Host": host})
            assert r.status_code == 421 and "not an address this daemon listens on" in r.json()["detail"], (host, r.text)
            r = c.post("/uploads", content=_snapshot(), headers={"Host": host, "Content-Type": "application/gzip"})
            assert r.status_code == 421, host
        for host in (f"127.0.0.1:{d.port}", f"localhost:{d.port}", f"LOCALHOST:{d.port}"):
            assert c.get("/health", headers={"Host": host}).status_code == 200, host
    assert _uploads(d) == [], "nothing of a refused request is kept"


def test_a_cross_site_request_is_refused(start_daemon) -> None:
    d = start_daemon()
    job = {"script": str(SCRIPTS / "tiny_train.py"), "run": {"trials": 1}}
    with d.http() as c:
        for origin in ("http://evil.example", f"http://evil.example:{d.port}", "null", f"https://127.0.0.1:{d.port}"):
            r = c.post("/jobs", json=job, headers={"Origin": origin})
            assert r.status_code == 403 and "cross-site" in r.json()["detail"], (origin, r.text)
            assert c.get("/jobs", headers={"Origin": origin}).status_code == 403
        assert c.get("/jobs").json() == [], "no job was queued"
        assert c.get("/health", headers={"Origin": f"http://127.0.0.1:{d.port}"}).status_code == 200
        assert c.get("/health", headers={"Origin": f"http://localhost:{d.port}"}).status_code == 200


def test_a_body_must_be_of_the_type_the_clients_send(start_daemon) -> None:
    """A cross-site form posts text/plain, urlencoded or multipart, and a ``no-cors`` fetch of a
    Blob posts no type at all: none needs the browser to ask first, so none is accepted."""
    d = start_daemon("--no-token")
    job = b'{"script": "/nowhere/train.py"}'
    with d.http() as c:
        for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
            headers = {"Content-Type": kind} if kind else {}
            r = c.post("/uploads", content=_snapshot(), headers=headers)
            assert r.status_code == 415 and "takes application/gzip" in r.json()["detail"], (kind, r.text)
            for path in ("/jobs", "/ensure"):
                r = c.post(path, content=job, headers=headers)
                assert r.status_code == 415 and "takes application/json" in r.json()["detail"], (path, kind, r.text)
        assert _uploads(d) == []
        r = c.post("/jobs", content=job, headers={"Content-Type": "application/json; charset=utf-8"})
        assert r.status_code == 400 and "not found" in r.json()["detail"], "JSON reaches the API"
        assert c.post("/uploads", content=_snapshot(), headers={"Content-Type": "application/gzip"}).status_code == 201


def test_json_bodies_are_bounded(start_daemon) -> None:
    d = start_daemon()
    big = b'{"script": "/x.py", "args": ["' + b"a" * MAX_JSON_BYTES + b'"]}'
    with d.http() as c:
        r = c.post("/jobs", content=big, headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "over the daemon's limit of 4 MiB" in r.json()["detail"], r.text
        chunked = c.post("/jobs", content=iter([b'{"script": ', b'"/x.py"}']),
                         headers={"Content-Type": "application/json"})
        assert chunked.status_code == 411 and "Content-Length" in chunked.json()["detail"], chunked.text


def test_uploads_waiting_for_their_job_are_bounded(start_daemon) -> None:
    """Each upload is kept an hour for its job: without a bound, a loop of uploads fills the disk."""
    d = start_daemon("--max-upload", "1MiB")
    with d.http() as c:
        def upload(size: int = 5) -> httpx.Response:
            return c.post("/uploads", content=_snapshot(size), headers={"Content-Type": "application/gzip"})

        # By size: together at most four times --max-upload, unpacked.
        for _ in range(4):
            assert upload(900 * 1024).status_code == 201
        r = upload(900 * 1024)
        assert r.status_code == 413 and "over the daemon's limit of 4 MiB for all of them" in r.json()["detail"], r.text
        assert len(_uploads(d)) == 4, "the refused upload is not kept"
        for claimed in _uploads(d)[:2]:  # as a job takes its upload: room again
            shutil.rmtree(claimed)
        # By count.
        for _ in range(MAX_PENDING_UPLOADS - 2):
            assert upload().status_code == 201
        r = upload()
        assert r.status_code == 429 and "uploads are waiting for their job" in r.json()["detail"], r.text
        assert len(_uploads(d)) == MAX_PENDING_UPLOADS


def test_a_token_is_made_on_the_first_start_and_found_by_the_clients(start_daemon, config_home: Path,
                                                                      tmp_path: Path) -> None:
    d = start_daemon()
    token_file = config_home / "autotune" / "token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
    token = token_file.read_text().strip()
    assert len(token) >= 40
    assert f"with the token in {token_file}" in d.log.read_text()
    with httpx.Client(base_url=d.url) as anonymous:
        for path in ("/health", "/jobs", "/openapi.json", "/jobs/job-1234"):
            assert anonymous.get(path).status_code == 401, path
        r = anonymous.get("/", headers={"Accept": "text/html"})
        assert r.status_code == 303 and r.headers["location"] == "/login", "a browser is sent to sign in"
        assert anonymous.post("/uploads", content=_snapshot(), headers={"Content-Type": "application/gzip"}).status_code == 401
    assert _uploads(d) == []

    # The same user's CLI reads it by itself; a daemon elsewhere is never sent it unasked.
    status = autotune("status", "--server", d.url, "--json", cwd=tmp_path)
    assert status.returncode == 0 and status.stdout.strip() == "[]", status.stderr
    from autotune.daemon.client import read_token

    assert read_token(None, d.url) == token and read_token(None, f"http://localhost:{d.port}") == token
    assert read_token(None, "http://10.20.30.40:8765") is None

    # The next start keeps the token; another user of the machine has none to give.
    d.stop()
    d.start()
    assert token_file.read_text().strip() == token
    other_user = autotune("status", "--server", d.url, cwd=tmp_path, env={"XDG_CONFIG_HOME": str(tmp_path / "other")})
    assert other_user.returncode == 2 and "missing or wrong token" in other_user.stderr, other_user.stderr


def test_a_token_file_that_others_can_read_is_refused(start_daemon, config_home: Path, tmp_path: Path) -> None:
    d = start_daemon()
    token_file = config_home / "autotune" / "token"
    token_file.chmod(0o644)
    for argv in (("status", "--server", d.url), ("serve", "--port", str(free_port()), "--storage",
                                                   f"sqlite:///{tmp_path / 'other.db'}")):
        proc = autotune(*argv, cwd=tmp_path, timeout=60)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert "can be read by other users (mode 0644)" in lines[0] and f"chmod 600 {token_file}" in lines[0], lines
    bad = tmp_path / "latin1-token"
    bad.write_bytes(b"caf\xe9\n")
    bad.chmod(0o600)
    proc = autotune("status", "--server", d.url, "--token-file", bad, cwd=tmp_path)
    assert proc.returncode == 2 and "not text" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_no_token_turns_it_off_on_loopback(start_daemon, config_home: Path, tmp_path: Path) -> None:
    d = start_daemon("--no-token")
    assert not (config_home / "autotune" / "token").exists(), "no token is made"
    assert "no token: any local user may submit jobs" in d.log.read_text()
    with httpx.Client(base_url=d.url) as anonymous:
        assert anonymous.get("/health").status_code == 200
        assert anonymous.get("/login", follow_redirects=False).status_code == 303
    both = autotune("serve", "--no-token", "--token-file", tmp_path / "t", "--port", str(free_port()), cwd=tmp_path)
    assert both.returncode == 2 and "give one of them" in both.stderr, both.stderr


def test_docs_load_no_script_from_elsewhere(start_daemon) -> None:
    """Swagger's page loads its script from a CDN into the daemon's origin: there is none."""
    d = start_daemon()
    with d.http() as c:
        for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            assert c.get(path).status_code == 404, path
        assert "/jobs" in c.get("/openapi.json").json()["paths"]
        assert "openapi.json" in c.get("/").text


def test_a_browser_signs_in_with_the_token(start_daemon, open_page, config_home: Path) -> None:
    d = start_daemon()
    token = (config_home / "autotune" / "token").read_text().strip()
    opened = open_page(d.url + "/")
    page = opened.page
    assert page.url == d.url + "/login", "sent to sign in"
    page.fill("input[name=token]", "not-the-token")
    page.click("button[type=submit]")
    assert page.locator(".error").inner_text() == "That is not the daemon's token."
    assert page.context.cookies() == []
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_url(d.url + "/")
    assert page.locator("h1").inner_text() == "autotune jobs" and page.locator("table#jobs").count() == 1
    [cookie] = page.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and token not in cookie["value"], cookie
    assert page.evaluate("document.cookie") == "", "no script of the page can read it"
    # The cookie opens the API's pages too, and only from the daemon's own origin.
    page.goto(d.url + "/jobs")
    assert page.locator("body").inner_text().strip() == "[]"
    status = page.evaluate("async () => (await fetch('/jobs/job-1234/cancel', {method: 'POST'})).status")
    assert status == 404, "a request of the daemon's own page is the user's"
    assert open_page(d.url + "/").page.url == d.url + "/login", "another browser has no session"
    # The browser logs the wrong token's 401 and the unknown job's 404; nothing else.
    assert [e for e in opened.errors if "Failed to load resource" not in e] == []


def test_one_daemon_per_database(start_daemon, tmp_path: Path) -> None:
    d = start_daemon("--no-token")
    second = autotune("serve", "--no-token", "--port", str(free_port()), "--storage", d.storage,
                      "--jobs-dir", tmp_path / "jobs2", cwd=tmp_path, timeout=60)
    lines = second.stderr.strip().splitlines()
    assert second.returncode == 2 and len(lines) == 1, second.stderr
    assert f"another autotune serve ({d.url}, pid {d.proc.pid} on {host_identity()}" in lines[0], lines
    # A daemon killed on this host holds nothing: its pid is gone, and the next one starts at once.
    d.kill()
    started = time.monotonic()
    d.start()
    assert time.monotonic() - started < 30
    # A clean stop gives the database up.
    d.stop()
    from sqlalchemy import create_engine, text

    with create_engine(d.storage).connect() as c:
        assert c.execute(text("SELECT count(*) FROM autotune_daemon")).scalar() == 0


def test_a_daemon_that_shares_the_host_name_but_not_the_processes_is_not_taken_for_gone(start_daemon,
                                                                                       tmp_path: Path) -> None:
    """Two containers may have one host name and not see each other's processes: a daemon in a
    PID namespace of its own (as a container's) finds the first one's pid nowhere, and must judge
    it by its heartbeat, not take its database."""
    namespace = ["unshare", "--pid", "--fork", "--mount-proc"]
    tried = subprocess.run([*namespace, "true"], capture_output=True, text=True)
    if tried.returncode != 0:
        pytest.skip(f"no PID namespace can be made here (unshare: {tried.stderr.strip()[:200]}); it needs root")
    d = start_daemon("--no-token")
    second = subprocess.run([*namespace, sys.executable, "-m", "autotune.cli", "serve", "--no-token", "--port",
                             str(free_port()), "--storage", d.storage, "--jobs-dir", str(tmp_path / "jobs2")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert second.returncode == 2, second.stderr
    # Its own name for the host differs from the first daemon's in the PID namespace alone.
    assert f"pid {d.proc.pid} on {host_identity()}" in second.stderr
    assert "its hold lapses 30 s after it was last seen" in second.stderr
    assert d.proc.poll() is None and d.http().get("/health").status_code == 200


def _lease_from(storage: str, host: str, seen_ago: float) -> None:
    from sqlalchemy import create_engine, text

    now = time.time()
    with create_engine(storage).begin() as c:
        c.execute(text("DELETE FROM autotune_daemon"))
        c.execute(text("INSERT INTO autotune_daemon (id, host, pid, pid_started, url, started_at, heartbeat_at) "
                       "VALUES ('daemon', :host, 4242, 1.0, 'http://10.0.0.9:8765', :t, :t)"),
                  {"host": host, "t": now - seen_ago})


def test_a_daemon_on_another_host_holds_the_database_while_it_beats(tmp_path: Path) -> None:
    d = DaemonProcess(home=tmp_path, port=free_port(), extra=["--no-token"])
    (tmp_path / "state").mkdir()
    JobStore(d.storage)
    _lease_from(d.storage, "trn1-node-7", seen_ago=2)
    refused = autotune(*d.argv()[3:], cwd=tmp_path, timeout=60)
    assert refused.returncode == 2 and "pid 4242 on trn1-node-7" in refused.stderr, refused.stderr
    assert "its hold lapses 30 s after it was last seen" in refused.stderr
    _lease_from(d.storage, "trn1-node-7", seen_ago=120)  # killed two minutes ago
    try:
        d.start()
    finally:
        d.stop()


def test_a_job_alive_on_another_host_is_never_run_again(tmp_path: Path) -> None:
    """A daemon that took over the database (its last holder killed on another host) leaves a job
    whose process there still beats alone, and settles one whose process stopped beating."""
    d = DaemonProcess(home=tmp_path, port=free_port(), extra=["--no-token"])
    (tmp_path / "state").mkdir()
    store = JobStore(d.storage)
    now = time.time()
    spec = JobSpec(script=str(SCRIPTS / "tiny_train.py"))
    for job_id, beat_ago, attempts in (("job-alive", 3.0, 1), ("job-gone", 300.0, MAX_ATTEMPTS)):
        directory = tmp_path / "jobs" / job_id
        directory.mkdir(parents=True)
        store.add(JobRecord(id=job_id, state=JobState.running, study=job_id, spec=spec, directory=str(directory),
                            created_at=now - 600, started_at=now - 500, host="trn1-node-7", pid=os.getpid(),
                            pid_started=now - 500, workers=1, attempts=attempts, heartbeat_at=now - beat_ago))
    try:
        d.start()
        time.sleep(3)  # a few rounds of the runner
        alive, gone = store.get("job-alive"), store.get("job-gone")
        assert alive.state == JobState.running and alive.attempts == 1 and alive.host == "trn1-node-7", alive
        assert "job job-alive: runs on trn1-node-7" in d.log.read_text()
        assert gone.state == JobState.failed and "silent on trn1-node-7" in (gone.message or ""), gone
    finally:
        d.stop()


@pytest.mark.slow
def test_a_jobs_process_beats_and_takes_a_cancel_from_a_daemon_elsewhere(tmp_path: Path) -> None:
    """The daemon that holds the database is on another host: it cannot signal the job's process
    here, which learns of the cancel from its own heartbeat and stops as that SIGINT would."""
    from autotune.daemon.messages import EXIT_CANCELLED, RunOptions
    from autotune.daemon.job_files import DaemonSettings, JobFiles, job_argv, start_job_process
    from autotune.daemon.runner import stop_process_tree

    storage = f"sqlite:///{tmp_path / 'autotune.db'}"
    store = JobStore(storage)
    _lease_from(storage, "trn1-node-7", seen_ago=1)
    run = RunOptions(trials=50, target="inductor", sets={"mode": "eager", "num_workers": "0"})
    files = JobFiles(tmp_path / "jobs" / "job-remote")
    files.root.mkdir(parents=True)
    job = JobRecord(id="job-remote", state=JobState.running, study="remote", directory=str(files.root),
                    spec=JobSpec(script=str(SCRIPTS / "tiny_train.py"), run=run), created_at=time.time(),
                    host=host_identity(), workers=1, attempts=1)
    store.add(job)
    argv = job_argv(job, DaemonSettings(storage=storage, cache=tmp_path / "cache", jobs_dir=tmp_path / "jobs"), 1)
    with open(files.log, "wb") as log, open(os.devnull, "wb") as out:
        proc = start_job_process(argv, storage, job.id, cwd=SCRIPTS, stdout=out, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while store.get(job.id).heartbeat_at is None:
            assert proc.poll() is None, files.log.read_text()[-2000:]
            assert time.monotonic() < deadline, "no heartbeat"
            time.sleep(0.5)
        store.request_cancel(job.id)
        cancelled_at = time.strftime("%H:%M:%S")
        log_text = lambda: files.log.read_text()  # noqa: E731
        assert proc.wait(timeout=90) == EXIT_CANCELLED, (
            f"cancel requested at {cancelled_at}; the job's heartbeat said: "
            f"{[ln for ln in log_text().splitlines() if 'heartbeat' in ln]}\n{log_text()[-1500:]}")
        assert files.read_exit_code() == EXIT_CANCELLED
    finally:
        stop_process_tree(proc.pid, grace_s=2)


def test_the_names_a_daemon_answers_to(start_daemon) -> None:
    """On all interfaces: this machine's names too; and the names given with --allow-host."""
    d = start_daemon("--host", "0.0.0.0", "--allow-host", "Tuner.internal")
    with d.http() as c:
        for host in (socket.gethostname(), "tuner.internal", "localhost", "127.0.0.1"):
            assert c.get("/health", headers={"Host": f"{host}:{d.port}"}).status_code == 200, host
        assert c.get("/health", headers={"Host": f"evil.example:{d.port}"}).status_code == 421
        r = c.get("/health", headers={"Origin": f"http://tuner.internal:{d.port}"})
        assert r.status_code == 200, "a page of the daemon reached by its alias is its own"


def test_a_queue_made_before_heartbeats_gets_their_column(tmp_path: Path) -> None:
    from sqlalchemy import create_engine, inspect, text

    storage = f"sqlite:///{tmp_path / 'old.db'}"
    with create_engine(storage).begin() as c:  # the table as it was, with a job in it
        c.execute(text("CREATE TABLE autotune_jobs (id VARCHAR(64) PRIMARY KEY, state VARCHAR(16) NOT NULL, "
                       "study VARCHAR(256) NOT NULL, spec TEXT NOT NULL, directory TEXT NOT NULL, "
                       "ensure_key VARCHAR(64), created_at FLOAT NOT NULL, started_at FLOAT, ended_at FLOAT, "
                       "exit_code INTEGER, message TEXT, host VARCHAR(256), pid INTEGER, pid_started FLOAT, "
                       "workers INTEGER, attempts INTEGER NOT NULL, cancel_requested BOOLEAN NOT NULL)"))
        c.execute(text("INSERT INTO autotune_jobs VALUES ('job-old', 'queued', 's', :spec, '/x', NULL, 1.0, NULL, "
                       "NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0)"),
                  {"spec": JobSpec(script="/x/train.py").model_dump_json()})
    store = JobStore(storage)
    assert "heartbeat_at" in {col["name"] for col in inspect(store.engine).get_columns("autotune_jobs")}
    old = store.get("job-old")
    assert old is not None and old.state == JobState.queued and old.heartbeat_at is None


def test_a_daemon_whose_database_was_taken_over_stops(start_daemon) -> None:
    """It stalled past the lease (a frozen VM, a long database outage) and another daemon took
    the database: it stops at its next heartbeat instead of running jobs beside the other."""
    d = start_daemon("--no-token")
    _lease_from(d.storage, "trn1-node-7", seen_ago=0)
    d.proc.wait(timeout=30)
    assert "another autotune serve took over its database; stopping" in d.log.read_text()
