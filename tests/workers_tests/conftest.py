"""Running real trials: real processes, real torch, no mocks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autotune.records import MeasurementProtocol, TrialResult
from autotune.trial import prepare_trial
from autotune.workers.launcher import TrialLimits, run_trial

#: Measures for at most 2 s after warm-up: enough for a figure, short enough for a test suite.
QUICK = MeasurementProtocol(max_measure_seconds=2.0, max_measure_steps=400)

RunScript = Callable[..., TrialResult]


@pytest.fixture(scope="session")
def run_script(tmp_path_factory: pytest.TempPathFactory) -> RunScript:
    """``run_script(script, target=..., sets=..., ...)``: plan and run one trial, as ``autotune trial`` does.

    ``base_env`` replaces the environment the trial process inherits (and the plan is made
    against it), which is how a test hands a trial a broken ``XLA_FLAGS``.
    """

    def run(script: str | Path, *, target: str = "inductor", sets: dict[str, Any] | None = None,
            args: list[str] | None = None, protocol: MeasurementProtocol = QUICK,
            timeout_s: float = 180.0, memory_bytes: int | None = None,
            base_env: dict[str, str] | None = None, nproc_per_node: int = 1,
            rendezvous_s: float | None = None) -> TrialResult:
        prepared = prepare_trial(script, target=target, sets=sets, base_env=base_env, nproc_per_node=nproc_per_node)
        return run_trial(prepared.plan, prepared.script, args, trial_dir=tmp_path_factory.mktemp("trial"),
                         limits=TrialLimits(timeout_s=timeout_s, memory_bytes=memory_bytes,
                                            rendezvous_s=rendezvous_s),
                         protocol=protocol, base_env=base_env)

    return run

