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

import math
import os
import time
import warnings
from pathlib import Path
from typing import Any

from autotune.errors import AutotuneError, InvalidConfigError
from autotune.execution.pool import LazyPool
from autotune.host import instance_type
from autotune.measurement.windows import PRUNE_MARGIN
from autotune.objectives import Constraint, objective
from autotune.pricing import check_instance_type, resolve_price, trial_rate
from autotune.records import FailureCategory, MeasurementProtocol, TrialPlan, TrialRequest, TrialResult
from autotune.search.configurations import enumerate_space, grid_size, starting_points
from autotune.search.samplers import make_sampler, suggest
from autotune.space import SearchSpace, compile_key, config_key
from autotune.space.processes import most_processes, with_processes
from autotune.study.budget import Budget
from autotune.study.claims import Claims, over_budget
from autotune.study.compile_stage import CompileAhead, compile_job, compile_stage, local_compile_slots
from autotune.study.database import sqlite_path
from autotune.study.options import (
    DEFAULT_DIR,
    StudyOptions,
    StudyProgress,
    StudyResult,
    default_storage,
    default_study_name,
)
from autotune.study.outputs import TrialSummary, check_writable, write_outputs
from autotune.study.record import TrialRecorder
from autotune.study.results import (
    _best,
    _ranked_configurations,
    baseline_value,
    best_config,
    maximizes,
    study_result,
    study_summaries,
    trial_counts,
)
from autotune.study.storage import GRACE_S, HEARTBEAT_S, Heartbeats, open_storage, open_study
from autotune.study.warm_start import WarmStart, after_baseline, describe, earlier_studies, read_warm_start
from autotune.targets import Target, resolve_target
from autotune.trial import check_script, load_trial_space, plan_for, validate_for
from autotune.units import parse_size
from autotune.trial_attrs import StudyAttrs, TrialAttrs, trial_attrs, write

def tune(script: str | Path, *args: str, **options: Any) -> StudyResult:
    """Tune ``script`` from Python; the keyword arguments are the options of
    :class:`autotune.config.RunConfig` (and :class:`StudyOptions`).

    >>> result = autotune.tune("train.py", trials=50, target="xla")   # doctest: +SKIP
    >>> result.best.env["NEURON_CC_FLAGS"]                              # doctest: +SKIP
    """
    return Study(StudyOptions.checked(script=script, args=list(args), **options)).run()


