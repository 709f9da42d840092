"""The study: Optuna proposes configurations, a pool of workers measures them.

The driver alone talks to the Optuna storage (ask/tell). Trial 0 is the baseline (every parameter
at its default, usually the script's own behaviour), then the space's known-good configurations,
then the sampler's proposals. A configuration already measured in the study (compared in canonical
form) is not run again: Optuna is told the earlier result.

``--trials N`` is the number of measured trials the study should hold: running the same study
again continues it up to N, and a study that already has N runs nothing. Trials left running by a
driver that was killed stop sending heartbeats; once stale they are marked failed and their
configurations are queued again (Optuna's retry callback, :mod:`autotune.storage.optuna_storage`).

What the study measures again (the noise, races, the best and the baseline before it ends, the
``--confirm`` best) is :mod:`autotune.repeats.racing`'s to say; a re-measurement is a trial of its
own (``confirms`` names the trial it measures again); it does not count towards ``--trials`` and
the sampler does not learn from it.

:class:`Study` sets a study up and owns what it found; the ask-tell loop is :mod:`.loop`, a
proposal's way to a worker :mod:`.dispatch`, what Optuna is told :mod:`.tell`. The same class
runs a replay or a benchmark: a pool factory answers trials from a recording, and a study kept in
Optuna's in-memory storage writes nothing.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.disk_space import no_space_reason, on_no_space
from autotune.execution.pool import TrialPool
from autotune.objectives import Constraint, objective
from autotune.records import TrialResult
from autotune.search.samplers import make_sampler
from autotune.space import SearchSpace, config_key
from autotune.space.processes import most_processes, trial_nodes, with_processes
from autotune.storage.claims import Claims
from autotune.study.costing import StudyCost
from autotune.storage.database import sqlite_path
from autotune.study.dispatch import Dispatch
from autotune.repeats.kept_noise import KeptNoise
from autotune.study.loop import AskTell
from autotune.study.opening import Identity, open_tuning_study
from autotune.repeats.racing import Racing
from autotune.results.ranking import prior
from autotune.execution.ray_pools import RayPools
from autotune.storage.database import DEFAULT_DIR, default_storage
from autotune.study.options import StudyOptions, StudyProgress, StudyResult, default_study_name
from autotune.results.outputs import check_writable, write_outputs
from autotune.study.tell import TrialRecorder
from autotune.study.requests import TrialRequests
from autotune.results.standings import baseline_value, maximizes
from autotune.results.best import best_config
from autotune.study.outcome import study_result, update_progress
from autotune.results.summaries import study_summaries
from autotune.storage.optuna_storage import Heartbeats, open_storage
from autotune.storage.trial_cache import TrialCache, fail_stale
from autotune.study.starting import enqueue_starting_points, warm_start
from autotune.study.warm_start import WarmStart, earlier_studies
from autotune.targets import Target, resolve_target
from autotune.trial import check_script, load_trial_space, validate_for
from autotune.storage.attrs import TrialAttrs, write
from autotune.units import parse_size

if TYPE_CHECKING:
    import optuna

#: Makes the pool a study runs its trials on, given the study (once it is open).
PoolFactory = Callable[["Study"], TrialPool]


def tune(script: str | Path, *args: str, **options: object) -> StudyResult:
    """Tune ``script`` from Python; the keyword arguments are the options of
    :class:`autotune.config.RunConfig` (and :class:`StudyOptions`).

    >>> result = autotune.tune("train.py", trials=50, target="xla")   # doctest: +SKIP
    >>> result.best.env["NEURON_CC_FLAGS"]                              # doctest: +SKIP
    """
    return Study(StudyOptions.checked(script=script, args=list(args), **options)).run()


def _quiet_optuna() -> None:
    """Optuna's logging, less what a driver that runs ask/tell by itself would only be warned of."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    # The driver beats for its in-flight trials itself (ask/tell has no optimize loop).
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


