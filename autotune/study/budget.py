"""A study's spending cap (``--budget-usd``, ``--budget-hours``) and what its trials spent.

What a study spends is the machine time its trials and compile jobs took: each one's wall seconds
(a trial's include its own compile; a compile job's are its :class:`~autotune.records.CompileStage`)
times the share of the instance it held, the same share a cost figure uses
(:func:`autotune.machine.pricing.trial_rate`: a trial that holds 1 of an inf2.xlarge's 2 NeuronCores uses
half of it; a CPU or GPU trial the whole machine). Results remembered from an earlier run and
configurations answered by an earlier trial cost nothing. The hours are instance-hours, and the
dollars those hours at the study's price.

The study stops asking for trials once the next one would pass the cap: what was spent, plus the
trials still running and the next one, each estimated at the mean of those measured so far. So a
stopped study has spent at most the cap plus what its trials ran over their mean, and has no
room for one more of them.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel

from autotune.errors import PricingError
from autotune.machine.pricing import Price, instance_rate
from autotune.records import TrialResult
from autotune.storage.attrs import StudyAttrs, TrialAttrs

if TYPE_CHECKING:
    import optuna


class Spend(BaseModel):
    """What a study spent, as ``--json`` and the study's attributes give it."""

    #: Instance-hours its trials and compile jobs took (each at its share of the instance).
    hours: float
    #: Those hours at the study's price; ``None`` without a price.
    usd: float | None = None
    #: The trials whose machine time it counts (those that ran, here or on another driver).
    trials: int = 0
    #: The caps the last run kept, where it had one.
    budget_hours: float | None = None
    budget_usd: float | None = None
    #: Why the study asked for no more trials, where the cap stopped it.
    stopped: str | None = None


def machine_seconds(trial: optuna.trial.FrozenTrial) -> float:
    """The wall seconds that ``trial`` (an Optuna trial) held its share of the instance: its run
    and its compile job ahead of it; 0 for one answered without running anything."""
    attrs = TrialAttrs.of(trial)
    if attrs.result is None or attrs.cached or attrs.duplicate_of is not None:
        return 0.0
    result = TrialResult.model_validate_json(attrs.result)
    return result.wall_seconds + (result.compile_stage.seconds if result.compile_stage else 0.0)


def instance_share(instance_type: str | None, devices_per_trial: int | None, nodes: int | None = 1) -> float:
    """The instances one trial holds: its share of each (1 where the target holds no devices) times
    the ``nodes`` it spans."""
    _, side_by_side = instance_rate(1.0, instance_type=instance_type, devices_per_trial=devices_per_trial)
    return (nodes or 1) / side_by_side


def spend_over_time(study: optuna.Study) -> list[tuple[datetime.datetime, float, float | None]]:
    """(when a trial ended, instance-hours spent up to it, dollars up to it or ``None`` without a
    price) at each trial of a stored study that cost machine time, in the order they ended."""
    attrs = StudyAttrs.of(study)
    share = instance_share((attrs.provenance or {}).get("instance_type"), attrs.devices_per_trial,
                           attrs.nodes_per_trial)
    per_hour = attrs.price["per_hour"] if attrs.price else None
    ended = sorted((t.datetime_complete, machine_seconds(t)) for t in study.get_trials(deepcopy=False)
                   if t.datetime_complete is not None)
    out: list[tuple[datetime.datetime, float, float | None]] = []
    hours = 0.0
    for when, seconds in ended:
        if seconds > 0:
            hours += seconds * share / 3600
            out.append((when, hours, hours * per_hour if per_hour is not None else None))
    return out


@dataclass
class Budget:
    """The caps of one run and what the study has spent against them."""

    #: Instance-hours and US dollars the study may spend (``None``: no cap of that kind).
    hours: float | None
    usd: float | None
    price: Price | None
    #: The share of the instance one trial holds.
    share: float
    #: Machine seconds of each finished trial, read once (a finished trial does not change).
    _seconds: dict[int, float] = field(default_factory=dict)
    stopped: str | None = None

    @classmethod
    def of(cls, *, hours: float | None, usd: float | None, price: Price | None, instance_type: str | None,
           devices_per_trial: int | None, nodes: int = 1) -> Budget:
        """The caps given; ``--budget-usd`` without a price is refused (it would never stop)."""
        if usd is not None and price is None:
            raise PricingError("--budget-usd needs the instance's price: give --instance-type (one the catalogue "
                               "prices), --price-per-hour or --prices")
        return cls(hours=hours, usd=usd, price=price, share=instance_share(instance_type, devices_per_trial, nodes))

    @property
    def capped(self) -> bool:
        return self.hours is not None or self.usd is not None

    def spent_hours(self, study: optuna.Study) -> tuple[float, int]:
        """Instance-hours the study's finished trials took, and how many of them ran."""
        for t in study.get_trials(deepcopy=False):
            if t.number not in self._seconds and t.state.is_finished():
                self._seconds[t.number] = machine_seconds(t)
        ran = [s for s in self._seconds.values() if s > 0]
        return sum(ran) * self.share / 3600, len(ran)

    def allows(self, study: optuna.Study, running: int) -> bool:
        """Whether one more trial fits under the caps, with ``running`` trials of this driver still
        running; once it does not, the study stops asking (and :attr:`stopped` says why)."""
        if self.stopped is not None:
            return False
        if not self.capped:
            return True
        hours, ran = self.spent_hours(study)
        mean = hours / ran if ran else 0.0
        expected = hours + (running + 1) * mean
        for cap, unit, scale in ((self.hours, "instance-hours", 1.0),
                                 (self.usd, "USD", self.price.per_hour if self.price else 0.0)):
            if cap is not None and expected * scale > cap:
                self.stopped = (f"the budget of {cap:g} {unit} stopped the study: it had spent {hours * scale:.4g} "
                                f"{unit} over {ran} trials, and one more (about {mean * scale:.3g} {unit} each) "
                                "would pass it")
                return False
        return True

    def spend(self, study: optuna.Study) -> Spend:
        hours, ran = self.spent_hours(study)
        return Spend(hours=hours, usd=hours * self.price.per_hour if self.price else None, trials=ran,
                     budget_hours=self.hours, budget_usd=self.usd, stopped=self.stopped)
