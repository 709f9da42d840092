"""On a host whose runs vary from one to the next, each run measures long enough to average over
that: a study's runs, and `autotune trial`'s afterwards, from the noise studies kept in the cache root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autotune.cache import noise_key, open_cache
from autotune.measurement.noise import RUN_SECONDS, RunNoise, measure_seconds
from autotune.provenance import caller_env, provenance
from autotune.records import TrialResult
from autotune.targets import resolve_target
from autotune.storage.attrs import TrialAttrs

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "tiny_train.py"
LOUD = RunNoise.of([[1000.0, 1500.0, 700.0]] * 2)  # one run to the next: +-40% and more


def test_only_a_host_whose_runs_vary_beyond_a_few_percent_asks_for_long_runs() -> None:
    assert measure_seconds(RunNoise()) == 0.0, "nothing known: the interval alone decides"
    assert measure_seconds(RunNoise.of([[1000.0, 1010.0, 995.0]] * 3)) == 0.0
    assert measure_seconds(LOUD) == RUN_SECONDS


def _seconds(trial_dir: Path) -> float:
    """The seconds a run measured after warm-up: its timing windows', as its harness wrote them (a
    figure from its steady rate would read short where the host slowed some windows down)."""
    return sum(w["seconds"] for w in json.loads((trial_dir / "report.json").read_text())["windows"])


@pytest.mark.slow
def test_where_a_study_here_found_the_host_noisy_every_run_measures_ten_seconds(tmp_path: Path) -> None:
    args = ["--steps", "1000000"]  # the script would end after 400 steps (half a second)
    cache = tmp_path / "cache"
    target = resolve_target("inductor", SCRIPT)
    here = provenance(target, SCRIPT, args, env=caller_env(target))
    key = noise_key(here, target.name)
    open_cache(cache).put_noise(key, "an earlier study", LOUD)
    common = ["--target", "inductor", "--set", "mode=eager", "--set", "num_workers=0", "--cache", str(cache)]
    env = {**os.environ, "AUTOTUNE_IMDS_ENDPOINT": "http://127.0.0.1:9"}

    proc = subprocess.run([sys.executable, "-m", "autotune.cli", "run", str(SCRIPT), *common, "--trials", "2",
                           "--no-prune", "--json", "--", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    said = [n for n in result["notes"] if "each run from now on measures at least 10 s" in n]
    assert said and "(as earlier studies here measured it)" in said[0], result["notes"]
    study = optuna.load_study(study_name=result["study"], storage=result["storage"])
    assert len([t for t in study.trials if TrialAttrs.of(t).result]) == 2
    runs = sorted(tmp_path.glob(".autotune/*/trials/*/report.json"))
    assert len(runs) == 2 and all(_seconds(r.parent) >= RUN_SECONDS for r in runs), \
        [_seconds(r.parent) for r in runs]

    proc = subprocess.run([sys.executable, "-m", "autotune.cli", "trial", str(SCRIPT), *common,
                           "--trial-dir", str(tmp_path / "again"), "--json", "--", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "note: one run of tiny_train.py here reads within a factor of" in proc.stderr and "at least 10 s" in proc.stderr
    assert TrialResult.model_validate_json(proc.stdout).ok and _seconds(tmp_path / "again") >= RUN_SECONDS


def test_a_wide_spread_reads_as_both_its_sides() -> None:
    from autotune.measurement.noise import spread_text

    assert spread_text(0.07) == "within ±7%"
    assert spread_text(0.5) == "within -33% to +50%", "a run 33% low is as likely as one 50% high"
    assert spread_text(1.56) == "within a factor of 2.6", "no percentage a reader cannot picture (-61% to +156%)"
