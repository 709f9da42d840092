"""The study: Optuna proposes configurations, a pool of Ray workers measures them.

The driver alone talks to the Optuna storage (ask/tell). Trial 0 is the baseline (every parameter
at its default, usually the script's own behaviour), then the space's known-good configurations,
then the sampler's proposals. A configuration already measured in the study (compared in canonical
form) is not run again: Optuna is told the earlier result.

``--trials N`` is the number of measured trials the study should hold: running the same study
again continues it up to N, and a study that already has N runs nothing. Trials left running by a
driver that was killed stop sending heartbeats; once stale they are marked failed and their
configurations are queued again (Optuna's ``RetryFailedTrialCallback``).

With ``confirm=K`` the K best configurations are measured once more at the end, unpruned, and
the best is chosen on the mean of each one's measurements: one lucky measurement does not make
the best. A re-measurement is a trial of its own (``confirms`` names the trial it measures
again); it does not count towards ``--trials`` and the sampler does not learn from it.
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, InvalidConfigError
from autotune.execution.pool import LazyPool
from autotune.measurement.windows import PRUNE_MARGIN
from autotune.records import MeasurementProtocol, TrialPlan, TrialRequest, TrialResult
from autotune.rendering import format_value
from autotune.search.samplers import make_sampler
from autotune.space import Parameter, SearchSpace
from autotune.study.claims import Claims, over_budget
from autotune.study.database import sqlite_path
from autotune.study.numerics import constraint_value, loss_deviation
from autotune.study.options import (
    DEFAULT_DIR,
    EXIT_ALL_FAILED,
    EXIT_OK,
    FinishedTrial,
    StudyOptions,
    StudyProgress,
    StudyResult,
    default_storage,
    default_study_name,
)
from autotune.study.outputs import TrialSummary, check_writable, write_outputs
from autotune.study.results import (
    _baseline_losses,
    _best,
    _ranked_configurations,
    _trial_env,
    baseline_value,
    best_config,
    study_summaries,
)
from autotune.study.storage import HEARTBEAT_S, open_storage, open_study
from autotune.targets import Target, resolve_target
from autotune.trial import check_script, load_trial_space, parse_size, validate_for
from autotune.trial_attrs import StudyAttrs, TrialAttrs, trial_attrs, write

#: A best measured once whose 95% interval is wider than this (half-width over throughput) gets a
#: note suggesting --confirm; the recorded landscapes' median is 6%.
WIDE_INTERVAL = 0.10


def tune(script: str | Path, *args: str, **options: Any) -> StudyResult:
    """Tune ``script`` from Python; the keyword arguments are the options of
    :class:`autotune.config.RunConfig` (and :class:`StudyOptions`).

    >>> result = autotune.tune("train.py", trials=50, target="xla")   # doctest: +SKIP
    >>> result.best.env["NEURON_CC_FLAGS"]                              # doctest: +SKIP
    """
    return Study(StudyOptions.checked(script=script, args=list(args), **options)).run()


def config_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


class Study:
    def __init__(self, options: StudyOptions) -> None:
        import optuna

        self.o = options
        self.script = check_script(options.script)
        self.target: Target = resolve_target(options.target, self.script)
        base_space = load_trial_space(self.target, options.space, options.platform)
        validate_for(self.target, base_space, {k: v for k, v in options.sets.items() if k not in base_space.parameters})
        self.space: SearchSpace = base_space.restrict(options.sets)
        self.memory_limit = parse_size(options.memory_limit) if options.memory_limit else None
        self.name = options.study or default_study_name(self.script, self.target.name)
        self.out = Path(options.out) if options.out else DEFAULT_DIR / self.name
        check_writable(self.out)
        self.storage_url = options.storage or default_storage()
        database = sqlite_path(self.storage_url)
        if database is not None:
            check_writable(database.parent)
        self.notes: list[str] = []
        from autotune.cache import open_cache

        self.cache = open_cache(options.cache)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        # The driver beats for its in-flight trials itself (ask/tell has no optimize loop).
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
        self.baseline_params = self.space.defaults()
        self.progress = StudyProgress(self.name, self.target.name, options.trials, metric=options.metric)
        # What run() opens and learns: the Optuna storage and study, where it measures (and the
        # parts of that which key remembered results), and what this invocation measured.
        self.storage: Any = None
        self.study: Any = None
        self.claims: Any = None
        self.provenance: dict[str, Any] = {}
        self._model_key: dict[str, Any] = {}
        self._env_key: dict[str, Any] = {}
        self.ran = self.reused = 0

    # -- set-up --------------------------------------------------------------------------------
    def _open_study(self) -> Any:
        study, notes = open_study(self.storage, self.name, self.o.direction, self._sampler(), fresh=self.o.fresh)
        self.notes.extend(notes)
        attrs = StudyAttrs.of(study)
        if attrs.target not in (None, self.target.name):
            raise AutotuneError(f"study {self.name!r} tunes target {attrs.target!r}, not {self.target.name!r}; "
                                "choose another --study name")
        if study.direction.name.lower() != self.o.direction:
            raise AutotuneError(f"study {self.name!r} was created to {study.direction.name.lower()}; "
                                "choose another --study name to change the direction")
        write(study, loss_tolerance=self.o.loss_tolerance, numerics_guard=self.o.numerics_guard)
        if attrs.target is None:
            write(study, target=self.target.name, metric=self.o.metric, script=str(self.script),
                  args=list(self.o.args), space=self.space.source)
        return study

    def _sampler(self) -> Any:
        return make_sampler(self.o.sampler, self.space, self.o.seed)

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> StudyResult:
        from autotune.cache import environment_of, model_of
        from autotune.execution.scheduler import connect
        from autotune.provenance import provenance

        started_ray = False
        if self.o.pool_factory is None and self.o.ray_address:
            # Before the storage is touched: an unreachable cluster must leave nothing written.
            started_ray = connect(self.o.ray_address)
        try:
            self.storage = open_storage(self.storage_url)
            self.study = self._open_study()
            self.claims = Claims(self.storage, self.study, self.storage_url)
        except BaseException:
            if started_ray:
                import ray

                ray.shutdown()
            raise
        self.provenance = provenance(self.target, self.script, self.o.args)
        write(self.study, provenance=self.provenance)
        self._model_key, self._env_key = model_of(self.provenance), environment_of(self.provenance)
        note = self.target.availability_note()
        if note:
            self.notes.append(note)
        self._fail_stale()
        self._enqueue_starting_points()
        if self.o.pool_factory is not None:
            pool = self.o.pool_factory(self)
            try:
                self._loop(pool)
            finally:
                pool.shutdown()
            return self.result()
        pool = LazyPool(self.target, ray_address=self.o.ray_address, workers=self.o.workers,
                        cores_per_trial=self.o.cores_per_trial, ray_started=started_ray)
        try:
            self._loop(pool)
        finally:
            pool.shutdown()
            self.notes.extend(pool.notes)
        return self.result()

    def _loop(self, pool: Any) -> None:
        deadline = time.monotonic() + self.o.timeout if self.o.timeout else math.inf
        in_flight: dict[int, Any] = {}  # trial number -> optuna trial
        consecutive_dups = 0
        self.ran = self.reused = 0
        last_beat = 0.0
        while True:
            counted, running_elsewhere = self._counts(exclude=set(in_flight))
            want_more = counted + len(in_flight) + running_elsewhere < self.o.trials
            while want_more and pool.free and time.monotonic() < deadline and consecutive_dups < 50:
                trial = self.study.ask()
                # At once: a driver killed before the trial is submitted must still leave a trial
                # that goes stale (one with no heartbeat at all never does, and a resume would wait).
                self.storage.record_heartbeat(trial._trial_id)
                outcome = self._dispatch(trial, pool)
                if outcome == "submitted":
                    in_flight[trial.number] = trial
                    consecutive_dups = 0
                else:
                    consecutive_dups += 1
                counted, running_elsewhere = self._counts(exclude=set(in_flight))
                want_more = counted + len(in_flight) + running_elsewhere < self.o.trials
            if consecutive_dups >= 50 and not in_flight:
                self.notes.append("every configuration the sampler proposes was measured already: "
                                  "the space is exhausted")
                break
            if not in_flight:
                if running_elsewhere and time.monotonic() < deadline:
                    self._fail_stale()  # another driver's trials, or a killed one's once stale
                    time.sleep(1.0)
                    continue
                break
            self._update_progress(len(in_flight))
            for number, result_json, error in pool.wait(timeout=1.0):
                trial = in_flight.pop(number)
                self._tell(trial, result_json, error)
            if time.monotonic() - last_beat > HEARTBEAT_S:
                for trial in in_flight.values():
                    self.storage.record_heartbeat(trial._trial_id)
                self._fail_stale()
                last_beat = time.monotonic()
        if self.o.confirm > 0 and time.monotonic() < deadline:
            self._confirm(pool, deadline)
        self._update_progress(0)
        self.write_outputs()

    def _confirm(self, pool: Any, deadline: float) -> None:
        """Measure the best ``confirm`` configurations once more, unpruned (each at most once
        per study: a resumed study measures only those not measured again yet)."""
        todo = _ranked_configurations(self.study)[:self.o.confirm]
        done = {TrialAttrs.of(t).confirms for t in self.study.get_trials(deepcopy=False)}
        todo = [t for t in todo if t.number not in done]
        in_flight: dict[Any, Any] = {}
        while todo or in_flight:
            while todo and pool.free and time.monotonic() < deadline:
                original = todo.pop(0)
                params = TrialResult.model_validate_json(TrialAttrs.of(original).result).plan.params
                trial_dir = self.out / "trials" / f"{original.number:04d}-again"
                tag = ("confirm", original.number)
                pool.submit(self._request(params, trial_dir, self.o.protocol), tag=tag)
                in_flight[tag] = original
            if not in_flight:
                break
            self._update_progress(len(in_flight))
            for tag, result_json, error in pool.wait(timeout=1.0):
                self._tell_confirmation(in_flight.pop(tag), result_json, error)
        skipped = [t.number for t in todo]
        if skipped:
            self.notes.append(f"the study's time ran out before trials {', '.join(map(str, skipped))} "
                              "were measured again")

    def _tell_confirmation(self, original: Any, result_json: str | None, error: str | None) -> None:
        """Store a re-measurement as a finished trial of its own."""
        import optuna

        attrs: dict[str, Any] = {"config_key": TrialAttrs.of(original).config_key, "confirms": original.number}
        value = None
        if result_json is not None:
            result = TrialResult.model_validate_json(result_json)
            attrs.update(result=result_json, env=_trial_env(result))
            value = self._objective(result) if result.ok else None
            if value is None:
                attrs["category"], attrs["reason"] = self._failure(result)
        else:
            attrs["category"], attrs["reason"] = "crash", error or "the worker failed"
        state = optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL
        self.study.add_trial(optuna.trial.create_trial(
            params=original.params, distributions=original.distributions, value=value, state=state,
            user_attrs=trial_attrs(**attrs)))
        self.ran += 1
        if value is None:
            self.notes.append(f"trial {original.number}'s configuration failed when measured again "
                              f"({attrs['category']}): it is not taken as the best")
            self._finished(original.number, original.params, None,
                           f"failed ({attrs['category']}), measured again")
        else:
            self._finished(original.number, original.params, value, "ok, measured again")

    def _finished(self, number: int, params: dict[str, Any], value: float | None, status: str) -> None:
        """Record a trial's end for the progress displays, and the live line's last event."""
        changed = {k: v for k, v in params.items() if self.baseline_params.get(k) != v}
        self.progress.finished.append(FinishedTrial(number, changed, value, status))
        shown = f"{format_value(value, self.o.metric)} " if value is not None else ""
        self.progress.last = f"trial {number}: {shown}{status}"

    def _counts(self, exclude: set[int]) -> tuple[int, int]:
        """Trials measured so far (in any run of this study), and trials running in other drivers."""
        import optuna

        counted = running = 0
        for t in self.study.get_trials(deepcopy=False):
            if TrialAttrs.of(t).counted and t.state.is_finished():
                counted += 1
            elif t.state == optuna.trial.TrialState.RUNNING and t.number not in exclude:
                running += 1
        return counted, running

    def _dispatch(self, trial: Any, pool: Any) -> str:
        """Suggest a configuration; run it, or answer it from an earlier result."""
        import optuna

        if over_budget(self.study, trial.number, self.o.trials):  # other drivers' trials filled it first
            write(trial, reason=f"the study already had its {self.o.trials} trials")
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return "surplus"
        try:
            params = self._suggest(trial)
            self.target.check(params)
        except InvalidConfigError as exc:
            write(trial, category="invalid_config")
            write(trial, reason=str(exc))
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self._finished(trial.number, trial.params, None, "failed (invalid_config)")
            return "invalid"
        key = config_key(params)
        write(trial, config_key=key)
        earlier = self._earlier_result(key, trial.number) or self.claims.holder(key, trial.number)
        if earlier is not None and not earlier.state.is_finished():  # another driver measures it now
            write(trial, duplicate_of=earlier.number)
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self._finished(trial.number, params, None, f"measured by trial {earlier.number}")
            return "reused"
        if earlier is not None:
            write(trial, duplicate_of=earlier.number)
            told = TrialAttrs.of(earlier)
            write(trial, **{name: value for name, value in (("category", told.category), ("reason", told.reason))
                            if value is not None})
            if earlier.state == optuna.trial.TrialState.COMPLETE:
                self.study.tell(trial, earlier.value)
            else:
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.reused += 1
            self.progress.reused += 1
            self._finished(trial.number, params, earlier.value, f"same as trial {earlier.number}")
            return "reused"
        from autotune.cache import result_key

        rkey = result_key(model=self._model_key, environment=self._env_key, target=self.target.name,
                          params=params, protocol_version=self.o.protocol.version)
        write(trial, result_key=rkey)
        remembered = None if self.o.fresh else self.cache.get_result(rkey)
        if remembered is not None and (remembered.ok or not self.o.retry_failed):
            self._tell(trial, remembered.model_dump_json(), None, from_cache=True)
            return "reused"
        plan = self.target.cached_plan(params, str(self.cache.path))
        if self.o.retry_failed:
            self.target.retry_failed_compile(plan)
        else:
            failed = self.target.failed_compile(plan, self.cache.path)
            if failed is not None:
                self._tell_known_failure(trial, plan, failed)
                return "reused"
        write(trial, env=plan.env)
        pool.submit(self._request(params, self.out / "trials" / f"{trial.number:04d}", self._trial_protocol(),
                                  plan=plan), tag=trial.number)
        return "submitted"

    def _request(self, params: dict[str, Any], trial_dir: Path, protocol: MeasurementProtocol,
                 plan: TrialPlan | None = None) -> TrialRequest:
        """What a worker needs to run one trial of ``params``."""
        return TrialRequest(
            plan=plan or self.target.cached_plan(params, str(self.cache.path)), script=str(self.script),
            args=list(self.o.args), cwd=os.getcwd(), trial_dir=str(trial_dir.resolve()),
            timeout_s=self.o.trial_timeout, memory_bytes=self.memory_limit, protocol=protocol,
            seed=self.o.seed or 0)

    def _suggest(self, trial: Any) -> dict[str, Any]:
        """Ask Optuna for each free parameter that is active given those chosen before it."""
        chosen: dict[str, Any] = dict(self.space.fixed)
        for p in self.space.in_dependency_order():
            if p.name in self.space.fixed or not p.is_active(chosen):
                continue
            chosen[p.name] = _suggest_one(trial, p)
        active = {k: v for k, v in chosen.items() if self.space.parameters[k].is_active(chosen)}
        return self.space.validate(active)

    def _earlier_result(self, key: str, number: int) -> Any:
        for t in self.study.get_trials(deepcopy=False):
            if t.number != number and TrialAttrs.of(t).config_key == key and TrialAttrs.of(t).counted \
                    and t.state.is_finished():
                return t
        return None

    def _tell_known_failure(self, trial: Any, plan: Any, reason: str) -> None:
        from autotune.records import Failure, FailureCategory

        result = TrialResult(status="failed", plan=plan,
                             failure=Failure(category=FailureCategory.compile_error, reason=reason))
        self._tell(trial, result.model_dump_json(), None, from_cache=True)

    def _tell(self, trial: Any, result_json: str | None, error: str | None, from_cache: bool = False) -> None:
        import optuna

        write(trial, counted=True)
        if from_cache:
            write(trial, cached=True)
            self.reused += 1
            self.progress.reused += 1
        else:
            self.ran += 1
        if result_json is None:
            write(trial, category="crash")
            write(trial, reason=error or "the worker failed")
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.progress.failed += 1
            self._finished(trial.number, trial.params, None, "failed (crash)")
            return
        result = TrialResult.model_validate_json(result_json)
        write(trial, result=result_json)
        if not from_cache and TrialAttrs.of(trial).result_key is not None:
            self.cache.put_result(TrialAttrs.of(trial).result_key, result)
        write(trial, env=_trial_env(result))
        value = self._objective(result)
        if result.ok and value is not None:
            self._guard_numerics(trial, result)
            self.study.tell(trial, value)
            status = "pruned" if result.measurement and result.measurement.pruned else "ok"
            if (TrialAttrs.of(trial).numerics_constraint or 0) > 0:
                status = "diverged"
            self._finished(trial.number, result.plan.params, value,
                           f"{status}, remembered" if from_cache else status)
        else:
            category, reason = self._failure(result)
            write(trial, category=category)
            write(trial, reason=reason)
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.progress.failed += 1
            self._finished(trial.number, result.plan.params, None,
                           f"failed ({category})" + (", remembered" if from_cache else ""))
        self.write_outputs()  # after every trial: a killed driver loses nothing measured

    def _failure(self, result: TrialResult) -> tuple[str, str]:
        """The category and reason of a trial that gave no value."""
        failure = result.failure
        if failure is None:
            return "script_error", f"the script reported no {self.o.metric!r}"
        return failure.category.value, failure.reason

    def _guard_numerics(self, trial: Any, result: TrialResult) -> None:
        """Record how far this trial's first losses are from the baseline's (a constraint)."""
        if not self.o.numerics_guard or not result.losses:
            return
        if TrialAttrs.of(trial).config_key == StudyAttrs.of(self.study).baseline_key:
            deviation: float | None = 0.0
        else:
            base = _baseline_losses(self.study)
            deviation = loss_deviation(result.losses, base) if base else None
        if deviation is not None:
            write(trial, loss_deviation=deviation if math.isfinite(deviation) else "inf")
            value = constraint_value(deviation, self.o.loss_tolerance)
            write(trial, numerics_constraint=value)
            trial.set_constraint("numerics", value)  # constrained sampling steers away from it

    def _objective(self, result: TrialResult) -> float | None:
        if self.o.metric == "throughput":
            return result.measurement.throughput if result.measurement else None
        return result.metrics.get(self.o.metric)

    def _trial_protocol(self) -> MeasurementProtocol:
        """The study's protocol with the bar below which a trial stops measuring: the best value
        so far less PRUNE_MARGIN. Only for throughput, which the harness times itself."""
        o = self.o
        if not o.prune or o.metric != "throughput" or o.direction != "maximize":
            return o.protocol
        best = _best(self.study)
        if best is None or not best[1]:
            return o.protocol
        return o.protocol.model_copy(update={"stop_below": best[1] * (1 - PRUNE_MARGIN)})

    def _enqueue_starting_points(self) -> None:
        """Baseline first, then the known-good configurations, each once per study."""
        if StudyAttrs.of(self.study).baseline_key is None:
            write(self.study, baseline_key=config_key(self.baseline_params))
        queued = {TrialAttrs.of(t).enqueued_key for t in self.study.get_trials(deepcopy=False)}
        for params in [self.baseline_params, *self.space.known_good]:
            try:
                config = self.space.validate({**self.baseline_params, **params, **self.space.fixed})
            except InvalidConfigError:
                continue  # a known-good point that the user's --set excludes
            key = config_key(config)
            if key in queued:
                continue
            queued.add(key)
            full = {p.name: config.get(p.name) for p in self.space.free_parameters if p.is_active(config)}
            self.study.enqueue_trial(full, user_attrs=trial_attrs(enqueued_key=key), skip_if_exists=False)

    def _fail_stale(self) -> None:
        import optuna

        optuna.storages.fail_stale_trials(self.study)

    # -- results -----------------------------------------------------------------------------
    def summaries(self) -> list[TrialSummary]:
        return study_summaries(self.study)

    def result(self) -> StudyResult:
        trials = self.summaries()
        best = best_config(self.study, self.name, self.provenance)
        by_cat: dict[str, int] = {}
        for t in trials:
            if t.state == "FAIL" and t.category and t.duplicate_of is None:
                by_cat[t.category] = by_cat.get(t.category, 0) + 1
        code = EXIT_OK if best is not None else EXIT_ALL_FAILED
        notes = list(self.notes)
        spread = best.relative_spread() if best is not None and len(best.measurements) < 2 else None
        if spread is not None and spread > WIDE_INTERVAL:
            notes.append(f"trial {best.trial}'s 95% interval is {best.ci95_low:,.1f} .. {best.ci95_high:,.1f} "
                         f"(±{spread:.0%}): one measurement may be a lucky draw; --confirm 2 measures the "
                         "two best configurations again")
        return StudyResult(study=self.name, storage=self.storage_url, target=self.target.name,
                           out_dir=str(self.out), metric=self.o.metric, best=best, baseline_value=baseline_value(self.study),
                           trials=trials, failures_by_category=by_cat, ran=self.ran, reused=self.reused,
                           notes=notes, exit_code=code)

    def write_outputs(self) -> None:
        trials = self.summaries()
        best = best_config(self.study, self.name, self.provenance)
        write_outputs(self.out, best, trials, baseline_value(self.study))

    def _update_progress(self, running: int) -> None:
        p = self.progress
        p.running = running
        p.done, _ = self._counts(exclude=set())
        p.baseline_value = baseline_value(self.study)
        best = _best(self.study)
        if best is not None:
            p.best_value, p.best_params = best[1], best[0].params
        if self.o.on_update:
            self.o.on_update(p)


def _suggest_one(trial: Any, p: Parameter) -> Any:
    if p.choices is not None:
        choices = list(p.choices)
        if p.default is None:
            choices = [None, *choices]  # None: leave the script's own value
        return trial.suggest_categorical(p.name, choices)
    if p.type == "int":
        return trial.suggest_int(p.name, int(p.low), int(p.high), step=int(p.step or 1), log=p.log)
    return trial.suggest_float(p.name, float(p.low), float(p.high), step=p.step, log=p.log)
