"""A surrogate of a recorded landscape: models fitted on the configurations that were measured,
which answer any configuration of the space.

A recorded landscape answers only the configurations it holds, a few hundred at most of a space
of millions (the built-in xla space). Surrogate benchmarks of hyperparameter optimisation
(HPOBench, YAHPO Gym) answer the rest from a regressor fitted on the recorded ones, so that
strategies can be compared over many seeds on the whole space; this is that, for a landscape:

* gradient boosting of depth-2 trees on the log of the throughput (main effects and pairs of
  parameters that interact, as compiler flags, precision and batch size do), each recorded
  configuration weighted by the inverse of its measurement's spread (from its 95% interval: a
  noisy measurement counts less; see ``_weights``), and a Gaussian process over what the boosting
  leaves unexplained near the recorded configurations (:class:`Residuals`), so that a recorded
  configuration is answered where its measurement says, not where the sum of its parameters'
  effects elsewhere puts it;
* a random forest that classifies a configuration as ``ok`` or as one of the failure categories
  the recording saw (``crash``, ``compile_error``, ...);
* random forests of the spread of a measurement (the width of its interval, on a log scale) and
  of a trial's compile seconds and other seconds (start-up, warm-up, measurement);
* what no model predicts (windows, steps, samples per step) from the nearest recorded
  configuration that ran.

A configuration is encoded one column per level of each parameter ("unset", the script's own
value, or inactive under its ``when``, being a level of its own), plus the value itself for a
numeric parameter (a batch size: a tree can split on it). Boosting for the throughput: its
held-out error was the lowest (docs/results/search.md#the-surrogates-model).
The classifier and the other regressors are random forests with scikit-learn's defaults: which
configurations fail is a matter of a flag or a pair, not of a smooth trend.

:class:`SurrogateLandscape` is a :class:`~autotune.landscapes.landscape.Landscape` whose lookup is
the surrogate, so that the benchmarks' :func:`bench.lib.simulate.simulate` and the replay pool run a
study on it unchanged. Its answers are deterministic (a configuration always gets the same result),
and its best is the best it predicts over the space (:meth:`SurrogateLandscape.best`).

:func:`autotune.landscapes.surrogate_error.held_out_error` says how far to trust it: k-fold, each recorded configuration predicted by
a surrogate fitted without it. Needs scikit-learn (``pip install "torch-autotune[bench]"``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from autotune.errors import AutotuneError, install_hint
from autotune.landscapes.landscape import ConfigRecord, Landscape, canonical
from autotune.landscapes.replay import interval_sigma
from autotune.measurement.noise import interval_of
from autotune.space import Parameter, ParamValue, SearchSpace, config_key

if TYPE_CHECKING:
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

OK = "ok"
#: A measurement's spread (log scale) below which it is not trusted more: a recorded interval of
#: ±0 (a measurement with one window) must not outweigh every other record.
SIGMA_FLOOR = 0.01
#: Trees of each random forest (scikit-learn's default).
TREES = 100
#: Gradient boosting of depth-2 trees: main effects and the interactions of pairs of parameters.
BOOSTING = {"max_depth": 2, "n_estimators": 300, "learning_rate": 0.05}
#: The best over the space: every configuration when there are at most this many, else a sample of
#: this many and a local search from the best of them.
MAX_ENUMERATED = 20000
LOCAL_STARTS = 20
#: Correct the boosting near the recorded configurations (:class:`Residuals`).
RESIDUALS = True


def load_sklearn() -> ModuleType:
    try:
        import sklearn.ensemble
        import sklearn.model_selection
    except ImportError:
        raise AutotuneError(f"a surrogate needs scikit-learn: {install_hint('bench')}") from None
    return sklearn


class ConfigEncoder:
    """Configurations of a space as rows of numbers: one 0/1 column per level of each free
    parameter (``None``, unset or inactive, is a level), and the value of a numeric one. A
    configuration is encoded in its canonical form: a value that leaving its parameter unset gives
    anyway (``unset_is``) is the unset level, as the run is the same."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.params: list[Parameter] = [p for p in space.in_dependency_order() if p.name not in space.fixed]
        choices: dict[str, list[ParamValue]] = {}
        for p in self.params:
            if p.choices is None:
                raise AutotuneError(f"{space.source}: parameter {p.name!r} is a range; a surrogate needs "
                                    "every parameter to have 'choices'")
            choices[p.name] = list(p.choices)
        self.levels = {name: [None, *values] for name, values in choices.items()}
        self.numeric = {name for name, values in choices.items()
                        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)}

    def canonical(self, configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [canonical(self.space, c) for c in configs]

    def level_indices(self, configs: list[dict[str, Any]]) -> np.ndarray:
        return self._indices(self.canonical(configs))

    def _indices(self, configs: list[dict[str, Any]]) -> np.ndarray:
        X = np.zeros((len(configs), len(self.params)), dtype=int)
        for i, c in enumerate(configs):
            for j, p in enumerate(self.params):
                X[i, j] = _level_index(self.levels[p.name], c.get(p.name))
        return X

    def encode(self, configs: list[dict[str, Any]]) -> np.ndarray:
        configs = self.canonical(configs)
        idx = self._indices(configs)
        cols = []
        for j, p in enumerate(self.params):
            cols.append(np.eye(len(self.levels[p.name]))[idx[:, j]])
            if p.name in self.numeric:
                values = np.array([c.get(p.name) if c.get(p.name) is not None else -1.0 for c in configs],
                                  dtype=float)
                cols.append(values[:, None])
        return np.concatenate(cols, axis=1) if cols else np.zeros((len(configs), 0))


def _level_index(levels: list[ParamValue | None], value: object) -> int:
    for i, level in enumerate(levels):
        if level is value or (level == value and type(level) is type(value)):
            return i
    return 0


class Surrogate:
    """The models of one landscape's recorded configurations (see the module's docstring)."""

    def __init__(self, space: SearchSpace, records: list[ConfigRecord], *, seed: int = 0) -> None:
        sk = load_sklearn()
        if not any(r.ok for r in records):
            raise AutotuneError("a surrogate needs at least one recorded configuration that ran")
        self.space = space
        self.encoder = ConfigEncoder(space)
        forest = sk.ensemble.RandomForestRegressor
        X = self.encoder.encode([r.params for r in records])
        self.levels = self.encoder.level_indices([r.params for r in records])
        labels = [r.outcome for r in records]
        self.labels = sorted(set(labels))
        self.status = None
        if len(self.labels) > 1:
            self.status = sk.ensemble.RandomForestClassifier(n_estimators=TREES, random_state=seed, n_jobs=1)
            self.status.fit(X, labels)
        ok = np.array([r.ok for r in records])
        self.ok_records = [r for r in records if r.ok]
        sigma = np.array([max(interval_sigma(r), SIGMA_FLOOR) for r in self.ok_records])
        y = np.log([r.figure for r in self.ok_records])
        self.throughput = sk.ensemble.GradientBoostingRegressor(**BOOSTING, random_state=seed)
        self.throughput.fit(X[ok], y, sample_weight=_weights(sigma))
        self.ok_levels = self.levels[ok]
        self.residuals = Residuals(_mismatches(self.ok_levels, self.ok_levels), y - self.throughput.predict(X[ok]),
                                   sigma) if RESIDUALS else None
        self.noise = forest(n_estimators=TREES, random_state=seed, n_jobs=1).fit(X[ok], np.log(sigma))
        times = np.array([[math.log(r.compile_seconds + 0.1), math.log(max(r.wall_seconds - r.compile_seconds, 0) + 0.1)]
                          for r in records])
        self.times = forest(n_estimators=TREES, random_state=seed, n_jobs=1).fit(X, times)
        self.reasons = {lab: next(r.reason for r in records if not r.ok and r.outcome == lab)
                        for lab in self.labels if lab != OK}

    @classmethod
    def of(cls, landscape: Landscape, *, seed: int = 0) -> Surrogate:
        return cls(landscape.space, landscape.records, seed=seed)

    def predict_log_throughput(self, configs: list[dict[str, Any]]) -> np.ndarray:
        return self._log_throughput(self.encoder.encode(configs), self._mismatches_ok(configs))

    def _mismatches_ok(self, configs: list[dict[str, Any]]) -> np.ndarray:
        """How many parameters each configuration differs in from each recorded one that ran."""
        return _mismatches(self.encoder.level_indices(configs), self.ok_levels)

    def _log_throughput(self, X: np.ndarray, mismatches_ok: np.ndarray) -> np.ndarray:
        out = self.throughput.predict(X)
        return out if self.residuals is None else out + self.residuals.predict(mismatches_ok)

    def predict_status(self, configs: list[dict[str, Any]]) -> list[str]:
        return self._status(self.encoder.encode(configs))

    def _status(self, X: np.ndarray) -> list[str]:
        if self.status is None:
            return [self.labels[0]] * len(X)
        proba = _mean(self.status, X, proba=True)
        return [str(label) for label in self.status.classes_[proba.argmax(axis=1)]]

    def predict(self, configs: list[dict[str, Any]]) -> list[ConfigRecord]:
        """A synthetic recorded result for each configuration (``index`` -1: never recorded)."""
        if not configs:
            return []
        X = self.encoder.encode(configs)
        status = self._status(X)
        mismatches = self._mismatches_ok(configs)
        log_tp = self._log_throughput(X, mismatches)
        sigma = np.exp(_mean(self.noise, X))
        times = np.exp(_mean(self.times, X)) - 0.1
        # What no model predicts comes from the recorded configuration that ran with the fewest
        # parameters different.
        near = [self.ok_records[int(i)] for i in mismatches.argmin(axis=1)]
        out = []
        for c, st, lt, sd, (compile_s, rest_s), n in zip(configs, status, log_tp, sigma, times, near):
            compile_s, rest_s = max(float(compile_s), 0.0), max(float(rest_s), 0.0)
            rec = ConfigRecord(index=-1, params=dict(c), status="ok" if st == OK else "failed",
                               compile_seconds=round(compile_s, 3), wall_seconds=round(compile_s + rest_s, 3),
                               graphs_compiled=n.graphs_compiled, graphs_after_warmup=n.graphs_after_warmup,
                               cache_hits=0 if n.cache_hits is not None else None,
                               cache_misses=n.graphs_compiled if n.cache_misses is not None else None)
            if st == OK:
                tp = float(math.exp(lt))
                low, high = interval_of(tp, sd)
                rec = replace(rec, throughput=tp, ci95_low=low, ci95_high=high,
                              samples_per_step=n.samples_per_step, steps_measured=n.steps_measured,
                              windows=n.windows, converged=n.converged, warmup_steps=n.warmup_steps,
                              warmup_seconds=n.warmup_seconds, measure_seconds=n.measure_seconds,
                              step_time_median=(n.samples_per_step or 0.0) / tp)
            else:
                rec = replace(rec, category=st, reason=f"(surrogate) as recorded: {self.reasons.get(st) or st}")
            out.append(rec)
        return out


class Residuals:
    """What the boosting leaves unexplained near the recorded configurations: a Gaussian process
    over their residuals (log throughput), with a kernel that decays with the number of parameters
    two configurations differ in, and each measurement's own spread as its noise.

    Depth-2 trees add up main effects and pairs, so a configuration whose measurement departs from
    what its parameters add up to elsewhere in the space is pulled back to that sum, however well
    it was measured. The process
    puts such a configuration, and in part its neighbours, back where the measurements say, and
    leaves configurations far from every record to the boosting.

    A recorded interval is the spread within one run; two runs of one configuration can differ by
    more. So the noise of each residual is its interval's plus a term between runs, which the data
    may set to 0: with the spread of the residuals and how many parameters apart they stay alike,
    it is chosen by the marginal likelihood of the residuals (what it chose on the recordings:
    docs/results/search.md#the-residual-process)."""

    SPREADS = (0.003, 0.01, 0.03, 0.1)
    LENGTHS = (0.5, 1.0, 2.0, 4.0)
    BETWEEN = (0.0, 0.03, 0.1, 0.2)

    def __init__(self, distance: np.ndarray, residuals: np.ndarray, sigma: np.ndarray) -> None:
        """``distance``: how many parameters each recorded configuration differs in from each other."""
        best = -math.inf
        for spread, length, between in itertools.product(self.SPREADS, self.LENGTHS, self.BETWEEN):
            a = spread * np.exp(-distance / length) + np.diag(sigma ** 2 + between ** 2)
            try:
                chol = np.linalg.cholesky(a)
            except np.linalg.LinAlgError:
                continue
            alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, residuals))
            fit = -0.5 * float(residuals @ alpha) - float(np.log(np.diag(chol)).sum())
            if fit > best:
                best, self.spread, self.length, self.between, self.alpha = fit, spread, length, between, alpha

    def predict(self, distance: np.ndarray) -> np.ndarray:
        """At configurations ``distance`` (parameters differing) from each recorded one it was fitted on."""
        return self.spread * np.exp(-distance / self.length) @ self.alpha


