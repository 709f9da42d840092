"""autotune's search strategy: reach the best configuration in few compiles.

A trial here costs a compile (minutes on a NeuronCore), so the sampler spends computation to save
trials. :class:`AutotuneSampler` is an Optuna sampler (the study's driver, duplicate handling,
storage and seeding with the baseline and the space's known-good configurations are unchanged);
for each new trial it scores every configuration not measured yet and proposes the best one:

* a Gaussian process on the log of the objective with a categorical kernel (exponentiated Hamming
  distance, one relevance weight per parameter, fitted by marginal likelihood), and expected
  improvement over the best value so far. Batch size, precision and compiler flags interact, and a
  kernel over whole configurations learns that from a handful of trials where a parameter-wise
  Parzen estimator (TPE) needs many;
* the probability that the configuration runs at all, from a logistic model of the failures seen
  (Optuna's TPE ignores failed trials, so it keeps proposing the flag that crashes);
* no configuration twice: the space is finite, so every proposal is a configuration never measured
  (TPE re-proposes measured ones; the study answers those for free, but the model learns nothing);
* optionally, the cost of the trial (``cost_power``): expected improvement per second of
  predicted wall time, from a model of the measured trial times and of which graphs the compile
  cache already holds.

What the replay of recorded landscapes showed to help, and what it did not, is in
``bench/search_bench.py``'s docstring; the defaults here are what it kept.

Parameters with ranges instead of choices are discretised by Optuna's own suggestion of them:
this sampler then falls back to Optuna's TPE for them (it only handles categorical choices).
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

import numpy as np
from optuna.samplers import BaseSampler
from scipy import optimize, special, stats

from autotune.space import Parameter, SearchSpace

#: User attributes the study keeps on each Optuna trial (see :mod:`autotune.study`).
_A_KEY, _A_RESULT, _A_DUP = "config_key", "result", "duplicate_of"
#: Enumerate the space when it has at most this many configurations; sample it when larger.
MAX_ENUMERATED = 20000
RANDOM_CANDIDATES = 2000


class CategoricalGP:
    """A Gaussian process over configurations of categorical parameters.

    ``k(a, b) = s2 * exp(-sum_p theta_p * [a_p != b_p])``: configurations that differ in a
    parameter of large weight ``theta_p`` are unrelated; weights near zero mark parameters that do
    not matter. ``theta``, ``s2`` and the noise are fitted by maximising the marginal likelihood
    with a log-normal prior on each (few observations: the prior keeps the fit sane).
    """

    def __init__(self, n_params: int) -> None:
        self.n_params = n_params

    def fit(self, X: np.ndarray, y: np.ndarray) -> CategoricalGP:
        self.X = X
        self.mean = float(np.mean(y))
        self.scale = float(np.std(y)) or 1.0
        self.y = (y - self.mean) / self.scale
        self.D = (X[:, None, :] != X[None, :, :]).astype(float)  # (n, n, P)
        p0 = np.concatenate([np.zeros(self.n_params), [0.0, math.log(0.05)]])  # log theta, log s2, log noise
        res = optimize.minimize(self._nll, p0, method="L-BFGS-B",
                                bounds=[(-4.0, 3.0)] * self.n_params + [(-3.0, 2.0), (math.log(1e-4), 0.0)])
        self._set(res.x if np.all(np.isfinite(res.x)) else p0)
        return self

    def _kernel(self, D: np.ndarray, theta: np.ndarray, s2: float) -> np.ndarray:
        return s2 * np.exp(-D @ theta)

    def _nll(self, p: np.ndarray) -> float:
        theta, s2, noise = np.exp(p[: self.n_params]), math.exp(p[-2]), math.exp(p[-1])
        K = self._kernel(self.D, theta, s2) + (noise + 1e-8) * np.eye(len(self.y))
        try:
            L = np.linalg.cholesky(K)
        except np.linalg.LinAlgError:
            return 1e10
        alpha = np.linalg.solve(L.T, np.linalg.solve(L, self.y))
        nll = 0.5 * self.y @ alpha + np.log(np.diag(L)).sum()
        prior = 0.5 * (((p[: self.n_params] - 0.0) / 1.5) ** 2).sum() + 0.5 * (p[-2] / 1.0) ** 2 \
            + 0.5 * ((p[-1] - math.log(0.05)) / 2.0) ** 2
        return float(nll + prior)

    def _set(self, p: np.ndarray) -> None:
        self.theta, self.s2, self.noise = np.exp(p[: self.n_params]), math.exp(p[-2]), math.exp(p[-1])
        K = self._kernel(self.D, self.theta, self.s2) + (self.noise + 1e-8) * np.eye(len(self.y))
        self.L = np.linalg.cholesky(K)
        self.alpha = np.linalg.solve(self.L.T, np.linalg.solve(self.L, self.y))

    def predict(self, Xc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation, in the units of the fitted ``y``."""
        Dc = (Xc[:, None, :] != self.X[None, :, :]).astype(float)
        Ks = self._kernel(Dc, self.theta, self.s2)
        mu = Ks @ self.alpha
        v = np.linalg.solve(self.L, Ks.T)
        var = np.maximum(self.s2 - (v * v).sum(axis=0), 1e-12)
        return self.mean + self.scale * mu, self.scale * np.sqrt(var)


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    z = (mu - best) / sd
    return (mu - best) * special.ndtr(z) + sd * stats.norm.pdf(z)