class Study:
    """A study of ``options.script``, on Ray workers, or on the pool ``pools`` makes (a replay of a
    recorded landscape, a test's).

    ``in_memory``: the study is kept in this Optuna storage instead of ``options.storage`` and
    writes nothing (no output files, no results kept in the cache root, no claims or heartbeats:
    no other driver can see it); ``space``, ``sampler`` and ``starting_points`` then stand in for
    the space file, ``options.sampler`` and the baseline with the space's known-good configurations.
    """

    def __init__(self, options: StudyOptions, pools: PoolFactory | None = None, *,
                 in_memory: optuna.storages.InMemoryStorage | None = None, space: SearchSpace | None = None,
                 sampler: optuna.samplers.BaseSampler | None = None,
                 starting_points: list[dict[str, Any]] | None = None) -> None:
        self.options = options
        self.pools = pools
        self.in_memory = in_memory
        self.given_sampler = sampler
        self.starting_points = starting_points
        self.script = check_script(options.script)
        self.target: Target = resolve_target(options.target, self.script, options.gpus_per_trial)
        loaded = space or load_trial_space(self.target, options.space, options.platform)
        base_space, sets = with_processes(loaded.with_flags(options.script_flags()), options.sets,
                                          options.nproc_per_node, options.nnodes)
        validate_for(self.target, base_space, {k: v for k, v in sets.items() if k not in base_space.parameters})
        #: The processes each trial runs on a node, and the nodes it spans (``--nnodes``).
        self.processes, self.nodes = most_processes(base_space), trial_nodes(base_space)
        self.target.check_processes(self.processes, options.cores_per_trial)
        self.name = options.study or default_study_name(self.script, self.target.name, options.nproc_per_node,
                                                        self.nodes)
        self.out = Path(options.out) if options.out else DEFAULT_DIR / self.name
        self.storage_url = "in-memory" if in_memory is not None else options.storage or default_storage()
        if in_memory is None:
            check_writable(self.out)
            database = sqlite_path(self.storage_url)
            if database is not None:
                check_writable(database.parent)
        self.notes: list[str] = []
        self.objectives = [objective(name, options.direction) for name in options.objectives()]
        self.constraints = [Constraint.parse(text) for text in options.constraint]
        self.cost = StudyCost(self.target, options, self.objectives, self.constraints, self.nodes)
        from autotune.cache import open_cache
        from autotune.provenance import caller_env, provenance

        self.cache = open_cache(options.cache) if in_memory is None else None
        #: Where it measures, and the parts of that which key remembered results (and the study).
        self.provenance: dict[str, Any] = provenance(self.target, self.script, options.args,
                                                     instance_type=self.cost.instance_type,
                                                     env=caller_env(self.target, options.trial_env()))
        #: What a trial gets: its plan in the caller's environment (the variables the target reads,
        #: the user's PJRT_DEVICE or XLA_FLAGS, and those given with --env travel with each trial
        #: and key its result), the script, the protocol.
        self.requests = TrialRequests(
            self.target, base_space.restrict(sets), self.script, options,
            environ={**os.environ, **options.trial_env()}, caller_env=caller_env(self.target, options.trial_env()),
            cache_root=self.cache.path if self.cache is not None else None,
            memory_limit=parse_size(options.memory_limit) if options.memory_limit else None,
            provenance=self.provenance)
        _quiet_optuna()
        self.baseline_params = self.space.defaults()
        self.progress = StudyProgress(self.name, self.target.name, options.trials, metric=self.objectives[0].name,
                                      maximize=self.objectives[0].maximize)
        #: What earlier studies of the same script give this one (``--warm-start``, ``--warm``).
        self.warm = WarmStart()
        #: The Optuna study and what tells it each outcome, once :meth:`run` has opened it.
        self._opened: tuple[optuna.Study, TrialRecorder] | None = None
        #: The ask-tell loop, while it runs; it keeps why the study ended early.
        self.loop: AskTell | None = None

    @property
    def space(self) -> SearchSpace:
        """The study's space as it stands (a knob that never reached the script is held from then on)."""
        return self.requests.space

    @property
    def study(self) -> optuna.Study:
        return self._open()[0]

    @property
    def recorder(self) -> TrialRecorder:
        return self._open()[1]

    def _open(self) -> tuple[optuna.Study, TrialRecorder]:
        if self._opened is None:
            raise RuntimeError("the study is not open: Study.run() opens it")
        return self._opened

    # -- set-up --------------------------------------------------------------------------------
    def _sampler(self) -> optuna.samplers.BaseSampler:
        if self.given_sampler is not None:
            return self.given_sampler
        if len(self.objectives) > 1 and self.options.sampler == "autotune":
            self.notes.append("autotune's sampler optimises one objective: this multi-objective study uses "
                              "Optuna's TPE")
            return make_sampler("tpe", self.space, self.options.seed)
        return make_sampler(self.options.sampler, self.space, self.options.seed)

    def _open_study(self, storage: optuna.storages.BaseStorage) -> optuna.Study:
        study, name = open_tuning_study(storage, self.name, self._sampler(),
                                        identity=Identity.of(self.script, self.options.args, self.provenance),
                                        target=self.target.name, objectives=self.objectives, options=self.options,
                                        space_source=self.space.source, notes=self.notes)
        if name != self.name:
            self.name = self.progress.study = name
            if self.options.out is None:
                self.out = DEFAULT_DIR / name
                if self.in_memory is None:
                    check_writable(self.out)
        return study

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> StudyResult:
        import optuna

        from autotune.execution.scheduler import connect
        from autotune.storage.reconnecting import waited_out

        started_ray = False
        if self.pools is None and self.options.ray_address:
            # Before the storage is touched: an unreachable cluster must leave nothing written.
            started_ray = connect(self.options.ray_address)
        try:
            storage = self.in_memory if self.in_memory is not None else open_storage(self.storage_url)
            # Before the study is made: a --warm-start that names no study must leave nothing written.
            warm_from = earlier_studies(storage, None, script=self.script, target=self.target.name,
                                        objectives=[o.name for o in self.objectives], named=list(self.options.warm_start),
                                        same_script=self.options.warm)
            study = self._open_study(storage)
            claims = Claims(storage, study, self.storage_url) if isinstance(storage, TrialCache) else None
        except BaseException:
            if started_ray:
                import ray

                ray.shutdown()
            raise
        recorder = TrialRecorder(study, self.options, self.cache, self.progress, self.baseline_params,
                                 self.notes, on_told=self.write_outputs, objectives=self.objectives,
                                 constraints=self.constraints, usd_per_sample_second=self.cost.usd_per_sample_second,
                                 on_result=self._learn_from, on_no_space=self._no_space)
        self._opened = study, recorder
        write(study, provenance=self.provenance, price=self.cost.price.model_dump() if self.cost.price else None,
              devices_per_trial=self.cost.devices_per_trial,
              **({"nodes_per_trial": self.nodes} if self.nodes > 1 else {}))
        note = self.target.availability_note()
        if note:
            self.notes.append(note)
        self.warm = warm_start(storage, [name for name in warm_from if name != self.name], study, self.space,
                               self.target.check, self.notes)
        for told in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,
                                                             optuna.trial.TrialState.FAIL)):
            attrs = TrialAttrs.of(told)  # a resumed study: what its trials showed still holds
            if attrs.idle or (attrs.config_key == config_key(self.baseline_params) and attrs.result):
                self._learn_from(told.number, TrialResult.model_validate_json(attrs.result or ""), stored=True)
        fail_stale(study)
        enqueue_starting_points(study, self.space, self.baseline_params, self.warm, self.starting_points)
        pool, done = self._pool(started_ray)
        try:
            dispatch = Dispatch(study, recorder, self.requests, pool, claims=claims, cache=self.cache, out=self.out,
                                objectives=self.objectives, constraints=self.constraints,
                                devices_per_trial=self.cost.devices_per_trial)
            beats = Heartbeats(storage) if self.in_memory is None else None
            self.loop = AskTell(study, dispatch, self.cost.budget, self.options, beats=beats,
                                on_progress=self._update_progress, racing=self._racing(study))
            self.loop.measure(pool)
            kept = self._kept_noise()
            if kept is not None:
                kept.keep(study, full=self._no_space)
            self._update_progress(0)
            spend = self.cost.budget.spend(study)
            write(study, spend=spend.model_dump())
            if spend.stopped:
                self.notes.append(spend.stopped)
            self.notes.extend(waited_out(storage))
            self.write_outputs()
        finally:
            pool.shutdown()
            done()
        return self.result()

    def _pool(self, started_ray: bool) -> tuple[TrialPool, Callable[[], None]]:
        """The pool the study hands its configurations to, and what to do once it is shut down."""
        if self.pools is not None:
            pool = self.pools(self)
            return pool, lambda: None
        ray = RayPools(self.target, self.options, self.baseline_params, self.processes, self.requests.compile_split,
                       self.notes, ray_started=started_ray, nodes=self.nodes)
        return ray.pool, ray.done

    # -- between-run noise --------------------------------------------------------------------
    def _kept_noise(self) -> KeptNoise | None:
        """Where the cache root keeps this study's noise (none for a study that writes nothing)."""
        if self.cache is None:
            return None
        return KeptNoise(self.cache, self.provenance, self.target.name, self.storage_url, self.name)

    def _racing(self, study: optuna.Study) -> Racing | None:
        """What the study measures again: races within the noise (``--race``; none for a study of
        several objectives, whose front has no one best to race for) and its best configurations
        once more (``--confirm``)."""
        race = self.options.race if len(self.objectives) == 1 else 0.0
        if race <= 0 and self.options.confirm <= 0:
            return None
        kept = self._kept_noise()
        if kept is not None:
            kept.write_prior(study)
        return Racing.of(race, self.options.trials, prior(study), config_key(self.baseline_params), confirm=self.options.confirm)

    def _learn_from(self, number: int, result: TrialResult, stored: bool = False) -> None:
        """What a trial's result says of the study beyond its value: knobs that never reach the
        script, the script's own DataLoader values (the baseline's), or a script that cannot run
        here at all (``stored``: a trial of the study before this run, which stopped nothing)."""
        if not stored and result.failure is not None and result.failure.category.stops_study and self.loop:
            self.loop.stop(f"trial {number} failed: {result.failure.reason}")
        self.notes.extend(self.requests.hold_idle_knobs(number, result, self.baseline_params, self.study.sampler))
        self.notes.extend(self.requests.same_as_script(number, result, self.baseline_params, self.study.sampler))

    def _no_space(self, path: Path) -> None:
        """A write of the study's own found no space: it stops as for a trial that found none."""
        if self.loop is not None:
            self.loop.stop(f"{path} could not be written: {no_space_reason(path)}")

    # -- results -----------------------------------------------------------------------------
    def result(self) -> StudyResult:
        from autotune.search.strategy import AutotuneSampler

        sampler = self.study.sampler
        gain = sampler.expected_gain(self.study) if isinstance(sampler, AutotuneSampler) else None
        loop = self.loop
        result = study_result(self.study, name=self.name, storage=self.storage_url, target=self.target.name,
                              out=self.out, provenance=self.provenance, notes=self.notes, ran=self.recorder.ran,
                              reused=self.recorder.reused, space=self.space, expected_gain=gain,
                              exhausted=loop is not None and loop.exhausted,
                              stopped=loop.stopped if loop is not None else None)
        return result.model_copy(update={"spend": self.cost.budget.spend(self.study),
                                         "measured_again": self.recorder.again})

    def write_outputs(self) -> None:
        if self.in_memory is not None:
            return
        trials = study_summaries(self.study)
        best = best_config(self.study, self.name, self.provenance)
        with on_no_space(self.out, self._no_space):
            write_outputs(self.out, best, trials, baseline_value(self.study), maximize=maximizes(self.study))

    def _update_progress(self, running: int) -> None:
        if self.in_memory is not None:  # nothing shows it: each update reads every trial
            return
        update_progress(self.progress, self.study, running)
        if self.options.on_update:
            self.options.on_update(self.progress)