def _mismatches(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many parameters each row of level indices ``a`` differs in from each row of ``b``."""
    return (a[:, None, :] != b[None, :, :]).sum(axis=2)


def _weights(sigma: np.ndarray) -> np.ndarray:
    """Each measurement's weight in the throughput's fit: the inverse of its spread (mean 1).

    Not the inverse of its variance, as a textbook fit would weigh it: the spread of a
    measurement grows with the throughput where a script's epoch is short (its fastest
    configurations run fewest steps), so inverse variances leave the top of a landscape, where a
    search ends, to the slow and precise configurations (docs/results/search.md#each-measurements-weight)."""
    return (1 / sigma) / np.mean(1 / sigma)


def _mean(forest: RandomForestRegressor | RandomForestClassifier, X: np.ndarray, proba: bool = False) -> np.ndarray:
    """What ``forest.predict`` (``predict_proba``) gives, without its per-call overhead: a study
    asks one configuration at a time, and scikit-learn's dispatch to the trees costs five times
    the trees themselves on one row."""
    X = np.asarray(X, dtype=np.float32)
    trees = forest.estimators_
    return np.sum([(t.predict_proba if proba else t.predict)(X, check_input=False) for t in trees], axis=0) / len(trees)



# -- a landscape that answers every configuration -------------------------------------------------

class SurrogateLandscape(Landscape):
    """The space of a recorded landscape, every configuration answered by its :class:`Surrogate`.

    Compile prices follow the recording's: a configuration's predicted compile is cold, and one
    whose graphs a replay compiled before costs it times the recording's warm/cold ratio
    (:attr:`Landscape.warm_compile_ratio`) where the target's compile cache persists.
    """

    def __init__(self, recorded: Landscape, surrogate: Surrogate | None = None, *, seed: int = 0) -> None:
        super().__init__({**recorded.header, "surrogate_of": recorded.path}, [], recorded.path)
        self.recorded = recorded
        self.surrogate = surrogate or Surrogate.of(recorded, seed=seed)
        self.seed = seed
        self._answers: dict[str, ConfigRecord] = {}
        self._best: ConfigRecord | None = None
        self.best_basis = ""
        self._enumerated: list[dict[str, Any]] | None = None
        from autotune.search.configurations import grid_size

        self._grid = grid_size(recorded.space)

    @property
    def name(self) -> str:
        return f"{super().name} (surrogate)"

    @property
    def size(self) -> int:
        return len(self._all()) if self._grid <= MAX_ENUMERATED else self._grid

    @property
    def warm_compile_ratio(self) -> float:
        return self.recorded.warm_compile_ratio

    def _all(self) -> list[dict[str, Any]]:
        if self._enumerated is None:
            from autotune.search.configurations import enumerate_space

            self._enumerated = enumerate_space(self.space)
        return self._enumerated

    def get(self, params: dict[str, Any]) -> ConfigRecord:
        key = config_key(params)
        if key not in self._answers:
            self._answers[key] = self.surrogate.predict([params])[0]
        return self._answers[key]

    def answer(self, configs: list[dict[str, Any]]) -> list[ConfigRecord]:
        """:meth:`get` for many at once (one call of each model)."""
        todo = [c for c in configs if config_key(c) not in self._answers]
        for c, rec in zip(todo, self.surrogate.predict(todo)):
            self._answers[config_key(c)] = rec
        return [self._answers[config_key(c)] for c in configs]

    def best(self) -> ConfigRecord:
        """The best configuration the surrogate predicts to run: over every configuration of the
        space when it has at most ``MAX_ENUMERATED``, else over a sample of that many
        (:func:`~autotune.search.configurations.sample_space`) followed by a local search (one
        parameter changed at a time, while that helps) from the best ``LOCAL_STARTS`` of them.
        :attr:`best_basis` says which."""
        if self._best is None:
            self._best = self.ranked()[0]
        return self._best

    def ranked(self) -> list[ConfigRecord]:
        """The configurations :meth:`best` chose from that the surrogate predicts to run, best
        first (one per canonical configuration)."""
        from autotune.search.configurations import sample_space

        if self._grid <= MAX_ENUMERATED:
            pool = self.answer(self._all())
            self.best_basis = f"every one of its {len(pool):,} configurations"
        else:
            pool = self.answer(sample_space(self.space, MAX_ENUMERATED, self.seed))
            ranked = sorted((r for r in pool if r.ok), key=lambda r: -r.figure)[:LOCAL_STARTS]
            pool = pool + [self._climb(r) for r in ranked]
            self.best_basis = (f"{MAX_ENUMERATED:,} sampled configurations of up to {self._grid:,}, and a local "
                               f"search from the best {LOCAL_STARTS}")
        ok = {config_key(canonical(self.space, r.params)): r for r in pool if r.ok}
        if not ok:
            raise AutotuneError(f"the surrogate of {self.path} predicts no configuration to run")
        return sorted(ok.values(), key=lambda r: -r.figure)

    def measured(self, params: dict[str, Any]) -> list[ConfigRecord]:
        """The recorded measurements of ``params`` (its canonical form), if it was recorded."""
        key = config_key(canonical(self.space, params))
        return [r for r in self.recorded.records if config_key(canonical(self.space, r.params)) == key]

    def best_line(self) -> str:
        """Whether the best it predicts rests on a measurement: a surrogate fitted on a sample of
        a large space can add up small effects into an optimum nothing measured supports."""
        best = self.best()
        runs = [r for r in self.measured(best.params) if r.ok]
        if runs:
            return (f"its best was recorded: measured {', '.join(f'{r.throughput:,.1f}' for r in runs)} samples/s "
                    f"(predicted {best.throughput:,.1f})")
        return ("its best was never recorded: nothing measured there (autotune landscape record --refine N "
                "records what the surrogate predicts best)")

    def _climb(self, start: ConfigRecord) -> ConfigRecord:
        from autotune.search.neighbours import one_knob_changes

        current = start
        while True:
            ok = [r for r in self.answer(one_knob_changes(self.space, current.params)) if r.ok]
            better = max(ok, key=lambda r: r.figure, default=None)
            if better is None or better.figure <= current.figure:
                return current
            current = better
