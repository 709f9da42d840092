"""``autotune serve``: who may talk to it, what it refuses, how it shares the cluster."""

from __future__ import annotations

import io
import socket
import tarfile
from pathlib import Path

from autotune.daemon.runner import fair_share, trial_slots
from autotune.targets import get_target

from .conftest import SCRIPTS, autotune, free_port


def test_listening_beyond_loopback_needs_a_token(tmp_path: Path) -> None:
    proc = autotune("serve", "--host", "0.0.0.0", "--port", str(free_port()), "--no-token", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "without a token" in lines[0] and "--no-token" in lines[0], proc.stderr
    assert not (tmp_path / ".autotune").exists(), "nothing is created before the refusal"


def test_a_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = autotune("serve", "--port", str(port), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "already in use" in lines[0], proc.stderr


def test_with_a_token_every_request_without_it_is_refused(start_daemon, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    token_file.chmod(0o600)
    d = start_daemon("--token-file", str(token_file), token="s3cret-token")
    for path in ("/health", "/jobs", "/openapi.json", "/docs", "/jobs/job-1234"):
        with d.http(token="") as anonymous:
            assert anonymous.get(path).status_code == 401, path
        with d.http(token="wrong") as wrong:
            assert wrong.get(path).status_code == 401, path
    with d.http(token="") as anonymous:
        assert anonymous.post("/jobs", json={"script": "/x.py"}).status_code == 401
        assert anonymous.post("/uploads", content=b"x").status_code == 401
    with d.http() as c:
        assert c.get("/health").json()["status"] == "ok"
        schema = c.get("/openapi.json").json()
        assert {"/jobs", "/jobs/{job_id}", "/ensure", "/uploads"} <= set(schema["paths"])

    refused = autotune("status", "--server", d.url, cwd=tmp_path, env={"AUTOTUNE_TOKEN": ""})
    assert refused.returncode == 2 and "token" in refused.stderr, refused.stderr
    allowed = autotune("status", "--server", d.url, "--token-file", token_file, cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr
    by_env = autotune("status", "--server", d.url, "--json", cwd=tmp_path, env={"AUTOTUNE_TOKEN": "s3cret-token"})
    assert by_env.returncode == 0 and by_env.stdout.strip() == "[]", by_env.stderr


def test_an_upload_that_escapes_its_directory_is_refused(start_daemon) -> None:
    d = start_daemon("--max-upload", "1MiB")
    for name in ("../../escape.py", "/tmp/escape.py"):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            info = tarfile.TarInfo(name)
            info.size = 5
            tar.addfile(info, io.BytesIO(b"pass\n"))
        with d.http() as c:
            r = c.post("/uploads", content=buf.getvalue(), headers={"Content-Type": "application/gzip"})
        assert r.status_code == 400 and "refused the upload" in r.json()["detail"], r.text
    assert not (d.home / "escape.py").exists() and not (d.home / "jobs" / "escape.py").exists()
    assert list((d.home / "jobs" / ".uploads").iterdir()) == [], "nothing is kept of a refused upload"
    with d.http() as c:
        huge = c.post("/uploads", content=b"\0" * (2 * 1024 ** 2), headers={"Content-Type": "application/gzip"})
        assert huge.status_code == 413
        # A job must name its script inside its upload, or an absolute path on shared storage.
        r = c.post("/jobs", json={"script": "train.py"})
        assert r.status_code == 400 and "absolute" in r.json()["detail"]
        r = c.post("/jobs", json={"script": str(SCRIPTS / "tiny_train.py"), "run": {"sets": {"a;rm -rf /": "1"}}})
        assert r.status_code == 422


def test_jobs_share_the_slots_fairly() -> None:
    assert trial_slots({"CPU": 2}) == 1
    assert trial_slots({"CPU": 64}) == 8
    assert trial_slots({"CPU": 128, "neuron_cores": 32}, "neuron_cores", 2) == 16
    # Counted through the target: a GPU target's trials hold GPUs (before, 8 GPUs gave the CPU rule's 2 slots).
    gpus = get_target("inductor", gpus_per_trial=2)
    assert trial_slots({"CPU": 16, "GPU": 8}, gpus.device_resource, gpus.devices_per_trial()) == 4
    neuron = get_target("neuron")
    assert trial_slots({"CPU": 16, "GPU": 8}, neuron.device_resource, neuron.devices_per_trial(2)) == 2, \
        "a Neuron job on a cluster of GPUs: no NeuronCores, the CPU rule"
    assert [fair_share(8, n) for n in (1, 2, 3, 4, 8, 16)] == [8, 4, 2, 2, 1, 1]
    assert fair_share(8, 2, wanted=3) == 3 and fair_share(8, 1, wanted=3) == 3
    assert fair_share(1, 2) == 1, "every running job gets at least one worker"
