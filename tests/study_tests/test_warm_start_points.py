"""What a warm-started study measures first: the baseline, the earlier best, and only those
known-good configurations that move a knob no earlier best moved."""

from __future__ import annotations

from autotune.search.configurations import starting_points
from autotune.space import parse_space
from autotune.study.warm_start import after_baseline

SPACE = parse_space("""\
target: inductor
parameters:
  batch_size: {type: int, choices: [16, 64]}
  mode: {type: categorical, choices: [eager, default]}
  num_workers: {type: int, choices: [0, 1]}
known_good:
  - {mode: default}
  - {num_workers: 1}
""")


def test_a_known_good_configuration_whose_knobs_the_earlier_best_moved_is_not_measured_first() -> None:
    baseline, compiled, workers = starting_points(SPACE)
    earlier_best = SPACE.validate({"batch_size": 64, "mode": "default"})
    assert after_baseline([baseline, compiled, workers], [earlier_best]) == [baseline, earlier_best, workers], \
        "the earlier study chose the mode; it never moved num_workers, so that guess is still measured"


def test_a_cold_study_measures_every_known_good_configuration() -> None:
    points = starting_points(SPACE)
    assert after_baseline(points, []) == points


def test_the_earlier_best_is_measured_once_where_it_is_a_known_good_configuration() -> None:
    baseline, compiled, workers = starting_points(SPACE)
    assert after_baseline([baseline, compiled, workers], [compiled]) == [baseline, compiled, workers]
