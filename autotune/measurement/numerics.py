"""The numerics guard: a cast that makes training diverge is not a speedup.

Every training trial runs with the same seed and records its first losses. A configuration whose
losses leave the baseline's, or turn NaN/inf, violates a constraint: Optuna's constrained
sampling steers away from it, and it can never be reported as the best configuration.
"""

from __future__ import annotations

import math
from typing import Sequence



def loss_deviation(losses: Sequence[float], baseline: Sequence[float]) -> float | None:
    """Relative distance of the mean of the first losses from the baseline's (inf for NaN/inf).

    ``None`` when either has no losses (an inference script): the guard does not apply.
    """
    n = min(len(losses), len(baseline))
    if n == 0:
        return None
    ours, theirs = list(losses[:n]), list(baseline[:n])
    if any(not math.isfinite(v) for v in ours):
        return math.inf
    ref = sum(theirs) / n
    return abs(sum(ours) / n - ref) / max(abs(ref), 1e-12)


def constraint_value(deviation: float | None, tolerance: float) -> float:
    """Optuna's convention: a value above 0 violates the constraint."""
    if deviation is None:
        return 0.0
    return 1e9 if math.isinf(deviation) else deviation - tolerance
