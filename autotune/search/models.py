"""The numerical models behind :class:`autotune.search.strategy.AutotuneSampler`.

A Gaussian process over whole configurations of a categorical space (the objective), a logistic
model and a culprit count over parameter levels (whether a configuration runs), and a ridge model
(how long it takes). They are written here because no library offers a kernel over ordered and
unordered categorical levels with a trend term, fitted in milliseconds on a dozen points; the
strategy's docstring, and ``bench/search_bench.py``, say what each buys against Optuna's own
``GPSampler`` and TPE on the recorded landscapes.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import optimize, special, stats


class CategoricalGP:
    """A Gaussian process over configurations of categorical parameters.

    ``k(a, b) = s2 * exp(-sum_p theta_p * d_p(a_p, b_p)) + sum_o v_o * z_o(a) * z_o(b)``. The
    first term relates configurations by how much they differ: ``d_p`` is 0/1 for a categorical
    parameter and the rank difference for an ordered one (batch sizes), and a parameter of weight
    ``theta_p`` near zero does not matter. The second term, over the ordered parameters ``o``
    (``z_o`` the centred rank of the value), lets the model learn a trend and follow it past the
    values measured: throughput that rose from batch 16 to 32 is expected to rise again at 64.
    The weights, ``s2``, ``v`` and the noise are fitted by maximising the marginal likelihood with
    a log-normal prior on each (few observations: the prior keeps the fit sane).

    ``fit(..., extra_noise=...)`` gives some observations noise of their own on top of the fitted
    one (in units of the standardised values): an earlier study's results, which inform the model
    without weighing as much as this study's own measurements.
    """

    def __init__(self, distances: Sequence[np.ndarray], positions: Sequence[np.ndarray | None] | None = None,
                 theta_prior: float = 1.0) -> None:
        self.theta_prior = theta_prior
        self.distances = list(distances)
        self.n_params = len(self.distances)
        positions = list(positions) if positions is not None else [None] * self.n_params
        self.trend = [(j, pos) for j, pos in enumerate(positions) if pos is not None]
        # What fit() learns (prior_sd() sets the same with the prior's hyperparameters): the
        # observations, standardised, their distances, the hyperparameters and the factorisation.
        self.X = np.zeros((0, self.n_params), dtype=int)
        self.y = np.zeros(0)
        self.mean, self.scale = 0.0, 1.0
        self.D = self.ZZ = np.zeros((0, 0, 0))
        self.theta, self.v = np.zeros(self.n_params), np.zeros(len(self.trend))
        self.s2 = self.noise = 0.0
        self.extra = np.zeros(0)
        self.L = self.alpha = np.zeros(0)

    def _dist(self, Xa: np.ndarray, Xb: np.ndarray) -> np.ndarray:
        return np.stack([d[Xa[:, j][:, None], Xb[:, j][None, :]] for j, d in enumerate(self.distances)]) \
            if self.n_params else np.zeros((0, len(Xa), len(Xb)))

    def _z(self, X: np.ndarray) -> np.ndarray:
        return np.stack([pos[X[:, j]] for j, pos in self.trend]) if self.trend else np.zeros((0, len(X)))

    def prior(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and spread of the log hyperparameters: theta (one per parameter), s2, noise, v."""
        P, T = self.n_params, len(self.trend)
        mean = np.concatenate([np.full(P, math.log(self.theta_prior)), [0.0, math.log(0.05)],
                               np.full(T, math.log(0.3))])
        sd = np.concatenate([np.full(P, 1.5), [1.0, 2.0], np.full(T, 1.5)])
        return mean, sd

    def fit(self, X: np.ndarray, y: np.ndarray, extra_noise: np.ndarray | None = None) -> CategoricalGP:
        self.X = X
        self.extra = np.zeros(len(y)) if extra_noise is None else np.asarray(extra_noise, dtype=float)
        self.mean = float(np.mean(y))
        self.scale = float(np.std(y)) or 1.0
        self.y = (y - self.mean) / self.scale
        self.D = self._dist(X, X)  # (P, n, n)
        Z = self._z(X)
        self.ZZ = Z[:, :, None] * Z[:, None, :]  # (T, n, n)
        p0, _ = self.prior()
        bounds = [(-4.0, 3.0)] * self.n_params + [(-3.0, 2.0), (math.log(1e-4), 0.0)] + [(-6.0, 2.0)] * len(self.trend)
        res = optimize.minimize(self._nll, p0, jac=True, method="L-BFGS-B", options={"maxiter": 60}, bounds=bounds)
        self._set(res.x if np.all(np.isfinite(res.x)) else p0)
        return self

    def _split(self, p: np.ndarray) -> tuple[np.ndarray, float, float, np.ndarray]:
        P = self.n_params
        return np.exp(p[:P]), math.exp(p[P]), math.exp(p[P + 1]), np.exp(p[P + 2:])

    def _nll(self, p: np.ndarray) -> tuple[float, np.ndarray]:
        """Negative log marginal likelihood plus the log-normal prior, and its gradient."""
        P = self.n_params
        theta, s2, noise, v = self._split(p)
        sE = s2 * np.exp(-np.tensordot(theta, self.D, axes=1))
        K = sE + np.tensordot(v, self.ZZ, axes=1) + np.diag(noise + 1e-8 + self.extra)
        try:
            L = np.linalg.cholesky(K)
        except np.linalg.LinAlgError:
            return 1e10, np.zeros_like(p)
        Kinv = np.linalg.solve(L.T, np.linalg.solve(L, np.eye(len(self.y))))
        alpha = Kinv @ self.y
        W = np.outer(alpha, alpha) - Kinv  # d nll / dK = -W / 2
        nll = 0.5 * self.y @ alpha + np.log(np.diag(L)).sum()
        grad = np.empty_like(p)
        for j in range(P):
            grad[j] = 0.5 * theta[j] * np.sum(W * self.D[j] * sE)
        grad[P] = -0.5 * np.sum(W * sE)
        grad[P + 1] = -0.5 * np.trace(W) * noise
        for t in range(len(self.trend)):
            grad[P + 2 + t] = -0.5 * v[t] * np.sum(W * self.ZZ[t])
        mean, sd = self.prior()
        nll += 0.5 * (((p - mean) / sd) ** 2).sum()
        grad += (p - mean) / sd ** 2
        return float(nll), grad

    def _set(self, p: np.ndarray) -> None:
        self.theta, self.s2, self.noise, self.v = self._split(p)
        K = self._cov(self.X, self.X, self.D) + np.diag(self.noise + 1e-8 + self.extra)
        self.L = np.linalg.cholesky(K)
        self.alpha = np.linalg.solve(self.L.T, np.linalg.solve(self.L, self.y))

    def _cov(self, Xa: np.ndarray, Xb: np.ndarray, D: np.ndarray | None = None) -> np.ndarray:
        D = self._dist(Xa, Xb) if D is None else D
        Za, Zb = self._z(Xa), self._z(Xb)
        return self.s2 * np.exp(-np.tensordot(self.theta, D, axes=1)) + (self.v[:, None] * Za).T @ Zb

    def prior_sd(self, X: np.ndarray, Xc: np.ndarray) -> np.ndarray:
        """Posterior standard deviation at ``Xc`` after observing ``X``, with the prior's
        hyperparameters (no values needed: where measuring teaches the most)."""
        self.X, self.y, self.extra = X, np.zeros(len(X)), np.zeros(len(X))
        self.D = self._dist(X, X)
        self._set(self.prior()[0])
        return self.predict(Xc)[1]

    def predict(self, Xc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation, in the units of the fitted ``y``."""
        Ks = self._cov(Xc, self.X)
        mu = Ks @ self.alpha
        w = np.linalg.solve(self.L, Ks.T)
        prior_var = self.s2 + (self.v[:, None] * self._z(Xc) ** 2).sum(axis=0)
        var = np.maximum(prior_var - (w * w).sum(axis=0), 1e-12)
        return self.mean + self.scale * mu, self.scale * np.sqrt(var)


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    z = (mu - best) / sd
    return (mu - best) * special.ndtr(z) + sd * stats.norm.pdf(z)


def one_hot(X: np.ndarray, sizes: Sequence[int], pairs: bool = False) -> np.ndarray:
    """An intercept, one column per parameter level, and with ``pairs`` one per pair of levels of
    two parameters (failures come from combinations: a flag that breaks only with one mode)."""
    cols = [np.eye(n)[X[:, i]] for i, n in enumerate(sizes)]
    out = [np.ones((len(X), 1)), *cols]
    if pairs:
        for i in range(len(cols)):
            for j in range(i + 1, len(cols)):
                out.append((cols[i][:, :, None] * cols[j][:, None, :]).reshape(len(X), -1))
    return np.concatenate(out, axis=1)


def success_probability(X: np.ndarray, ok: np.ndarray, Xc: np.ndarray, sizes: Sequence[int],
                        prior_rate: float = 0.9, l2: float = 0.1) -> np.ndarray:
    """P(the configuration runs), by a logistic regression on one-hot parameters and pairs of
    parameters (MAP, L2 prior).

    The intercept's prior is ``prior_rate``: a configuration like nothing seen fails rarely.
    """
    if ok.all():
        return np.ones(len(Xc))
    A, Ac = one_hot(X, sizes, pairs=True), one_hot(Xc, sizes, pairs=True)
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


def culprit_probability(X: np.ndarray, ok: np.ndarray, Xc: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """How surely each candidate contains what made the failed configurations fail.

    Compile failures are mostly deterministic: a flag, or a pair of settings, that always breaks.
    The suspects of a failure are its parameter levels and pairs of levels that no successful
    configuration had; two failures that share suspects narrow them to those. A candidate holding
    a share ``s`` of a failure's (or pair of failures') suspects gets ``s``; the largest counts.
    """
    A = one_hot(X, sizes, pairs=True)[:, 1:] > 0
    Ac = one_hot(Xc, sizes, pairs=True)[:, 1:].astype(float)
    cleared = A[ok > 0].any(axis=0)
    suspects = [row & ~cleared for row in A[ok == 0]]
    sets = [s for s in suspects if s.any()]
    sets += [a & b for i, a in enumerate(sets) for b in sets[i + 1:] if (a & b).any()]
    p = np.zeros(len(Xc))
    for s in sets:
        p = np.maximum(p, Ac @ s / s.sum())
    return p


def convicted(X: np.ndarray, ok: np.ndarray, Xc: np.ndarray, sizes: Sequence[int],
              broke: np.ndarray | None = None) -> np.ndarray:
    """Whether each candidate holds a parameter level that two or more configurations failed with
    and none ran with: a flag that broke the compile twice and never compiled.

    ``broke`` marks the failures that count (default: every one that did not run); the sampler
    passes those that failed to compile or crashed, not a timeout or an out-of-memory, which
    other settings of the configuration may cause. A parameter's first level (unset: the
    script's own) is never convicted.

    :func:`culprit_probability` shares the blame among a failure's suspects, pairs of levels
    included, so a candidate far from the failures holds a small share of them. Late in a study,
    when the expected improvement near the best is all but spent, the one level never measured
    keeps the model's widest uncertainty, and a share-based discount did not stop it: a real xla
    study proposed ``thunk_runtime=False`` four trials in a row after two compile errors with it.
    """
    broke = ok == 0 if broke is None else broke.astype(bool)
    A = one_hot(X, sizes)[:, 1:] > 0
    unset = np.zeros(A.shape[1], dtype=bool)
    unset[np.cumsum([0, *sizes[:-1]])] = True
    guilty = (A[broke].sum(axis=0) >= 2) & (A[ok > 0].sum(axis=0) == 0) & ~unset
    return np.asarray((one_hot(Xc, sizes)[:, 1:] > 0)[:, guilty].any(axis=1))


def ridge_predict(X: np.ndarray, y: np.ndarray, Xc: np.ndarray, sizes: Sequence[int], l2: float = 1.0) -> np.ndarray:
    A, Ac = one_hot(X, sizes), one_hot(Xc, sizes)
    mean = float(np.mean(y))
    w = np.linalg.solve(A.T @ A + l2 * np.eye(A.shape[1]), A.T @ (y - mean))
    return mean + Ac @ w
