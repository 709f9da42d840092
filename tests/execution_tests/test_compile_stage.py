"""The compile stage (--compile-workers): configurations compiled by compile workers ahead of their
measurement, for real with inductor on this CPU; failed compiles never take a trial slot."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autotune.published import Published
from autotune.study.study import tune

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
pytestmark = pytest.mark.slow

# Two configurations that differ only in the loader's workers: the same graphs.
SPACE = """
target: inductor
parameters:
  batch_size: {type: int, choices: [32], default: 32}
  num_workers: {type: int, choices: [0, 1], default: 0}
  mode: {type: categorical, choices: [default], default: default}
"""


def test_measure_jobs_find_every_graph_their_compile_job_made(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # The compiled graphs of the cache root's own inductor/ folder, not the suite's shared one.
    monkeypatch.delenv("AUTOTUNE_INDUCTOR_CACHE")
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    script = tmp_path / "train.py"
    shutil.copy(SCRIPTS / "tiny_train.py", script)
    cache = tmp_path / "cache"
    result = tune(script, trials=2, target="inductor", space=str(space), cache=cache, seed=0, compile_workers=1)
    assert result.exit_code == 0 and result.ran == 2, result.notes
    measured = [t for t in result.trials if t.state == "COMPLETE"]
    assert len(measured) == 2
    for t in measured:
        # Each measure job found its graphs: it compiled nothing itself.
        assert (t.cache_hits or 0) >= 1 and t.cache_misses == 0, (t.cache_hits, t.cache_misses)
        assert t.measure_compile_seconds is not None
    assert result.cache_hit_rate == 1.0
    # The graphs were compiled once, by the first configuration's compile job; the second's found
    # them published and ran nothing.
    first, second = sorted(measured, key=lambda t: t.number)
    assert first.compile_stage_seconds > 0 and second.compile_stage_seconds == 0
    trials = tmp_path / ".autotune" / result.study / "trials"
    assert (trials / f"{first.number:04d}-compile" / "trial.log").exists()
    assert not (trials / f"{second.number:04d}-compile").exists()
    (manifest,) = list((cache / "compiled").glob("*/*.json"))
    assert Published(cache).manifest(manifest.stem)["params"] == {"batch_size": 32, "num_workers": 0,
                                                                  "mode": "default"}


def test_a_configuration_whose_compile_fails_never_takes_a_trial_slot(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.replace("choices: [default], default: default", "choices: [default]"))
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('this script never compiles')\n")
    result = tune(script, trials=1, target="inductor", space=str(space), cache=tmp_path / "cache", seed=0,
                  compile_workers=1)
    assert result.exit_code != 0
    (failed,) = [t for t in result.trials if t.state == "FAIL"]
    assert failed.compile_stage_seconds is not None and failed.measure_compile_seconds is None
    trials = tmp_path / ".autotune" / result.study / "trials"
    assert (trials / f"{failed.number:04d}-compile").exists() and not (trials / f"{failed.number:04d}").exists()
    assert not list((tmp_path / "cache" / "compiled").glob("*/*.json")), "a failed compile publishes nothing"
