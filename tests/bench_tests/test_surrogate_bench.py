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


SMALL = Path(__file__).resolve().parents[2] / "landscapes" / "xla-vit.jsonl"


def test_best_first_measures_the_surrogates_best_configurations_best_first() -> None:
    from bench.surrogate_bench import AFTER, STRATEGIES, _best_first, _one, surrogate

    ranked = surrogate(str(SMALL)).ranked()
    starts = _best_first(str(SMALL))
    assert starts == [dict(r.params) for r in ranked[:AFTER[0]]]
    assert [r.figure for r in ranked[:AFTER[0]]] == sorted((r.figure for r in ranked[:AFTER[0]]), reverse=True)
    # Without noise it reports the best from its first trial: the reference a target under noise
    # compares with, where the by-hand method is at it.
    best_first = next(s for s in STRATEGIES if s.name == "best-first")
    outcome = _one((str(SMALL), best_first, 0, 20, False, 0.0))
    assert outcome.reach[0.05][0] == 1.0
    assert outcome.after[AFTER[0]] == 1.0


def test_race_cost_counts_the_re_measurements_and_the_time_they_add() -> None:
    from bench.surrogate_bench import _cost_one

    small_xla = str(WHOLE.parents[1] / "xla-vit.jsonl")
    off_runs, off_seconds = _cost_one((small_xla, 1, 0.0))
    on_runs, on_seconds = _cost_one((small_xla, 1, 0.1))
    assert off_runs == 0, "--race 0 measures nothing again"
    # The noise measured early (two more runs of one configuration) and at least one race or final run.
    assert on_runs >= 3 and on_seconds > off_seconds, (on_runs, on_seconds, off_seconds)
