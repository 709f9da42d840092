"""What counts as the same failure, and a reduction written out as a bug report, with a plain
function in place of the trials."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.records import Failure, FailureCategory, TrialPlan, TrialResult
from autotune.afterwards.minimal_failure import moved_knobs, reduce_failure, same_failure, with_moved, write_bug_report

BASELINE = {"batches_per_execution": 1, "precision": "fp32"}
FAILING = {**BASELINE, "batch_size": 32, "fast_math": True, "thunk_runtime": False, "xnnpack": True}
NO_THUNKS = Failure(category=FailureCategory.script_error,
                    reason="the script raised RuntimeError: CpuExecutable has no thunks.\nat step 3")


def result(params: dict, failure: Failure | None) -> TrialResult:
    flags = " ".join(f"--{k}" for k in sorted(params) if k in ("fast_math", "thunk_runtime", "xnnpack"))
    return TrialResult(status="failed" if failure else "ok", failure=failure, log_tail="the log's last lines\n",
                       plan=TrialPlan(target="xla", params=params, flags_env="XLA_FLAGS", env={"XLA_FLAGS": flags}))


def test_the_same_failure_is_the_same_category_and_first_line() -> None:
    again = NO_THUNKS.model_copy(update={"reason": "the script raised RuntimeError: CpuExecutable has no thunks.\n"
                                                    "at step 9"})
    assert same_failure(NO_THUNKS, result({}, again))
    other_line = NO_THUNKS.model_copy(update={"reason": "the script raised RuntimeError: out of range"})
    assert not same_failure(NO_THUNKS, result({}, other_line))
    assert not same_failure(NO_THUNKS, result({}, NO_THUNKS.model_copy(update={"category": FailureCategory.crash})))
    assert not same_failure(NO_THUNKS, result({}, None))


def test_moved_knobs_are_those_away_from_the_baseline_and_a_subset_moves_only_them() -> None:
    moved = moved_knobs(BASELINE, {**FAILING, "precision": "bf16_model"})
    assert moved == {"batch_size": 32, "fast_math": True, "precision": "bf16_model", "thunk_runtime": False,
                     "xnnpack": True}
    assert with_moved(BASELINE, moved, frozenset({"precision"})) == {"batches_per_execution": 1,
                                                                     "precision": "bf16_model"}
    # A knob the failing configuration leaves at the script's own value is removed from the baseline.
    assert with_moved(BASELINE, {"precision": None}, frozenset({"precision"})) == {"batches_per_execution": 1}


def test_a_failure_that_changes_its_message_on_the_way_is_not_the_one_reduced(tmp_path: Path) -> None:
    """Without xnnpack, thunk_runtime fails with another message: both knobs are needed for this one."""
    ran: list[dict] = []

    def run(config: dict, _name: str) -> tuple[TrialResult, bool]:
        ran.append(config)
        if config.get("thunk_runtime") is False:
            reason = NO_THUNKS if config.get("xnnpack") else Failure(category=FailureCategory.script_error,
                                                                     reason="the script raised RuntimeError: other")
            return result(config, reason), True
        return result(config, None), True

    outcome = reduce_failure(NO_THUNKS, BASELINE, FAILING, run, reference_result=result(FAILING, NO_THUNKS),
                             reference_ran=True)
    assert outcome.knobs == {"thunk_runtime": False, "xnnpack": True} and outcome.reduction.minimal
    assert outcome.trials == len(ran) + 1 and outcome.tested == len(ran) + 1
    write_bug_report(tmp_path / "report", outcome, script=Path("/work/train.py"), args=["--epochs", "1"],
                     target="xla", space=None, provenance={"versions": {"torch": "2.9.0", "torch-xla": "2.9.0"},
                                                           "device": "xla:CPU", "host_device": "cpu:x"})
    summary = json.loads((tmp_path / "report" / "minimal.json").read_text())
    assert summary["knobs"] == {"thunk_runtime": False, "xnnpack": True} and summary["from_cache"] == 0
    readme = (tmp_path / "report" / "README.md").read_text()
    assert "- torch-xla: 2.9.0" in readme and "XLA_FLAGS=--thunk_runtime --xnnpack" in readme
    reproduce = (tmp_path / "report" / "reproduce.sh").read_text()
    assert "--set thunk_runtime=False --set xnnpack=True -- --epochs 1" in reproduce


def test_the_budget_says_what_it_did_not_show() -> None:
    def run(config: dict, _name: str) -> tuple[TrialResult, bool]:
        return result(config, NO_THUNKS if config.get("thunk_runtime") is False else None), True

    outcome = reduce_failure(NO_THUNKS, BASELINE, FAILING, run, reference_result=result(FAILING, NO_THUNKS),
                             budget=1)
    assert not outcome.reduction.minimal
    assert "the budget ran out before removing each of batch_size, fast_math, thunk_runtime, xnnpack was tried" \
        in outcome.proof()
