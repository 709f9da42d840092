"""bench/surrogate_bench.py starts autotune's studies as a study starts today: a recording of a
built-in space keeps its space as recorded, but the known-good configurations are the strategy's."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.landscapes.landscape import load_landscape
from autotune.space import builtin_space
from bench.surrogate_bench import study_starts

WHOLE = Path(__file__).resolve().parents[2] / "landscapes" / "whole" / "inductor.jsonl"


def _recorded_with(tmp_path: Path, known_good: str, space_source: str) -> Path:
    """The whole inductor recording, its header's space with another known-good list."""
    lines = WHOLE.read_text().splitlines()
    header = json.loads(lines[0])
    text = header["space_yaml"]
    header["space_yaml"] = text[:text.index("known_good:")] + f"known_good:\n  - {known_good}\n"
    header["space_source"] = space_source
    path = tmp_path / "recorded.jsonl"
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    return path


def test_a_recording_of_the_built_in_space_starts_from_its_known_good_of_today(tmp_path: Path) -> None:
    land = load_landscape(_recorded_with(tmp_path, "{num_workers: 2}", "search_spaces/inductor.yaml"))
    assert land.space.known_good == [{"num_workers": 2}]
    starts = study_starts(land)
    assert starts[0] == land.space.defaults()
    assert starts[1:] == [land.space.validate({**land.space.defaults(), **c})
                          for c in builtin_space("inductor").known_good]


def test_a_recording_of_a_space_of_its_own_keeps_its_known_good(tmp_path: Path) -> None:
    land = load_landscape(_recorded_with(tmp_path, "{num_workers: 2}", "landscapes/spaces/mine.yaml"))
    assert study_starts(land)[1:] == [{"num_workers": 2, "precision": "fp32"}]
