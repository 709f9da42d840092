"""What a study's trials cost: the instance they run on and its price, the share of it a trial
holds, and the spending cap. Every price check of a run's options happens here, before anything
of the study is written, so an option that needs a price it lacks leaves nothing behind."""

from __future__ import annotations

from autotune.machine.host import instance_type
from autotune.objectives import Constraint, Objective
from autotune.machine.pricing import check_instance_type, resolve_price, trial_rate
from autotune.study.budget import Budget
from autotune.study.options import StudyOptions
from autotune.targets import Target


class StudyCost:
    """``instance_type``: the instance a study measures on; ``price``: what an hour of it costs
    (``None``: no price known); ``devices_per_trial``: the devices a trial holds (``None``: the
    target holds none, as on CPU) on each of its ``nodes``; ``usd_per_sample_second``: what a sample-second of a trial costs,
    where the study optimises or bounds cost; ``budget``: the spending cap (``--budget-usd``,
    ``--budget-hours``) and what the study spent against it."""

    def __init__(self, target: Target, options: StudyOptions, objectives: list[Objective],
                 constraints: list[Constraint], nodes: int = 1) -> None:
        check_instance_type(options.instance_type, price_per_hour=options.price_per_hour, prices_file=options.prices)
        self.instance_type = instance_type(options.instance_type)
        self.price = resolve_price(self.instance_type, price_per_hour=options.price_per_hour,
                                   prices_file=options.prices)
        self.devices_per_trial = target.devices_per_trial(options.cores_per_trial) or None
        self.nodes = nodes
        costed = "cost" in [o.name for o in objectives] + [c.name for c in constraints]
        self.usd_per_sample_second = trial_rate(self.price, instance_type=self.instance_type,
                                                devices_per_trial=self.devices_per_trial, nodes=nodes) \
            if costed else None
        self.budget = Budget.of(hours=options.budget_hours, usd=options.budget_usd, price=self.price,
                                instance_type=self.instance_type, devices_per_trial=self.devices_per_trial,
                                nodes=nodes)
