"""autotune: a compiler-flag autotuner for PyTorch.

Scripts may ``import autotune`` to read their trial's parameters or report a metric; this import
is light (no torch, Ray or Optuna). The driver side lives in the submodules.
"""

from __future__ import annotations

from typing import Any

from autotune.api import in_trial, param, params, report, step
from autotune.errors import AutotuneError

__version__ = "0.1.0"

__all__ = ["AutotuneError", "in_trial", "param", "params", "report", "step", "tune", "__version__"]


def __getattr__(name: str) -> Any:
    # The study pulls in Optuna and Ray; only load them when asked for.
    if name == "tune":
        from autotune.study.study import tune

        return tune
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
