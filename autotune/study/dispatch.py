"""A proposal's way from Optuna to a worker: a chain of small steps, each of which answers it (and
returns its :class:`Outcome`) or passes it on, the last one submitting it to the trial pool.

In order: the study already holds its trials (other drivers filled it); the space or the target
rejects the configuration; it was measured before in this study, or another driver measures it
now; the cache root remembers its result; its compile failed before; else it runs.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.cache import CacheRoot
from autotune.errors import InvalidConfigError
from autotune.execution.pool import TrialPool
from autotune.measurement.noise import RUN_SECONDS, spread_text
from autotune.records import MeasurementProtocol, TrialPlan, TrialResult
from autotune.search.samplers import suggest
from autotune.space import config_key
from autotune.repeats import pruning
from autotune.storage.claims import Claims, trials_filled
from autotune.study.tell import TrialRecorder
from autotune.study.requests import TrialRequests
from autotune.results.best import noise_figure
from autotune.results.standings import noise_of, standings
from autotune.storage.attrs import TrialAttrs, counts, write

if TYPE_CHECKING:
    import optuna

    from autotune.objectives import Constraint, Objective


class Outcome(enum.Enum):
    """How a proposal ended its dispatch."""

    #: Other drivers' trials filled the study first.
    surplus = "surplus"
    #: The space or the target rejects the configuration.
    invalid = "invalid"
    #: Answered without running: measured before, measured elsewhere now, remembered, failed before.
    reused = "reused"
    #: Handed to the pool.
    submitted = "submitted"


@dataclass
class Proposal:
    """A configuration Optuna proposed, as its trial holds it."""

    trial: optuna.Trial
    params: dict[str, Any]
    key: str
    #: Its plan, once a step has made it.
    plan: TrialPlan | None = None


class Dispatch:
    """The steps of one study's dispatch; ``claims`` is ``None`` for a study no other driver can see."""

    def __init__(self, study: optuna.Study, recorder: TrialRecorder, requests: TrialRequests, pool: TrialPool, *,
                 claims: Claims | None, cache: CacheRoot | None, out: Path, objectives: list[Objective],
                 constraints: list[Constraint], devices_per_trial: int | None) -> None:
        self.study = study
        self.told = recorder
        self.requests = requests
        self.pool = pool
        self.claims = claims
        self.cache = cache
        self.out = out
        self.objectives = objectives
        self.constraints = constraints
        self.devices_per_trial = devices_per_trial
        self.options = requests.options
        self._said_noisy = False

    def again(self, original: optuna.trial.FrozenTrial, name: str, tag: Hashable) -> None:
        """Measure ``original``'s configuration once more, whole (unpruned: a re-measurement is
        compared with the whole of other runs), its files under ``trials/<name>``. Its compiled
        graphs are in the compile cache, and no remembered result answers it: it runs."""
        params = TrialResult.model_validate_json(TrialAttrs.of(original).result or "").plan.params
        self._measuring(self.options.protocol)  # where a repeat is the first to find the host noisy, its note
        self.pool.submit(self.requests.request(params, self.out / "trials" / name,
                                               pruning.measuring_again(self.options.protocol, self.study)), tag=tag)

    def _measuring(self, protocol: MeasurementProtocol) -> MeasurementProtocol:
        """:func:`pruning.measuring`, said once in the study's notes when the host proves noisy."""
        measuring = pruning.measuring(protocol, self.study)
        if measuring.min_measure_seconds > protocol.min_measure_seconds and not self._said_noisy:
            self._said_noisy = True
            # Said early, on the first repeats: the study's own figure (its noise line) comes later,
            # on more runs, and is often far narrower than one said on a few.
            measured = standings(self.study)
            figure = noise_figure(measured, noise_of(self.study, measured))
            basis = f"on the {figure.repeats} runs measured so far" if figure is not None and figure.repeats \
                else "as earlier studies here measured it"
            spread = spread_text(figure.spread) if figure is not None and figure.spread is not None else "far"
            self.told.notes.append(f"one run of {RUN_SECONDS:.0f} s here reads {spread} of its configuration's mean "
                                   f"({basis}): each run from now on measures at least "
                                   f"{measuring.min_measure_seconds:.0f} s after warm-up, so that it averages over "
                                   "the host's ups and downs")
        return measuring

    def __call__(self, trial: optuna.Trial) -> Outcome:
        """Suggest a configuration; run it, or answer it from an earlier result."""
        if trials_filled(self.study, trial.number, self.options.trials):
            self.told.tell_surplus(trial, self.options.trials)
            return Outcome.surplus
        proposal = self._suggest(trial)
        if proposal is None:
            return Outcome.invalid
        for step in (self._measured_before, self._remembered, self._failed_before):
            outcome = step(proposal)
            if outcome is not None:
                return outcome
        return self._submit(proposal)

    def _suggest(self, trial: optuna.Trial) -> Proposal | None:
        try:
            params = suggest(trial, self.requests.space)
            self.requests.target.check(params)
        except InvalidConfigError as exc:
            self.told.tell_invalid(trial, str(exc))
            return None
        key = config_key(params)
        write(trial, config_key=key)
        return Proposal(trial, params, key)

    def _measured_before(self, p: Proposal) -> Outcome | None:
        """Measured before in this study, or claimed by another driver that measures it now."""
        earlier = self._earlier_result(p.key, p.trial.number)
        if earlier is None and self.claims is not None:
            earlier = self.claims.holder(p.key, p.trial.number)
        if earlier is None:
            return None
        if not earlier.state.is_finished():
            self.told.tell_measured_elsewhere(p.trial, p.params, earlier)
        else:
            self.told.tell_duplicate(p.trial, p.params, earlier)
        return Outcome.reused

    def _earlier_result(self, key: str, number: int) -> optuna.trial.FrozenTrial | None:
        for t in self.study.get_trials(deepcopy=False):
            if t.number != number and TrialAttrs.of(t).config_key == key and counts(t):
                return t
        return None

    def _remembered(self, p: Proposal) -> Outcome | None:
        """A result the cache root keeps from an earlier study of the same script and environment."""
        if self.cache is None:
            return None
        rkey = self.requests.result_key(p.params, self.devices_per_trial)
        write(p.trial, result_key=rkey)
        remembered = None if self.options.fresh else self.cache.get_result(rkey)
        if remembered is None or not pruning.answers(remembered, prune=self.options.prune):
            return None
        if not remembered.ok and self.options.retry_failed:
            return None
        self.told.tell(p.trial, remembered, None, from_cache=True)
        return Outcome.reused

    def _failed_before(self, p: Proposal) -> Outcome | None:
        """A configuration whose compile the target's compile cache holds as failed."""
        p.plan = self.requests.plan(p.params)
        if self.options.retry_failed:
            self.requests.target.retry_failed_compile(p.plan)
            return None
        if self.cache is None:
            return None
        failed = self.requests.target.failed_compile(p.plan, self.cache.path)
        if failed is None:
            return None
        self.told.tell_known_failure(p.trial, p.plan, failed)
        return Outcome.reused

    def _submit(self, p: Proposal) -> Outcome:
        protocol = pruning.trial_protocol(self._measuring(self.options.protocol), self.study, prune=self.options.prune,
                                          objectives=self.objectives, constraints=self.constraints)
        request = self.requests.request(p.params, self.out / "trials" / f"{p.trial.number:04d}", protocol,
                                        plan=p.plan)
        self.pool.submit(request, tag=p.trial.number)
        write(p.trial, env=request.plan.env, provenance=self.requests.provenance)
        return Outcome.submitted