def one_hot(X: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    cols = [np.eye(n)[X[:, i]] for i, n in enumerate(sizes)]
    return np.concatenate([np.ones((len(X), 1)), *cols], axis=1)


def success_probability(X: np.ndarray, ok: np.ndarray, Xc: np.ndarray, sizes: Sequence[int],
                        prior_rate: float = 0.9, l2: float = 1.0) -> np.ndarray:
    """P(the configuration runs), by a logistic regression on one-hot parameters (MAP, L2 prior).

    The intercept's prior is ``prior_rate``: a configuration like nothing seen fails rarely.
    """
    if ok.all():
        return np.ones(len(Xc))
    A, Ac = one_hot(X, sizes), one_hot(Xc, sizes)
    w0 = np.zeros(A.shape[1])
    w0[0] = math.log(prior_rate / (1 - prior_rate))
    w = w0.copy()
    for _ in range(25):  # Newton steps on the penalised log-likelihood
        p = special.expit(A @ w)
        grad = A.T @ (p - ok) + l2 * (w - w0)
        H = (A * (p * (1 - p))[:, None]).T @ A + l2 * np.eye(len(w))
        step = np.linalg.solve(H, grad)
        w -= step
        if np.abs(step).max() < 1e-6:
            break
    return special.expit(Ac @ w)


def ridge_predict(X: np.ndarray, y: np.ndarray, Xc: np.ndarray, sizes: Sequence[int], l2: float = 1.0) -> np.ndarray:
    A, Ac = one_hot(X, sizes), one_hot(Xc, sizes)
    mean = float(np.mean(y))
    w = np.linalg.solve(A.T @ A + l2 * np.eye(A.shape[1]), A.T @ (y - mean))
    return mean + Ac @ w


class AutotuneSampler(BaseSampler):
    """An Optuna sampler that proposes whole configurations of a finite categorical space.

    ``space`` is the study's :class:`~autotune.space.SearchSpace` (after ``--set``); the study
    asks its parameters in dependency order, and this sampler answers each with the value of the
    configuration it chose for the trial. ``cost_power`` weighs the predicted trial time:
    0 ignores it, 1 is expected improvement per second. ``compile_cache_persists`` says whether a
    configuration that compiles the same graphs as a measured one loads them from the cache
    (default: by target).
    """

    def __init__(self, space: SearchSpace, *, seed: int | None = None, cost_power: float = 0.0,
                 failure_model: bool = True, compile_cache_persists: bool | None = None,
                 runtime_only_params: Sequence[str] = ("num_workers",)) -> None:
        import optuna

        self.space = space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.cost_power = cost_power
        self.failure_model = failure_model
        self.runtime_only = set(runtime_only_params)
        self.cache_persists = compile_cache_persists if compile_cache_persists is not None \
            else space.target in ("inductor", "neuron")
        self.free: list[Parameter] = [p for p in space.parameters.values() if p.name not in space.fixed]
        self.categorical = all(p.choices is not None for p in self.free)
        self.levels = {p.name: _levels(p) for p in self.free}
        self.sizes = [len(self.levels[p.name]) for p in self.free]
        self._enumerated: list[dict[str, Any]] | None = None
        self._picked: dict[int, dict[str, Any]] = {}
        self._fallback = optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, constant_liar=True)

    # -- the Optuna sampler interface ---------------------------------------------------------------
    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {} if self.categorical else self._fallback.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        return {} if self.categorical else self._fallback.sample_relative(study, trial, search_space)

    def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
        if not self.categorical or param_name not in self.levels:
            return self._fallback.sample_independent(study, trial, param_name, param_distribution)
        config = self._picked.get(trial._trial_id)
        if config is None:
            config = self._picked[trial._trial_id] = self.propose(study)
        value = config.get(param_name)
        if value in param_distribution.choices:
            return value
        return param_distribution.choices[int(self.rng.integers(len(param_distribution.choices)))]

    def before_trial(self, study: Any, trial: Any) -> None:
        if not self.categorical:
            self._fallback.before_trial(study, trial)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self._picked.pop(trial._trial_id, None)
        if not self.categorical:
            self._fallback.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.rng = np.random.default_rng()
        self._fallback.reseed_rng()

    # -- choosing a configuration -----------------------------------------------------------------
    def propose(self, study: Any) -> dict[str, Any]:
        """The next configuration to measure (a measured one only when none is left)."""
        import optuna

        maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
        history, in_flight = _history(study)
        taken = {_key(c) for c, *_ in history} | {_key(c) for c in self._picked.values()} | in_flight
        candidates = [c for c in self._candidates(history) if _key(c) not in taken]
        if not candidates:
            done = [(c, v) for c, v, _ in history if v is not None]
            if done:
                return (max if maximize else min)(done, key=lambda cv: cv[1])[0]
            return self._candidates(history)[0] if self._candidates(history) else {}
        X = self._encode([c for c, *_ in history])
        Xc = self._encode(candidates)
        values = [v for _, v, _ in history]
        ok = np.array([v is not None for v in values])
        score = np.ones(len(candidates))
        if ok.sum() >= 2:
            y = np.array([_transform(v, maximize) for v in values if v is not None])
            gp = CategoricalGP(len(self.free)).fit(X[ok], y)
            mu, sd = gp.predict(Xc)
            score = expected_improvement(mu, sd, float(y.max())) + 1e-12
        else:
            # Nothing to model yet: spread out (farthest from everything tried).
            if len(X):
                score = (Xc[:, None, :] != X[None, :, :]).sum(axis=2).min(axis=1).astype(float) + 1e-3
        if self.failure_model and len(X) and not ok.all():
            score = score * success_probability(X, ok.astype(float), Xc, self.sizes)
        if self.cost_power and len(X):
            score = score / self._predicted_cost(history, X, candidates, Xc) ** self.cost_power
        best = np.flatnonzero(score >= score.max() * (1 - 1e-9))
        return candidates[int(self.rng.choice(best))]

    def _predicted_cost(self, history: list[tuple[dict[str, Any], float | None, dict[str, float]]],
                        X: np.ndarray, candidates: list[dict[str, Any]], Xc: np.ndarray) -> np.ndarray:
        walls = np.array([max(h[2].get("wall", 1.0), 1.0) for h in history])
        cost = np.exp(ridge_predict(X, np.log(walls), Xc, self.sizes))
        if self.cache_persists:
            compiled = {}
            for c, v, t in history:
                if v is not None and t.get("compile"):
                    compiled[self._compile_key(c)] = t["compile"]
            saved = np.array([compiled.get(self._compile_key(c), 0.0) for c in candidates])
            cost = np.maximum(cost - saved, 1.0)
        return cost

    def _compile_key(self, config: dict[str, Any]) -> str:
        return _key({k: v for k, v in config.items() if k not in self.runtime_only})

    def _candidates(self, history: list[Any]) -> list[dict[str, Any]]:
        if self._enumerated is None:
            from autotune.landscape import enumerate_space

            size = math.prod(self.sizes) if self.sizes else 1
            self._enumerated = enumerate_space(self.space) if size <= MAX_ENUMERATED else []
        if self._enumerated:
            return self._enumerated
        return self._sampled(history)

    def _sampled(self, history: list[Any]) -> list[dict[str, Any]]:
        """A large space: random configurations, and the neighbours of the best ones measured."""
        from autotune.errors import InvalidConfigError
        from autotune.targets import get_target

        target = get_target(self.space.target)
        out: dict[str, dict[str, Any]] = {}

        def add(raw: dict[str, Any]) -> None:
            active = {k: v for k, v in {**raw, **self.space.fixed}.items()
                      if v is not None and self.space.parameters[k].is_active({**raw, **self.space.fixed})}
            try:
                config = self.space.validate(active)
                target.check(config)
            except InvalidConfigError:
                return
            out.setdefault(_key(config), config)

        for _ in range(RANDOM_CANDIDATES):
            add({p.name: self.levels[p.name][int(self.rng.integers(len(self.levels[p.name])))] for p in self.free})
        ranked = sorted((h for h in history if h[1] is not None), key=lambda h: -abs(h[1]))[:5]
        for config, *_ in ranked:
            for p in self.free:
                for level in self.levels[p.name]:
                    add({**config, p.name: level})
        return list(out.values())

    def _encode(self, configs: list[dict[str, Any]]) -> np.ndarray:
        X = np.zeros((len(configs), len(self.free)), dtype=int)
        for i, c in enumerate(configs):
            for j, p in enumerate(self.free):
                X[i, j] = _level_index(self.levels[p.name], c.get(p.name))
        return X


