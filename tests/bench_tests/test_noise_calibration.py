"""bench/noise_calibration.py recomputes its coverage from saved runs (``--from``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench" / "noise_calibration.py"


def _run(x: float, half: float) -> dict:
    return {"throughput": x, "ci95_low": x - half, "ci95_high": x + half}


def _saved(tmp_path: Path, configs: list[list[dict]]) -> Path:
    data = {"date": "2026-11-26T00:00:00+00:00", "cpu_count": 2, "env": {}, "max_measure_seconds": 5.0,
            "repeats": 3, "examples": {"a": {"script": "a.py", "target": "inductor", "args": [],
                                             "configs": [{"params": {"n": i}, "runs": runs}
                                                         for i, runs in enumerate(configs)]}}}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(data))
    return path


def _calibrate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=120)


# Each configuration's runs read 1.0, 1.1 and 0.9 times its speed, each within +-5%: of each
# configuration only the middle run's interval covers the mean of the other two.
ONE = [_run(100, 5), _run(110, 5), _run(90, 4), {"failed": "crash"}]
TWO = [_run(200, 10), _run(220, 10), _run(180, 8)]


def test_the_combined_interval_takes_the_spread_from_the_other_configurations(tmp_path) -> None:
    done = _calibrate("--from", str(_saved(tmp_path, [ONE, TWO])), "--json")
    assert done.returncode == 0, done.stderr
    a = json.loads(done.stdout)["examples"]["a"]
    assert (a["runs"], a["within"], a["combined"]) == (6, 2, 6)
    assert a["df"] == 4 and 0.3 < a["spread"] < 0.5  # runs 10% apart, over 4 degrees of freedom
    # Both configurations read 1.0, 1.1 and 0.9 times their speed round by round: all of the
    # spread is the rounds', none is left within a round.
    middle = (1.0 * 1.1 * 0.9) ** (1 / 3)
    assert [round(f, 6) for f in a["round_factors"]] == [round(x / middle, 6) for x in (1.0, 1.1, 0.9)]
    assert a["sigma_in_round"] < 1e-9 and a["df_in_round"] == 2
    text = _calibrate("--from", str(_saved(tmp_path, [ONE, TWO]))).stdout
    assert "within-run 2/6 (33%), combined 6/6 (100%)" in text and "failed (crash)" in text


def test_a_configuration_alone_has_no_spread_to_borrow(tmp_path) -> None:
    # Judged without its own runs, a lone configuration's combined interval is its within-run one.
    done = _calibrate("--from", str(_saved(tmp_path, [ONE])), "--json")
    assert done.returncode == 1
    a = json.loads(done.stdout)["examples"]["a"]
    assert (a["runs"], a["within"], a["combined"]) == (3, 1, 1)


def test_runs_that_part_within_a_round_keep_their_spread_and_a_round_with_a_failure_is_left_out(tmp_path) -> None:
    # The second configuration reads high where the first reads low: no load common to both.
    other = [_run(220, 10), _run(200, 10), _run(200, 8), _run(200, 8)]
    done = _calibrate("--from", str(_saved(tmp_path, [ONE, other])), "--json")
    a = json.loads(done.stdout)["examples"]["a"]
    assert len(a["round_factors"]) == 3, "the fourth round, where the first configuration failed, is left out"
    assert a["df_in_round"] == 2 and a["sigma_in_round"] > 0.05
    text = _calibrate("--from", str(_saved(tmp_path, [ONE, other]))).stdout
    assert "round by round" in text and f"within a round: sigma {a['sigma_in_round']:.3f} (df 2)" in text


def test_it_says_how_the_runs_were_measured(tmp_path) -> None:
    path = _saved(tmp_path, [ONE, TWO])
    assert "at least" not in _calibrate("--from", str(path)).stdout.splitlines()[0]
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "neighbour": True, "min_measure_seconds": 10.0, "max_measure_seconds": 10.0}))
    first = _calibrate("--from", str(path)).stdout.splitlines()[0]
    assert "beside a neighbour burning a core on and off" in first
    assert "3 runs per configuration, 10 s measured each after warm-up" in first
    path.write_text(json.dumps({**data, "min_measure_seconds": 10.0, "max_measure_seconds": 30.0}))
    assert "at least 10 s and at most 30 s measured each" in _calibrate("--from", str(path)).stdout


def test_a_negative_number_of_seconds_is_refused_before_anything_runs() -> None:
    done = _calibrate("--min-seconds", "-1")
    assert done.returncode == 2 and "--min-seconds must be at least 0" in done.stderr
