"""One ranking rule for a study's measured configurations: each is a :class:`Standing` (its first
trial, its runs, what each run measured), and :func:`ranked` orders them by what their runs say
once each one's luck is allowed for. The study's best, its races, its pruning bar and every reader
rank by it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.measurement.noise import PRIOR_DF, RunNoise, Runs, shrunk
from autotune.records import Measurement
from autotune.results.outputs import RunFigure
from autotune.storage.attrs import StudyAttrs, TrialAttrs

if TYPE_CHECKING:
    import optuna


@dataclass(frozen=True)
class Standing:
    """One measured configuration: its first trial, its runs, whether a re-measurement failed, and
    what each run measured (``figures``, in the order of ``runs``)."""

    trial: optuna.trial.FrozenTrial
    runs: Runs
    flaky: bool
    figures: tuple[RunFigure, ...] = ()
    #: Its configuration's key (read from its trial where not given).
    config_key: str | None = None


def steady_seconds(m: Measurement | None) -> float | None:
    """The seconds of steady steps a measurement was made over (``None`` where there is none)."""
    return m.seconds if m is not None and m.seconds > 0 else None


def prior(study: optuna.Study) -> RunNoise:
    """The noise earlier studies measured here, as the study keeps it, weighed as a few repeats."""
    kept = StudyAttrs.of(study).noise_prior
    return RunNoise(float(kept[0]), int(kept[1])).weighed_as(PRIOR_DF) if kept else RunNoise()


def study_noise(measured: list[Standing], kept: RunNoise) -> RunNoise:
    """The between-run noise a study's figures are judged with: its own repeats pooled with ``kept``."""
    return RunNoise.of(s.runs for s in measured) + kept


def ranked(measured: list[Standing], noise: RunNoise, *, maximize: bool) -> list[Standing]:
    """The configurations best first: by what their runs say of their speed once their luck is
    allowed for (:func:`~autotune.measurement.noise.shrunk`: a mean over one run, on a noisy host,
    counts for less than a mean over five), the one measured more often first where that says
    nothing between them; by the mean over their runs where no noise is known. Those whose
    re-measurement failed come last."""
    sign = -1.0 if maximize else 1.0
    usable = [s for s in measured if not s.flaky]
    if noise.known:
        score = dict(zip((id(s) for s in usable), shrunk([s.runs for s in usable], noise)))
        order = sorted(usable, key=lambda s: (sign * score[id(s)], -s.runs.n, sign * s.runs.mean, s.trial.number))
    else:
        order = sorted(usable, key=lambda s: (sign * s.runs.mean, s.trial.number))
    return order + sorted((s for s in measured if s.flaky), key=lambda s: (sign * s.runs.mean, s.trial.number))


def key(s: Standing) -> str:
    return s.config_key or trial_key(s.trial)


def trial_key(trial: optuna.trial.FrozenTrial) -> str:
    """A trial's configuration, as :func:`standing` keys it."""
    return TrialAttrs.of(trial).config_key or f"#{trial.number}"
