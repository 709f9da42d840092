"""The smallest set of moved knobs that still fails: delta debugging (Zeller and Hildebrandt's ddmin).

A failing configuration moves some knobs away from the baseline; which of them the failure needs
is what a compiler bug report, or a user avoiding the bug, wants to know. ddmin tests subsets and
complements of the failing set at a finer and finer split, keeps any that still fails the same
way, and ends with a set from which no single knob can be removed (1-minimal): each removal was
tested and did not fail that way.

Pure: the test is a function of a set of knob names, so the search is tested with a function and
run for real with trials. No library implements ddmin over an arbitrary test (``picire`` reduces
text files), hence it is written here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable


@dataclass(frozen=True)
class Verdict:
    """What one test of a set of knobs showed."""

    #: It failed the same way as the configuration being reduced.
    same_failure: bool
    #: A trial ran for it (``False``: remembered, from the cache root): what a budget counts.
    ran: bool = True


@dataclass
class Reduction:
    """Where ddmin ended: the smallest failing set found, and what it showed on the way."""

    knobs: list[str]
    #: Tests answered, in all; of which trials that ran.
    tested: int = 0
    ran: int = 0
    #: Every knob of :attr:`knobs` was shown needed (its removal was tested and did not fail the
    #: same way): the set is 1-minimal. ``False`` where the budget ran out first.
    minimal: bool = False
    #: The knobs of :attr:`knobs` whose removal was tested and did not fail the same way.
    needed: list[str] = field(default_factory=list)

    @property
    def unproven(self) -> list[str]:
        """The knobs of :attr:`knobs` whose removal no test has tried yet."""
        return [k for k in self.knobs if k not in self.needed]


class _BudgetSpent(Exception):
    pass


def minimize(moved: Iterable[str], test: Callable[[frozenset[str]], Verdict], *,
             budget: int | None = None) -> Reduction:
    """The smallest subset of ``moved`` (a set already known to fail) that ``test`` says fails the
    same way; ``budget``: stop once this many trials ran and say what was shown so far. The empty
    set (the baseline) is tested last, once one knob is left."""
    current = sorted(set(moved))
    seen: dict[frozenset[str], bool] = {frozenset(current): True}
    out = Reduction(knobs=list(current))

    def fails(subset: list[str]) -> bool:
        key = frozenset(subset)
        if key not in seen:
            if budget is not None and out.ran >= budget:
                raise _BudgetSpent
            verdict = test(key)
            out.tested += 1
            out.ran += verdict.ran
            seen[key] = verdict.same_failure
        return seen[key]

    n = 2
    try:
        while current:
            n = min(n, len(current))
            chunks = _split(current, n)
            smaller = next((c for c in chunks if len(chunks) > 1 and fails(c)), None)
            if smaller is not None:
                current, n = smaller, 2
                continue
            rest = next((r for c in chunks if fails(r := [k for k in current if k not in c])), None)
            if rest is not None:
                current, n = rest, max(n - 1, 2)
                continue
            if n >= len(current):
                break
            n = min(2 * n, len(current))
    except _BudgetSpent:
        pass
    out.knobs = current
    out.needed = [k for k in current if seen.get(frozenset(current) - {k}) is False]
    out.minimal = len(out.needed) == len(current)
    return out


def _split(items: list[str], n: int) -> list[list[str]]:
    """``items`` in ``n`` runs of nearly equal length, in order."""
    size, extra = divmod(len(items), n)
    chunks, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        chunks.append(items[start:end])
        start = end
    return chunks
