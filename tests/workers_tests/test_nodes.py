"""A trial of several nodes as one result (:func:`autotune.workers.nodes.joined`): the sum of the
nodes' figures, or the failure of the node that ended first without one."""

from __future__ import annotations

from autotune.records import Failure, FailureCategory, Measurement, TrialPlan, TrialResult
from autotune.workers.nodes import joined

PLAN = TrialPlan(target="inductor", params={"nnodes": 2, "nproc_per_node": 2})


def part(node: str, throughput: float | None, failure: str | None = None) -> TrialResult:
    measured = Measurement(throughput=throughput, ci95_low=throughput - 3, ci95_high=throughput + 4,
                           step_time_median=0.01, step_time_p90=0.02, samples_per_step=32, steps_measured=100,
                           windows=5, converged=True, warmup_steps=3, warmup_seconds=1.0) if throughput else None
    return TrialResult(status="failed" if failure else "ok", plan=PLAN, measurement=measured,
                       failure=Failure(category=FailureCategory.crash, reason=failure) if failure else None,
                       placement={"ray_node": node})


def test_the_nodes_figures_add_up_and_the_placement_lists_them() -> None:
    result = joined([part("a", 100.0), part("b", 80.0)])
    assert result.ok and result.measurement is not None
    m = result.measurement
    assert (m.throughput, m.samples_per_step) == (180.0, 64)
    assert m.ci95_low < 180.0 < m.ci95_high
    assert result.placement["ray_nodes"] == "a,b"


def test_the_node_that_ended_first_is_the_cause() -> None:
    stopped = "stopped: another node of the trial ended without a result"
    result = joined([part("a", None, stopped), part("b", None, "rank 3: exit code 1")], cause=1)
    assert not result.ok and result.measurement is None
    assert result.failure is not None and result.failure.reason == "node 1 of 2: rank 3: exit code 1"
