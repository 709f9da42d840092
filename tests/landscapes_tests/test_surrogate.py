"""The surrogate of a landscape: it recovers a known function from half of its configurations,
predicts failures where they are, and answers a simulated study on configurations never recorded."""

from __future__ import annotations

import json
import math
import random

import optuna
import pytest

from autotune.landscapes.landscape import ConfigRecord, Landscape
from autotune.landscapes.surrogate import Surrogate, SurrogateLandscape
from autotune.landscapes.surrogate_error import held_out_error
from autotune.search.configurations import enumerate_space, starting_points
from autotune.space import config_key, parse_space
from bench.lib.simulate import simulate

SPACE = """\
target: xla
parameters:
  batch_size: {type: int, choices: [8, 16, 32, 64], default: 8}
  precision: {type: categorical, choices: [fp32, bf16_model, bf16_autocast], default: fp32}
  backend_opt_level: {type: int, choices: [0, 1, 2, 3], default: 2}
  fast_math: {type: bool, default: false}
  thunk_runtime: {type: bool, default: true}
"""
SPEED = {"fp32": 1.0, "bf16_model": 1.5, "bf16_autocast": 1.2}


def truth(params: dict) -> float | None:
    """The known function: None (a crash) without the thunk runtime, else a product of effects."""
    if params.get("thunk_runtime") is False:
        return None
    return (100.0 * math.sqrt(params["batch_size"]) * SPEED[params["precision"]]
            * (1 + 0.1 * params["backend_opt_level"]) * (1.1 if params.get("fast_math") else 1.0))


def record_of(index: int, params: dict, noise: random.Random) -> ConfigRecord:
    value = truth(params)
    compile_s = 5.0 + params["backend_opt_level"]
    if value is None:
        return ConfigRecord(index=index, params=params, status="failed", category="crash",
                            reason="SIGABRT", compile_seconds=0.0, wall_seconds=4.0)
    measured = value * math.exp(noise.gauss(0.0, 0.01))  # 95% intervals of about ±2%
    return ConfigRecord(index=index, params=params, status="ok", throughput=measured, ci95_low=measured * 0.98,
                        ci95_high=measured * 1.02, samples_per_step=params["batch_size"], steps_measured=40,
                        windows=8, converged=True, warmup_steps=4, warmup_seconds=1.0, measure_seconds=3.0,
                        compile_seconds=compile_s, wall_seconds=compile_s + 6.0, graphs_compiled=2)


def landscape(keep: float = 1.0, seed: int = 0) -> tuple[Landscape, list[dict]]:
    """A recording of a share ``keep`` of the space (drawn with ``seed``), and the configurations left out."""
    configs = enumerate_space(parse_space(SPACE))
    rng = random.Random(seed)
    kept = sorted(rng.sample(range(len(configs)), int(keep * len(configs))))
    noise = random.Random(seed + 1)
    header = {"kind": "header", "target": "xla", "space_yaml": SPACE, "compile_cache_persists": False,
              "configurations": len(configs)}
    land = Landscape(header, [record_of(i, configs[i], noise) for i in kept], "synthetic.jsonl")
    return land, [c for i, c in enumerate(configs) if i not in set(kept)]


