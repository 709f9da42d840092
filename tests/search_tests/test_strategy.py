"""autotune's sampler: whole configurations, never one measured before, failures learned."""

from __future__ import annotations

import numpy as np
import optuna
import pytest

from autotune.search.configurations import enumerate_space
from autotune.search.models import (
    CategoricalGP,
    convicted,
    culprit_probability,
    success_probability,
)
from autotune.execution.pool import Finished
from autotune.records import CompileStats, Failure, FailureCategory, Measurement, TrialRequest, TrialResult
from autotune.search.samplers import suggest
from autotune.search import strategy
from autotune.search.encoding import _distance_table, _positions
from autotune.search.strategy import AutotuneSampler
from autotune.space import builtin_space, config_key, parse_space
from autotune.study.study import Study
from autotune.study.options import StudyOptions
from autotune.storage.attrs import write

SPACE = parse_space("""\
target: xla
parameters:
  batch_size: {type: int, choices: [8, 16, 32, 64], default: 16}
  precision: {type: categorical, choices: [fp32, bf16_model, bf16_autocast], default: fp32}
  backend_opt_level: {type: int, choices: [0, 2], default: 2}
  thunk_runtime: {type: bool, choices: [false], when: {backend_opt_level: [0]}}
""")


def speed(config: dict) -> float | None:
    """A made-up landscape: bigger batches and bf16 are faster; thunk_runtime=false crashes."""
    if config.get("thunk_runtime") is False:
        return None
    return config["batch_size"] * {"fp32": 1.0, "bf16_model": 1.3, "bf16_autocast": 1.2}[config["precision"]] \
        * (1.0 if config["backend_opt_level"] == 2 else 0.8)


class ObjectivePool:
    """A trial pool of one worker that answers each trial at once with ``objective`` of its
    configuration (a compile error where it gives None), each costing 10 s of which 4 s compiling."""

    def __init__(self, objective) -> None:
        self.objective = objective
        self.measured: list[dict] = []
        self.finished: list = []

    @property
    def free(self) -> int:
        return 0 if self.finished else 1

    def submit(self, request: TrialRequest, tag) -> None:
        config = request.plan.params
        self.measured.append(config)
        value = self.objective(config)
        result = TrialResult(status="ok" if value is not None else "failed", plan=request.plan, wall_seconds=10.0,
                             compile=CompileStats(compile_seconds=4.0))
        if value is None:
            result.failure = Failure(category=FailureCategory.compile_error, reason="made up")
        else:
            result.measurement = Measurement(throughput=value, ci95_low=value, ci95_high=value, step_time_median=0.01,
                                             step_time_p90=0.01, samples_per_step=1, steps_measured=100, windows=5,
                                             converged=True, warmup_steps=1, warmup_seconds=1.0)
        self.finished.append(Finished(tag, result=result))

    def wait(self, timeout: float) -> list:
        out, self.finished = self.finished, []
        return out

    def shutdown(self) -> None:
        pass


def drive(sampler, space, trials: int, objective=speed, study=None, starting: list[dict] | None = None) -> list[dict]:
    """``trials`` more trials on ``objective`` (in ``study``, an Optuna study in memory, or a new
    one), driven by autotune's study as ``autotune run`` drives one, measuring ``starting`` first;
    returns the configurations in the order measured."""
    storage = study._storage if study is not None else optuna.storages.InMemoryStorage()
    held = sum(t.state.is_finished() for t in study.get_trials(deepcopy=False)) if study is not None else 0
    pool = ObjectivePool(objective)
    # Without re-measurements (--race 0): what is asked of the sampler, and nothing else, is measured.
    options = StudyOptions(script=__file__, target=space.target, trials=held + trials, prune=False, race=0,
                           study=study.study_name if study is not None else None)
    Study(options, pools=lambda _: pool, in_memory=storage, space=space, sampler=sampler,
          starting_points=starting or []).run()
    return pool.measured


def test_every_proposal_is_a_new_configuration_until_the_space_is_exhausted() -> None:
    size = len(enumerate_space(SPACE))
    measured = drive(AutotuneSampler(SPACE, seed=0), SPACE, size)
    assert len({config_key(c) for c in measured}) == size


def test_it_finds_the_best_of_a_structured_space_in_few_trials() -> None:
    best = max(speed(c) or 0 for c in enumerate_space(SPACE))
    needed = []
    for seed in range(3):
        values = [speed(c) or 0 for c in drive(AutotuneSampler(SPACE, seed=seed), SPACE, 12)]
        needed.append(values.index(best) + 1 if best in values else 99)
    assert sorted(needed)[1] <= 10  # the median of 3 seeds; the space has 36 configurations


