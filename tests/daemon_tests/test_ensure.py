"""``autotune ensure``: a pipeline's pre-step, through the daemon and locally."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import optuna
import pytest

from autotune.results.outputs import BestConfig

from .conftest import FAST, SCRIPTS, autotune

pytestmark = pytest.mark.slow


def _trials(storage: str, study: str) -> int:
    return len(optuna.load_study(study_name=study, storage=storage).trials)


def _env_file_is_usable(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    assert lines and all(line.startswith("export ") for line in lines), lines
    return dict(line[len("export "):].split("=", 1) for line in lines)


def test_ensure_tunes_once_then_answers_from_the_store(start_daemon, tmp_path: Path) -> None:
    d = start_daemon("--slots", "2")
    args = ["ensure", SCRIPTS / "tiny_train.py", "--server", d.url, "--trials", "2", "--workers", "2", *FAST, "--json"]

    first = autotune(*args, "--out", tmp_path / "first" / "best.env", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    tuned = json.loads(first.stdout)
    assert tuned["source"] == "tuned" and tuned["job"]
    assert _env_file_is_usable(tmp_path / "first" / "best.env")["AUTOTUNE_PARAMS"]
    trials_before = _trials(d.storage, tuned["study"])
    jobs_before = len(d.http().get("/jobs").json())

    started = time.monotonic()
    without_flag = [a for a in args if a not in ("--server", d.url)]
    second = autotune(*without_flag, "--out", tmp_path / "second.env", cwd=tmp_path, env={"AUTOTUNE_SERVER": d.url})
    elapsed = time.monotonic() - started
    assert second.returncode == 0, second.stderr
    stored = json.loads(second.stdout)
    assert stored["source"] == "stored" and stored["ran"] == 0 and stored["job"] is None, stored
    assert stored["study"] == tuned["study"] and stored["best"] == tuned["best"]
    assert _trials(d.storage, tuned["study"]) == trials_before, "no trial ran"
    assert len(d.http().get("/jobs").json()) == jobs_before, "no job was started"
    assert elapsed < 30, f"a stored answer took {elapsed:.0f} s"
    assert (tmp_path / "second.env").read_text() == (tmp_path / "first" / "best.env").read_text()
    assert BestConfig.model_validate_json((tmp_path / "second.json").read_text()).study == tuned["study"]

    # The same question asked locally of the daemon's database: the key is the same.
    local = autotune(*without_flag, "--storage", d.storage, "--out", tmp_path / "local.env", cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    assert json.loads(local.stdout)["source"] == "stored"


def test_the_key_tells_questions_apart(tmp_path: Path) -> None:
    from autotune.daemon.ensure import ensure_key, space_identity
    from autotune.daemon.messages import RunOptions
    from autotune.targets import get_target

    script = tmp_path / "train.py"
    script.write_text((SCRIPTS / "tiny_train.py").read_text())
    inductor = get_target("inductor")
    run = RunOptions(trials=2, target="inductor", sets={"mode": "eager"})

    def key(**change) -> str:
        args = change.pop("args", [])
        return ensure_key(script, args, change.pop("target", inductor), run.model_copy(update=change),
                          change.pop("space", space_identity(None)))

    base = key()
    assert key() == base, "the same question gets the same key"
    assert key(trials=50) == base, "more trials tops the same study up"
    others = [key(sets={"mode": "eager", "batch_size": "16"}), key(args=["--steps", "10"]),
              key(target=get_target("xla")), key(metric="latency_ms", direction="minimize"),
              key(space=space_identity(None, "target: inductor\n")), key(nproc_per_node=2), key(cores_per_trial=2), key(nnodes=2),
              key(env=["CUDA_VISIBLE_DEVICES=1"])]
    assert len({base, *others}) == 1 + len(others)
    script.write_text(script.read_text() + "\n# changed\n")
    assert key() != base, "another script is another model"


def test_ensure_without_a_daemon_tunes_here(tmp_path: Path) -> None:
    args = ["ensure", SCRIPTS / "tiny_train.py", "--trials", "1", "--workers", "2", *FAST, "--cache", tmp_path / "cache",
            "--json"]
    first = autotune(*args, "--out", tmp_path / "best.env", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["source"] == "tuned"
    second = autotune(*args, "--out", tmp_path / "again.env", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    answer = json.loads(second.stdout)
    assert answer["source"] == "stored" and answer["ran"] == 0
    assert (tmp_path / "again.env").read_text() == (tmp_path / "best.env").read_text()
    assert (tmp_path / ".autotune" / "autotune.db").exists(), "the local default storage"


def test_ensure_exec_tunes_then_runs_the_job_with_the_result_applied(tmp_path: Path) -> None:
    """A pipeline in one command: tune if no study answers, then run the job with every knob applied
    (its batch size by the DataLoader) and its own exit code."""
    script = tmp_path / "train.py"
    script.write_text((SCRIPTS / "tiny_train.py").read_text() + '\nprint(f"last batch {x.shape[0]}")\n')
    args = ["ensure", script, "--trials", "1", "--workers", "1", *FAST, "--set", "batch_size=64",
            "--cache", tmp_path / "cache", "--out", tmp_path / "best.env", "--exec", "--"]
    job = [sys.executable, script]
    first = autotune(*args, *job, cwd=tmp_path, env={"AUTOTUNE_APPLY": ""})
    assert first.returncode == 0, first.stderr
    assert "tuned (1 trials run)" in first.stderr
    assert "last batch 64" in first.stdout  # the script asked for 32
    assert "autotune: applying study" in first.stderr

    # A job that is not the script itself gives the tuning no arguments: the same question, answered.
    second = autotune(*args, "sh", "-c", "exit 5", cwd=tmp_path)
    assert "stored result" in second.stderr
    assert second.returncode == 5, second.stderr  # the job's exit code

    # The tuning runs the script with the job's own arguments: another question.
    third = autotune(*args, *job, "--steps", "40", cwd=tmp_path)
    assert third.returncode == 0 and "tuned (1 trials run)" in third.stderr, third.stderr
    assert json.loads((tmp_path / "best.json").read_text())["provenance"]["script_args"] == ["--steps", "40"]

    missing = autotune(*args, "no-such-job-here", cwd=tmp_path)
    assert missing.returncode == 2
    assert "no-such-job-here: command not found" in missing.stderr
