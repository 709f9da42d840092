"""What a trial's outcome becomes in the Optuna study: a value, a failure with its category, a
re-measurement of its own, and a line in the progress displays.

:class:`TrialRecorder` is the one place that tells Optuna; :mod:`.loop` decides what to run and
hands every outcome here, and :mod:`.verdict` says what a result is worth. Every outcome is in the
study database once told, so a driver killed between two trials loses nothing it measured: the
same command continues the study and writes its outputs from there. The outputs are written again
after a trial (:data:`OUTPUT_PACE`) and at the end.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from autotune.cache import CacheRoot
from autotune.disk_space import on_no_space
from autotune.errors import InvalidConfigError
from autotune.objectives import BUILT_IN, Constraint, Objective
from autotune.records import Failure, FailureCategory, TrialPlan, TrialResult
from autotune.study.options import FinishedTrial, StudyOptions, StudyProgress
from autotune.storage.optuna_storage import GRACE_S
from autotune.storage.optuna_versions import constraints_of, finished_already, tell_constraints
from autotune.study.verdict import Verdict
from autotune.storage.attrs import TrialAttrs, trial_attrs, write

if TYPE_CHECKING:
    import optuna

#: After a trial the outputs are written again once the time since they were last written is this
#: many times what that took: after every trial while they are small, every few seconds on a study
#: of thousands of trials, where writing them after each would be most of the driver's work.
OUTPUT_PACE = 10


class TrialRecorder:
    """Tells Optuna each outcome of one study, and counts what this driver ran and reused."""

    def __init__(self, study: optuna.Study, options: StudyOptions, cache: CacheRoot | None, progress: StudyProgress,
                 baseline_params: dict[str, Any], notes: list[str], on_told: Callable[[], None], *,
                 objectives: list[Objective], constraints: list[Constraint],
                 usd_per_sample_second: float | None,
                 on_result: Callable[[int, TrialResult], None] | None = None,
                 on_no_space: Callable[[Path], None] = lambda path: None) -> None:
        self.study = study
        self.cache = cache
        self.progress = progress
        self.baseline_params = baseline_params
        #: The study's notes, shared with the driver: a re-measurement that fails adds one.
        self.notes = notes
        self.on_told = on_told
        #: Called with each trial's number and result once Optuna has been told it.
        self.on_result = on_result
        #: Called with the cache root when a result could not be kept there for lack of space.
        self.on_no_space = on_no_space
        self.objectives = objectives
        #: What the study makes of each result: its values, or why it gave none.
        self.verdict = Verdict(study, options, objectives, constraints, usd_per_sample_second)
        self.ran = self.reused = 0
        #: When ``on_told`` last returned, and how long it took.
        self._told_at = -math.inf
        self._told_took = 0.0
        #: Re-measurements this driver ran (not trials: ``ran`` does not count them).
        self.again = 0

    def tell(self, trial: optuna.Trial, result: TrialResult | None, error: str | None, from_cache: bool = False) -> None:
        """Tell Optuna a measured (or remembered) trial: its ``result``, or ``None`` with ``error``
        when the worker itself failed."""
        import optuna

        if result is not None and not from_cache:
            self._remember(trial, result)
        write(trial, counted=True)
        if from_cache:
            write(trial, cached=True)
            self.count_reused()
        else:
            self.ran += 1
        if result is None:
            write(trial, category=FailureCategory.crash.value)
            write(trial, reason=error or "the worker failed")
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.progress.failed += 1
            self.finished(trial.number, trial.params, None, "failed (crash)")
            return
        write(trial, result=result.model_dump_json())
        self._check_reported(trial, result)
        write(trial, env=trial_env(result))
        idle = [k.param for k in result.idle_knobs]
        if idle:
            write(trial, idle=idle)
        values = self.verdict.values(result)
        if result.ok and values is not None:
            self.verdict.guard_numerics(trial, result)
            violated = self.verdict.judge_constraints(trial, result)
            self.study.tell(trial, values)
            status = "pruned" if result.measurement and result.measurement.pruned else "ok"
            if (TrialAttrs.of(trial).numerics_constraint or 0) > 0:
                status = "diverged"
            if violated:
                status = f"infeasible ({', '.join(violated)})"
            if idle:
                status += f"; {', '.join(idle)} never reached the script"
            self.finished(trial.number, result.plan.params, values[0],
                          f"{status}, remembered" if from_cache else status)
        else:
            category, reason = self.verdict.failure(result)
            write(trial, category=category)
            write(trial, reason=reason)
            untried = FailureCategory(category).stops_study
            if untried:  # the configuration was never tried: the trial does not count
                write(trial, counted=False)
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            if untried:  # and a study continued once the data is there measures it first
                self.study.enqueue_trial(trial.params, skip_if_exists=False,
                                         user_attrs=trial_attrs(enqueued_key=TrialAttrs.of(trial).config_key))
            self.progress.failed += 1
            self.finished(trial.number, result.plan.params, None,
                          f"failed ({category})" + (", remembered" if from_cache else ""))
        if self.on_result is not None:
            self.on_result(trial.number, result)
        self._paced_on_told()

    def _paced_on_told(self) -> None:
        started = time.monotonic()
        if started - self._told_at < OUTPUT_PACE * self._told_took:
            return
        self.on_told()
        self._told_at = time.monotonic()
        self._told_took = self._told_at - started

    def _remember(self, trial: optuna.Trial, result: TrialResult) -> None:
        """Keep a measured result in the cache root before anything is written to its trial: a
        driver that took the trial for lost has finished it, and every write to it fails, yet the
        measurement still answers its configuration next time. A result that lacks an objective
        the script reports is not kept (a typo of the objective's name is no measurement of it)."""
        key = TrialAttrs.of(trial).result_key
        if self.cache is not None and key is not None and (not result.ok or self.verdict.values(result) is not None):
            with on_no_space(self.cache.path, self.on_no_space):  # the study keeps the result all the same
                self.cache.put_result(key, result)

    def tell_known_failure(self, trial: optuna.Trial, plan: TrialPlan, reason: str) -> None:
        """A configuration whose compile failed before (the target's compile cache says so)."""
        result = TrialResult(status="failed", plan=plan,
                             failure=Failure(category=FailureCategory.compile_error, reason=reason))
        self.tell(trial, result, None, from_cache=True)

    def tell_duplicate(self, trial: optuna.Trial, params: dict[str, Any], earlier: optuna.trial.FrozenTrial) -> None:
        """A configuration measured before in this study: Optuna is told the earlier outcome."""
        import optuna

        write(trial, duplicate_of=earlier.number)
        told = TrialAttrs.of(earlier)
        write(trial, **{name: value for name, value in (("category", told.category), ("reason", told.reason))
                        if value is not None})
        if earlier.state == optuna.trial.TrialState.COMPLETE:
            tell_constraints(trial, constraints_of(earlier))
            self.study.tell(trial, earlier.values)
        else:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        self.count_reused()
        self.finished(trial.number, params, earlier.values[0] if earlier.values else None,
                      f"same as trial {earlier.number}")

    def tell_measured_elsewhere(self, trial: optuna.Trial, params: dict[str, Any], earlier: optuna.trial.FrozenTrial) -> None:
        """A configuration another driver is measuring now: this trial ends at once, a duplicate of it."""
        import optuna

        write(trial, duplicate_of=earlier.number)
        self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        self.finished(trial.number, params, None, f"measured by trial {earlier.number}")

    def tell_confirmation(self, original: optuna.trial.FrozenTrial, result: TrialResult | None, error: str | None,
                          why: str) -> None:
        """Store a re-measurement of ``original`` as a finished trial of its own; ``why`` it was
        measured again (:data:`autotune.repeats.racing.NOISE`, ``RACE``, ``CONFIRM``)."""
        import optuna

        attrs: dict[str, Any] = {"config_key": TrialAttrs.of(original).config_key, "confirms": original.number,
                                 "again": why}
        values = None
        if result is not None:
            attrs.update(result=result.model_dump_json(), env=trial_env(result))
            values = self.verdict.values(result) if result.ok else None
            if values is None:
                attrs["category"], attrs["reason"] = self.verdict.failure(result)
        else:
            attrs["category"], attrs["reason"] = FailureCategory.crash.value, error or "the worker failed"
        state = optuna.trial.TrialState.COMPLETE if values is not None else optuna.trial.TrialState.FAIL
        self.study.add_trial(optuna.trial.create_trial(
            params=original.params, distributions=original.distributions, values=values, state=state,
            user_attrs=trial_attrs(**attrs)))
        value = values[0] if values is not None else None
        self.again += 1
        if value is None:
            self.notes.append(f"trial {original.number}'s configuration failed when measured again "
                              f"({attrs['category']}): it is not taken as the best")
            self.finished(original.number, original.params, None, f"failed ({attrs['category']}), measured again")
        else:
            self.finished(original.number, original.params, value, "ok, measured again")

    def tell_surplus(self, trial: optuna.Trial, trials: int) -> None:
        """A trial asked for after other drivers' trials filled the study: failed, uncounted."""
        import optuna

        write(trial, reason=f"the study already had its {trials} trials")
        self.study.tell(trial, state=optuna.trial.TrialState.FAIL)

    def tell_held(self, trial: optuna.Trial, result: TrialResult | None, error: str | None) -> None:
        """Tell a trial this driver ran, unless another driver took it for lost meanwhile (its
        heartbeats stopped reaching the database for longer than the grace period): that driver
        failed it and queued its configuration again, so this measurement is not counted twice."""
        try:
            self.tell(trial, result, error)
        except RuntimeError as exc:  # Optuna's refusal to change a finished trial
            if not finished_already(exc):
                raise
            self.notes.append(f"trial {trial.number} was taken for lost while it ran (no heartbeat reached "
                              f"the database for {GRACE_S} s); its configuration was queued again")

    def tell_invalid(self, trial: optuna.Trial, reason: str) -> None:
        """A configuration the space or the target rejects: failed without running."""
        import optuna

        write(trial, category=FailureCategory.invalid_config.value)
        write(trial, reason=reason)
        self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        self.finished(trial.number, trial.params, None, "failed (invalid_config)")

    def count_reused(self) -> None:
        self.reused += 1
        self.progress.reused += 1

    def finished(self, number: int, params: dict[str, Any], value: float | None, status: str) -> None:
        """Record a trial's end for the progress displays, and the live line's last event."""
        changed = {k: v for k, v in params.items() if self.baseline_params.get(k) != v}
        self.progress.finished.append(FinishedTrial(number, changed, value, status))
        shown = f"{self.objectives[0].format(value)} " if value is not None else ""
        self.progress.last = f"trial {number}: {shown}{status}"

    def _check_reported(self, trial: optuna.Trial, result: TrialResult) -> None:
        """A metric objective that the study's first complete run never reported is a typo, not a
        configuration's failure: the study stops there, nothing remembered of it."""
        import optuna

        missing = [o.name for o in self.objectives if not o.unit and o.read(result, None) is None]
        if not missing or not result.ok or (result.measurement and result.measurement.pruned) \
                or self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            return
        reported = ", ".join(sorted(result.metrics)) or "nothing through autotune.report()"
        write(trial, category=FailureCategory.script_error.value, reason=f"the script reported no {missing[0]!r}")
        self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        raise InvalidConfigError(f"--objective {missing[0]!r}: the script reported {reported}; choose one of "
                                 f"those or a built-in objective ({', '.join(BUILT_IN)})")


def trial_env(result: TrialResult) -> dict[str, str]:
    """The env a trial ran with: its plan's, and the NeuronCores its placement gave it."""
    return {**result.plan.env, **{k: v for k, v in result.placement.items() if k.startswith("NEURON_")}}
