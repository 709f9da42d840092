"""Failure categories from the strings that compilers, runtimes and the OS really print.

The patterns are checked in order against the tail of a trial's log (and the exception that ended
the script); the first that matches decides the category. The strings a compiler or runtime
prints belong to its target (``autotune.targets.failure_patterns()`` gathers them, with the
host's from here last). Exit codes and signals that say more
than any log line (a kill by the memory watchdog, a timeout) are decided by the launcher first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from autotune.records import Failure
from autotune.records import FailureCategory as C


@dataclass(frozen=True)
class FailurePattern:
    pattern: re.Pattern[str]
    category: C
    reason: str


def failure_pattern(regex: str, category: C, reason: str) -> FailurePattern:
    return FailurePattern(re.compile(regex), category, reason)


#: A write that found no space, whatever it broke (a compiler that could not write its output is no
#: compile error): checked before every target's strings (:func:`autotune.targets.failure_patterns`).
DISK_PATTERNS: tuple[FailurePattern, ...] = (
    failure_pattern(r"No space left on device|\[Errno 28\]|Disk quota exceeded|\[Errno 122\]", C.disk_full,
                    "a write found no space left on its filesystem (the cache root, or the trial's folder): free "
                    "some, then run the same command again"),
)

#: What any process on any target may print: out of GPU memory (torch's own message, whatever
#: the compiler) and out of host memory. Each target adds its own strings
#: (:attr:`autotune.targets.base.Target.failure_patterns`), checked before these.
HOST_PATTERNS: tuple[FailurePattern, ...] = (
    failure_pattern(r"CUDA out of memory|OutOfMemoryError", C.device_oom, "out of GPU memory"),
    # torch.distributed, on any backend: the ranks of a multi-process trial never all met (a
    # rank that never joins: "DistStoreError: wait timeout after 5000ms, keys: /default_pg/...").
    failure_pattern(r"DistStoreError|DistNetworkError|Rendezvous(?:Timeout|Closed)Error|waiting for clients",
                    C.rendezvous, "the ranks never all met in init_process_group: a rank did not join, or its port "
                                  "could not be used"),
    # A collective of a rank whose partner hangs or died ("Timed out waiting 5000ms for recv
    # operation to complete", gloo; the NCCL watchdog's own words).
    failure_pattern(r"Timed out waiting \d+ms for (?:recv|send) operation|Watchdog caught collective operation timeout",
                    C.timeout, "a collective waited too long for another rank: one hangs, died or is far behind"),
    # Host.
    failure_pattern(r"\bMemoryError\b|std::bad_alloc|Cannot allocate memory", C.host_oom, "out of host memory"),
    # The script's data, last: a log that says anything more specific is classified by that. A
    # download that found no network (urllib, as torchvision's datasets use it; requests; the
    # Hugging Face hub), and torchvision's own words for a data set it was not allowed to download.
    failure_pattern(r"urlopen error|Error downloading |Max retries exceeded with url|couldn't connect to 'https?://"
                    r"|LocalEntryNotFoundError",
                    C.missing_data, "the script tried to download its data and could not: put the data where the "
                                    "script reads it, as a plain run of it needs"),
    failure_pattern(r"Dataset not found", C.missing_data,
                    "the script's data set is not where the script reads it: put it there, as a plain run of it "
                    "needs"),
)


def classify_text(text: str, patterns: Sequence[FailurePattern]) -> FailurePattern | None:
    """The first of ``patterns`` found in ``text``."""
    for fp in patterns:
        if fp.pattern.search(text):
            return fp
    return None


def classify(text: str, patterns: Sequence[FailurePattern], *, default: C, default_reason: str,
             exit_code: int | None = None, signal: str | None = None) -> Failure:
    """A :class:`Failure` for a trial whose log (or exception) is ``text``: the category of the
    first of ``patterns`` it holds, else ``default``."""
    found = classify_text(text, patterns)
    if found is not None:
        return Failure(category=found.category, reason=found.reason, exit_code=exit_code, signal=signal)
    return Failure(category=default, reason=default_reason, exit_code=exit_code, signal=signal)
