"""The cache root: result store, the Neuron XLA-path layout, stats, prune and clear."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.cache import cache_stats, clear, open_cache, parse_age, prune, result_key
from autotune.errors import AutotuneError
from autotune.published import Published
from autotune.records import Failure, FailureCategory, Measurement, TrialPlan, TrialResult
from autotune.targets.neuron import NeuronTarget
from autotune.targets.neuron.cache import XLA_CACHE_DIR, neuron_cache_entries

PLAN = TrialPlan(target="inductor", params={"mode": "eager"})


def ok_result() -> TrialResult:
    m = Measurement(throughput=100.0, ci95_low=99.0, ci95_high=101.0, step_time_median=0.01,
                    step_time_p90=0.012, samples_per_step=1, steps_measured=50, windows=5, converged=True,
                    warmup_steps=3, warmup_seconds=1.0)
    return TrialResult(status="ok", plan=PLAN, measurement=m)


def failed(category: FailureCategory) -> TrialResult:
    return TrialResult(status="failed", plan=PLAN, failure=Failure(category=category, reason="x"))


def make_neuron_tree(root: Path, flags: list[str]) -> Path:
    """A Neuron persistent cache as documented: done, failed, locked and stale entries."""
    base = root / "neuron-compile-cache" / "neuronxcc-2.21.18209.0"

    def entry(name: str, files: dict[str, str], age: float = 0) -> None:
        d = base / name
        d.mkdir(parents=True)
        for fname, text in files.items():
            (d / fname).write_text(text)
            if age:
                t = time.time() - age
                os.utime(d / fname, (t, t))

    entry("MODULE_111+aaaa", {"model.neff": "neff", "model.hlo_module.pb": "hlo", "model.done": "",
                              "compile_flags.json": json.dumps(["--target=trn1"])})
    entry("MODULE_222+bbbb", {"model.hlo_module.pb": "hlo", "model.log": "ERROR: [F134] ...",
                              "compile_flags.json": json.dumps(flags)})
    entry("MODULE_333+cccc", {"model.hlo_module.pb": "hlo", "model.hlo_module.pb.lock": ""})
    entry("MODULE_444+dddd", {"model.hlo_module.pb": "hlo", "model.hlo_module.pb.lock": ""}, age=7200)
    return base


def test_results_are_remembered_atomically_and_only_when_they_would_hold(tmp_path) -> None:
    cache = open_cache(tmp_path / "c")
    key = result_key(model={"script_sha256": "s"}, environment={"v": 1}, target="inductor", params={"a": 1})
    assert cache.get_result(key) is None
    assert cache.put_result(key, ok_result())
    assert cache.get_result(key).measurement.throughput == 100.0
    assert not list(cache.results_dir.rglob("*.tmp")), "no temporary file is left behind"
    assert cache.put_result("k2", failed(FailureCategory.compile_error)), "compile errors would recur"
    assert not cache.put_result("k3", failed(FailureCategory.timeout)), "a timeout may be the machine's fault"
    # A half-written entry (a killed writer) is never trusted.
    (cache.results_dir / "ab").mkdir()
    (cache.results_dir / "ab" / "abcd.json").write_text('{"status": "ok", "plan"')
    assert cache.get_result("abcd") is None


def test_keys_change_with_every_part() -> None:
    base = dict(model={"script_sha256": "s", "args": []}, environment={"versions": {"torch": "2.9.0"}},
                target="xla", params={"batch_size": 16})
    k = result_key(**base)
    assert k == result_key(**base)
    for part, other in [("model", {"script_sha256": "t", "args": []}),
                        ("environment", {"versions": {"torch": "2.10.0"}}),
                        ("target", "inductor"), ("params", {"batch_size": 32})]:
        assert result_key(**{**base, part: other}) != k, part
    assert result_key(**base, protocol_version=99) != k
    assert result_key(**base, devices_per_trial=2) != result_key(**base, devices_per_trial=1)


def test_the_environment_key_holds_the_device_model_and_the_callers_variables(monkeypatch) -> None:
    from autotune.cache import environment_key, environment_of
    from autotune.machine.host import host_device
    from autotune.provenance import caller_env, provenance
    from autotune.targets.inductor import InductorTarget

    target = InductorTarget()
    script = Path(__file__)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    plain = provenance(target, script, [], instance_type="inf2.xlarge", env=caller_env(target))
    assert environment_of(plain)["host_device"] == host_device() != "cpu:"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("HOME", "/elsewhere")  # a variable the target does not read keys nothing
    assert caller_env(target) == {"CUDA_VISIBLE_DEVICES": "1"}
    one = provenance(target, script, [], instance_type="inf2.xlarge", env=caller_env(target))
    given = provenance(target, script, [], instance_type="inf2.xlarge",
                       env=caller_env(target, {"OMP_NUM_THREADS": "2"}))
    assert len({environment_key(p) for p in (plain, one, given)}) == 3


def neuron_plan(flags: str) -> TrialPlan:
    return TrialPlan(target="neuron", params={}, env={"NEURON_CC_FLAGS": flags}, flags_env="NEURON_CC_FLAGS")


def test_the_neuron_layout_is_read_with_each_entry_state(tmp_path) -> None:
    flags = ["--target=trn1", "--model-type=transformer", "--optlevel=3"]
    make_neuron_tree(tmp_path / "c", flags)
    cache = open_cache(tmp_path / "c")
    states = {e.graph_hash: e.state for e in neuron_cache_entries(cache.path / XLA_CACHE_DIR)}
    assert states == {"111": "done", "222": "failed", "333": "locked", "444": "stale_lock"}
    found = NeuronTarget().failed_compile(neuron_plan(" ".join(flags) + " --cache_dir=/x"), cache.path)
    assert found is not None and "(MODULE_222+bbbb)" in found, "wrapper flags are not part of a compile"
    assert NeuronTarget().failed_compile(neuron_plan("--target=trn1 --optlevel=3"), cache.path) is None

    stats = cache_stats(cache).sections["neuron-xla"]
    assert (stats["entries"], stats["done"], stats["failed"], stats["locked"], stats["stale_lock"]) == (4, 1, 1, 1, 1)
    out = subprocess.run([sys.executable, "-m", "autotune.cli", "cache", "stats", "--cache", str(cache.path),
                          "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["sections"]["neuron-xla"]["failed"] == 1


def test_prune_and_clear(tmp_path) -> None:
    cache = open_cache(tmp_path / "c")
    old, new = "aa" + "0" * 62, "bb" + "0" * 62
    cache.put_result(old, ok_result())
    cache.put_result(new, ok_result())
    t = time.time() - 10 * 86400
    os.utime(cache.results_dir / old[:2] / f"{old}.json", (t, t))
    make_neuron_tree(cache.path, ["--target=trn1"])
    removed, freed = prune(cache, older_than=parse_age("7d"))
    assert removed == 1 and freed > 0  # the ten-day-old result only
    assert cache.get_result(old) is None and cache.get_result(new) is not None
    states = {e.state for e in neuron_cache_entries(cache.path / XLA_CACHE_DIR)}
    assert "locked" in states, "an entry being compiled is never pruned"
    prune(cache, max_size=0)
    assert cache.get_result(new) is None
    assert clear(cache) >= 0 and not any(cache.results_dir.iterdir())


def test_clear_removes_autotune_sections_and_nothing_else(tmp_path) -> None:
    home = tmp_path / "home"  # autotune cache clear --cache ~ --yes
    (home / "Documents").mkdir(parents=True)
    (home / "Documents" / "thesis.tex").write_text("years of work")
    (home / ".bashrc").write_text("export PATH")
    cache = open_cache(home)
    cache.put_result("aa" + "0" * 62, ok_result())
    (home / "inductor" / "fxgraph").mkdir(parents=True)
    (home / "inductor" / "fxgraph" / "graph.py").write_text("compiled")
    make_neuron_tree(home, ["--target=trn1"])
    Published(home).publish("cc" + "0" * 62, {"seconds": 1.0})
    out = subprocess.run([sys.executable, "-m", "autotune.cli", "cache", "clear", "--cache", str(home), "--yes"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert (home / "Documents" / "thesis.tex").read_text() == "years of work" and (home / ".bashrc").exists()
    assert sorted(p.name for p in home.iterdir()) == [".bashrc", "Documents", "results"]


def test_prune_withdraws_the_manifests_of_compiled_graphs(tmp_path) -> None:
    cache = open_cache(tmp_path / "c")
    published, key = Published(cache.path), "cc" + "0" * 62
    graph = cache.path / "inductor" / "fxgraph" / "graph.py"
    graph.parent.mkdir(parents=True)
    graph.write_text("compiled")
    published.publish(key, {"seconds": 1.0})
    cache.put_result("aa" + "0" * 62, ok_result())
    t = time.time() - 10 * 86400
    os.utime(cache.results_dir / "aa" / f"{'aa' + '0' * 62}.json", (t, t))
    prune(cache, older_than=parse_age("7d"))
    assert published.manifest(key) is not None, "a pruned result takes no compiled graph with it"
    os.utime(graph, (t, t))
    prune(cache, older_than=parse_age("7d"))
    assert not graph.exists() and published.manifest(key) is None, "its graphs may be gone: compile again"


def test_parse_age_and_unwritable_root(tmp_path) -> None:
    assert parse_age("12h") == 43200 and parse_age("30") == 30
    with pytest.raises(AutotuneError):
        parse_age("soon")
    with pytest.raises(AutotuneError, match="cannot write"):
        open_cache("/proc/autotune-cache")
