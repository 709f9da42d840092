"""The optional API for scripts: ``import autotune``.

A script that never imports it is tuned all the same. One that does can read its trial's
parameters and report metrics of its own (an inference latency, say). Outside a trial every call
is harmless: ``params()`` is empty and ``report()`` does nothing, so the script runs as before.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Protocol


class TrialContext(Protocol):
    """What the harness inside a trial process provides."""

    params: dict[str, Any]

    def on_report(self, metrics: dict[str, float]) -> None: ...

    def on_step(self, samples: int | None) -> None: ...


_context: TrialContext | None = None


def _install(context: TrialContext | None) -> None:
    global _context
    _context = context


def in_trial() -> bool:
    """Whether this process runs as an autotune trial."""
    return _context is not None


def params() -> dict[str, Any]:
    """This trial's parameters (canonical names and values).

    Outside a trial, the tuned parameters of a ``best.env`` that was sourced (``AUTOTUNE_PARAMS``),
    so that the training job reads what the study found; else empty.
    """
    if _context is not None:
        return dict(_context.params)
    raw = os.environ.get("AUTOTUNE_PARAMS")
    if raw:
        try:
            value = json.loads(raw)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}
    return {}


def param(name: str, default: Any = None) -> Any:
    """One parameter of this trial, or ``default`` when it is not set."""
    return params().get(name, default)


def report(**metrics: float) -> None:
    """Record metrics of the script's own, for example ``autotune.report(latency_ms=3.2)``.

    The last value reported for a name is kept. A study can optimise any reported metric
    (``autotune run --metric latency_ms --direction minimize``).
    """
    if _context is None:
        return
    clean: dict[str, float] = {}
    for name, value in metrics.items():
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"autotune.report: metric {name!r} is not finite ({value})")
        clean[name] = value
    _context.on_report(clean)


def step(samples: int | None = None) -> None:
    """Mark the end of one step of ``samples`` samples, for loops that use no DataLoader.

    Once a script calls it, its calls alone delimit steps.
    """
    if _context is not None:
        _context.on_step(samples)

