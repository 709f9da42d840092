"""``autotune verify``: does a study's recorded gain still hold here and now?

The best configuration and the baseline are measured again, alternating (baseline, best, best,
baseline, ...: a drift of the machine weighs on both alike), K runs each, each run in a process of
its own as a trial. The speedup is the ratio of their mean figures, with a 95% interval from the
spread between runs (Welch's t on the logarithms). The recorded gain holds when it lies within or
below that interval. What changed since the study (compiler, torch and torch-xla versions, the
instance, the script) is said beside it, and so is each knob of the best that no longer reached
the script: the usual reasons for a gain that went away.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, Field

from autotune.errors import AutotuneError, InvalidConfigError
from autotune.measurement.noise import Figure, RunNoise, Runs, ratio
from autotune.objectives import objective
from autotune.records import TrialResult, TrialStatus
from autotune.results.outputs import BestConfig

#: The provenance entries that change what a configuration measures.
_COMPARED = ("autotune", "python", "device", "host_device", "instance_type", "script_sha256")


#: Which of the two configurations a run measured.
Side = Literal["best", "baseline"]


class VerifyRun(BaseModel):
    configuration: Side
    value: float | None
    status: TrialStatus
    reason: str | None = None


class Verification(BaseModel):
    """What ``autotune verify`` measured and concluded (``--json``)."""

    study: str
    trial: int
    metric: str
    recorded_speedup: float
    runs: list[VerifyRun] = Field(default_factory=list)
    best_mean: float | None = None
    baseline_mean: float | None = None
    speedup: float | None = None
    ci95_low: float | None = None
    ci95_high: float | None = None
    holds: bool = False
    #: Why the gain does not hold, or what may explain a change: one line each.
    reasons: list[str] = Field(default_factory=list)
    #: Provenance entries that differ from the study's: name -> [recorded, now].
    changed: dict[str, list[Any]] = Field(default_factory=dict)


def speedup_interval(best: list[float], baseline: list[float], maximize: bool = True) -> Figure:
    """The ratio of the means (best over baseline, or the inverse where smaller is better) with a
    95% interval from the spread between runs: each configuration's own, on the logarithms."""
    return ratio(Runs(tuple(best)), Runs(tuple(baseline)), RunNoise.of([baseline]) + RunNoise.of([best]),
                 maximize=maximize)


def provenance_changes(recorded: dict[str, Any], now: dict[str, Any]) -> dict[str, list[object]]:
    """The entries of the study's provenance that differ from this machine's now."""
    changed: dict[str, list[object]] = {}
    for key in _COMPARED:
        if recorded.get(key) != now.get(key):
            changed[key] = [recorded.get(key), now.get(key)]
    old, new = recorded.get("versions") or {}, now.get("versions") or {}
    for package in sorted(set(old) | set(new)):
        if old.get(package) != new.get(package):
            changed[package] = [old.get(package), new.get(package)]
    return changed


def verify(best: BestConfig, *, repeats: int, measure: Callable[[str, dict[str, Any], int], TrialResult],
           provenance_now: dict[str, Any], on_run: Callable[[VerifyRun], None] | None = None) -> Verification:
    """Measure the best and the baseline ``repeats`` times each, alternating; ``measure(which,
    params, index)`` runs one trial of ``params``."""
    if repeats < 2:
        raise InvalidConfigError("--repeats must be at least 2: the interval comes from the spread between runs")
    if best.speedup is None or best.baseline_params is None:
        raise AutotuneError(f"study {best.study} has no measured baseline: there is no recorded gain to verify")
    # The cost of a sample is the price over the throughput: on one machine its ratio is the throughput's.
    goal = objective("throughput" if best.metric == "cost" else best.metric)
    out = Verification(study=best.study, trial=best.trial, metric=best.metric, recorded_speedup=best.speedup)
    order: list[tuple[Side, Side]] = [("baseline", "best"), ("best", "baseline")]
    results: dict[Side, list[TrialResult]] = {"best": [], "baseline": []}
    for i in range(repeats):
        for which in order[i % 2]:
            params = best.params if which == "best" else best.baseline_params
            result = measure(which, params, i)
            results[which].append(result)
            value = goal.read(result, None) if result.ok else None
            run = VerifyRun(configuration=which, value=value, status=result.status,
                            reason=result.failure.reason if result.failure else None)
            out.runs.append(run)
            if on_run is not None:
                on_run(run)
    out.changed = provenance_changes(best.provenance, provenance_now)
    values = {w: [r.value for r in out.runs if r.configuration == w and r.value is not None] for w in results}
    for r in results["best"]:
        for knob in r.idle_knobs:
            line = f"{knob.param}={knob.value} no longer reached the script: {knob.detail}"
            if line not in out.reasons:
                out.reasons.append(line)
    for which, measured in values.items():
        if len(measured) < 2:
            failed = next((r for r in out.runs if r.configuration == which and r.value is None), None)
            out.reasons.append(f"the {which} configuration did not run twice: "
                               f"{failed.reason if failed and failed.reason else 'no figure measured'}")
    if out.reasons and any("did not run twice" in r for r in out.reasons):
        return _explain(out)
    out.best_mean, out.baseline_mean = Runs(tuple(values["best"])).mean, Runs(tuple(values["baseline"])).mean
    gain = speedup_interval(values["best"], values["baseline"], goal.maximize)
    out.speedup, out.ci95_low, out.ci95_high = gain.mean, gain.low, gain.high
    out.holds = (gain.high is None or gain.high >= best.speedup) and not any("no longer reached" in r
                                                                            for r in out.reasons)
    if not out.holds and not out.reasons:
        out.reasons.append(f"the speedup measured now, {out.speedup:.2f}x [{out.ci95_low or 0:.2f}, {out.ci95_high or 0:.2f}], "
                           f"is below the {best.speedup:.2f}x recorded")
    return _explain(out)


def _explain(out: Verification) -> Verification:
    """A gain that does not hold, with the changes since the study that may explain it."""
    if not out.holds:
        for key, (old, new) in out.changed.items():
            what = "the script changed" if key == "script_sha256" else f"{key}: {old} then, {new} now"
            out.reasons.append(f"since the study, {what}")
    return out


def trial_directory(root: Path, which: str, index: int) -> Path:
    return root / f"{index + 1}-{which}"
