"""Studies and the cache root: results reused, compiled graphs loaded, failed compiles not retried."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from autotune.machine.host import host_device
from autotune.study.study import tune
from autotune.targets.neuron import NeuronTarget

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
pytestmark = pytest.mark.slow

COMPILED_SPACE = """
target: inductor
parameters:
  batch_size: {type: int, choices: [32]}
  mode: {type: categorical, choices: [default], default: default}
"""


def test_results_are_reused_then_measured_again_with_compiled_graphs_from_the_cache(ray_cluster, tmp_path,
                                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    # The compiled graphs of the cache root's own inductor/ folder, not the suite's shared one.
    monkeypatch.delenv("AUTOTUNE_INDUCTOR_CACHE")
    space = tmp_path / "space.yaml"
    space.write_text(COMPILED_SPACE)
    script = tmp_path / "train.py"
    shutil.copy(SCRIPTS / "tiny_train.py", script)
    cache = tmp_path / "cache"
    first = tune(script, trials=1, target="inductor", space=str(space), cache=cache, seed=0)
    assert first.ran == 1 and first.exit_code == 0
    assert (first.trials[0].cache_misses or 0) >= 1, "a cold cache compiles"
    # Where it was measured: the worker's machine, which on a cluster is not the driver's.
    assert first.trials[0].placement["host_device"] == host_device() == first.best.provenance["host_device"]

    # A new study database, the same cache root: every result is answered, no trial process starts.
    shutil.rmtree(tmp_path / ".autotune")
    again = tune(script, trials=1, target="inductor", space=str(space), cache=cache, seed=0)
    assert (again.ran, again.reused) == (0, 1)
    assert not (tmp_path / ".autotune" / again.study / "trials").exists()
    assert again.best.value == first.best.value

    # --fresh measures again, loading the compiled graphs instead of compiling them.
    fresh = tune(script, trials=1, target="inductor", space=str(space), cache=cache, seed=0, fresh=True)
    assert fresh.ran == 1
    assert all((t.cache_hits or 0) >= 1 for t in fresh.trials), [t.cache_hits for t in fresh.trials]
    assert any((cache / "inductor").rglob("*.py")), "the graphs were compiled into the cache root"
    assert any("kept as study" in n for n in fresh.notes), "the earlier study is kept, not deleted"

    # A changed script means fresh measurements.
    script.write_text(script.read_text() + "\n# changed\n")
    changed = tune(script, trials=1, target="inductor", space=str(space), cache=cache, seed=0, study="changed")
    assert changed.ran == 1


def test_a_failed_neuron_compile_is_not_retried(ray_cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = {"target": "trn1", "model_type": "transformer", "optlevel": 3}
    flags = NeuronTarget().plan(params).compiler_flags
    failed = tmp_path / "cache" / "neuron-compile-cache" / "neuronxcc-2.21.0" / "MODULE_42+f00d"
    failed.mkdir(parents=True)
    (failed / "model.log").write_text("An Internal Compiler Error has occurred")
    (failed / "compile_flags.json").write_text(json.dumps(flags.split()))
    sets = {"model_type": "transformer", "optlevel": 3}
    result = tune(SCRIPTS / "sleepy_train.py", trials=1, target="neuron", platform="trn1", sets=sets,
                  cache=tmp_path / "cache", seed=0)
    trial = result.trials[0]
    assert (trial.state, trial.category, result.ran) == ("FAIL", "compile_error", 0)
    assert "MODULE_42+f00d" in trial.reason

    retried = tune(SCRIPTS / "sleepy_train.py", trials=1, target="neuron", platform="trn1", sets=sets,
                   cache=tmp_path / "cache", seed=0, study="retry", retry_failed=True)
    assert retried.ran == 1
    assert "--retry_failed_compilation" in retried.trials[0].env["NEURON_CC_FLAGS"]
