"""ddmin over knob names, with tests that are plain functions of the set tested."""

from __future__ import annotations

from autotune.search.minimize import Verdict, minimize

MOVED = ["batch_size", "fast_math", "thunk_runtime", "xnnpack"]


def needs(*culprits: str, cached: frozenset[frozenset[str]] = frozenset()):
    """A test that fails the same way where every one of ``culprits`` is moved, and records its calls."""
    calls: list[frozenset[str]] = []

    def test(subset: frozenset[str]) -> Verdict:
        calls.append(subset)
        return Verdict(same_failure=set(culprits) <= subset, ran=subset not in cached)

    test.calls = calls  # type: ignore[attr-defined]
    return test


def test_one_knob_among_four_is_found_and_shown_needed():
    test = needs("thunk_runtime")
    out = minimize(MOVED, test)
    assert out.knobs == ["thunk_runtime"]
    assert out.minimal and out.needed == ["thunk_runtime"]
    # the two halves, the two quarters of the failing half, then the baseline
    assert test.calls == [frozenset({"batch_size", "fast_math"}), frozenset({"thunk_runtime", "xnnpack"}),
                          frozenset({"thunk_runtime"}), frozenset()]
    assert out.tested == out.ran == 4


def test_two_knobs_that_fail_only_together():
    out = minimize(MOVED, needs("batch_size", "xnnpack"))
    assert out.knobs == ["batch_size", "xnnpack"] and out.minimal


def test_no_set_is_tested_twice():
    test = needs("fast_math", "thunk_runtime", "xnnpack")
    out = minimize(MOVED + ["num_workers", "precision"], test)
    assert out.knobs == ["fast_math", "thunk_runtime", "xnnpack"] and out.minimal
    assert len(test.calls) == len(set(test.calls)) == out.tested


def test_a_baseline_that_fails_the_same_way_leaves_no_knob():
    out = minimize(MOVED, needs())
    assert out.knobs == [] and out.minimal


def test_the_budget_stops_the_search_and_says_what_is_unproven():
    out = minimize(MOVED, needs("thunk_runtime"), budget=2)
    assert out.ran == 2
    assert out.knobs == ["thunk_runtime", "xnnpack"]
    assert not out.minimal and out.unproven == ["thunk_runtime", "xnnpack"]


def test_remembered_results_cost_no_budget():
    cached = frozenset({frozenset({"batch_size", "fast_math"}), frozenset({"thunk_runtime", "xnnpack"})})
    out = minimize(MOVED, needs("thunk_runtime", cached=cached), budget=2)
    assert out.knobs == ["thunk_runtime"] and out.minimal
    assert out.tested == 4 and out.ran == 2
