"""How far to trust a surrogate of a recorded landscape (:mod:`.surrogate`): each recorded
configuration predicted by a surrogate fitted without it (k-fold), against what was measured."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


from autotune.errors import AutotuneError
from autotune.landscapes.landscape import Landscape
from autotune.landscapes.surrogate import OK, Surrogate, load_sklearn
from autotune.measurement.noise import relative_half_width


@dataclass(frozen=True)
class SurrogateError:
    """A surrogate's error on recorded configurations it was not fitted on (k-fold)."""

    records: int
    folds: int
    #: Held-out configurations that ran: the median of |predicted - recorded| / recorded
    #: throughput, and Spearman's rank correlation between the two.
    median_relative_error: float
    rank_correlation: float
    #: The same error for a constant guess (the median of the training folds): what the model adds.
    constant_error: float
    #: The median half-width of the recorded 95% intervals over throughput: no model can be much
    #: more accurate than the measurements it is fitted on.
    median_noise: float
    #: The share of held-out configurations whose status (ok, or its failure category) was
    #: predicted, and of the failed ones predicted to fail.
    status_accuracy: float
    failures: int
    failures_predicted: float | None
    #: The same error over the recorded configurations in the top tenth by throughput (at least
    #: 5), where a search ends, and its median signed part (predicted / recorded - 1: negative when
    #: the surrogate puts the recorded top lower than it measured).
    top: int = 0
    top_error: float = math.nan
    top_bias: float = math.nan

    def line(self) -> str:
        fails = f", {self.failures_predicted:.0%} of its {self.failures} failures predicted" \
            if self.failures_predicted is not None else ", no failures recorded"
        top = (f"; on the {self.top} fastest recorded: median {self.top_error:.1%}, predicted "
               f"{abs(self.top_bias):.1%} {'below' if self.top_bias < 0 else 'above'} the recorded (median)"
               if self.top else "")
        return (f"surrogate held-out error ({self.folds}-fold over {self.records} recorded configurations): "
                f"throughput median {self.median_relative_error:.1%} (a constant guess: {self.constant_error:.1%}; "
                f"the recorded intervals' median half-width: {self.median_noise:.1%}), rank correlation "
                f"{self.rank_correlation:.2f}{top}; status (ok or the failure category) right for "
                f"{self.status_accuracy:.0%}{fails}")


def held_out_error(landscape: Landscape, *, folds: int = 5, seed: int = 0) -> SurrogateError:
    """Each recorded configuration predicted by a surrogate fitted on the other folds."""
    from scipy import stats

    sk = load_sklearn()
    records = landscape.records
    if len(records) < folds:
        raise AutotuneError(f"{landscape.path}: {len(records)} configurations are too few for {folds}-fold")
    predicted: dict[int, tuple[float, str]] = {}
    constant: dict[int, float] = {}
    space = landscape.space
    for train, test in sk.model_selection.KFold(folds, shuffle=True, random_state=seed).split(records):
        fitted = [records[i] for i in train]
        held = [records[i] for i in test]
        model = Surrogate(space, fitted, seed=seed)
        log_tp = model.predict_log_throughput([r.params for r in held])
        status = model.predict_status([r.params for r in held])
        guess = statistics.median(r.figure for r in fitted if r.ok)
        for i, lt, st in zip(test, log_tp, status):
            predicted[int(i)] = (math.exp(lt), st)
            constant[int(i)] = guess
    ok = [i for i, r in enumerate(records) if r.ok]
    rel = [abs(predicted[i][0] - records[i].figure) / records[i].figure for i in ok]
    const = [abs(constant[i] - records[i].figure) / records[i].figure for i in ok]
    truth = [r.outcome for r in records]
    failed = [i for i, r in enumerate(records) if not r.ok]
    noise = [w for r in records if r.ok and (w := relative_half_width(r.figure, r.ci95_low, r.ci95_high)) is not None]
    top = sorted(ok, key=lambda i: -records[i].figure)[:max(5, len(ok) // 10)] if len(ok) >= 10 else []
    signed = [predicted[i][0] / records[i].figure - 1 for i in top]
    # scipy's annotations leave its result tuple's class unnamed ("_"): its fields are unseen.
    correlation = stats.spearmanr([predicted[i][0] for i in ok], [records[i].figure for i in ok]) \
        if len(ok) > 2 else None
    rho = correlation.statistic if correlation is not None else math.nan  # pyright: ignore[reportAttributeAccessIssue]
    return SurrogateError(
        records=len(records), folds=folds, median_relative_error=statistics.median(rel),
        rank_correlation=float(rho), constant_error=statistics.median(const),
        median_noise=statistics.median(noise) if noise else math.nan,
        status_accuracy=sum(predicted[i][1] == truth[i] for i in range(len(records))) / len(records),
        failures=len(failed),
        failures_predicted=sum(predicted[i][1] != OK for i in failed) / len(failed) if failed else None,
        top=len(top), top_error=statistics.median(abs(e) for e in signed) if top else math.nan,
        top_bias=statistics.median(signed) if top else math.nan)
