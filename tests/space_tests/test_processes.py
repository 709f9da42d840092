"""The process count of a trial as a parameter: ``--set nproc_per_node=2`` fixes it, ``=1,2`` lets
the study choose; a space that does not name it keeps its configurations and keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.errors import InvalidConfigError
from autotune.space import builtin_space, config_key
from autotune.space.processes import most_processes, trial_nodes, with_processes
from autotune.trial import prepare_trial

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "tiny_train.py"


def test_a_space_that_does_not_name_it_is_unchanged() -> None:
    space = builtin_space("inductor")
    same, sets = with_processes(space, {"batch_size": "16"})
    assert same is space and sets == {"batch_size": "16"}
    assert most_processes(space) == 1
    assert "nproc_per_node" not in config_key(space.defaults())


def test_one_count_is_fixed_and_several_are_searched() -> None:
    fixed, sets = with_processes(builtin_space("xla"), {"nproc_per_node": "2"})
    assert sets == {"nproc_per_node": 2} and most_processes(fixed) == 2
    searched, sets = with_processes(builtin_space("xla"), {"nproc_per_node": "2,1"})
    assert sets == {} and searched.parameters["nproc_per_node"].choices == (1, 2)
    assert most_processes(searched) == 2
    assert searched.defaults()["nproc_per_node"] == 1  # the baseline: the fewest, through torchrun too
    from_option, sets = with_processes(builtin_space("xla"), {}, nproc_per_node=4)
    assert sets == {"nproc_per_node": 4} and most_processes(from_option) == 4


@pytest.mark.parametrize("value", ["x", "0", "1,,2", ""])
def test_a_bad_count_names_the_form(value: str) -> None:
    with pytest.raises(InvalidConfigError, match="process count"):
        with_processes(builtin_space("xla"), {"nproc_per_node": value})


def test_the_plan_launches_through_torchrun_and_keeps_the_batch_per_process() -> None:
    one = prepare_trial(SCRIPT, target="inductor", sets={"batch_size": "16"})
    assert one.plan.launch is None and one.plan.nproc_per_node == 1
    two = prepare_trial(SCRIPT, target="inductor", sets={"batch_size": "16", "nproc_per_node": "2"})
    assert two.plan.launch == "torchrun --nproc_per_node=2"
    assert two.plan.knobs.batch_size == 16
    assert config_key(two.params) != config_key(one.params)
    single = prepare_trial(SCRIPT, target="inductor", sets={"nproc_per_node": "1"})
    assert single.plan.launch == "torchrun --nproc_per_node=1"


def test_the_node_count_keys_a_configuration_only_above_one() -> None:
    space = builtin_space("inductor")
    one, sets = with_processes(space, {"batch_size": "16"}, nnodes=1)
    assert one is space and sets == {"batch_size": "16"} and trial_nodes(one) == 1
    two, sets = with_processes(space, {}, nproc_per_node=2, nnodes=2)
    assert sets == {"nproc_per_node": 2, "nnodes": 2} and trial_nodes(two) == 2
    assert config_key(two.defaults()) != config_key({**two.defaults(), "nnodes": 1})
    plan = prepare_trial(SCRIPT, target="inductor", sets={"nproc_per_node": "2", "nnodes": "2"}).plan
    assert (plan.world_size, plan.launch) == (4, "torchrun --nnodes=2 --nproc_per_node=2")
    with pytest.raises(InvalidConfigError, match="one node count for the whole study"):
        with_processes(space, {"nnodes": "1,2"})