def test_the_surrogate_recovers_the_function_on_configurations_it_never_saw() -> None:
    land, unseen = landscape(keep=0.5)
    assert len(land.records) == 96 and len(unseen) == 96
    answers = Surrogate.of(land).predict(unseen)
    for params, rec in zip(unseen, answers):
        assert rec.ok == (truth(params) is not None), params  # failures predicted where they are
        if not rec.ok:
            assert rec.category == "crash" and "SIGABRT" in rec.reason
    errors = sorted(abs(r.throughput - truth(p)) / truth(p) for p, r in zip(unseen, answers) if r.ok)
    # Stated bounds: half the predictions within 5% of the function, nine in ten within 12%
    # (measured: 3% and 7%; the recorded noise is about 1%).
    assert errors[len(errors) // 2] < 0.05
    assert errors[int(0.9 * len(errors))] < 0.12
    rec = answers[0]
    assert rec.index == -1 and rec.wall_seconds > rec.compile_seconds > 0


def test_held_out_error_says_how_far_to_trust_it() -> None:
    land, _ = landscape()
    error = held_out_error(land, folds=4)
    assert error.records == 192 and error.failures == 96
    assert error.median_relative_error < 0.05 < error.constant_error
    assert error.rank_correlation > 0.9
    assert error.status_accuracy == 1.0 and error.failures_predicted == 1.0
    assert "4-fold over 192" in error.line() and "100% of its 96 failures predicted" in error.line()
    # The top tenth of the 96 that ran (9 of them): a function of multiplicative effects is no harder there.
    assert error.top == 9 and error.top_error < 0.1 and abs(error.top_bias) < 0.1
    assert "on the 9 fastest recorded: median" in error.line()


def test_held_out_error_says_when_the_recorded_top_is_put_lower_than_measured() -> None:
    # The fastest few measured far above what the effects of their parameters add up to (a
    # combination that works better than its parts, or lucky measurements): a model of main
    # effects and pairs cannot put them there, and a search on it would never find them.
    land, _ = landscape()
    fastest = sorted((r for r in land.records if r.ok), key=lambda r: -r.throughput)[:18]
    for r in fastest[::2]:
        r.throughput, r.ci95_low, r.ci95_high = r.throughput * 2, r.ci95_low * 2, r.ci95_high * 2
    error = held_out_error(land, folds=4)
    assert error.top == 9 and error.top_bias < -0.2
    assert "predicted" in error.line() and "below the recorded" in error.line()



def test_a_configuration_measured_far_from_what_its_parameters_add_up_to_is_answered_as_measured(monkeypatch) -> None:
    # One configuration runs twice as fast as its parameters' effects make it elsewhere, measured
    # within ±2%: the surrogate answers it nearer its measurement than the sum of the effects (not
    # at it: one departure among measurements that agree otherwise is half taken for a run that
    # went differently), and leaves configurations that differ from it in most parameters as the
    # effects make them.
    import autotune.landscapes.surrogate as surrogate_module

    land, _ = landscape()
    odd = next(r for r in land.records if r.ok and r.params["batch_size"] == 16 and r.params["precision"] == "fp32"
               and r.params["backend_opt_level"] == 1)
    odd.throughput, odd.ci95_low, odd.ci95_high = odd.throughput * 2, odd.ci95_low * 2, odd.ci95_high * 2
    far = [r.params for r in land.records if r.ok and sum(r.params[k] != odd.params[k] for k in odd.params) >= 3]

    corrected = Surrogate.of(land)
    [answer] = corrected.predict([odd.params])
    monkeypatch.setattr(surrogate_module, "RESIDUALS", False)
    boosting_alone = Surrogate.of(land)
    [pulled_back] = boosting_alone.predict([odd.params])
    assert pulled_back.throughput < 0.7 * odd.throughput  # what the correction is for
    assert (pulled_back.throughput + odd.throughput) / 2 < answer.throughput < odd.ci95_high
    near_far = [abs(a.throughput / b.throughput - 1)
                for a, b in zip(corrected.predict(far), boosting_alone.predict(far))]
    assert sorted(near_far)[len(near_far) // 2] < 0.02

def test_a_study_runs_on_the_surrogate_and_its_best_is_the_functions() -> None:
    land, unseen = landscape(keep=0.5)
    surrogate = SurrogateLandscape(land)
    assert surrogate.size == 192 and surrogate.name == "synthetic (surrogate)"
    best = surrogate.best()
    assert best.params == {"backend_opt_level": 3, "batch_size": 64, "fast_math": True, "precision": "bf16_model",
                           "thunk_runtime": True}
    assert "every one of its 192" in surrogate.best_basis
    space = surrogate.space
    trace = simulate(surrogate, optuna.samplers.RandomSampler(seed=1), starting_points=starting_points(space),
                     max_trials=30)
    assert len(trace.steps) == 30
    keys = {s.key for s in trace.steps}
    assert keys & {config_key(c) for c in unseen}, "configurations never recorded were answered"
    for s in trace.steps:  # the same answer every time a configuration is asked
        again = surrogate.get(json.loads(s.key))
        assert s.value == (again.throughput if again.ok else None)


def test_a_landscape_whose_every_configuration_failed_has_no_surrogate() -> None:
    land, _ = landscape()
    failed = Landscape(land.header, [r for r in land.records if not r.ok], land.path)
    with pytest.raises(Exception, match="at least one recorded configuration that ran"):
        Surrogate.of(failed)


def test_the_best_of_a_space_too_large_to_enumerate_is_searched_for(monkeypatch) -> None:
    # As on the built-in spaces: a sample of the space and a local search from its best.
    monkeypatch.setattr("autotune.landscapes.surrogate.MAX_ENUMERATED", 40)
    monkeypatch.setattr("autotune.landscapes.surrogate.LOCAL_STARTS", 3)
    land, _ = landscape(keep=0.5)
    surrogate = SurrogateLandscape(land)
    assert surrogate.size == 4 * 3 * 4 * 2 * 2  # the grid's bound: not enumerated
    best = surrogate.best()
    assert "40 sampled configurations of up to 192, and a local search from the best 3" == surrogate.best_basis
    assert best.params == {"backend_opt_level": 3, "batch_size": 64, "fast_math": True, "precision": "bf16_model",
                           "thunk_runtime": True}


def test_it_says_whether_its_best_rests_on_a_measurement() -> None:
    land, _ = landscape()
    surrogate = SurrogateLandscape(land)
    best = surrogate.best()
    runs = surrogate.measured(best.params)
    assert [r.params for r in runs] == [best.params] and runs[0].index >= 0
    assert surrogate.best_line().startswith(f"its best was recorded: measured {runs[0].throughput:,.1f} samples/s")
    ranked = surrogate.ranked()
    assert ranked[0] is best and [r.throughput for r in ranked] == sorted((r.throughput for r in ranked), reverse=True)
    assert len({config_key(r.params) for r in ranked}) == len(ranked) == 96  # each configuration that runs, once
    # the same recording without its best: the surrogate still predicts the best there, unmeasured
    without = Landscape(land.header, [r for r in land.records if r.params != best.params], land.path)
    other = SurrogateLandscape(without)
    assert other.best().params == best.params
    assert other.measured(best.params) == [] and "its best was never recorded" in other.best_line()
