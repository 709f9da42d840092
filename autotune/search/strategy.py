"""autotune's search strategy: reach the best configuration in few compiles.

:class:`AutotuneSampler` is an Optuna sampler (the study's driver, storage and duplicate handling
are unchanged). For each new trial it scores the configurations not measured yet (every one when
the space has at most ``MAX_ENUMERATED``; otherwise random ones and the neighbours of the best),
within a trust region around the best measured, and proposes the best-scoring one::

    score = expected improvement x P(it runs)  [/ predicted trial seconds ** cost_power]

Expected improvement comes from a Gaussian process over whole configurations
(:class:`~autotune.search.models.CategoricalGP`), P(it runs) from the failures seen, a level that
two failures convict is ruled out, and no configuration is proposed twice. A space with ranges
instead of choices goes to Optuna's TPE. Why each part is there, and the replays of recorded
landscapes that chose the defaults: ``docs/reference/search.md`` and ``docs/results/search.md``.
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

import numpy as np
from optuna.samplers import BaseSampler

from autotune.records import FailureCategory
from autotune.search.candidates import Candidates
from autotune.search.encoding import Encoding
from autotune.search.trust_region import TrustRegion
from autotune.search.models import (
    CategoricalGP,
    convicted,
    culprit_probability,
    expected_improvement,
    ridge_predict,
    success_probability,
)
from autotune.space import (
    RUNTIME_ONLY_PARAMS,
    SearchSpace,
    compile_key,
    config_key,
)
from autotune.storage.attrs import TrialAttrs
from autotune.storage.optuna_versions import constrained, constraints_of
from autotune.storage.trial_cache import trials_of

#: Enumerate the space when it has at most this many configurations; sample it when larger.
MAX_ENUMERATED = 20000
#: The trust region (:mod:`.trust_region`): its radius grows by one knob for every this many
#: trials without a gain of more than LOCAL_GAIN (on the objective's log: 0.01 is about 1%).
LOCAL_PATIENCE = 2
LOCAL_GAIN = 0.01
#: An earlier study's result weighs as a measurement with this much noise of its own, in units of
#: the standardised values (1: their whole spread): another version, instance or model moves
#: the figures, so it guides the model where this study has not measured without overruling it.
WARM_NOISE = 0.3
#: The Gaussian process is fitted on at most the best FIT_BEST and the latest FIT_LATEST
#: configurations measured: its fit costs the cube of its points, and a study of thousands of
#: trials on a fleet would spend longer choosing a trial than running it. The best say where to
#: look, the latest what was learnt last; studies within that many trials fit on every one.
FIT_BEST = 64
FIT_LATEST = 64


class AutotuneSampler(BaseSampler):
    """An Optuna sampler that proposes whole configurations of a finite categorical space.

    ``space`` is the study's :class:`~autotune.space.SearchSpace` (after ``--set``); the study
    asks its parameters in dependency order, and this sampler answers each with the value of the
    configuration it chose for the trial. ``cost_power`` weighs the predicted trial time:
    0 (the default) ignores it, 1 is expected improvement per second. ``compile_cache_persists`` says whether a
    configuration that compiles the same graphs as a measured one loads them from the cache
    (default: by target).
    """

    def __init__(self, space: SearchSpace, *, seed: int | None = None, cost_power: float = 0.0,
                 failure_model: bool = True, compile_cache_persists: bool | None = None,
                 runtime_only_params: Sequence[str] = tuple(RUNTIME_ONLY_PARAMS), ordinal: bool = True,
                 trend: bool = True, cost_l2: float = 1.0, theta_prior: float = 0.3,
                 local_patience: int | None = LOCAL_PATIENCE, local_gain: float = LOCAL_GAIN,
                 patience_after_start: bool = True) -> None:
        import optuna

        self.space = space
        #: Where the sampler may propose (``None``: anywhere in the space).
        self.region = TrustRegion(space, local_patience, local_gain, patience_after_start) \
            if local_patience else None
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.cost_power = cost_power
        self.cost_l2 = cost_l2
        self.theta_prior = theta_prior
        self.failure_model = failure_model
        self.runtime_only = set(runtime_only_params)
        if compile_cache_persists is None:
            from autotune.targets import get_target

            compile_cache_persists = get_target(space.target).compile_cache_persists()
        self.cache_persists = compile_cache_persists
        #: The space as the models see it: levels, and configurations as rows of level indices.
        self.encoding = Encoding(space, ordinal)
        self.categorical = all(p.choices is not None for p in self.encoding.free)
        self.trend = trend
        #: The configuration proposed for each trial being sampled, by its study's name and its number.
        self._picked: dict[tuple[str, int], dict[str, Any]] = {}
        #: Parameters held at one value from now on (``None``: the script's own), see :meth:`pin`.
        self.pinned: dict[str, Any] = {}
        #: Parameters whose value here is the same run as leaving them unset, see :meth:`same_as_unset`.
        self.unset_is: dict[str, Any] = {}
        self.candidates = Candidates(self.encoding, self.pinned, self.unset_is, max_enumerated=MAX_ENUMERATED,
                                     local_patience=local_patience)
        #: Earlier studies' results (:meth:`warm`): configurations of this space and their values.
        self.prior: list[tuple[dict[str, Any], float]] = []
        # Optuna's TPE takes over a space with ranges (built only then: it warns when built).
        self._fallback = None if self.categorical else optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, constant_liar=True, **constrained())

    # -- the Optuna sampler interface ---------------------------------------------------------------
    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {} if self._fallback is None else self._fallback.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        return {} if self._fallback is None else self._fallback.sample_relative(study, trial, search_space)

    def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
        if self._fallback is not None:
            return self._fallback.sample_independent(study, trial, param_name, param_distribution)
        config = self._picked.get((study.study_name, trial.number))
        if config is None:
            config = self._picked[(study.study_name, trial.number)] = self.propose(study)
        value = config.get(param_name)
        if value in param_distribution.choices:
            return value
        return param_distribution.choices[int(self.rng.integers(len(param_distribution.choices)))]

    def before_trial(self, study: Any, trial: Any) -> None:
        if self._fallback is not None:
            self._fallback.before_trial(study, trial)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self._picked.pop((study.study_name, trial.number), None)
        if self._fallback is not None:
            self._fallback.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.rng = np.random.default_rng()
        if self._fallback is not None:
            self._fallback.reseed_rng()

    def pin(self, values: dict[str, Any]) -> None:
        """Propose only configurations with these parameters at these values (``None``: unset, the
        script's own): the study found that they never reach the script, so their other values are
        the same run under another name."""
        self.pinned.update(values)

    def same_as_unset(self, values: dict[str, Any]) -> None:
        """Setting these parameters to these values is the same run as leaving them unset (the
        study found them to be the script's own): candidates take their unset form."""
        self.unset_is.update(values)

    def warm(self, results: Sequence[tuple[dict[str, Any], float | None]],
             starts: Sequence[dict[str, Any]] = ()) -> None:
        """Inform the model with earlier studies' ``results`` (configuration, value or ``None``
        where it failed): a prior, not this study's results. Only configurations of this space
        are kept (a parameter it lacks, or one ``--set`` holds at another value, measured
        something else). ``starts``: the earlier best configurations the study measures first,
        which, like its baseline, are not the search's trials (the trust region's patience)."""
        for config, value in results:
            fits = self.encoding.of_this_space(config)
            if fits is not None and value is not None:
                self.prior.append((fits, value))
        if self.region is not None:
            self.region.start_with(starts)

    # -- choosing a configuration -----------------------------------------------------------------
    def propose(self, study: Any) -> dict[str, Any]:
        """The next configuration to measure (a measured one only when none is left)."""
        import optuna

        maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
        history, in_flight = measured_history(study, self._read_of(study))
        taken = {config_key(c) for c, *_ in history} | {config_key(c) for c in self._picked.values()} | in_flight
        candidates = [c for c in self.candidates.of(history, self.rng, maximize) if config_key(c) not in taken]
        if not candidates:
            done = [(c, v) for c, v, _ in history if v is not None]
            if done:
                return dict((max if maximize else min)(done, key=lambda cv: cv[1])[0])  # the history's own is kept
            return self.candidates.of(history, self.rng, maximize)[0] \
                if self.candidates.of(history, self.rng, maximize) else {}
        X = self.encoding.encode([c for c, *_ in history])
        Xc = self.encoding.encode(candidates)
        values = [v for _, v, _ in history]
        ok = np.array([v is not None for v in values])
        score = np.ones(len(candidates))
        if ok.sum() >= 2 or self._prior_informs(X, ok, values, maximize):
            score = self._expected_improvement(X, ok, values, Xc, maximize) + 1e-12
        else:
            # Nothing to model yet: measure where the model, with its prior, knows least. That is
            # far from everything tried, and at the ends of ordered parameters (batch sizes).
            if len(X):
                gp = CategoricalGP(self.encoding.distances, self.encoding.positions if self.trend else None,
                                   self.theta_prior)
                score = gp.prior_sd(X, Xc) + 1e-6
        if self.failure_model and len(X) and not ok.all():
            runs = self._runs(X, ok, Xc, _broke(history))
            if (score * runs).max() <= 0:  # every candidate holds a convicted level
                runs = self._runs(X, ok, Xc)
            score = score * runs
        if self.cost_power and len(X):
            score = score / self._predicted_cost(history, X, candidates, Xc) ** self.cost_power
        if self.region is not None and ok.any():
            near = self.region.near(X, [None if v is None else _transform(v, maximize) for v in values], Xc, history)
            if (score * near).max() > 0:
                score = score * near
        best = np.flatnonzero(score >= score.max() * (1 - 1e-9))
        return candidates[int(self.rng.choice(best))]

    def expected_gain(self, study: Any) -> float | None:
        """What the model expects one more trial to add: over the configurations not measured
        yet, the largest expected improvement of the objective's log (0.05: about 5%) times the
        chance the configuration runs. 0 when none is left; None before two trials ran, or on a
        space with ranges (searched by TPE). The end of a study reports it
        (:mod:`autotune.results.outlook`)."""
        import optuna

        if not self.categorical:
            return None
        maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
        history, in_flight = measured_history(study, self._read_of(study))
        values = [v for _, v, _ in history]
        ok = np.array([v is not None for v in values])
        X = self.encoding.encode([c for c, *_ in history])
        if ok.sum() < 2 and not self._prior_informs(X, ok, values, maximize):
            return None
        taken = {config_key(c) for c, *_ in history} | in_flight
        candidates = [c for c in self.candidates.of(history, self.rng, maximize) if config_key(c) not in taken]
        if not candidates:
            return 0.0
        Xc = self.encoding.encode(candidates)
        gain = self._expected_improvement(X, ok, values, Xc, maximize)
        if self.failure_model and not ok.all():
            gain = gain * self._runs(X, ok, Xc, _broke(history))
        return float(gain.max())

    @staticmethod
    def _read_of(study: Any) -> dict[int, Any]:
        """What :func:`measured_history` read of each finished trial of ``study``, kept with its
        trials (:mod:`autotune.storage.trial_cache`): read once, since a finished trial never changes."""
        return trials_of(study).kept("history", dict)

    def _expected_improvement(self, X: np.ndarray, ok: np.ndarray, values: list[float | None], Xc: np.ndarray,
                              maximize: bool) -> np.ndarray:
        """Expected improvement of the objective's log at each candidate over the best this study
        measured, from the Gaussian process fitted on the trials that ran (at least two), and on
        the earlier studies' results (:meth:`warm`) as noisier observations."""
        y = np.array([_transform(v, maximize) for v in values if v is not None])
        Xp, yp = self._prior_points(X[ok], y, maximize)
        fit = _fit_set(y)
        extra = np.concatenate([np.zeros(len(fit)), np.full(len(yp), WARM_NOISE)])
        gp = CategoricalGP(self.encoding.distances, self.encoding.positions if self.trend else None, self.theta_prior) \
            .fit(np.vstack([X[ok][fit], Xp]), np.concatenate([y[fit], yp]), extra_noise=extra)
        mu, sd = gp.predict(Xc)
        return expected_improvement(mu, sd, float(y.max()))

    def _prior_informs(self, X: np.ndarray, ok: np.ndarray, values: list[float | None], maximize: bool) -> bool:
        """Whether earlier studies' results inform the model now (one measurement of this study
        that they share is enough to put them on its scale)."""
        if not self.prior or not ok.any():
            return False
        y = np.array([_transform(v, maximize) for v in values if v is not None])
        return len(self._prior_points(X[ok], y, maximize)[1]) > 0

    def _prior_points(self, X: np.ndarray, y: np.ndarray, maximize: bool) -> tuple[np.ndarray, np.ndarray]:
        """The earlier results this study has not measured itself, encoded, with their values
        moved onto this study's scale: by the mean difference over the configurations both
        measured (another machine or version is faster or slower as a whole). None where they
        share no configuration: nothing says how their figures compare."""
        empty = np.zeros((0, X.shape[1]), dtype=int), np.zeros(0)
        if not self.prior:
            return empty
        Xp = self.encoding.encode([c for c, _ in self.prior])
        yp = np.array([_transform(v, maximize) for _, v in self.prior])
        own = {row.tobytes(): value for row, value in zip(X, y)}
        both = [i for i, row in enumerate(Xp) if row.tobytes() in own]
        if not both:
            return empty
        shift = float(np.mean([own[Xp[i].tobytes()] - yp[i] for i in both]))
        rest = np.array([row.tobytes() not in own for row in Xp])
        return Xp[rest], yp[rest] + shift

    def _runs(self, X: np.ndarray, ok: np.ndarray, Xc: np.ndarray, broke: np.ndarray | None = None) -> np.ndarray:
        """The chance each candidate runs, from the failures seen; with ``broke`` (the failures to
        compile or run at all), none for one that holds a level two of them convict
        (:func:`convicted`)."""
        runs = np.minimum(success_probability(X, ok.astype(float), Xc, self.encoding.sizes),
                          1 - 0.95 * culprit_probability(X, ok.astype(float), Xc, self.encoding.sizes))
        if broke is None:
            return runs
        return np.where(convicted(X, ok.astype(float), Xc, self.encoding.sizes, broke), 0.0, runs)

    def _predicted_cost(self, history: list[tuple[dict[str, Any], float | None, dict[str, float]]],
                        X: np.ndarray, candidates: list[dict[str, Any]], Xc: np.ndarray) -> np.ndarray:
        walls = np.array([max(h[2].get("wall", 1.0), 1.0) for h in history])
        cost = np.exp(ridge_predict(X, np.log(walls), Xc, self.encoding.sizes, l2=self.cost_l2))
        if self.cache_persists:
            compiled = {}
            for c, v, t in history:
                if v is not None and t.get("compile"):
                    compiled[compile_key(c, self.runtime_only)] = t["compile"]
            saved = np.array([compiled.get(compile_key(c, self.runtime_only), 0.0) for c in candidates])
            cost = np.maximum(cost - saved, 1.0)
        return cost

def _fit_set(y: np.ndarray) -> np.ndarray:
    """The indices, in order, of the values the model is fitted on (``y``: higher is better, in
    the order measured): the FIT_BEST best and the FIT_LATEST latest."""
    if len(y) <= FIT_BEST + FIT_LATEST:
        return np.arange(len(y))
    best = np.argsort(-y, kind="stable")[:FIT_BEST]
    return np.union1d(best, np.arange(len(y) - FIT_LATEST, len(y)))


def _transform(value: float, maximize: bool) -> float:
    """What the model fits: the log of a positive objective (speed-ups multiply), negated to minimise."""
    v = math.log(value) if value > 0 else value
    return v if maximize else -v


def measured_history(study: Any, read: dict[int, Any] | None = None,
                     ) -> tuple[list[tuple[dict[str, Any], float | None, dict[str, float]]], set[str]]:
    """Each distinct finished configuration as (config, value or None if it failed, its costs:
    ``wall`` and ``compile`` seconds, and ``convicting`` 1 for a failure whose category
    :attr:`~autotune.records.FailureCategory.convicts_level`), and the keys of the configurations
    in flight. A failure that is not the configuration's doing is no point of its history.
    ``read``: what an earlier call read of each finished trial, kept by the caller and added to."""
    import optuna

    read = {} if read is None else read
    found: dict[str, tuple[dict[str, Any], float | None, dict[str, float]]] = {}
    in_flight: set[str] = set()
    for t in study.get_trials(deepcopy=False):
        if not t.state.is_finished():
            key = TrialAttrs.of(t).config_key if t.state == optuna.trial.TrialState.RUNNING else None
            if key:
                in_flight.add(key)
            continue
        if t.number not in read:
            read[t.number] = _history_point(t)
        point = read[t.number]
        if point is None:
            continue
        key = config_key(point[0])
        if key not in found or found[key][1] is None:
            found[key] = point
    return list(found.values()), in_flight


def _history_point(t: Any) -> tuple[dict[str, Any], float | None, dict[str, float]] | None:
    """What a finished trial adds to :func:`measured_history`, or ``None`` where it adds nothing."""
    import optuna

    attrs = TrialAttrs.of(t)
    if attrs.duplicate_of is not None or attrs.confirms is not None:
        return None
    key = attrs.config_key
    if key and not attrs.counted and t.state != optuna.trial.TrialState.COMPLETE:
        return None  # failed for its driver's sake (killed, stale heartbeat): run again, not the config's fault
    category = FailureCategory.named(attrs.category)
    if category is not None and not category.configuration_fault:
        return None
    config = json.loads(key) if key else {k: v for k, v in t.params.items() if v is not None}
    if not config:
        return None
    # A trial that violates a constraint (the study's numerics guard: its losses diverged)
    # counts as one that did not run: never a best, and its neighbours are suspect.
    feasible = all(v <= 0 for v in constraints_of(t).values())
    value = t.value if t.state == optuna.trial.TrialState.COMPLETE and feasible else None
    facts = _costs(attrs.result)
    if value is None and category is not None and category.convicts_level:
        facts["convicting"] = 1.0
    return config, value, facts


def _broke(history: list[tuple[dict[str, Any], float | None, dict[str, float]]]) -> np.ndarray:
    return np.array([h[1] is None and h[2].get("convicting", 0.0) > 0 for h in history])


def _costs(result_json: str | None) -> dict[str, float]:
    if not result_json:
        return {}
    try:
        doc = json.loads(result_json)
    except ValueError:
        return {}
    return {"wall": float(doc.get("wall_seconds") or 0.0),
            "compile": float((doc.get("compile") or {}).get("compile_seconds") or 0.0)}
