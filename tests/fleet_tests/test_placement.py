"""Placement from each node's resources: a worker always fits on one node, and a CPU study leaves
room for another beside it (the cluster's total is never asked for by one worker)."""

from __future__ import annotations

import pytest

from autotune.errors import AutotuneError
from autotune.execution.scheduler import COMPILE_RESOURCE, plan_compile_placement, plan_placement
from autotune.targets import get_target

TWO_SMALL_NODES = [{"CPU": 1.0}, {"CPU": 1.0}]


def test_a_cpu_worker_holds_one_nodes_share_not_the_clusters(monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS")  # the session's 1 would cap the threads of every share
    # Before: 2 CPUs in the cluster, so one worker asked for 2 CPUs, which no node has (it was
    # never placed), and on one larger node a second study waited for the first to end.
    placement = plan_placement(get_target("inductor"), workers=None, cores_per_trial=1, nodes=TWO_SMALL_NODES)
    assert (placement.workers, placement.cpus_per_worker, placement.threads_per_trial) == (1, 1.0, 1)
    two = plan_placement(get_target("inductor"), workers=2, cores_per_trial=1, nodes=TWO_SMALL_NODES)
    assert (two.workers, two.cpus_per_worker) == (2, 1.0), "one worker on each node, not two on one"
    big = plan_placement(get_target("inductor"), workers=None, cores_per_trial=1, nodes=[{"CPU": 64.0}] * 16)
    assert (big.workers, big.cpus_per_worker, big.threads_per_trial) == (8, 8.0, 8)


def test_neuron_slots_are_counted_on_each_node() -> None:
    nodes = [{"CPU": 1.0, "neuron_cores": 3.0}, {"CPU": 1.0, "neuron_cores": 4.0}]
    placement = plan_placement(get_target("neuron"), workers=None, cores_per_trial=2, nodes=nodes)
    assert (placement.workers, placement.devices_per_worker) == (3, 2), "3 cores hold one trial of 2, not 1.5"
    with pytest.raises(AutotuneError, match="largest node"):
        plan_placement(get_target("neuron"), workers=None, cores_per_trial=8, nodes=nodes)


def test_compile_workers_take_the_compile_slots_the_nodes_declare():
    nodes = [{"CPU": 128.0, "neuron_cores": 32.0}, {"CPU": 16.0, COMPILE_RESOURCE: 8.0},
             {"CPU": 16.0, COMPILE_RESOURCE: 8.0}]
    placement = plan_compile_placement(get_target("neuron"), workers=None, nodes=nodes)
    assert (placement.workers, placement.device_resource, placement.devices_per_worker) == (16, COMPILE_RESOURCE, 1)
    assert placement.compiles and placement.cpus_per_worker == 0 and placement.threads_per_trial == 1
    fewer = plan_compile_placement(get_target("neuron"), workers=4, nodes=nodes)
    assert fewer.workers == 4 and not fewer.notes
    more = plan_compile_placement(get_target("neuron"), workers=40, nodes=nodes)
    assert more.workers == 16 and "using 16" in more.notes[0]
    with pytest.raises(AutotuneError, match=r"declares compile_slots: start the nodes that compile with ray start "
                                            r"--resources='\{\"compile_slots\": 8\}'"):
        plan_compile_placement(get_target("neuron"), workers=None, nodes=nodes[:1])


def test_each_placement_says_how_many_of_its_workers_share_a_node() -> None:
    """Each trial's default memory limit is that share of 80% of its node's memory."""
    assert plan_placement(get_target("inductor"), workers=None, cores_per_trial=1, nodes=[{"CPU": 64.0}] * 16).per_node \
        == 8
    assert plan_placement(get_target("inductor"), workers=3, cores_per_trial=1, nodes=[{"CPU": 2.0}]).per_node == 2
    assert plan_placement(get_target("inductor"), workers=None, cores_per_trial=1, nodes=TWO_SMALL_NODES).per_node == 1
    neuron = [{"CPU": 1.0, "neuron_cores": 3.0}, {"CPU": 1.0, "neuron_cores": 8.0}]
    assert plan_placement(get_target("neuron"), workers=None, cores_per_trial=2, nodes=neuron).per_node == 4
    assert plan_placement(get_target("neuron"), workers=2, cores_per_trial=2, nodes=neuron).per_node == 2
    compiles = [{"CPU": 16.0, COMPILE_RESOURCE: 8.0}, {"CPU": 16.0, COMPILE_RESOURCE: 2.0}]
    assert plan_compile_placement(get_target("neuron"), workers=None, nodes=compiles).per_node == 8


def test_a_trial_of_several_nodes_holds_a_share_on_each_and_no_two_on_one() -> None:
    nodes = [{"CPU": 128.0, "neuron_cores": 32.0}] * 3
    whole = plan_placement(get_target("neuron"), workers=None, cores_per_trial=32, nodes=nodes, nodes_per_trial=2)
    assert (whole.workers, whole.nodes_per_trial, whole.bundle()) == (1, 2, {"neuron_cores": 32.0}), \
        "three whole nodes hold one trial of two"
    halves = plan_placement(get_target("neuron"), workers=5, cores_per_trial=16, nodes=nodes, nodes_per_trial=2)
    assert halves.workers == 3 and "using 3" in halves.notes[0], "six halves, each trial's two on two nodes"
    with pytest.raises(AutotuneError, match="the Ray cluster has 3 such nodes: lower --nnodes"):
        plan_placement(get_target("neuron"), workers=None, cores_per_trial=32, nodes=nodes, nodes_per_trial=4)
