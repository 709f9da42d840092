"""The configurations one knob away: what the surrogate's local search steps through."""

from __future__ import annotations

from autotune.search.neighbours import one_knob_changes
from autotune.space import parse_space

SPACE = parse_space("""\
target: inductor
parameters:
  mode: {type: categorical, choices: [eager, default], default: eager}
  cpp_simdlen: {type: int, choices: [256, 512], when: {mode: [default]}}
  batch_size: {type: int, choices: [16, 32], default: 16}
""")
EAGER = {"mode": "eager", "batch_size": 16}


def test_a_knob_that_does_not_apply_is_not_changed() -> None:
    assert one_knob_changes(SPACE, EAGER) == [{"mode": "default", "batch_size": 16}, {"mode": "eager", "batch_size": 32}]


def test_a_change_that_stops_a_knob_applying_drops_it() -> None:
    compiled = {"mode": "default", "cpp_simdlen": 512, "batch_size": 16}
    changes = one_knob_changes(SPACE, compiled)
    assert EAGER in changes
    assert {"mode": "default", "batch_size": 16} in changes  # cpp_simdlen unset: the script's own
    assert {"mode": "default", "cpp_simdlen": 256, "batch_size": 16} in changes
    assert compiled not in changes