def test_two_failures_that_share_a_flag_convict_it() -> None:
    sizes = [3, 2]  # (batch size index, flag: 0 unset, 1 set)
    X = np.array([[0, 0], [1, 0], [2, 0], [0, 1], [2, 1]])
    ok = np.array([1.0, 1.0, 1.0, 0.0, 0.0])
    p = culprit_probability(X, ok, np.array([[1, 1], [1, 0]]), sizes)
    assert p[0] > 0.6 and p[1] == 0.0


def test_a_level_that_failed_twice_and_never_ran_is_convicted() -> None:
    sizes = [3, 2]  # (batch size index, flag: 0 unset, 1 set)
    X = np.array([[0, 0], [1, 0], [0, 1], [2, 1]])
    ok = np.array([1.0, 1.0, 0.0, 0.0])
    assert convicted(X, ok, np.array([[1, 1], [2, 0], [1, 0]]), sizes).tolist() == [True, False, False]
    once = convicted(X[:3], ok[:3], np.array([[1, 1]]), sizes)
    assert once.tolist() == [False], "one failure leaves the flag a suspect, not convicted"
    cleared = convicted(np.vstack([X, [[1, 1]]]), np.append(ok, 1.0), np.array([[1, 1]]), sizes)
    assert cleared.tolist() == [False], "a flag that ran once breaks only in combination"
    timed_out = convicted(X, ok, np.array([[1, 1]]), sizes, broke=np.array([False, False, True, False]))
    assert timed_out.tolist() == [False], "only the failures passed as broke count"
    unset = convicted(np.array([[1, 0], [2, 0]]), np.array([0.0, 0.0]), np.array([[0, 0], [0, 1]]), sizes)
    assert unset.tolist() == [False, False], "a parameter left unset (its first level) is never convicted"


def test_a_flag_that_failed_twice_is_not_proposed_again_when_the_gains_run_out() -> None:
    # The whole xla space, where thunk_runtime=False always fails and only the batch size and
    # openxla matter: once those are found, the expected improvement elsewhere is all but spent,
    # and the never-measured flag keeps the model's widest uncertainty. Without the conviction
    # this seed proposed it at trials 8, 15 and 19 (and three times more by trial 25).
    space = builtin_space("xla")

    def speed(config: dict) -> float | None:
        if config.get("thunk_runtime") is False:
            return None
        return 100.0 * (config.get("batch_size") or 16) ** 0.5 * (1.1 if config.get("openxla") else 1.0)

    measured = drive(AutotuneSampler(space, seed=1), space, 20, objective=speed)
    assert sum(c.get("thunk_runtime") is False for c in measured) == 2


def test_the_failure_model_blames_the_combination_that_failed() -> None:
    sizes = [2, 2]
    X = np.array([[0, 0], [0, 1], [1, 0], [1, 1], [1, 1]])
    ok = np.array([1.0, 1.0, 1.0, 0.0, 0.0])  # only the pair (1, 1) fails
    p = success_probability(X, ok, np.array([[1, 1], [0, 1], [1, 0]]), sizes)
    assert p[0] < 0.3 and p[1] > 0.6 and p[2] > 0.6
    assert culprit_probability(X, ok, np.array([[1, 1], [0, 1]]), sizes).tolist() == [1.0, 0.0]


def test_the_trend_term_extrapolates_along_an_ordered_parameter() -> None:
    levels = [None, 8, 16, 32, 64]
    X, y = np.array([[1], [2], [3]]), np.array([1.0, 2.0, 3.0])  # batch sizes 8, 16, 32 measured
    with_trend = CategoricalGP([_distance_table(levels, True)], [_positions(levels)]).fit(X, y)
    without = CategoricalGP([_distance_table(levels, True)]).fit(X, y)
    at_64 = np.array([[4]])  # not measured
    assert with_trend.predict(at_64)[0][0] > max(without.predict(at_64)[0][0], 2.5)


@pytest.mark.parametrize("name", ["xla", "inductor", "neuron-trn1"])
def test_it_samples_a_space_too_large_to_enumerate(name) -> None:
    space = builtin_space(name)
    measured = drive(AutotuneSampler(space, seed=0), space, 6, objective=lambda c: float(c.get("batch_size") or 1))
    assert len({config_key(c) for c in measured}) == 6


