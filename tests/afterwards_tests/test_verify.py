"""``autotune verify``: the best and the baseline measured again, alternating, against the gain recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.provenance import provenance
from autotune.records import ApplySpec
from autotune.results.outputs import BestConfig, write_outputs
from autotune.afterwards.verify import provenance_changes, speedup_interval
from autotune.targets import resolve_target
from autotune.trial import prepare_trial

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "scripts" / "tiny_train.py"


def test_speedup_interval_is_the_ratio_of_means_with_the_spread_between_runs() -> None:
    gain = speedup_interval([200.0, 210.0, 190.0], [100.0, 105.0, 95.0])
    assert gain.mean == pytest.approx(2.0)
    assert gain.low < 2.0 < gain.high and gain.high / gain.low < 1.3
    same = speedup_interval([200.0, 200.0], [100.0, 100.0])
    assert same.mean == same.low == same.high == pytest.approx(2.0)
    # Where less is better (a latency), the speedup is baseline over best.
    assert speedup_interval([5.0, 5.0], [10.0, 10.0], maximize=False).mean == pytest.approx(2.0)


def test_provenance_changes_name_what_moved() -> None:
    then = {"versions": {"torch": "2.9.0", "neuronx-cc": "2.20"}, "instance_type": "trn1.2xlarge",
            "script_sha256": "a", "device": "neuron"}
    now = {"versions": {"torch": "2.9.0", "neuronx-cc": "2.21"}, "instance_type": "trn1.2xlarge",
           "script_sha256": "b", "device": "neuron"}
    assert provenance_changes(then, now) == {"script_sha256": ["a", "b"], "neuronx-cc": ["2.20", "2.21"]}


def _best_json(script: Path, out: Path, recorded: float) -> Path:
    """A best.json as a study of ``script`` on the inductor target writes it: batch 64 against the
    script's own 32, uncompiled."""
    sets = {"batch_size": 64, "mode": "eager", "num_workers": 0}
    plan = prepare_trial(script, target="inductor", sets=sets).plan
    base = {"mode": "eager", "num_workers": 0}
    best = BestConfig(study="tiny-inductor", trial=3, target="inductor", params=plan.params, env=plan.env,
                      value=1000.0, speedup=recorded, baseline_params=base,
                      provenance=provenance(resolve_target("inductor", script), script, []),
                      apply=ApplySpec.of(plan, study="tiny-inductor", trial=3, script=script.name, env=plan.env))
    write_outputs(out, best, [], None)
    return out / "best.json"


def _verify(best: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune.cli", "verify", str(best), "--repeats", "2", "--json"],
                          cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_verify_holds_then_fails_once_the_script_ignores_the_knob(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TINY.read_text())
    best = _best_json(script, tmp_path, recorded=1.2)

    held = _verify(best, tmp_path)
    assert held.returncode == 0, held.stderr
    outcome = json.loads(held.stdout)
    assert outcome["holds"] is True
    assert [r["configuration"] for r in outcome["runs"]] == ["baseline", "best", "best", "baseline"]
    assert outcome["speedup"] > 1.2 or outcome["ci95_high"] >= 1.2
    assert outcome["recorded_speedup"] == 1.2 and outcome["changed"] == {}

    # The script now batches its data itself: the DataLoader's batch size no longer reaches it.
    script.write_text(TINY.read_text().replace(
        "loader = DataLoader(data, batch_size=args.batch_size,",
        "loader = DataLoader(data, batch_sampler=torch.utils.data.BatchSampler("
        "torch.utils.data.RandomSampler(data), args.batch_size, drop_last=True),").replace(
        "shuffle=True, drop_last=True)", ")"))
    failed = _verify(best, tmp_path)
    assert failed.returncode == 1, failed.stderr
    outcome = json.loads(failed.stdout)
    assert outcome["holds"] is False
    assert any(r.startswith("batch_size=64 no longer reached the script") for r in outcome["reasons"])
    assert "since the study, the script changed" in outcome["reasons"]
    assert "script_sha256" in outcome["changed"]


def test_verify_refuses_bad_input(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TINY.read_text())
    best = _best_json(script, tmp_path, recorded=1.2)
    for argv, message in [
        ([str(best), "--repeats", "1"], "--repeats must be at least 2"),
        ([str(tmp_path / "nope.json")], "no such file"),
    ]:
        done = subprocess.run([sys.executable, "-m", "autotune.cli", "verify", *argv], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert message in done.stderr and "Traceback" not in done.stderr
    data = json.loads(best.read_text())
    data["target"] = "xla"  # a best.json of another target than its space's
    best.write_text(json.dumps(data))
    done = subprocess.run([sys.executable, "-m", "autotune.cli", "verify", str(best)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "unknown parameter 'mode' for target xla" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2
    data["target"] = "inductor"
    data["speedup"] = None
    best.write_text(json.dumps(data))
    done = subprocess.run([sys.executable, "-m", "autotune.cli", "verify", str(best)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no measured baseline" in done.stderr
