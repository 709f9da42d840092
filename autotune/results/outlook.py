"""Would more trials help? What a study found, and whether its search looks converged, from the
study's own trials: the line ``autotune run`` ends with, and ``StudyResult.outlook``.

The evidence, each named in the line:

* how many trials have passed since the best last improved by more than the measurement noise
  (the larger relative half-width of the two 95% intervals, which include the between-run noise
  where the study measured it, at least ``NOISE_FLOOR``): a best
  that keeps improving has not converged, and one improvement inside the noise is no evidence;
* the knobs (free parameters of the space) that no trial set away from the baseline's value: the
  search has not looked there at all;
* where autotune's sampler ran, the improvement its model expects from the next trial (its
  largest expected improvement over the configurations not measured yet, times the chance each
  runs: :meth:`autotune.search.strategy.AutotuneSampler.expected_gain`).

The rule (``more_likely``, ``converged`` or ``unclear``): fewer than ``MIN_TRIALS`` trials are too
few to call a search converged; a best that improved beyond the noise in the last
``max(3, n/4)`` trials, a knob never tried, or a model that expects ``GAIN_LIKELY`` or more make
more trials likely to find more; no improvement beyond the noise in the last ``max(5, n/3)``
trials, every knob tried and a model that expects less than ``GAIN_SMALL`` (or none) make the
search look converged; anything between is ``unclear``. After those quiet trials the model's
expectation counts only beyond the best's own noise too: a model fitted on noisy measurements
keeps expecting a few percent somewhere (docs/results/search.md#the-outlook). It says "likely"
and "looks": it reads
the trials a study ran, and a search can always miss a narrow peak.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

from autotune.measurement.noise import RunNoise, Runs, ahead, relative_half_width
from autotune.objectives import objective
from autotune.records import FailureCategory
from autotune.space import SearchSpace
from autotune.results.outputs import BestConfig, TrialSummary

MIN_TRIALS = 8
#: An improvement smaller than this (relative) is never "beyond the noise", whatever the intervals.
NOISE_FLOOR = 0.01
GAIN_LIKELY = 0.02
GAIN_SMALL = 0.005
#: Objectives read from the throughput, whose interval is theirs too.
FROM_THROUGHPUT = {"throughput", "cost"}


class SearchOutlook(BaseModel):
    """What a study found, and whether a longer one would likely find more (see the module)."""

    trials: int
    best_trial: int | None = None
    #: Trials since the best last improved beyond the measurement noise (None: nothing ran).
    trials_since_improvement: int | None = None
    #: Free parameters that no trial set away from the baseline's value.
    untried_knobs: list[str] = Field(default_factory=list)
    #: The relative improvement autotune's model expects from the next trial, where it ran.
    expected_gain: float | None = None
    #: ``more_likely``, ``converged`` or ``unclear``; ``exhausted`` where nothing is left to measure,
    #: ``stopped`` where the study asked for no more trials (the script cannot run as it is).
    verdict: str
    #: The ``--trials`` a longer study would ask for (it continues this one).
    suggested_trials: int | None = None
    line: str


def search_outlook(trials: list[TrialSummary], space: SearchSpace, best: BestConfig | None, *,
                   metric: str = "throughput", maximize: bool = True,
                   expected_gain: float | None = None, exhausted: bool = False,
                   stopped: str | None = None) -> SearchOutlook:
    """The outlook of a study whose trials are ``trials`` (its summaries), on ``space``;
    ``exhausted``: every configuration of the space has been measured; ``stopped``: why the study
    asked for no more trials."""
    tried = sorted((t for t in trials if t.duplicate_of is None and t.confirms is None and _tried(t)),
                   key=lambda t: t.number)
    n = len(tried)
    since = _since_improvement(tried, metric, maximize)
    untried = _untried_knobs(tried, space)
    more = max(2 * n, n + 10)
    suggested = int(math.ceil(more / 10) * 10)
    recent, quiet = max(3, n // 4), max(5, n // 3)
    improving = since is not None and since < recent
    quiet_long = since is not None and since >= quiet
    expects = expected_gain is not None and expected_gain >= (
        max(GAIN_LIKELY, _best_noise(tried, best, metric)) if quiet_long else GAIN_LIKELY)
    if stopped:
        verdict = "stopped"
    elif exhausted:
        verdict = "exhausted"
    elif n < MIN_TRIALS:
        verdict = "more_likely"
    elif improving or untried or expects:
        verdict = "more_likely"
    elif quiet_long and (expected_gain is None or expected_gain < GAIN_SMALL):
        verdict = "converged"
    else:
        verdict = "unclear"

    found = _found(n, best, metric)
    if verdict == "stopped":  # what the trials would say of the search is beside the point
        return SearchOutlook(trials=n, best_trial=best.trial if best else None, trials_since_improvement=since,
                             untried_knobs=untried, expected_gain=expected_gain, verdict=verdict,
                             line=f"{found if n else 'no configuration ran'}: the study stopped: {stopped}")
    evidence = []
    first = next((i for i, t in enumerate(tried) if t.state == "COMPLETE" and t.value is not None), None)
    if since is not None and first is not None and since == n - 1 - first and since > 0:
        # The first measured trial is still the best: nothing has improved on it yet.
        evidence.append(f"no trial beat the first one beyond the noise in the {since} trial{'s' if since > 1 else ''} "
                        "after it")
    elif since is not None:
        evidence.append("the best improved beyond the noise at the last trial" if since == 0 else
                        f"the best improved beyond the noise {since} trial{'s' if since > 1 else ''} ago"
                        if since < quiet or n < MIN_TRIALS else
                        f"no improvement beyond the noise in the last {since} trials")
    if untried:
        names = ", ".join(untried[:4]) + (f" and {len(untried) - 4} more" if len(untried) > 4 else "")
        evidence.append(f"{len(untried)} knob{'s were' if len(untried) > 1 else ' was'} never tried away from "
                        f"the baseline ({names})")
    elif n:
        evidence.append("every knob was tried away from the baseline")
    if expected_gain is not None:
        expects_what = f"{expected_gain:+.1%}" if expected_gain >= 0.001 else "less than +0.1%"
        evidence.append(f"autotune's model expects {expects_what} from the next trial")
    if verdict == "exhausted":
        conclusion = "every configuration of the space was measured: more trials find nothing new"
    elif verdict == "more_likely" and n < MIN_TRIALS:
        conclusion = f"too few trials to tell whether the search converged: --trials {suggested} is likely to find more"
    elif verdict == "more_likely":
        conclusion = f"--trials {suggested} is likely to find more"
    elif verdict == "converged":
        conclusion = "the search looks converged"
    else:
        conclusion = f"a longer study (--trials {suggested}) may still find more"
    line = found + ("; " + ", ".join(evidence) if evidence else "") + ": " + conclusion
    return SearchOutlook(trials=n, best_trial=best.trial if best else None, trials_since_improvement=since,
                         untried_knobs=untried, expected_gain=expected_gain, verdict=verdict,
                         suggested_trials=None if verdict in ("converged", "exhausted", "stopped") else suggested,
                         line=line)


def _found(n: int, best: BestConfig | None, metric: str) -> str:
    what = f"{n} trial{'s' if n != 1 else ''}"
    if best is None:
        return f"{what}: no configuration ran"
    speed = f" ({best.speedup:.2f}x the baseline)" if best.speedup else ""
    return f"{what}: best {objective(metric).format(best.value)}{speed} at trial {best.trial}"


def _tried(t: TrialSummary) -> bool:
    """A trial of the search: measured, or failed in a way that says the configuration was tried
    (:attr:`~autotune.records.FailureCategory.tried`; an invalid configuration never ran)."""
    if t.state == "COMPLETE":
        return True
    category = FailureCategory.named(t.category)
    return t.state == "FAIL" and category is not None and category.tried


def _since_improvement(tried: list[TrialSummary], metric: str, maximize: bool) -> int | None:
    """Trials since the last one that beat every earlier value by more than the noise (the first
    value counts as an improvement); None when no trial gave a value."""
    best: tuple[float, float] | None = None  # the value so far, and its noise
    last = None
    for i, t in enumerate(tried):
        if t.state != "COMPLETE" or t.value is None or t.numerics_violated or t.violated or t.idle:
            continue
        noise = _noise(t, metric)
        if best is None:
            best, last = (t.value, noise), i
            continue
        if ahead(Runs((t.value,), (noise,)), Runs((best[0],), (best[1],)), RunNoise(), maximize=maximize,
                 floor=NOISE_FLOOR) > 0:
            last = i
        if (t.value > best[0]) if maximize else (t.value < best[0]):
            best = (t.value, noise)
    return None if last is None else len(tried) - 1 - last


def _best_noise(tried: list[TrialSummary], best: BestConfig | None, metric: str) -> float:
    """The relative half-width of the best trial's 95% interval (``NOISE_FLOOR`` where unknown)."""
    trial = next((t for t in tried if best is not None and t.number == best.trial), None)
    return NOISE_FLOOR if trial is None else _noise(trial, metric)


def _noise(t: TrialSummary, metric: str) -> float:
    """A configuration's noise as a fraction of its value: its figure's interval, else (a metric
    that is no timed figure) its throughput's."""
    own = relative_half_width(t.value, t.value_ci95_low, t.value_ci95_high)
    if own is None and metric in FROM_THROUGHPUT:
        own = relative_half_width(t.throughput, t.ci95_low, t.ci95_high)
    return NOISE_FLOOR if own is None else own


def _untried_knobs(tried: list[TrialSummary], space: SearchSpace) -> list[str]:
    baseline = space.defaults()
    # A parameter with one value has nowhere else to be tried.
    names = [p.name for p in space.free_parameters if p.choices is None or len({*p.choices, p.default}) > 1]
    changed = {name for t in tried for name in names if t.params.get(name) != baseline.get(name)}
    return [name for name in names if name not in changed]