def test_the_expected_gain_of_one_more_trial_shrinks_to_nothing_when_the_space_is_exhausted() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = AutotuneSampler(SPACE, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    gains = []
    for _ in range(len(enumerate_space(SPACE))):
        gains.append(sampler.expected_gain(study))
        trial = study.ask()
        config = suggest(trial, SPACE)
        write(trial, config_key=config_key(config))
        write(trial, counted=True)
        value = speed(config)
        if value is None:  # a failure its driver tells has its category (one without was lost)
            write(trial, category="compile_error")
        study.tell(trial, value) if value is not None else study.tell(trial, state=optuna.trial.TrialState.FAIL)
    assert gains[0] is None and gains[1] is None, "nothing to model before two trials ran"
    first = next(i for i, g in enumerate(gains) if g is not None)
    assert all(g is not None and g >= 0 for g in gains[first:]) and max(gains[first:]) > 0.05
    assert sampler.expected_gain(study) == 0.0, "every configuration measured: nothing left to gain"


@pytest.mark.parametrize("enumerated", [True, False], ids=["enumerated", "sampled"])
def test_a_pinned_parameter_keeps_its_value_in_every_later_proposal(monkeypatch, enumerated) -> None:
    # The study pins a parameter that a trial showed never reached the script: its other values
    # are the same run under other names, so the sampler proposes none of them any more.
    if not enumerated:
        monkeypatch.setattr(strategy, "MAX_ENUMERATED", 1)
    sampler = AutotuneSampler(SPACE, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    before = drive(sampler, SPACE, 4, study=study)
    assert {c["precision"] for c in before} != {"fp32"}, "unpinned, the sampler varies it"
    sampler.pin({"precision": "fp32"})
    after = drive(sampler, SPACE.restrict({"precision": "fp32"}), 6, study=study)
    assert {c["precision"] for c in after} == {"fp32"}
    keys = [config_key(c) for c in before + after]
    assert len(keys) == len(set(keys)), "still a new configuration each time"


def outside_trust_region(measured: list[dict], patience: int) -> list[int]:
    """The trials that differ from the best measured before them in more than
    1 + (trials since that best) // patience knobs."""
    free = list(SPACE.parameters)
    out = []
    for i in range(1, len(measured)):
        values = [speed(c) for c in measured[:i]]
        ran = [j for j, v in enumerate(values) if v is not None]
        if ran:
            best = max(ran, key=lambda j: values[j])
            if sum(measured[i].get(k) != measured[best].get(k) for k in free) > 1 + (i - 1 - best) // patience:
                out.append(i)
    return out


@pytest.mark.parametrize("enumerated", [True, False], ids=["enumerated", "sampled"])
def test_the_trust_region_changes_one_knob_of_the_best_until_it_stops_improving(monkeypatch, enumerated) -> None:
    if not enumerated:
        monkeypatch.setattr(strategy, "MAX_ENUMERATED", 1)
    assert outside_trust_region(drive(AutotuneSampler(SPACE, seed=1, local_patience=2, local_gain=0.0), SPACE, 14), 2) == []
    assert outside_trust_region(drive(AutotuneSampler(SPACE, seed=1, local_patience=None), SPACE, 14), 2), \
        "without the trust region the sampler leaves it (else this test shows nothing)"


def test_the_starting_points_do_not_use_up_the_trust_regions_patience() -> None:
    """The baseline and a known-good configuration that does not beat it are the study's, not the
    search's: the first trials the sampler chooses after them change one knob of the best, where
    counting the starting points as trials without a gain had widened the region to two knobs."""
    space = parse_space("""\
target: xla
parameters:
  batch_size: {type: int, choices: [8, 16, 32, 64], default: 16}
  precision: {type: categorical, choices: [fp32, bf16_model, bf16_autocast], default: fp32}
  backend_opt_level: {type: int, choices: [0, 1, 2], default: 2}
known_good:
  - {backend_opt_level: 1}
""")
    from autotune.search.configurations import starting_points

    baseline = space.defaults()

    def flat(config: dict) -> float:  # nothing beats the baseline: the radius only grows by patience
        return 100.0 if config == baseline else 50.0

    def knobs_from_baseline(patience_after_start: bool, seed: int) -> list[int]:
        sampler = AutotuneSampler(space, seed=seed, local_patience=2, patience_after_start=patience_after_start)
        measured = drive(sampler, space, 5, objective=flat, starting=starting_points(space))
        assert measured[:2] == starting_points(space)
        return [sum(c.get(k) != baseline.get(k) for k in space.parameters) for c in measured[2:4]]

    seeds = range(4)
    assert all(knobs_from_baseline(True, seed) == [1, 1] for seed in seeds)
    assert any(knobs_from_baseline(False, seed)[1] == 2 for seed in seeds), \
        "counted as trials, the starting points widen the region by the fourth trial (else this shows nothing)"
