"""Earlier studies' results as the sampler's prior (:meth:`AutotuneSampler.warm`): put on this
study's scale through a configuration both measured, weighed less than its own measurements,
never its trials."""

from __future__ import annotations

import optuna

from autotune.search.configurations import enumerate_space, starting_points
from autotune.search.strategy import AutotuneSampler

from .test_strategy import SPACE, drive, speed

BEST = max((c for c in enumerate_space(SPACE) if speed(c) is not None), key=speed)


def _warm_study(sampler: AutotuneSampler) -> optuna.Study:
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.enqueue_trial(starting_points(SPACE)[0])
    return study


def _earlier(scale: float) -> list[tuple[dict, float | None]]:
    """Every configuration, measured on a machine ``scale`` times as fast."""
    return [(c, None if speed(c) is None else scale * speed(c)) for c in enumerate_space(SPACE)]


def cast_bound(config: dict) -> float | None:
    """Another made-up landscape: the model in bf16 is three times as fast, the rest matters little."""
    if speed(config) is None:
        return None
    return {"fp32": 1.0, "bf16_model": 3.0, "bf16_autocast": 1.2}[config["precision"]] \
        * (1 + config["batch_size"] / 1000) * (1.0 if config["backend_opt_level"] == 2 else 0.9)


def test_an_earlier_study_of_another_machine_chooses_the_first_move_from_the_baseline() -> None:
    """After the baseline alone, the trust region allows one knob's change: the earlier study, on a
    machine 0.4 times as fast, says which change is best (the model in bf16); cold, the model
    knows nothing yet and measures where it knows least (the ends of the batch sizes)."""
    baseline = starting_points(SPACE)[0]
    earlier = [(c, None if cast_bound(c) is None else 0.4 * cast_bound(c)) for c in enumerate_space(SPACE)]
    moves = [c for c in enumerate_space(SPACE) if sum(c.get(k) != baseline.get(k) for k in SPACE.parameters) == 1]
    best_move = max((c for c in moves if cast_bound(c) is not None), key=cast_bound)
    for seed in range(4):
        sampler = AutotuneSampler(SPACE, seed=seed)
        sampler.warm(earlier)
        measured = drive(sampler, SPACE, 2, objective=cast_bound, study=_warm_study(sampler))
        assert measured[1] == best_move, (seed, measured)
    cold = [drive(sampler, SPACE, 2, objective=cast_bound, study=_warm_study(sampler))[1]
            for sampler in (AutotuneSampler(SPACE, seed=seed) for seed in range(4))]
    assert best_move not in cold, "cold, the second trial is another (else this shows nothing)"


def test_earlier_results_that_share_no_configuration_with_the_study_change_nothing() -> None:
    baseline = starting_points(SPACE)[0]
    apart = [(c, v) for c, v in _earlier(0.4) if c != baseline]
    for seed in range(3):
        warm = AutotuneSampler(SPACE, seed=seed)
        warm.warm(apart)
        cold = AutotuneSampler(SPACE, seed=seed)
        # the second trial: the baseline alone is measured, and the earlier study did not measure it
        assert drive(warm, SPACE, 2, study=_warm_study(warm)) == drive(cold, SPACE, 2, study=_warm_study(cold))


def test_earlier_results_are_not_the_studys_trials_and_never_its_best() -> None:
    sampler = AutotuneSampler(SPACE, seed=0)
    sampler.warm([(BEST, 1e9), *_earlier(1.0)])
    study = _warm_study(sampler)
    drive(sampler, SPACE, 3, study=study)
    assert len(study.trials) == 3 and study.best_value < 1e9
    assert sampler.expected_gain(study) is not None


def test_configurations_of_another_space_are_left_out() -> None:
    sampler = AutotuneSampler(SPACE.restrict({"precision": "fp32"}), seed=0)
    sampler.warm([({"batch_size": 64, "precision": "bf16_model"}, 5.0),  # --set holds fp32
                  ({"batch_size": 64, "unknown_knob": 3}, 5.0),           # a knob this space lacks
                  ({"batch_size": 12}, 5.0),                              # a value it lacks
                  ({"batch_size": 64, "precision": "fp32"}, 5.0),
                  ({"batch_size": 32}, None)])                            # a failure: no value to learn
    assert sampler.prior == [({"batch_size": 64}, 5.0)]
