"""What the script gives its DataLoaders itself, gathered as the configuration replaces it."""

from __future__ import annotations

from autotune.records import HarnessReport, RuntimeKnobs
from autotune.harness.knobs import set_loader_arguments
from autotune.workers.multiprocess import combine


def test_each_loader_tells_what_the_script_gave_it_and_takes_the_configurations() -> None:
    own: dict[str, list[int]] = {}
    applied: set[str] = set()
    knobs = RuntimeKnobs(batch_size=64, num_workers=2)
    train = {"dataset": "d", "batch_size": 32, "shuffle": True}
    test = {"dataset": "d", "batch_size": 1000}
    set_loader_arguments(train, knobs, applied, own)
    set_loader_arguments(test, knobs, applied, own)
    # Neither gave num_workers: a DataLoader's own default, 0.
    assert own == {"batch_size": [32, 1000], "num_workers": [0]}
    assert train["batch_size"] == test["batch_size"] == 64 and train["num_workers"] == 2
    assert applied == {"batch_size", "num_workers"}


def test_a_loader_given_no_batch_size_or_a_sampler_of_batches() -> None:
    own: dict[str, list[int]] = {}
    set_loader_arguments({"dataset": "d"}, RuntimeKnobs(), set(), own)
    assert own == {"batch_size": [1], "num_workers": [0]}, "the DataLoader's defaults"
    own = {}
    set_loader_arguments({"dataset": "d", "batch_sampler": object(), "num_workers": 3}, RuntimeKnobs(), set(), own)
    assert own == {"num_workers": [3]}, "a batch sampler batches itself: no batch size of the script's"
    own = {}
    set_loader_arguments({"dataset": "d", "batch_size": None}, RuntimeKnobs(), set(), own)
    assert own == {"num_workers": [0]}


def test_the_processes_of_a_trial_pool_what_their_scripts_gave() -> None:
    ranks = [HarnessReport(rank=0, script_loader={"batch_size": [64], "num_workers": [0]}),
             HarnessReport(rank=1, script_loader={"batch_size": [64, 1000]})]
    report = combine(HarnessReport(script_loader={"num_workers": [0]}), ranks)
    assert report is not None and report.script_loader == {"num_workers": [0], "batch_size": [64, 1000]}
