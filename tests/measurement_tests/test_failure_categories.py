"""What a failure category says of its configuration is a property of the category, and the parts
that act on a failure ask the category: the sampler's history, the outlook's count of trials, the
cache root's memory, the report's colours."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from autotune.cache import open_cache
from autotune.records import Failure, FailureCategory, TrialPlan, TrialResult
from autotune.report.figures import CATEGORY_COLOURS
from autotune.search.strategy import measured_history
from autotune.space import config_key, parse_space
from autotune.results.outlook import search_outlook
from autotune.results.outputs import TrialSummary
from autotune.storage.attrs import write

C = FailureCategory

#: Each category's (configuration_fault, tried, remembered, convicts_level, stops_study).
PROPERTIES = {
    C.invalid_config: (True, False, True, True, False),
    C.compile_error: (True, True, True, True, False),
    C.device_oom: (True, True, True, False, False),
    C.host_oom: (True, True, False, False, False),
    C.timeout: (True, True, False, False, False),
    C.crash: (True, True, False, True, False),
    C.script_error: (True, True, False, False, False),
    C.numerics: (True, True, True, False, False),
    C.device_unavailable: (False, False, False, False, False),
    C.rendezvous: (True, True, False, False, False),
    C.missing_data: (False, False, False, False, True),
    C.disk_full: (False, False, False, False, True),
}

SPACE = parse_space("""\
target: xla
parameters:
  batch_size: {type: int, choices: [8, 16, 32, 64], default: 16}
  fast_math: {type: bool}
""")


def test_each_category_says_what_it_says_of_its_configuration() -> None:
    assert set(PROPERTIES) == set(C), "a new category says what it is here too"
    found = {c: (c.configuration_fault, c.tried, c.remembered, c.convicts_level, c.stops_study) for c in C}
    assert found == PROPERTIES


def test_a_stored_name_this_version_does_not_know_is_no_category() -> None:
    assert C.named("crash") is C.crash
    assert C.named(None) is None and C.named("exploded") is None


@pytest.mark.parametrize("category", list(C), ids=lambda c: c.value)
def test_the_samplers_history_holds_a_failure_the_configuration_caused(category: FailureCategory) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    config = {"batch_size": 64, "fast_math": True}
    write(trial, config_key=config_key(config))
    write(trial, counted=True)
    write(trial, result=json.dumps({"wall_seconds": 10.0, "compile": {"compile_seconds": 4.0}}))
    write(trial, category=category.value)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    history, _ = measured_history(study)
    if not category.configuration_fault:
        assert history == []
        return
    [(found, value, facts)] = history
    assert found == config and value is None
    assert (facts.get("convicting") == 1.0) is category.convicts_level


@pytest.mark.parametrize("category", list(C), ids=lambda c: c.value)
def test_the_outlook_counts_a_failed_trial_whose_configuration_was_tried(category: FailureCategory) -> None:
    ts = [TrialSummary(number=i, state="COMPLETE", params={"batch_size": 16}, value=100.0 + i, throughput=100.0 + i)
          for i in range(9)]
    ts.append(TrialSummary(number=9, state="FAIL", params={"batch_size": 64}, category=category.value))
    assert search_outlook(ts, SPACE, None).trials == 9 + category.tried


def test_a_failure_of_a_category_this_version_does_not_know_is_no_trial_of_the_outlook() -> None:
    ts = [TrialSummary(number=i, state="COMPLETE", params={"batch_size": 16}, value=100.0 + i, throughput=100.0 + i)
          for i in range(9)]
    ts.append(TrialSummary(number=9, state="FAIL", params={"batch_size": 64}, category="exploded"))
    assert search_outlook(ts, SPACE, None).trials == 9


@pytest.mark.parametrize("category", list(C), ids=lambda c: c.value)
def test_the_cache_root_remembers_a_failure_that_would_happen_again(category: FailureCategory,
                                                                    tmp_path: Path) -> None:
    cache = open_cache(tmp_path)
    # A trial that held its GPU alone: its out-of-memory is its own (tests/targets_tests/test_gpus.py).
    result = TrialResult(status="failed", plan=TrialPlan(target="inductor", params={"mode": "eager"}),
                         failure=Failure(category=category, reason="x"), placement={"CUDA_VISIBLE_DEVICES": "0"})
    assert cache.put_result("ab" * 32, result) is category.remembered
    assert (cache.get_result("ab" * 32) is not None) is category.remembered


def test_the_report_draws_every_category_in_a_colour_of_its_own() -> None:
    assert set(CATEGORY_COLOURS) == set(C)
    assert len(set(CATEGORY_COLOURS.values())) == len(C)
