"""Warm starts: a study begins where the earlier studies of the same script ended (their best
measured right after the baseline, their results the sampler's prior), and never counts their
trials as its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autotune.landscapes.replay import replay_study
from autotune.space import parse_space
from autotune.study.study import tune
from autotune.study.warm_start import of_space

from .test_study import SCRIPTS

ROOT = Path(__file__).resolve().parents[2]
LANDSCAPE = ROOT / "landscapes" / "inductor-vit.jsonl"


def _params(trial) -> dict:
    return {k: v for k, v in trial.params.items() if v is not None}


def test_a_new_study_of_the_same_script_measures_the_earlier_best_after_its_baseline(tmp_path) -> None:
    earlier, _ = replay_study(LANDSCAPE, trials=10, workdir=tmp_path, seed=1, study="before")
    later, _ = replay_study(LANDSCAPE, trials=4, workdir=tmp_path, seed=2, study="after", race=0)
    study = optuna.load_study(study_name="after", storage=later.storage)
    trials = sorted(study.trials, key=lambda t: t.number)
    assert earlier.best.params != trials[0].params, "the earlier best is not the baseline (else this shows nothing)"
    assert _params(trials[1]) == {k: v for k, v in earlier.best.params.items() if v is not None}
    assert len(later.trials) == len(trials) == 4, "the earlier study's trials are not this one's"
    assert study.user_attrs["warm_start"] == ["before"]
    assert any(n.startswith("warm start from before: 1 earlier best") for n in later.notes), later.notes


def test_no_warm_starts_cold(tmp_path) -> None:
    earlier, _ = replay_study(LANDSCAPE, trials=10, workdir=tmp_path, seed=1, study="before")
    later, _ = replay_study(LANDSCAPE, trials=3, workdir=tmp_path, seed=2, study="after", warm=False)
    study = optuna.load_study(study_name="after", storage=later.storage)
    assert study.user_attrs["warm_start"] == []
    assert not any("warm start" in n for n in later.notes)
    first = sorted(study.trials, key=lambda t: t.number)[1]
    assert _params(first) != {k: v for k, v in earlier.best.params.items() if v is not None}


def test_a_warm_start_that_names_no_stored_study_is_refused_in_one_line(tmp_path) -> None:
    db = tmp_path / "db.sqlite"
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", "run", str(SCRIPTS / "tiny_train.py"),
                           "--target", "inductor", "--warm-start", "nosuch", "--storage", f"sqlite:///{db}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AWS_EC2_METADATA_DISABLED": "true"})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--warm-start 'nosuch': no such study in this storage" in lines[0], proc.stderr
    assert optuna.get_all_study_names(f"sqlite:///{db}") == [], "no study was made"


def test_an_earlier_configuration_outside_the_space_is_not_a_start() -> None:
    space = parse_space("""\
target: inductor
parameters:
  batch_size: {type: int, choices: [8, 256]}
  mode: {type: categorical, choices: [eager, default], default: eager}
""")
    check = lambda config: None  # noqa: E731  (the target's check: nothing more to refuse here)
    assert of_space({"batch_size": 256}, space, check) == {"batch_size": 256, "mode": "eager"}
    assert of_space({"batch_size": 256, "cpp_simdlen": 256}, space, check) is None
    assert of_space({"batch_size": 12}, space, check) is None
    assert of_space({"batch_size": 256, "mode": "default"}, space.restrict({"mode": "eager"}), check) is None


TWO_BATCHES = """
target: inductor
parameters:
  batch_size: {type: int, choices: [8, 256]}
  mode: {type: categorical, choices: [eager], default: eager}
"""


@pytest.mark.slow
def test_a_real_study_measures_the_earlier_best_as_its_first_trial_after_the_baseline(ray_cluster, tmp_path,
                                                                                      monkeypatch) -> None:
    """tiny_train.py: a batch of 256 is many times a batch of 8 or the script's 32 in samples/s.
    The second study runs in another environment (an env var of its own keys its results), so the
    earlier best is measured again, not answered from the cache. In this process, on the session's
    Ray: from the command line each study started a Ray of its own."""
    monkeypatch.chdir(tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text(TWO_BATCHES)
    common = dict(target="inductor", space=str(space), seed=0)

    earlier = tune(SCRIPTS / "tiny_train.py", trials=3, study="before", **common)
    assert earlier.exit_code == 0, earlier.trials
    assert earlier.best is not None and earlier.best.params["batch_size"] == 256, earlier.best
    later = tune(SCRIPTS / "tiny_train.py", trials=2, study="after", warm_start=["before"],
                 env=["AUTOTUNE_TEST_SETTING=another"], **common)
    assert later.exit_code == 0, later.trials
    study = optuna.load_study(study_name="after", storage=f"sqlite:///{tmp_path / '.autotune' / 'autotune.db'}")
    first, second = sorted(study.trials, key=lambda t: t.number)
    assert first.params.get("batch_size") is None, "the baseline first"
    assert second.params["batch_size"] == 256 and not second.user_attrs.get("cached"), "measured, not remembered"
    assert len(later.trials) == 2 and later.ran == 2


def test_a_warm_start_from_a_study_of_another_objective_is_refused(tmp_path) -> None:
    storage = f"sqlite:///{tmp_path / 'db.sqlite'}"
    other = optuna.create_study(study_name="fast-p99", storage=storage, direction="minimize")
    other.set_user_attr("objectives", ["latency_p99"])
    proc = subprocess.run([sys.executable, "-m", "autotune.cli", "run", str(SCRIPTS / "tiny_train.py"),
                           "--target", "inductor", "--warm-start", "fast-p99", "--storage", storage],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AWS_EC2_METADATA_DISABLED": "true"})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--warm-start 'fast-p99' optimised latency_p99, not throughput" in lines[0], proc.stderr
    assert optuna.get_all_study_names(storage) == ["fast-p99"], "no study was made"