class Study:
    def __init__(self, options: StudyOptions) -> None:
        import optuna

        self.o = options
        self.script = check_script(options.script)
        self.target: Target = resolve_target(options.target, self.script, options.gpus_per_trial)
        base_space, sets = with_processes(load_trial_space(self.target, options.space, options.platform)
                                          .with_flags(options.script_flags()), options.sets, options.nproc_per_node)
        validate_for(self.target, base_space, {k: v for k, v in sets.items() if k not in base_space.parameters})
        self.space: SearchSpace = base_space.restrict(sets)
        self.processes = most_processes(self.space)
        self.memory_limit = parse_size(options.memory_limit) if options.memory_limit else None
        self.target.check_processes(self.processes, options.cores_per_trial)
        self.name = options.study or default_study_name(self.script, self.target.name, options.nproc_per_node)
        self.out = Path(options.out) if options.out else DEFAULT_DIR / self.name
        check_writable(self.out)
        self.storage_url = options.storage or default_storage()
        database = sqlite_path(self.storage_url)
        if database is not None:
            check_writable(database.parent)
        self.notes: list[str] = []
        #: The instance it measures on, and what an hour of it costs (``None``: no price known).
        check_instance_type(options.instance_type, price_per_hour=options.price_per_hour, prices_file=options.prices)
        self.instance_type = instance_type(options.instance_type)
        self.price = resolve_price(self.instance_type, price_per_hour=options.price_per_hour, prices_file=options.prices)
        from autotune.cache import environment_of, model_of, open_cache

        self.cache = open_cache(options.cache)
        from autotune.provenance import caller_env, provenance

        #: The environment a trial would inherit from the caller, and what of it travels with each
        #: trial and keys its result: the variables the target reads (the user's PJRT_DEVICE, XLA_FLAGS)
        #: and those given with --env.
        self.environ = {**os.environ, **options.trial_env()}
        self.caller_env = caller_env(self.target, options.trial_env())
        #: Where it measures, and the parts of that which key remembered results (and the study).
        self.provenance: dict[str, Any] = provenance(self.target, self.script, options.args,
                                                     instance_type=self.instance_type, env=self.caller_env)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        # The driver beats for its in-flight trials itself (ask/tell has no optimize loop).
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
        self.baseline_params = self.space.defaults()
        self.objectives = [objective(name, options.direction) for name in options.objectives()]
        self.constraints = [Constraint.parse(text) for text in options.constraint]
        #: The devices a trial holds (None: the target holds none, as on CPU), and what a
        #: sample-second of a trial costs where the study optimises or bounds cost.
        self.devices_per_trial = self.target.devices_per_trial(options.cores_per_trial) or None
        costed = "cost" in [o.name for o in self.objectives] + [c.name for c in self.constraints]
        self.usd_per_sample_second = trial_rate(self.price, instance_type=self.instance_type,
                                                devices_per_trial=self.devices_per_trial) if costed else None
        #: The spending cap (``--budget-usd``, ``--budget-hours``) and what the study spent against it.
        self.budget = Budget.of(hours=options.budget_hours, usd=options.budget_usd, price=self.price,
                                instance_type=self.instance_type, devices_per_trial=self.devices_per_trial)
        self.progress = StudyProgress(self.name, self.target.name, options.trials, metric=self.objectives[0].name,
                                      maximize=self.objectives[0].maximize)
        # What run() opens: the Optuna storage and study.
        self.storage: Any = None
        self.study: Any = None
        self.claims: Any = None
        self._model_key: dict[str, Any] = model_of(self.provenance)
        self._env_key: dict[str, Any] = environment_of(self.provenance)
        #: Tells Optuna each outcome; made once the study is open.
        self.recorder: TrialRecorder | None = None
        #: The compile stage (``--compile-workers``), while the study runs with one.
        self.farm: CompileAhead | None = None
        #: Every configuration of the space has been measured (the study ended before ``--trials``).
        self.exhausted = False
        #: Why the study asks for no more trials although it has fewer than ``--trials``: a trial
        #: showed that the script cannot run here as it is (its data is missing), whatever the
        #: configuration.
        self.stopped: str | None = None
        #: What earlier studies of the same script give this one (``--warm-start``, ``--warm``).
        self.warm = WarmStart()
        #: The configurations of the space, while it stays small and all-categorical.
        self._grid: tuple[SearchSpace, set[str]] | None = None

    # -- set-up --------------------------------------------------------------------------------
    def _open_study(self) -> Any:
        names = [o.name for o in self.objectives]
        directions = [o.direction for o in self.objectives]
        study, notes = open_study(self.storage, self.name, directions, self._sampler(), fresh=self.o.fresh)
        self.notes.extend(notes)
        attrs = StudyAttrs.of(study)
        changed = self._changed(attrs)
        if changed:
            # Its trials measured another script or environment: they must not answer this one's
            # configurations, nor share a best with its measurements.
            old = self.name
            self.name = f"{old}-{self._identity_hash()[:8]}"
            if self.o.out is None:
                self.out = DEFAULT_DIR / self.name
                check_writable(self.out)
            self.progress.study = self.name
            study, _ = open_study(self.storage, self.name, directions, self._sampler(), fresh=False)
            attrs = StudyAttrs.of(study)
            if self._changed(attrs):
                raise AutotuneError(f"study {self.name!r} measured another script or environment; "
                                    "choose another --study name")
            self.notes.append(f"{' and '.join(changed)} changed since study {old} was measured: "
                              f"this run measures study {self.name}")
        if attrs.target not in (None, self.target.name):
            raise AutotuneError(f"study {self.name!r} tunes target {attrs.target!r}, not {self.target.name!r}; "
                                "choose another --study name")
        had = [d.name.lower() for d in study.directions]
        if attrs.target is not None and (had != directions or (attrs.objectives or [attrs.metric]) != names):
            was = ", ".join(f"{n} ({d})" for n, d in zip(attrs.objectives or [attrs.metric], had))
            raise AutotuneError(f"study {self.name!r} was created to optimise {was}; choose another --study "
                                "name to change what it optimises")
        write(study, loss_tolerance=self.o.loss_tolerance, numerics_guard=self.o.numerics_guard,
              constraints=list(self.o.constraint), prefer=self.o.prefer or names[0])
        if attrs.target is None:
            # One attribute at a time, the target last: a driver that opens the study meanwhile
            # sees no target (and writes the same), never a target without its objectives.
            write(study, metric=names[0], objectives=names, script=str(self.script), args=list(self.o.args),
                  space=self.space.source, **self._identity())
            write(study, target=self.target.name)
        elif attrs.script_sha256 is None:  # made before studies kept what they measured: from now on
            write(study, **self._identity())
        return study

    def _identity(self) -> dict[str, Any]:
        """What the study's trials measured: the script's contents and the environment's key (with
        its arguments, kept as ``args``)."""
        from autotune.cache import environment_key

        return {"script_sha256": self.provenance["script_sha256"], "environment_key": environment_key(self.provenance)}

    def _identity_hash(self) -> str:
        import hashlib
        import json

        doc = {**self._identity(), "args": list(self.o.args)}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    def _changed(self, attrs: StudyAttrs) -> list[str]:
        """What differs between the stored study's script, arguments and environment and this run's."""
        if attrs.target is None or attrs.script_sha256 is None:
            return []
        mine = self._identity()
        return [what for what, differs in (
            (f"the script {self.script.name}", attrs.script_sha256 != mine["script_sha256"]),
            ("its arguments", list(attrs.args or []) != list(self.o.args)),
            ("the environment (versions, device, env vars)", attrs.environment_key != mine["environment_key"]),
        ) if differs]

    def _sampler(self) -> Any:
        if len(self.objectives) > 1 and self.o.sampler == "autotune":
            self.notes.append("autotune's sampler optimises one objective: this multi-objective study uses "
                              "Optuna's TPE")
            return make_sampler("tpe", self.space, self.o.seed)
        return make_sampler(self.o.sampler, self.space, self.o.seed)

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> StudyResult:
        import optuna

        from autotune.execution.scheduler import connect

        started_ray = False
        if self.o.pool_factory is None and self.o.ray_address:
            # Before the storage is touched: an unreachable cluster must leave nothing written.
            started_ray = connect(self.o.ray_address)
        try:
            self.storage = open_storage(self.storage_url)
            # Before the study is made: a --warm-start that names no study must leave nothing written.
            warm_from = earlier_studies(self.storage, None, script=self.script, target=self.target.name,
                                        objectives=[o.name for o in self.objectives], named=list(self.o.warm_start),
                                        same_script=self.o.warm)
            self.study = self._open_study()
            self.claims = Claims(self.storage, self.study, self.storage_url)
        except BaseException:
            if started_ray:
                import ray

                ray.shutdown()
            raise
        self.recorder = TrialRecorder(self.study, self.o, self.cache, self.progress, self.baseline_params,
                                      self.notes, on_told=self.write_outputs, objectives=self.objectives,
                                      constraints=self.constraints, usd_per_sample_second=self.usd_per_sample_second,
                                      on_result=self._learn_from)
        write(self.study, provenance=self.provenance, price=self.price.model_dump() if self.price else None,
              devices_per_trial=self.devices_per_trial)
        note = self.target.availability_note()
        if note:
            self.notes.append(note)
        self.warm = self._warm_start([name for name in warm_from if name != self.name])
        for told in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,
                                                                  optuna.trial.TrialState.FAIL)):
            if TrialAttrs.of(told).idle:  # a resumed study: what its trials showed still holds
                self._hold_idle_knobs(told.number, TrialResult.model_validate_json(TrialAttrs.of(told).result))
        self._fail_stale()
        self._enqueue_starting_points()
        if self.o.pool_factory is not None:
            pool = self.o.pool_factory(self)
            try:
                self._loop(pool)
            finally:
                pool.shutdown()
            return self.result()
        slots = local_compile_slots(self.o)
        pool = LazyPool(self.target, ray_address=self.o.ray_address, workers=self.o.workers,
                        cores_per_trial=self.o.cores_per_trial, processes_per_trial=self.processes,
                        ray_started=started_ray, compile_slots=slots)
        compilers = LazyPool(self.target, ray_address=self.o.ray_address, workers=self.o.compile_workers or None,
                             cores_per_trial=1, ray_started=False, compiles=True, compile_slots=slots)
        self.farm = compile_stage(self.target, self.o, self.baseline_params, compilers, self.notes)
        try:
            self._loop(pool)
        finally:
            pool.shutdown()
            compilers.shutdown()
            self.notes.extend(pool.notes + compilers.notes)
        return self.result()

    def _loop(self, pool: Any) -> None:
        deadline = time.monotonic() + self.o.timeout if self.o.timeout else math.inf
        with Heartbeats(self.storage) as beats:
            self._measure(pool, beats, deadline)
        if self.o.confirm > 0 and time.monotonic() < deadline:
            self._confirm(pool, deadline)
        self._update_progress(0)
        spend = self.budget.spend(self.study)
        write(self.study, spend=spend.model_dump())
        if spend.stopped:
            self.notes.append(spend.stopped)
        self.write_outputs()

    def _measure(self, pool: Any, beats: Heartbeats, deadline: float) -> None:
        """Ask, run and tell trials until the study holds ``--trials`` of them (or time runs out)."""
        in_flight: dict[int, Any] = {}  # trial number -> optuna trial
        consecutive_dups = 0
        last_check = 0.0

        def tell(number: int, result_json: str | None, error: str | None) -> None:
            trial = in_flight.pop(number)
            beats.release(trial._trial_id)
            self._tell_held(trial, result_json, error)

        while True:
            counted, running_elsewhere = self._counts(exclude=set(in_flight))
            want_more = counted + len(in_flight) + running_elsewhere < self.o.trials and self.stopped is None
            exhausted = consecutive_dups >= 50
            while want_more and self._room(pool) and time.monotonic() < deadline and not exhausted \
                    and self.budget.allows(self.study, len(in_flight)):
                if self._every_configuration_taken():  # only where a trial could start: it reads every trial
                    exhausted = True
                    break
                trial = self.study.ask()
                # At once: a driver killed before the trial is submitted must still leave a trial
                # that goes stale (one with no heartbeat at all never does, and a resume would wait).
                beats.hold(trial._trial_id)
                outcome = self._dispatch(trial, pool)
                if outcome == "submitted":
                    in_flight[trial.number] = trial
                    consecutive_dups = 0
                else:
                    beats.release(trial._trial_id)
                    consecutive_dups += 1
                counted, running_elsewhere = self._counts(exclude=set(in_flight))
                want_more = counted + len(in_flight) + running_elsewhere < self.o.trials and self.stopped is None
                exhausted = consecutive_dups >= 50
            if exhausted and not in_flight:
                self.exhausted = True
                self.notes.append("every configuration the sampler proposes was measured already: "
                                  "the space is exhausted")
                return
            if not in_flight:
                if running_elsewhere and time.monotonic() < deadline:
                    self._fail_stale()  # another driver's trials, or a killed one's once stale
                    time.sleep(1.0)
                    continue
                return
            self._update_progress(len(in_flight))
            if self.farm is not None:
                for number, result_json, error in self.farm.poll():
                    tell(number, result_json, error)
                self.farm.start_measurements(pool)
            for number, result_json, error in pool.wait(timeout=1.0):
                tell(number, self.farm.measured(number, result_json) if self.farm else result_json, error)
            if time.monotonic() - last_check > HEARTBEAT_S:
                self._fail_stale()
                last_check = time.monotonic()

    def _tell_held(self, trial: Any, result_json: str | None, error: str | None) -> None:
        """Tell a trial this driver ran, unless another driver took it for lost meanwhile (its
        heartbeats stopped reaching the database for longer than the grace period): that driver
        failed it and queued its configuration again, so this measurement is not counted twice."""
        import optuna

        try:
            self._told.tell(trial, result_json, error)
        except optuna.exceptions.UpdateFinishedTrialError:
            self.notes.append(f"trial {trial.number} was taken for lost while it ran (no heartbeat reached "
                              f"the database for {GRACE_S} s); its configuration was queued again")

    def _every_configuration_taken(self) -> bool:
        """Whether each configuration of a small all-categorical space has a trial already, measured
        or running (the sampler would only propose duplicates; a larger space is left to the
        sampler, which stops the study after 50 in a row)."""
        import optuna

        from autotune.search.strategy import MAX_ENUMERATED

        free = self.space.free_parameters
        if any(p.choices is None for p in free) or grid_size(self.space) > MAX_ENUMERATED:
            return False
        if self._grid is None or self._grid[0] is not self.space:
            self._grid = (self.space, {config_key(c) for c in enumerate_space(self.space)})
        taken = {TrialAttrs.of(t).config_key for t in self.study.get_trials(deepcopy=False)
                 if TrialAttrs.of(t).counted or t.state == optuna.trial.TrialState.RUNNING}
        return self._grid[1] <= taken

    def _learn_from(self, number: int, result: TrialResult) -> None:
        """What a trial's result says of the study beyond its value: knobs that never reach the
        script, or a script that cannot run here at all."""
        if result.failure is not None and result.failure.category == FailureCategory.missing_data and not self.stopped:
            self.stopped = f"trial {number} failed: {result.failure.reason}"
            self.notes.append(f"{self.stopped}. Every configuration would fail the same way, so the study asks for "
                              "no more trials; the same command continues it once the data is there")
        self._hold_idle_knobs(number, result)

    def _hold_idle_knobs(self, number: int, result: TrialResult) -> None:
        """Hold each parameter that trial ``number`` shows never reached the script (a batch size
        with no DataLoader to set it on) at the baseline's value for the rest of the study: its other
        values would measure the same run under other names, and a best among them is noise."""
        idle = {k.param: k.detail for k in result.idle_knobs
                if k.param in self.space.parameters and k.param not in self.space.fixed}
        if not idle:
            return
        held = {name: self.baseline_params.get(name) for name in idle}
        self.space = self.space.restrict(held)
        pin = getattr(self.study.sampler, "pin", None)
        if pin is not None:
            pin(held)
        for name, detail in idle.items():
            kept = "the script's own value" if held[name] is None else f"{name}={held[name]}"
            self.notes.append(f"{name} never reached the script (trial {number}: {detail}); the rest of the "
                              f"study keeps {kept}")

    def _room(self, pool: Any) -> bool:
        """Whether a configuration can start now: a free trial slot, or with a compile stage a
        free compile worker and room ahead of the measurements."""
        return self.farm.room if self.farm is not None else pool.free > 0

    def _confirm(self, pool: Any, deadline: float) -> None:
        """Measure the best ``confirm`` configurations once more, unpruned (each at most once
        per study: a resumed study measures only those not measured again yet)."""
        todo = _ranked_configurations(self.study)[:self.o.confirm]
        done = {TrialAttrs.of(t).confirms for t in self.study.get_trials(deepcopy=False)}
        todo = [t for t in todo if t.number not in done]
        in_flight: dict[Any, Any] = {}
        while todo or in_flight:
            while todo and pool.free and time.monotonic() < deadline and self.budget.allows(self.study, len(in_flight)):
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
                self._told.tell_confirmation(in_flight.pop(tag), result_json, error)
        skipped = [t.number for t in todo]
        if skipped:
            self.notes.append(f"the study's time or budget ran out before trials {', '.join(map(str, skipped))} "
                              "were measured again")

    def _counts(self, exclude: set[int]) -> tuple[int, int]:
        return trial_counts(self.study, exclude)

    def _dispatch(self, trial: Any, pool: Any) -> str:
        """Suggest a configuration; run it, or answer it from an earlier result."""
        import optuna

        if over_budget(self.study, trial.number, self.o.trials):  # other drivers' trials filled it first
            write(trial, reason=f"the study already had its {self.o.trials} trials")
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return "surplus"
        try:
            params = suggest(trial, self.space)
            self.target.check(params)
        except InvalidConfigError as exc:
            self._told.tell_invalid(trial, str(exc))
            return "invalid"
        key = config_key(params)
        write(trial, config_key=key)
        earlier = self._earlier_result(key, trial.number) or self.claims.holder(key, trial.number)
        if earlier is not None and not earlier.state.is_finished():  # another driver measures it now
            self._told.tell_measured_elsewhere(trial, params, earlier)
            return "reused"
        if earlier is not None:
            self._told.tell_duplicate(trial, params, earlier)
            return "reused"
        from autotune.cache import result_key

        rkey = result_key(model=self._model_key, environment=self._env_key, target=self.target.name,
                          params=params, protocol_version=self.o.protocol.version,
                          devices_per_trial=self.devices_per_trial)
        write(trial, result_key=rkey)
        remembered = None if self.o.fresh else self.cache.get_result(rkey)
        if remembered is not None and not self.o.prune and remembered.measurement and remembered.measurement.pruned:
            remembered = None  # stopped early by a run that pruned: --no-prune measures it whole
        if remembered is not None and (remembered.ok or not self.o.retry_failed):
            self._told.tell(trial, remembered.model_dump_json(), None, from_cache=True)
            return "reused"
        plan = self._plan(params)
        if self.o.retry_failed:
            self.target.retry_failed_compile(plan)
        else:
            failed = self.target.failed_compile(plan, self.cache.path)
            if failed is not None:
                self._told.tell_known_failure(trial, plan, failed)
                return "reused"
        request = self._request(params, self.out / "trials" / f"{trial.number:04d}", self._trial_protocol(), plan=plan)
        if self.farm is not None:
            request = self._compile_first(trial.number, request)
        else:
            pool.submit(request, tag=trial.number)
        write(trial, env=request.plan.env, provenance=self.provenance)
        return "submitted"

    def _compile_first(self, number: int, request: TrialRequest) -> TrialRequest:
        """Hand ``request`` to the compile stage and return its measure job, which follows once it
        has compiled (at once, in line for a trial slot, where the target does not compile it ahead)."""
        from autotune.cache import artifact_key

        assert self.farm is not None
        split = compile_job(self.target, request, platform=self.o.platform, cache_root=str(self.cache.path),
                            key_of=lambda env: artifact_key(
                                model=self._model_key, environment=self._env_key, target=self.target.name,
                                graphs=compile_key(request.plan.params), env=env))
        if split is None:
            self.farm.queue(number, request)
            return request
        self.farm.submit(number, *split)
        return split[1]

    def _request(self, params: dict[str, Any], trial_dir: Path, protocol: MeasurementProtocol,
                 plan: TrialPlan | None = None) -> TrialRequest:
        """What a worker needs to run one trial of ``params``."""
        return TrialRequest(
            plan=plan or self._plan(params),
            script=str(self.script),
            args=list(self.o.args), cwd=os.getcwd(), trial_dir=str(trial_dir.resolve()),
            timeout_s=self.o.trial_timeout, memory_bytes=self.memory_limit, protocol=protocol,
            seed=self.o.seed or 0)

    def _plan(self, params: dict[str, Any]) -> TrialPlan:
        """``params`` as a trial applies them in the caller's environment: the target adds its flags
        to the caller's (theirs kept, its own winning on the same flag) and keeps a device the caller
        chose; the caller's variables travel in the plan, to whichever worker runs it."""
        plan = plan_for(self.target, self.space, params, cache_root=str(self.cache.path), base_env=self.environ)
        for name, value in self.caller_env.items():
            plan.env.setdefault(name, value)
        return plan

    def _earlier_result(self, key: str, number: int) -> Any:
        for t in self.study.get_trials(deepcopy=False):
            if t.number != number and TrialAttrs.of(t).config_key == key and TrialAttrs.of(t).counted \
                    and t.state.is_finished():
                return t
        return None

    def _trial_protocol(self) -> MeasurementProtocol:
        """The study's protocol with the bar below which a trial stops measuring: the best
        throughput so far less PRUNE_MARGIN, when throughput is the one objective, and the bound of
        a ``throughput>=X`` constraint (a trial certainly below it is infeasible). Only throughput,
        which the harness times itself, can stop a trial early."""
        o = self.o
        bars = [c.bound for c in self.constraints if c.name == "throughput" and not c.upper]
        if o.prune and [obj.name for obj in self.objectives] == ["throughput"]:
            best = _best(self.study)
            if best is not None and best[1]:
                bars.append(best[1] * (1 - PRUNE_MARGIN))
        return o.protocol.model_copy(update={"stop_below": max(bars)}) if bars else o.protocol

    def _warm_start(self, names: list[str]) -> WarmStart:
        """Read the earlier studies ``names``; their results become the sampler's prior."""
        warm = read_warm_start(self.storage, names, self.space, self.target.check)
        prior = getattr(self.study.sampler, "warm", None)  # autotune's sampler; Optuna's have none
        if prior is not None:
            prior(warm.results, starts=warm.bests)
        note = describe(warm)
        if note:
            self.notes.append(note)
        write(self.study, warm_start=warm.studies)
        return warm

    def _enqueue_starting_points(self) -> None:
        """Baseline first, then the earlier studies' best configurations, then the known-good
        configurations, each once per study."""
        if StudyAttrs.of(self.study).baseline_key is None:
            write(self.study, baseline_key=config_key(self.baseline_params))
        queued = {TrialAttrs.of(t).enqueued_key for t in self.study.get_trials(deepcopy=False)}
        for config in after_baseline(starting_points(self.space), self.warm.bests):
            key = config_key(config)
            if key not in queued:
                queued.add(key)
                full = {p.name: config.get(p.name) for p in self.space.free_parameters if p.is_active(config)}
                self.study.enqueue_trial(full, user_attrs=trial_attrs(enqueued_key=key), skip_if_exists=False)

    def _fail_stale(self) -> None:
        import optuna

        optuna.storages.fail_stale_trials(self.study)

    @property
    def _told(self) -> TrialRecorder:
        if self.recorder is None:
            raise RuntimeError("the study is not open: Study.run() opens it")
        return self.recorder

    # -- results -----------------------------------------------------------------------------
    def summaries(self) -> list[TrialSummary]:
        return study_summaries(self.study)

    def result(self) -> StudyResult:
        from autotune.search.strategy import AutotuneSampler

        sampler = self.study.sampler
        gain = sampler.expected_gain(self.study) if isinstance(sampler, AutotuneSampler) else None
        result = study_result(self.study, name=self.name, storage=self.storage_url, target=self.target.name,
                              out=self.out, provenance=self.provenance, notes=self.notes, ran=self._told.ran,
                              reused=self._told.reused, space=self.space, expected_gain=gain,
                              exhausted=self.exhausted, stopped=self.stopped)
        return result.model_copy(update={"spend": self.budget.spend(self.study)})

    def write_outputs(self) -> None:
        trials = self.summaries()
        best = best_config(self.study, self.name, self.provenance)
        write_outputs(self.out, best, trials, baseline_value(self.study), maximize=maximizes(self.study))

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