def _levels(p: Parameter) -> list[Any]:
    """A parameter's values; ``None`` (unset, or inactive under its ``when``) is a level of its own."""
    return [None, *(p.choices or ())]


def _level_index(levels: list[Any], value: Any) -> int:
    for i, level in enumerate(levels):
        if level is value or (level == value and type(level) is type(value)):
            return i
    return 0


def _key(config: dict[str, Any]) -> str:
    return json.dumps({k: config[k] for k in sorted(config) if config[k] is not None},
                      sort_keys=True, separators=(",", ":"))


def _transform(value: float, maximize: bool) -> float:
    """What the model fits: the log of a positive objective (speed-ups multiply), negated to minimise."""
    v = math.log(value) if value > 0 else value
    return v if maximize else -v


def _history(study: Any) -> tuple[list[tuple[dict[str, Any], float | None, dict[str, float]]], set[str]]:
    """Each distinct finished configuration as (config, value or None if it failed, its costs),
    and the keys of the configurations in flight."""
    import optuna

    out = []
    seen: set[str] = set()
    for t in study.get_trials(deepcopy=False):
        if not t.state.is_finished() or t.user_attrs.get(_A_DUP) is not None:
            continue
        key = t.user_attrs.get(_A_KEY)
        config = json.loads(key) if key else {k: v for k, v in t.params.items() if v is not None}
        if not config or _key(config) in seen:
            continue
        seen.add(_key(config))
        value = t.value if t.state == optuna.trial.TrialState.COMPLETE else None
        out.append((config, value, _costs(t.user_attrs.get(_A_RESULT))))
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    in_flight = {t.user_attrs[_A_KEY] for t in running if t.user_attrs.get(_A_KEY)}
    return out, in_flight


def _costs(result_json: str | None) -> dict[str, float]:
    if not result_json:
        return {}
    try:
        doc = json.loads(result_json)
    except ValueError:
        return {}
    return {"wall": float(doc.get("wall_seconds") or 0.0),
            "compile": float((doc.get("compile") or {}).get("compile_seconds") or 0.0)}
