"""``--set NAME=A,B`` narrows any parameter to those values (the study chooses among them), as it
does for the process count; ``--set NAME=A`` still fixes it."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.errors import InvalidConfigError
from autotune.search.configurations import starting_points
from autotune.search.samplers import suggest
from autotune.space import builtin_space, load_space
from autotune.space.processes import with_processes
from autotune.trial import prepare_trial

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "tiny_train.py"


def test_a_list_narrows_the_space_and_the_study_picks_only_from_it() -> None:
    space, sets = with_processes(builtin_space("inductor"), {"batch_size": "64,16", "mode": "default,max-autotune",
                                                           "num_workers": "2"})
    assert sets == {"num_workers": "2"}, "one value is fixed, as before"
    assert space.parameters["batch_size"].choices == (64, 16)
    assert space.parameters["mode"].choices == ("default", "max-autotune")
    narrowed = space.restrict(sets)
    assert {p["batch_size"] for p in starting_points(narrowed)} <= {64, 16}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        params = suggest(trial, narrowed)
        seen.add((params["batch_size"], params["mode"]))
        study.tell(trial, 1.0)
    assert {b for b, _ in seen} == {64, 16} and {m for _, m in seen} == {"default", "max-autotune"}


def test_a_range_becomes_the_values_given(tmp_path: Path) -> None:
    path = tmp_path / "range.yaml"
    path.write_text("target: inductor\nparameters:\n  batch_size: {type: int, low: 1, high: 64}\n")
    space, sets = with_processes(load_space(path), {"batch_size": "8, 32 ,8"})
    param = space.parameters["batch_size"]
    assert sets == {} and param.choices == (8, 32) and param.low is None and param.default == 8


@pytest.mark.parametrize("value, message", [
    ("16,7", "parameter 'batch_size': 7 is not allowed"),
    ("16,null", "a list holds values of batch_size"),
    ("16,x", "'x' is not a valid int"),
])
def test_a_bad_value_in_a_list_is_the_parameters_own_error(value: str, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        with_processes(builtin_space("inductor"), {"batch_size": value})


def test_a_list_of_one_value_fixes_it() -> None:
    space, sets = with_processes(builtin_space("inductor"), {"batch_size": "16,16"})
    assert sets == {"batch_size": 16} and space.parameters["batch_size"].choices == builtin_space(
        "inductor").parameters["batch_size"].choices


def test_a_trial_runs_the_first_value_of_a_list() -> None:
    prepared = prepare_trial(SCRIPT, target="inductor", sets={"batch_size": "32,16"})
    assert prepared.params["batch_size"] == 32
