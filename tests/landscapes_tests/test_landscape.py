"""Recording a landscape: every configuration once, resumable, failures kept with their category."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.errors import AutotuneError, SpaceError
from autotune.landscapes.landscape import RecordOptions, load_landscape, record, summary
from autotune.records import MeasurementProtocol
from autotune.search.configurations import enumerate_space
from autotune.space import load_space, parse_space

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "scripts" / "tiny_train.py"

SPACE = """\
target: inductor
parameters:
  batch_size: {type: int, choices: [32, 64], default: 32}
  mode: {type: categorical, choices: [eager], default: eager}
  precision: {type: categorical, choices: [fp32, int4], default: fp32}
"""


def test_the_shipped_spaces_are_small_grids_with_failures() -> None:
    for name, size in (("xla-vit", 56), ("inductor-vit", 60)):
        configs = enumerate_space(load_space(REPO / "landscapes" / "spaces" / f"{name}.yaml"))
        assert len(configs) == size >= 48


def test_a_space_with_a_range_cannot_be_enumerated() -> None:
    space = parse_space("target: inductor\nparameters:\n  batch_size: {type: int, low: 8, high: 64}\n")
    with pytest.raises(SpaceError, match="needs every parameter to have 'choices'"):
        enumerate_space(space)


def test_configurations_the_target_rejects_are_not_enumerated() -> None:
    space = parse_space("""\
target: xla
parameters:
  openxla: {type: bool, default: false}
  batches_per_execution: {type: int, choices: [1, 2], default: 1}
""")
    configs = enumerate_space(space)
    assert {"openxla": True, "batches_per_execution": 2} not in configs  # XlaTarget.check rejects it
    assert len(configs) == 3


def test_a_torn_last_line_is_ignored(tmp_path) -> None:
    path = tmp_path / "l.jsonl"
    path.write_text(json.dumps({"kind": "header", "target": "inductor", "space_yaml": SPACE}) + "\n"
                    + json.dumps({"kind": "config", "index": 0, "params": {"batch_size": 32}, "status": "ok",
                                  "throughput": 1.0}) + "\n" + '{"kind": "config", "ind')
    land = load_landscape(path)
    assert [r.index for r in land.records] == [0]


@pytest.mark.slow
def test_a_recording_continues_where_it_stopped_and_keeps_failures(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    space_file = tmp_path / "space.yaml"
    space_file.write_text(SPACE.replace("fp32, int4", "fp32"))
    out = tmp_path / "tiny.jsonl"
    options = RecordOptions(script=TINY, target="inductor", space=space_file, out=out, args=["--steps", "3000"],
                            trial_timeout=120, protocol=MeasurementProtocol(max_measure_seconds=1.0, min_windows=2),
                            limit=1)
    first = record(options)
    assert len(first.records) == 1
    options.limit = None
    second = record(options)
    assert [r.index for r in second.records] == [0, 1]  # the first configuration was not run again
    assert all(r.ok and r.throughput > 0 and r.wall_seconds > 0 for r in second.records)
    assert summary(second)["ok"] == 2
    other = tmp_path / "other.yaml"
    other.write_text(SPACE)
    with pytest.raises(AutotuneError, match="another target, space"):
        record(RecordOptions(script=TINY, target="inductor", space=other, out=out))
