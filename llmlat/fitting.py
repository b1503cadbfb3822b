"""Estimate queueing models (servers c and rate mu, or batching parameters) from measured latency.

``fit(data, model=...)`` returns a :class:`FitResult` in the statsmodels results style. A
closed-loop sweep (``level_kind == "concurrency"``) is fitted with the finite-population form of
the station model (N clients, think time Z), an open-loop sweep (``"rate"``) with the open form.

Estimation:

- ``method="ml"``: maximum likelihood on every request's time, for the models that give a
  response-time distribution (``mm1``, ``mmc``, ``closed``), fitted with statsmodels'
  ``GenericLikelihoodModel``.
- ``method="wls"``: weighted least squares on one per-level statistic (mean, p50 or p95),
  weights from its standard error, as a Gaussian likelihood with an estimated scale (so AIC is
  defined); the only option for ``mgc``, ``batch`` and per-level tables.

Maximum likelihood on a level with many requests works on equal-count bins of its times
(:data:`_BINS`), so a million rows fit in about a second; the reported log-likelihood is that
of every request.

Response-time quantiles (``predict``, ``curve``, ``plan(p95=...)``) are exact for the M/M/c
family; for ``mgc`` they take gamma service with the measured CV plus an exponential wait with
Allen-Cunneen's mean (:func:`llmlat.queueing.mgc_response_quantile`), and for ``batch`` a
request's own output length (its measured distribution) times the step time, plus the mean
wait.

The integer parameter (servers ``c``, slot cap ``slots``) is profiled: the likelihood is
maximised over the continuous parameters at each integer and the best integer is kept; its
interval is the set of integers within the chi-square(1) cut of the maximum.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from scipy import optimize, stats
from statsmodels.base.model import GenericLikelihoodModel
from statsmodels.iolib.summary2 import Summary

from llmlat._aggregate import QUANTILES, Observed, latency_levels, observe, resample
from llmlat._models import MODELS, Model

__all__ = ["MAX_REFUSED", "FitResult", "Plan", "compare", "fit"]

#: Default of ``max_refused``: levels with a larger share of 429s or retries are not fitted.
MAX_REFUSED = 0.05

_LOG2PI = np.log(2 * np.pi)
_MODEL_NAMES = ("mm1", "mmc", "mgc", "closed", "batch")


class _Likelihood(GenericLikelihoodModel):
    """statsmodels wrapper around a per-observation log-likelihood closure."""

    def __init__(self, fn, nobs: int, names: list[str]):
        self._fn = fn
        super().__init__(np.zeros(nobs), extra_params_names=names)

    def loglikeobs(self, params):
        return self._fn(np.asarray(params))


@dataclass
class _Estimate:
    theta: np.ndarray  # log-scale continuous parameters (+ log scale for WLS)
    k: int | None
    llf: float
    profile: dict[int, float]
    p: dict
    cov: np.ndarray
    #: integer -> best continuous parameters there (log scale), where profiled
    thetas: dict[int, np.ndarray] = field(default_factory=dict)


class _Problem:
    """One model, one data set, one estimation method: the objective for each integer."""

    def __init__(self, model: Model, obs: Observed, method: str, stat: str, fixed: dict):
        self.model, self.method, self.stat, self.fixed = model, method, stat, fixed
        # overloaded open levels: their throughput is evidence of capacity, not their latency
        self.all, self.obs = obs, latency_levels(obs)
        flag = obs.levels["overloaded"].to_numpy(bool) if "overloaded" in obs.levels else None
        if flag is None or not flag.any():
            self.x_over = self.se_over = self.lam_over = np.empty(0)
        else:
            x = obs.levels["throughput_rps"].to_numpy(dtype=np.float64)[flag]
            n = np.fmax(obs.levels["n"].to_numpy(dtype=np.float64)[flag], 1.0)
            self.x_over, self.se_over = x, x / np.sqrt(n)
            self.lam_over = obs.levels["level"].to_numpy(dtype=np.float64)[flag]
        if len(self.obs.levels) == 0:
            raise ValueError(
                "level: every level is overloaded (throughput short of the offered rate); "
                "the capacity is about "
                f"{np.nanmax(self.x_over):.3g} req/s, but the service time needs levels below "
                "it: measure at lower rates"
            )
        obs = self.obs
        lv = obs.levels
        self.loads = lv["level"].to_numpy(dtype=np.float64)
        if method == "wls":
            y = lv[f"{stat}_s"].to_numpy(dtype=np.float64)
            se = lv[f"se_{stat}_s"].to_numpy(dtype=np.float64)
            good = np.isfinite(se) & (se > 0)
            rel = np.nanmedian(se[good] / y[good]) if good.any() else 0.05
            self.y = y
            self.se = np.where(good, np.maximum(se, 1e-9 * y), rel * y)
            if not np.isfinite(y).all():
                raise ValueError(f"stat: the per-level table has no {stat!r} for every level")
            if model.family == "batch" and obs.kind == "concurrency":
                # a level's latency scales with its own mean output length: compare every
                # level at the run's mean length (exact for a closed loop without think time)
                ratio = fixed["tokens"] / lv["tokens_mean"].to_numpy(dtype=np.float64)
                ratio = np.where(np.isfinite(ratio), ratio, 1.0)
                self.y, self.se = self.y * ratio, self.se * ratio
            self.se = np.concatenate([self.se, self.se_over])
        self.nobs = len(lv) if method == "wls" else int(sum(len(t) for t in obs.times))
        self.nobs += len(self.x_over)
        if method == "ml":
            self.binned, self.weights = _bin_times(obs)

    def _over_resid(self, p: dict) -> np.ndarray:
        """Standardised residuals of the overloaded levels' throughput: min(lambda, capacity)."""
        if not len(self.x_over):
            return self.x_over
        return (self.x_over - np.minimum(self.lam_over, self.model.capacity(p))) / self.se_over

    def _over_llobs(self, p: dict) -> np.ndarray:
        r = self._over_resid(p)
        return -0.5 * _LOG2PI - np.log(self.se_over) - 0.5 * r**2

    def params(self, theta: np.ndarray, k: int | None) -> dict:
        return self.model.params(theta[: len(self.model.free)], k, self.fixed)

    def _resid(self, theta: np.ndarray, k: int | None) -> np.ndarray:
        p = self.params(theta, k)
        think = p.get("level_think_s")
        pred = self.model.predict(p, self.loads, self.obs.kind, (self.stat,), think)
        r = (self.y - pred[f"{self.stat}_s"]) / self.se[: len(self.y)]
        r = np.concatenate([r, self._over_resid(p)])
        return np.where(np.isfinite(r), r, 1e6)

    def llf(self, theta: np.ndarray, k: int | None) -> float:
        """Log-likelihood, with the WLS scale concentrated out."""
        with np.errstate(all="ignore"):
            if self.method == "ml":
                p = self.params(theta, k)
                v = float(self.weights @ self.model.loglikeobs(p, self.binned))
                v += float(np.sum(self._over_llobs(p)))
            else:
                r = self._resid(theta, k)
                s2 = max(float(np.mean(r**2)), 1e-16)
                n = len(r)
                v = float(-0.5 * n * (_LOG2PI + 1 + np.log(s2)) - np.sum(np.log(self.se)))
        return v if np.isfinite(v) else -1e300

    def llobs_full(self, k: int | None):
        """Per-observation log-likelihood of all parameters (WLS: log scale last)."""
        if self.method == "ml":

            def ml(th):
                p = self.params(th, k)
                lat = self.weights * self.model.loglikeobs(p, self.binned)
                return np.concatenate([lat, self._over_llobs(p)])

            return ml

        def fn(th):
            s = np.exp(th[-1]) * self.se
            r = self._resid(th[:-1], k) * self.se
            return -0.5 * _LOG2PI - np.log(s) - 0.5 * (r / s) ** 2

        return fn

    def llf_exact(self, theta: np.ndarray, k: int | None) -> float:
        """Log-likelihood of every request (maximum likelihood works on binned times)."""
        if self.method != "ml":
            return float(np.sum(self.llobs_full(k)(theta)))
        info = np.repeat(_information(self.obs), [len(t) for t in self.obs.times])
        p = self.params(theta, k)
        lat = float(info @ self.model.loglikeobs(p, self.obs))
        return lat + float(np.sum(self._over_llobs(p)))

    def lower_bound(self, k: int | None) -> float:
        """Smallest log mu for which an open M/M/c is stable at every level."""
        if self.obs.kind != "rate" or self.model.family != "mmc":
            return -np.inf
        c = 1 if self.model.name == "mm1" else k
        return float(np.log(self.loads.max() / c)) + 1e-9

    def optimise(
        self,
        k: int | None,
        start: np.ndarray | None = None,
        width: float = 4.0,
        xatol: float = 1e-6,
    ):
        """Best continuous parameters at integer ``k``: from a warm start and the default one."""
        default = self.model.start(k, self.obs, self.fixed)
        if start is None:
            return self._optimise_from(k, default, 4.0, xatol)[:2]
        if self.method == "ml" and len(start) > 1:
            # a likelihood evaluation is dear on large data: optimise from the better start
            better = start if self.llf(start, k) >= self.llf(default, k) else default
            return self._optimise_from(k, better.copy(), width, xatol)[:2]
        theta, llf, edge = self._optimise_from(k, start.copy(), width, xatol)
        if len(start) == 1 and not edge:
            return theta, llf  # one dimension, optimum inside the bracket: nothing to gain
        other = self._optimise_from(k, default, 4.0, xatol)
        return (theta, llf) if llf >= other[1] else other[:2]

    def _bounds(self, k: int | None, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Box on the log-scale parameters: stability of an open queue, a sane think time."""
        lower, upper = np.full(n, -np.inf), np.full(n, np.inf)
        lower[0] = self.lower_bound(k)
        if "join_steps" in self.model.free:  # waiting for the next step: at most one step
            i = self.model.free.index("join_steps")
            lower[i], upper[i] = np.log(1e-3), 0.0
        if "think_s" in self.model.free:  # log Z runs off to -inf when the data have no think
            i = self.model.free.index("think_s")
            means = self.obs.levels["mean_s"]
            lower[i] = np.log(1e-4 * float(np.nanmin(means)))
            upper[i] = np.log(1e3 * float(np.nanmax(means)))
        return lower, upper

    def _optimise_from(self, k: int | None, theta0: np.ndarray, width: float, xatol: float):
        lo = self.lower_bound(k)
        lower, upper = self._bounds(k, len(theta0))
        theta0 = np.clip(theta0, lower + 1e-6, upper - 1e-6)
        edge = False
        if self.method == "wls":  # the concentrated Gaussian likelihood only needs sum r^2
            with np.errstate(all="ignore"):
                res = optimize.least_squares(
                    lambda th: self._resid(th, k),
                    theta0,
                    bounds=(lower, upper),
                    method="trf",
                    xtol=1e-10,
                    ftol=1e-12,
                    max_nfev=2000,
                )
            theta = res.x
        elif len(theta0) == 1:
            a = max(theta0[0] - width, lo)
            b = max(theta0[0] + width, a + 1.0)
            res = optimize.minimize_scalar(
                lambda x: -self.llf(np.array([x]), k),
                bounds=(a, b),
                method="bounded",
                options={"xatol": xatol},
            )
            theta = np.array([res.x])
            edge = min(res.x - a, b - res.x) < 1e-4
        else:
            # smooth likelihood: quasi-Newton with a numerical gradient, then Nelder-Mead only
            # if that stopped on a non-finite step
            box = list(zip(lower, upper, strict=True))
            res = optimize.minimize(
                lambda th: -self.llf(th, k), theta0, method="L-BFGS-B", bounds=box
            )
            if not res.success:
                res = optimize.minimize(
                    lambda th: -self.llf(th, k),
                    res.x,
                    method="Nelder-Mead",
                    bounds=box,
                    options={"xatol": 1e-7, "fatol": 1e-9, "maxiter": 4000, "adaptive": True},
                )
            theta = res.x
        return theta, self.llf(theta, k), edge


#: Maximum likelihood on a level with more requests than twice this works on this many bins of
#: equal counts, each at the mean of its times: the log density is smooth on a bin's width, so
#: the estimate moves by a small fraction of its standard error, and the cost no longer grows
#: with the number of rows (a million rows: seconds, not a minute).
_BINS = 2000


def _information(obs: Observed) -> np.ndarray:
    """Per level: the information of one request relative to an independent draw, 1 / vif.

    Consecutive requests share queue states, so n correlated requests carry the information
    of about n / vif independent ones (vif from batch means, :mod:`llmlat.stats`); weighting
    each request's log-likelihood by 1 / vif makes the curvature, the profile over the integer
    and every interval honest about it (a quasi-likelihood).
    """
    vif = obs.levels["vif"].to_numpy(dtype=np.float64) if "vif" in obs.levels else None
    if vif is None:
        return np.ones(len(obs.levels))
    return 1.0 / np.where(np.isfinite(vif), np.clip(vif, 1.0, None), 1.0)


def _bin_times(obs: Observed) -> tuple[Observed, np.ndarray]:
    times, weights = [], []
    for t, info in zip(obs.times, _information(obs), strict=True):
        if len(t) <= 2 * _BINS:
            times.append(t)
            weights.append(np.full(len(t), info))
            continue
        s = np.sort(t)
        edges = np.linspace(0, len(s), _BINS + 1).astype(np.int64)[:-1]
        counts = np.diff(np.append(edges, len(s)))
        times.append(np.add.reduceat(s, edges) / counts)
        weights.append(info * counts.astype(np.float64))
    return replace(obs, times=times), np.concatenate(weights)


def _profile(problem: _Problem, lo: int, hi: int, candidates=None) -> dict[int, tuple]:
    """Maximise over the continuous parameters at each integer; coarse-to-fine search."""
    cache: dict[int, tuple] = {}

    def ev(k: int) -> float:
        if k not in cache:
            near = min(cache, key=lambda j: abs(j - k)) if cache else None
            start = cache[near][0] if near is not None and abs(near - k) <= 2 else None
            cache[k] = problem.optimise(k, start)
        return cache[k][1]

    if candidates is not None:
        for k in candidates:
            ev(int(k))
        return cache
    grid = np.unique(np.round(np.geomspace(lo, hi, 24)).astype(int)) if hi > lo else [lo]
    for k in grid:
        ev(int(k))
    while True:
        keys = sorted(cache)
        best = max(keys, key=lambda k: cache[k][1])
        i = keys.index(best)
        a = keys[i - 1] if i > 0 else best
        b = keys[i + 1] if i + 1 < len(keys) else best
        todo = [k for k in range(a, b + 1) if k not in cache]
        if not todo:
            break
        step = max(1, len(todo) // 8)
        for k in todo[::step]:
            ev(k)
    # the edges of {k: llf(k) >= best - 3}, by bisection (the profile is unimodal), for the
    # interval on the integer
    best = max(cache, key=lambda k: cache[k][1])
    cut = cache[best][1] - 3.0
    for edge in (lo, hi):
        inside, outside = best, edge
        if ev(edge) >= cut:
            continue
        while abs(outside - inside) > 1:
            mid = (inside + outside) // 2
            inside, outside = (mid, outside) if ev(mid) >= cut else (inside, mid)
        ev(inside + (1 if edge > best else -1))
    return cache


def _walk(problem: _Problem, k0: int, lo: int, hi: int, starts: dict) -> dict[int, tuple]:
    """Hill-climb the integer from ``k0`` (used for maximum likelihood, where a fit is dear)."""
    cache: dict[int, tuple] = {}

    def ev(k: int) -> float:
        if k not in cache:  # a rough optimum first: enough to rank the integers
            cache[k] = problem.optimise(
                k, starts.get(k), width=0.3 if k in starts else 4.0, xatol=1e-3
            )
        return cache[k][1]

    for k in (k0 - 1, k0, k0 + 1):
        if lo <= k <= hi:
            ev(k)
    while True:
        best = max(cache, key=lambda k: cache[k][1])
        nxt = [k for k in (best - 1, best + 1) if lo <= k <= hi and k not in cache]
        if not nxt:
            break
        for k in nxt:
            ev(k)
    best = max(cache, key=lambda k: cache[k][1])
    cut = cache[best][1] - 3.0
    for direction in (-1, 1):
        k = best
        while lo <= k + direction <= hi and cache[k][1] >= cut:
            k += direction
            ev(k)
    edge = cache[best][1] - stats.chi2.ppf(0.95, 1) / 2
    for k, (theta, llf) in list(cache.items()):
        # polish where the rough value could change the interval on the integer; the best
        # one is polished by statsmodels
        if k != best and abs(llf - edge) < 5:
            cache[k] = problem.optimise(k, theta, width=0.01)
    return cache


def _estimate(problem: _Problem, candidates=None) -> _Estimate:
    model = problem.model
    if model.integer is None:
        theta, llf = problem.optimise(None)
        prof: dict[int, float] = {}
        k = None
    else:
        lo, hi = model.int_range(problem.obs)
        if problem.method == "ml" and candidates is None:
            # cheap per-level profile first, then a short walk on the full likelihood
            coarse_prob = _Problem(model, problem.all, "wls", "mean", problem.fixed)
            coarse = _profile(coarse_prob, lo, hi)
            k0 = max(coarse, key=lambda j: coarse[j][1])
            _check_saturation(model, problem.all, coarse, hi)
            cache = _walk(problem, k0, lo, hi, {j: v[0] for j, v in coarse.items()})
        else:
            cache = _profile(problem, lo, hi, candidates)
        k = max(cache, key=lambda j: cache[j][1])
        if candidates is None:
            _check_saturation(model, problem.all, cache, hi)
        theta, llf = cache[k]
        prof = {j: v[1] for j, v in sorted(cache.items())}
    theta_full, cov, llf = _statsmodels_fit(problem, theta, k, llf)
    if k is not None:
        prof[k] = max(prof[k], llf)
    thetas = {j: v[0] for j, v in cache.items()} if k is not None else {}
    return _Estimate(theta_full, k, llf, prof, problem.params(theta_full, k), cov, thetas)


def _check_saturation(model: Model, obs: Observed, cache: dict, hi: int) -> None:
    if model.family != "mmc" or hi not in cache:
        return
    best = max(cache, key=lambda j: cache[j][1])
    if cache[hi][1] >= cache[best][1] - 1.92:
        lv = obs.levels["level"]
        what = "concurrency" if obs.kind == "concurrency" else "request rate"
        raise ValueError(
            f"level: no saturation reached between {lv.min():g} and {lv.max():g} "
            f"({obs.kind}); the number of servers c is not bounded by the data. Measure at a "
            f"higher {what} (e.g. up to {4 * lv.max():g}) until throughput stops growing"
        )


def _statsmodels_fit(problem: _Problem, theta: np.ndarray, k, llf: float):
    """Polish with statsmodels and take the covariance from its Hessian."""
    names = [f"log_{n}" for n in problem.model.free]
    start = theta
    if problem.method == "wls":
        r = problem._resid(theta, k)
        start = np.append(theta, 0.5 * np.log(max(float(np.mean(r**2)), 1e-16)))
        names.append("log_scale")
    nobs = problem.nobs if problem.method == "wls" else len(problem.weights) + len(problem.x_over)
    mod = _Likelihood(problem.llobs_full(k), nobs, names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = mod.fit(start_params=start, method="bfgs", maxiter=100, disp=0)
        try:
            cov = np.asarray(res.cov_params()) if np.isfinite(res.llf) else None
        except ValueError:  # singular Hessian: a parameter the data do not pin down
            cov = None
    full = np.asarray(res.params)
    # the polish is unconstrained: a step out of the box (e.g. join_steps > 1 step) is refused,
    # and the curvature at the bounded optimum taken instead
    n = len(problem.model.free)
    lower, upper = problem._bounds(k, n)
    outside = np.any((full[:n] < lower - 1e-9) | (full[:n] > upper + 1e-9))
    if not np.isfinite(res.llf) or res.llf < llf - 1e-6 or outside:
        full, cov = start, _inverse_curvature(mod, start)
    if cov is None or not np.all(np.isfinite(np.diag(cov))):
        cov = np.full((len(full), len(full)), np.nan)
    return full, cov, problem.llf_exact(full, k)


def _inverse_curvature(mod: _Likelihood, theta: np.ndarray) -> np.ndarray | None:
    """Covariance from the numerical Hessian at ``theta``, or None when it is not definite."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            cov = np.linalg.inv(-np.asarray(mod.hessian(theta)))
        except np.linalg.LinAlgError:
            return None
    return cov if np.all(np.diag(cov) > 0) else None


def _fixed(model: Model, obs: Observed, think_s, tokens, gamma, cv_s) -> tuple[dict, list[str]]:
    notes = []
    z = think_s if think_s is not None else obs.think_s
    if obs.kind == "concurrency" and not np.isfinite(z):
        z = 0.0
        notes.append("think time unknown: assumed 0 s (pass think_s=...)")
    elif (
        obs.kind == "concurrency"
        and think_s is None
        and z < 0.01 * float(np.nanmin(obs.levels["mean_s"]))
    ):
        z = 0.0  # a client's bookkeeping between requests is not think time
    fixed: dict = {"think_s": float(z) if obs.kind == "concurrency" else 0.0}
    if obs.kind == "concurrency" and think_s is None:
        # each level with the client time measured at that level (a client that falls behind
        # at high concurrency keeps fewer requests in flight than N)
        per = obs.levels["think_s"].to_numpy(dtype=np.float64)
        small = per < 0.01 * obs.levels["mean_s"].to_numpy(dtype=np.float64)
        per = np.where(np.isfinite(per), np.where(small, 0.0, per), fixed["think_s"])
        if np.any(per > 0):
            fixed["level_think_s"] = per
    if "think_s" in model.free:
        fixed["think_s_start"] = fixed.pop("think_s")
        fixed.pop("level_think_s", None)
    if model.family == "batch":
        tok = tokens if tokens is not None else obs.tokens
        if not np.isfinite(tok):
            tok = 1.0
            notes.append("output tokens per request unknown: t0_s, t1_s are per-request times")
        fixed["tokens"] = float(tok)
        fixed["tokens_q"] = obs.tokens_q
        if not obs.tokens_q:
            notes.append("output-length spread unknown: quantiles assume equal lengths")
        if "gamma" not in model.free:
            fixed["gamma"] = 1.0 if gamma is None else float(gamma)
    if model.family == "mmc":
        given = cv_s is not None
        if not given:
            lv = obs.levels.iloc[0]
            cv_s = float(lv["std_s"] / lv["mean_s"])
            if not np.isfinite(cv_s) and model.name == "mgc":
                raise ValueError("cv_s: the data has no spread at the lightest level; pass cv_s")
        if np.isfinite(cv_s) and (
            model.name == "mgc" or given or _not_exponential(cv_s, obs.levels["n"].iloc[0])
        ):
            fixed["cv_s"] = float(cv_s)
            if not given:
                notes.append(
                    f"service-time CV {cv_s:.3g} taken from the lightest level; quantiles "
                    "use that service law (M/G/c), not the exponential one"
                )
    return fixed, notes


def _not_exponential(cv: float, n: float) -> bool:
    """Whether a measured service-time CV is clearly not the exponential law's 1.

    The sampling error of a CV near 1 over n draws is about 1 / sqrt(n); three of them, and
    never less than 0.15 (where the exact M/M/c quantiles are kept).
    """
    return bool(abs(cv - 1.0) > max(0.15, 3.0 / np.sqrt(max(float(n), 1.0))))


def _pick_model(name: str, obs: Observed, gamma) -> Model:
    if name not in _MODEL_NAMES:
        raise ValueError(
            f"model: expected one of {', '.join(_MODEL_NAMES)} or 'auto', got {name!r}"
        )
    if name == "batch":
        return MODELS["batch_linear" if len(obs.levels) >= 6 else "batch_few"]
    model = MODELS[name]
    if obs.kind not in model.kinds:
        hint = {"mgc": "use 'mmc' or 'closed' for a concurrency sweep", "closed": "use 'mmc'"}
        raise ValueError(
            f"model: {name!r} does not apply to a {obs.kind} sweep; {hint.get(name, '')}".rstrip()
        )
    return model


def _dropped_text(obs: Observed) -> str:
    """Name the levels left out and why, and the levels worth measuring instead."""
    if not obs.dropped:
        return ""
    kept = obs.levels["level"].to_numpy(dtype=np.float64)
    why = ", ".join(f"{v:g} ({r})" for v, r in sorted(obs.dropped.items()))
    above = [v for v in obs.dropped if v > kept.max()]
    top = min(above) if above else 4 * kept.max()
    add = np.unique(np.round(np.geomspace(kept.max(), top, 5)[1:-1], 2 if top < 10 else 0))
    add = [v for v in add if v not in kept and v not in obs.dropped]
    hint = f"; add levels between {kept.max():g} and {top:g}, e.g. " if add else ""
    return f" (left out: {why}{hint}{', '.join(f'{v:g}' for v in add)})"


def _check_levels(model: Model, obs: Observed, method: str) -> None:
    n = len(obs.levels)
    if n < 2:
        raise ValueError(
            f"level: only one load level ({obs.levels['level'].iloc[0]:g}) can be fitted"
            f"{_dropped_text(obs)}; a queueing model needs several. Measure at least 3 "
            "levels, from light load up to saturation"
        )
    if method == "wls":
        need = len(model.free) + 1 + (model.integer is not None)
        if n <= need:
            raise ValueError(
                f"level: {n} levels cannot identify {need} parameters of {model.name!r} by "
                f"least squares{_dropped_text(obs)}; measure at least {need + 1} levels"
            )


def _method(model: Model, obs: Observed, method: str, stat: str) -> str:
    if method not in ("auto", "ml", "wls"):
        raise ValueError(f"method: expected 'auto', 'ml' or 'wls', got {method!r}")
    can_ml = model.distribution and obs.times is not None
    if method == "ml" and not can_ml:
        why = "per-level table" if obs.times is None else f"model {model.name!r}"
        raise ValueError(f"method: maximum likelihood is not available for a {why}; use 'wls'")
    if method == "auto":
        return "ml" if can_ml else "wls"
    return method


def fit(
    data: object,
    model: str = "auto",
    metric: str = "latency",
    stat: str = "mean",
    *,
    method: str = "auto",
    level_kind: str | None = None,
    think_s: float | None = None,
    tokens: float | None = None,
    gamma: float | None = None,
    cv_s: float | None = None,
    max_refused: float | None = MAX_REFUSED,
) -> FitResult:
    """Fit a queueing model to measured latency at several loads.

    Parameters
    ----------
    data : SweepResult or pandas.DataFrame
        A sweep, a requests table with the record schema, or a per-level table (``level``,
        ``level_kind``, ``<metric>_mean_s``/``_p50_s``/``_p95_s``, optionally ``n``,
        ``<metric>_std_s``, ``throughput_rps``, ``completion_tokens_mean``, ``think_s``).
    model : {"auto", "mm1", "mmc", "mgc", "closed", "batch"}, default "auto"
        ``auto`` fits every applicable model by least squares, keeps the lowest AIC and refits
        it with the default method. ``closed`` is M/M/c with the think time estimated too.
    metric : {"latency", "ttft"}, default "latency"
        The time to model (``latency_s`` or ``ttft_s``).
    stat : {"mean", "p50", "p95"}, default "mean"
        Per-level statistic fitted by least squares and reported in the residuals (maximum
        likelihood uses every request either way).
    method : {"auto", "ml", "wls"}, default "auto"
        ``auto``: maximum likelihood when the model gives a distribution and the data has
        per-request rows, otherwise weighted least squares.
    level_kind : {"concurrency", "rate"}, optional
        Supplies or overrides the data's ``level_kind``.
    think_s : float, optional
        Think time between a client's requests in a closed loop (default: measured from the
        data's ``worker`` timings or metadata, else 0).
    tokens : float, optional
        Output tokens per request for ``batch`` (default: mean ``completion_tokens``, else 1).
    gamma : float, optional
        Fix the batching step-time exponent (1 = linear). By default it is estimated when there
        are at least 6 levels.
    cv_s : float, optional
        Service-time coefficient of variation for ``mgc`` (default: from the lightest level).
    max_refused : float or None, default 0.05
        Levels where more than this share of the measured requests was refused with 429 or
        needed a retry are left out, with a note: the models have no admission limit, and a
        retried request's latency holds its backoff. Only a requests table says this;
        None fits every level.

    Returns
    -------
    FitResult
        Parameters, uncertainty, information criteria, residuals, predictions and planning.

    Raises
    ------
    ValueError
        When the data cannot identify the model (one level, every request failed, no
        saturation), naming what to measure next, or for a bad argument.
    """
    if stat not in ("mean", "p50", "p95", "p99"):
        raise ValueError(f"stat: expected 'mean', 'p50', 'p95' or 'p99', got {stat!r}")
    obs = observe(data, metric, level_kind, _max_refused(max_refused))
    opts = {"think_s": think_s, "tokens": tokens, "gamma": gamma, "cv_s": cv_s}
    if model == "auto":
        res = _fit_auto(obs, stat, method, opts)
    else:
        res = _fit_obs(obs, model, stat, method, opts)
    res.data = data
    return res


def _max_refused(value: object) -> float | None:
    """Check ``max_refused``: a share in [0, 1], or None."""
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
        raise ValueError(f"max_refused: expected a share between 0 and 1, or None, got {value!r}")
    return float(value)


def _fit_auto(obs: Observed, stat: str, method: str, opts: dict) -> FitResult:
    """Rank every applicable model by least-squares AIC, refit the best with ``method``.

    Level means alone hardly tell c exponential servers from a batching server (both are flat,
    then linear in N). The requests do: at the lightest level a batch's latency is its output
    length times a step time, far less variable than an exponential service. So when the
    lightest level's CV is that of an exponential law, only the M/M/c family is ranked.
    """
    names = None
    if obs.times is not None and opts["cv_s"] is None:
        light = obs.levels.iloc[0]
        cv = float(light["std_s"] / light["mean_s"])
        if np.isfinite(cv) and not _not_exponential(cv, light["n"]):
            # "closed" estimates a think time the data did not measure; here they did
            skip = {"batch", "closed"} if np.isfinite(obs.think_s) else {"batch"}
            names = [m for m in _MODEL_NAMES if m not in skip and obs.kind in MODELS[m].kinds]
    table, fits = _compare(obs, names, stat, opts)
    ok = table[table["aic"].notna()]
    if ok.empty:
        if obs.times is None or method == "wls":
            raise ValueError(f"model: no model could be fitted: {table['error'].iloc[0]}")
        # too few levels to rank models by least squares; the likelihood of every request
        # may still identify c servers of rate mu
        try:
            res = _fit_obs(obs, "mmc", stat, method, opts)
        except ValueError as exc:
            raise ValueError(f"model: no model could be fitted: {exc}") from None
        res.notes.append(
            f"too few levels to compare models ({table['error'].iloc[0]}); fitted mmc by "
            "maximum likelihood on every request"
        )
        return res
    best = str(ok.index[0])
    same = _method(fits[best]._model, obs, method, stat) == "wls"
    res = fits[best] if same else _fit_obs(obs, best, stat, method, opts)
    close = [str(m) for m in ok.index[1:] if ok.loc[m, "delta_aic"] < 2]
    if close:
        res.notes.append(
            f"model chosen by AIC among {', '.join(ok.index)}, but {', '.join(close)} fit "
            "these data about as well (AIC within 2): indistinguishable here; measure more "
            "levels around the knee to tell them apart"
        )
    else:
        res.notes.append(f"model chosen by AIC among {', '.join(ok.index)}")
    if names is not None:
        res.notes.append(
            f"service-time CV {cv:.2g} at the lightest level, as for exponential service: "
            "batching (near-constant service per output length) not considered"
        )
    return res


def _fit_obs(obs: Observed, name: str, stat: str, method: str, opts: dict) -> FitResult:
    model = _pick_model(name, obs, opts["gamma"])
    meth = _method(model, obs, method, stat)
    fixed, notes = _fixed(model, obs, **opts)
    if method == "auto" and meth == "ml" and "cv_s" in fixed and model.name != "mgc":
        # the likelihood is that of exponential service: misspecified here; fit the means
        meth = "wls"
        notes.append("service not exponential: fitted by least squares on the level means")
    _check_levels(model, obs, meth)
    problem = _Problem(model, obs, meth, stat, fixed)
    res = FitResult(problem, _estimate(problem), list(obs.notes) + notes)
    if model.family != "batch" or len(obs.levels) < 7:
        return res
    if opts["gamma"] is not None:
        return res
    # the linear step time is the default form; a free exponent must earn its parameter
    curved = MODELS["batch"]
    fixed, notes = _fixed(curved, obs, **opts)
    problem = _Problem(curved, obs, meth, stat, fixed)
    alt = FitResult(problem, _estimate(problem), list(obs.notes) + notes)
    if alt.aic < res.aic - 2:
        alt.notes.append(
            f"step time grows as batch^{alt.params['gamma']:.3g}: the free exponent lowers AIC "
            f"by {res.aic - alt.aic:.3g} against the linear form"
        )
        return alt
    return res


def _compare(obs: Observed, models, stat: str, opts: dict) -> tuple[pd.DataFrame, dict]:
    names = list(models) if models is not None else list(_MODEL_NAMES)
    rows, fits = [], {}
    for name in names:
        row: dict = {"model": name}
        try:
            r = _fit_obs(obs, name, stat, "wls", opts)
        except ValueError as exc:
            if models is None and "does not apply" in str(exc):
                continue
            row["error"] = str(exc)
        else:
            fits[name] = r
            row.update(
                method=r.method,
                k=r.df_model,
                nobs=r.nobs,
                llf=r.llf,
                aic=r.aic,
                bic=r.bic,
                capacity_rps=r.capacity_rps,
                max_abs_resid_rel=float(np.nanmax(np.abs(r.levels["resid_rel"]))),
                params=", ".join(f"{k}={v:.4g}" for k, v in r.params.items()),
            )
        rows.append(row)
    cols = ["model", "method", "k", "nobs", "llf", "aic", "bic", "capacity_rps"]
    cols += ["max_abs_resid_rel", "params", "error"]
    table = pd.DataFrame(rows).reindex(columns=cols).set_index("model")
    table = table.sort_values("aic", na_position="last")
    table.insert(table.columns.get_loc("aic") + 1, "delta_aic", table["aic"] - table["aic"].min())
    w = np.exp(-0.5 * table["delta_aic"].to_numpy(dtype=np.float64))
    table["weight"] = w / np.nansum(w)
    return table, fits


def compare(
    data: object,
    models: Sequence[str] | None = None,
    metric: str = "latency",
    stat: str = "mean",
    **options: float | str | None,
) -> pd.DataFrame:
    """Fit several models to the same per-level statistic and rank them by AIC.

    Every model is fitted by weighted least squares on the same per-level statistic, so their
    likelihoods (and AICs) are comparable; a model that fails says why in ``error``.

    Parameters
    ----------
    data : SweepResult or pandas.DataFrame
        As for :func:`fit`.
    models : sequence of str, optional
        Models to compare (default: every model that applies to the sweep kind).
    metric : {"latency", "ttft"}, default "latency"
        The time to model.
    stat : {"mean", "p50", "p95"}, default "mean"
        Per-level statistic to fit.
    **options
        ``level_kind``, ``think_s``, ``tokens``, ``gamma``, ``cv_s``, ``max_refused`` as for
        :func:`fit`.

    Returns
    -------
    pandas.DataFrame
        One row per model (index ``model``), best first: ``method``, ``k`` (parameters),
        ``nobs``, ``llf``, ``aic``, ``delta_aic``, ``bic``, ``capacity_rps``,
        ``max_abs_resid_rel``, ``params``, ``error`` and the Akaike ``weight``.
    """
    bad = set(options) - {"level_kind", "think_s", "tokens", "gamma", "cv_s", "max_refused"}
    if bad:
        raise ValueError(f"options: unknown option(s) {', '.join(sorted(bad))}")
    refused = _max_refused(options.pop("max_refused", MAX_REFUSED))
    obs = observe(data, metric, options.pop("level_kind", None), refused)
    opts = {k: options.get(k) for k in ("think_s", "tokens", "gamma", "cv_s")}
    return _compare(obs, models, stat, opts)[0]


def _min_or_none(values) -> int | None:
    """Smallest of the values that are not None (None if all are)."""
    known = [v for v in values if v is not None]
    return min(known) if known else None


@dataclass
class Plan:
    """The answer of :meth:`FitResult.plan` (all rates in requests/s).

    Every bound is taken on the conservative end of the fit's uncertainty: the worst of the
    parameter sets inside the 95% intervals (one-sided), not the point estimate, so the
    recommended load meets the target unless the model itself is wrong.

    Attributes
    ----------
    target : str
        The constraint, e.g. ``"latency p95 <= 2 s"`` (empty if only limits were given).
    feasible : bool
        Whether some load meets the target. When not, the rates and concurrencies are NaN /
        None and ``note`` says what the nearest feasible target is.
    max_rate_rps : float
        Largest open-loop arrival rate meeting the target (NaN when none does).
    utilization_at_max_rate : float
        ``max_rate_rps`` over the fitted capacity.
    max_concurrency : int or None
        Largest closed-loop concurrency meeting the target (with the fitted think time); None
        when none does.
    utilization_at_max_concurrency : float
        Throughput at ``max_concurrency`` over the capacity.
    limit_rate_rps : float
        Rate allowed by the RPM/TPM limits (``inf`` if none given).
    limit_concurrency : int or None
        Largest concurrency whose throughput stays under ``limit_rate_rps``; None when no
        concurrency reaches it (the limit does not bind a closed loop).
    utilization_cap_rate_rps : float
        ``max_utilization`` times the capacity (``inf`` if not given).
    rate_rps : float
        The recommended rate: the smallest of the bounds above.
    concurrency : int or None
        The recommended concurrency: the smallest of the concurrency bounds (None: no bound).
    binding : str
        Which bound sets ``rate_rps``: ``"latency target"``, ``"rpm limit"``, ``"tpm limit"``
        or ``"utilization cap"`` (``"none"`` when the target is infeasible).
    capacity_rps : float
        The fitted capacity (point estimate).
    nearest_target_s : float
        The smallest value of the target statistic the fit allows (a single request on an
        idle station, on the conservative end): any target above it is feasible.
    note : str
        Plain-language caveats: infeasible targets, the conservative end used.
    """

    target: str
    feasible: bool
    max_rate_rps: float
    utilization_at_max_rate: float
    max_concurrency: int | None
    utilization_at_max_concurrency: float
    limit_rate_rps: float
    limit_concurrency: int | None
    utilization_cap_rate_rps: float
    rate_rps: float
    concurrency: int | None
    binding: str
    capacity_rps: float
    nearest_target_s: float
    note: str = ""

    def to_frame(self) -> pd.DataFrame:
        """Return the plan as a one-column table.

        Returns
        -------
        pandas.DataFrame
            Field name -> value.
        """
        return pd.DataFrame({"value": pd.Series(self.__dict__, dtype=object)})

    def describe(self) -> str:
        """Say the plan in one sentence (what the demo and the report print).

        Returns
        -------
        str
            The recommended load and its binding bound, or why no load meets the target.
        """
        goal = self.target or "the limits given"
        if not self.feasible:
            return f"Plan for {goal}: {self.note}."
        n = (
            f"at most {self.concurrency} requests in flight"
            if self.concurrency is not None
            else "no concurrency bound (the station never gets that slow)"
        )
        return (
            f"Plan for {goal}: {n}, or {self.rate_rps:.3g} requests/s open loop "
            f"({self.rate_rps / self.capacity_rps:.0%} of the fitted capacity "
            f"{self.capacity_rps:.3g} requests/s); bound: {self.binding}; {self.note}."
        )

    def __repr__(self) -> str:
        return f"Plan({self.target or 'limits only'})\n{self.to_frame().to_string()}"


@dataclass
class FitResult:
    """A fitted queueing model (statsmodels-style results).

    Attributes
    ----------
    model : str
        Model name.
    kind : str
        ``"concurrency"`` (closed form fitted) or ``"rate"`` (open form).
    metric, stat, method : str
        What was fitted and how (``"ml"`` or ``"wls"``).
    params : pandas.Series
        Estimates on the natural scale: ``c`` and ``mu`` (requests/s per server) for the M/M/c
        family (plus ``think_s`` for ``closed``); ``slots``, ``t0_s``, ``t1_s`` (and ``gamma``)
        for ``batch``.
    bse : pandas.Series
        Standard errors (delta method from the log scale; NaN for integers).
    fixed : pandas.Series
        Values held fixed (measured think time, tokens per request, service CV).
    llf, aic, bic : float
        Log-likelihood and information criteria (integers count as parameters).
    nobs : int
        Requests (``ml``) or levels (``wls``).
    df_model : int
        Number of estimated parameters.
    levels : pandas.DataFrame
        Per level: observed and predicted statistic and throughput, residuals, utilization.
    capacity_rps : float
        Implied capacity (c * mu, or batching throughput at the slot cap).
    profile : pandas.Series
        Profile log-likelihood over the integer parameter.
    notes : list of str
        Caveats found while fitting.
    data : SweepResult or pandas.DataFrame
        The data passed to :func:`fit` (a reference, not a copy), for :meth:`plot`.
    """

    _problem: _Problem = field(repr=False)
    _est: _Estimate = field(repr=False)
    notes: list[str] = field(default_factory=list)
    data: object = field(default=None, repr=False)

    def __post_init__(self) -> None:
        pr, est = self._problem, self._est
        m = pr.model
        self.model, self.kind, self.metric = m.name, pr.obs.kind, pr.obs.metric
        self.stat, self.method = pr.stat, pr.method
        names = ([m.integer] if m.integer else []) + list(m.free)
        self.params = pd.Series({n: est.p[n] for n in names}, dtype=np.float64)
        nfree = len(m.free)
        se_log = np.sqrt(np.diag(est.cov))[:nfree]
        bse = {m.integer: np.nan} if m.integer else {}
        bse.update({n: est.p[n] * s for n, s in zip(m.free, se_log, strict=True)})
        self.bse = pd.Series(bse, dtype=np.float64)
        keep = ("think_s", "tokens", "gamma", "cv_s")
        self.fixed = pd.Series(
            {k: v for k, v in est.p.items() if k in keep and k not in names}, dtype=np.float64
        )
        self.scale = float(np.exp(est.theta[-1])) if pr.method == "wls" else np.nan
        self.llf, self.nobs = est.llf, pr.nobs
        self.df_model = len(est.theta) + (m.integer is not None)
        self.aic = -2 * self.llf + 2 * self.df_model
        self.bic = -2 * self.llf + np.log(self.nobs) * self.df_model
        self.capacity_rps = m.capacity(est.p)
        self.profile = pd.Series(est.profile, name="llf", dtype=np.float64)
        self.profile.index.name = m.integer
        self._lower_bound = False
        if m.family == "batch":
            hi = m.int_range(pr.obs)[1]
            prof = self.profile
            if hi in prof.index and prof[hi] >= prof.max() - stats.chi2.ppf(0.95, 1) / 2:
                self._lower_bound = True
                low = int(prof.index[prof >= prof.max() - stats.chi2.ppf(0.95, 1) / 2].min())
                self.notes.append(
                    f"slot cap not identified: the data only say slots >= {low} (no saturation "
                    f"up to {hi:g}); measure at higher load to find it"
                )
        self.levels = self._levels_table()

    # -- per-level view -------------------------------------------------------------------
    def _levels_table(self) -> pd.DataFrame:
        obs = self._problem.all.levels
        s = self.stat
        p = self._est.p
        pred = self._model.predict(
            p, obs["level"].to_numpy(), self.kind, (s,), p.get("level_think_s")
        )
        out = pd.DataFrame({"level": obs["level"], "n": obs["n"]})
        out["throughput_rps"] = obs["throughput_rps"]
        out["throughput_pred_rps"] = pred["throughput_rps"]
        out[f"{s}_s"] = obs[f"{s}_s"]
        out[f"{s}_pred_s"] = pred[f"{s}_s"]
        out["resid_s"] = out[f"{s}_s"] - out[f"{s}_pred_s"]
        out["resid_rel"] = out["resid_s"] / out[f"{s}_pred_s"]
        if "overloaded" in obs:  # fitted by its throughput only
            out["overloaded"] = obs["overloaded"].to_numpy(bool)
        x = out["throughput_rps"].where(out["throughput_rps"].notna(), out["throughput_pred_rps"])
        out["utilization"] = x / self.capacity_rps
        return out.set_index("level")

    @property
    def _model(self) -> Model:
        return self._problem.model

    @property
    def resid(self) -> pd.Series:
        """Observed minus predicted statistic per level, seconds."""
        return self.levels["resid_s"]

    @property
    def utilization(self) -> pd.Series:
        """Measured throughput of each level over the fitted capacity."""
        return self.levels["utilization"]

    @property
    def fittedvalues(self) -> pd.Series:
        """Predicted statistic (``stat``) per level, seconds."""
        return self.levels[f"{self.stat}_pred_s"]

    def cov_params(self) -> pd.DataFrame:
        """Covariance of the continuous parameters on the natural scale (delta method).

        The integer parameter has no covariance (it is profiled, see :meth:`conf_int`); its
        row and column are NaN.

        Returns
        -------
        pandas.DataFrame
            Indexed by parameter, like :attr:`params`.
        """
        m = self._model
        nfree = len(m.free)
        scale = np.array([self._est.p[n] for n in m.free])
        cov = self._est.cov[:nfree, :nfree] * np.outer(scale, scale)
        out = pd.DataFrame(np.nan, index=self.params.index, columns=self.params.index)
        out.loc[list(m.free), list(m.free)] = cov
        return out

    # -- uncertainty ----------------------------------------------------------------------
    def conf_int(
        self, alpha: float = 0.05, method: str = "auto", n_boot: int = 100, seed: int = 0
    ) -> pd.DataFrame:
        """Confidence intervals of the parameters.

        Parameters
        ----------
        alpha : float, default 0.05
            1 - confidence level.
        method : {"auto", "asymptotic", "bootstrap"}, default "auto"
            ``asymptotic`` (and ``auto``, the one :meth:`summary` shows): Wald intervals on
            the log scale from the correlation-weighted likelihood (so they stay positive),
            widened to span the optimum at every integer inside the integer's interval, which
            is the profile-likelihood set. ``bootstrap``: a moving-block bootstrap of each
            level's requests in order, refit, percentiles.
        n_boot : int, default 100
            Bootstrap replicates.
        seed : int, default 0
            Seed of the bootstrap.

        Returns
        -------
        pandas.DataFrame
            Columns ``lower`` and ``upper``, one row per parameter.
        """
        if not 0 < alpha < 1:
            raise ValueError("alpha: must be in (0, 1)")
        if method not in ("auto", "asymptotic", "bootstrap"):
            raise ValueError(
                f"method: expected 'auto', 'asymptotic' or 'bootstrap', got {method!r}"
            )
        if method == "bootstrap":
            return self._bootstrap(alpha, n_boot, seed)
        z = stats.norm.ppf(1 - alpha / 2)
        m = self._model
        nfree = len(m.free)
        th = self._est.theta[:nfree]
        se = np.sqrt(np.diag(self._est.cov))[:nfree]
        # a bounded parameter's interval stays within its bounds (join_steps in [0.001, 1])
        lo, hi = self._problem._bounds(self._est.k, len(self._est.theta))
        rows = {}
        centres = [th]
        if m.integer:
            rows[m.integer] = self._integer_interval(alpha)
            # the joint set projected: each continuous interval spans its optimum at every
            # integer inside the integer's interval (c and mu trade off against each other)
            a, b = rows[m.integer]
            centres += [v[:nfree] for j, v in self._est.thetas.items() if a <= j <= b]
        low, high = np.min(centres, axis=0), np.max(centres, axis=0)
        with np.errstate(over="ignore"):  # an unidentified parameter: (0, inf)
            for i, name in enumerate(m.free):
                rows[name] = (
                    np.exp(max(low[i] - z * se[i], lo[i])),
                    np.exp(min(high[i] + z * se[i], hi[i])),
                )
        return pd.DataFrame(rows, index=["lower", "upper"]).T

    def _integer_interval(self, alpha: float) -> tuple[float, float]:
        prof = self.profile
        cut = prof.max() - stats.chi2.ppf(1 - alpha, 1) / 2
        inside = prof.index[prof >= cut]
        lo, hi = float(inside.min()), float(inside.max())
        if self._lower_bound:
            hi = np.inf
        return lo, hi

    def _bootstrap(self, alpha: float, n_boot: int, seed: int) -> pd.DataFrame:
        obs = self._problem.all
        if obs.times is None:
            raise ValueError("method: bootstrap needs per-request data, not a per-level table")
        rng = np.random.default_rng(seed)
        plausible = self.profile.index[self.profile >= self.profile.max() - 10].to_numpy()
        if len(plausible) > 9:  # keep refits cheap: the best and 8 spread over the rest
            best = int(self.profile.idxmax())
            spread = plausible[np.round(np.linspace(0, len(plausible) - 1, 8)).astype(int)]
            plausible = np.unique(np.append(spread, best))
        draws = []
        for _ in range(n_boot):
            pr = self._problem
            sub = _Problem(pr.model, resample(obs, rng), pr.method, pr.stat, pr.fixed)
            try:
                est = _estimate(sub, plausible.tolist() if len(plausible) else None)
            except ValueError:
                continue
            draws.append([est.p[n] for n in self.params.index])
        if len(draws) < 10:
            raise ValueError("n_boot: too few bootstrap fits succeeded; use method='asymptotic'")
        arr = np.asarray(draws, dtype=np.float64)
        lo, hi = np.quantile(arr, [alpha / 2, 1 - alpha / 2], axis=0)
        return pd.DataFrame({"lower": lo, "upper": hi}, index=self.params.index)

    # -- prediction -----------------------------------------------------------------------
    def predict(
        self,
        load: float | Sequence[float] | np.ndarray,
        kind: str | None = None,
        stats: Sequence[str] = ("mean", "p50", "p95", "p99"),
    ) -> pd.DataFrame:
        """Predict throughput, utilization and response-time statistics at given loads.

        Parameters
        ----------
        load : float or array_like
            Concurrency levels (closed form) or arrival rates in requests/s (open form).
        kind : {"concurrency", "rate"}, optional
            Which form to evaluate (default: the kind of the fitted sweep).
        stats : sequence of str, default ("mean", "p50", "p95", "p99")
            Statistics to compute (approximate quantiles for ``mgc`` and ``batch``, see the
            module docstring).

        Returns
        -------
        pandas.DataFrame
            ``load``, ``throughput_rps``, ``utilization`` and ``<metric>_<stat>_s`` columns;
            times are ``inf`` past saturation of an open system.
        """
        kind = kind or self.kind
        if kind not in ("concurrency", "rate"):
            raise ValueError(f"kind: expected 'concurrency' or 'rate', got {kind!r}")
        bad = [s for s in stats if s not in QUANTILES]
        if bad:
            raise ValueError(f"stats: unknown statistic(s) {bad}")
        x = np.atleast_1d(np.asarray(load, dtype=np.float64))
        if kind == "concurrency" and (np.any(x < 1) or np.any(x % 1 != 0)):
            raise ValueError("load: concurrency must be a positive integer")
        if kind == "rate" and np.any(x < 0):
            raise ValueError("load: rate must be >= 0")
        pred = self._model.predict(self._est.p, x, kind, tuple(stats))
        out = pd.DataFrame({"load": x, "throughput_rps": pred["throughput_rps"]})
        out["utilization"] = out["throughput_rps"] / self.capacity_rps
        if kind == "rate":
            out["utilization"] = x / self.capacity_rps
        for s in stats:
            out[f"{self.metric}_{s}_s"] = pred[f"{s}_s"]
        return out

    def curve(
        self,
        loads: Sequence[float] | np.ndarray | None = None,
        kind: str | None = None,
        n: int = 60,
        stats: Sequence[str] = ("mean", "p50", "p95"),
    ) -> pd.DataFrame:
        """Tabulate the fitted curve over a load grid, ready to plot.

        Parameters
        ----------
        loads : array_like, optional
            The grid (default: ``n`` points from light load to twice the largest concurrency,
            or to 98% of capacity for an open system, plus the measured levels).
        kind : {"concurrency", "rate"}, optional
            Which form (default: the fitted sweep's kind).
        n : int, default 60
            Grid size when ``loads`` is not given.
        stats : sequence of str, default ("mean", "p50", "p95")
            Statistics to tabulate.

        Returns
        -------
        pandas.DataFrame
            As :meth:`predict`, sorted by load, plus ``model``.
        """
        kind = kind or self.kind
        if loads is None:
            lv = self.levels.index.to_numpy(dtype=np.float64)
            if kind == "concurrency":
                top = 2 * lv.max() if self.kind == "concurrency" else 2 * self.capacity_rps
                grid = np.round(np.geomspace(1, max(top, 2), n))
            else:
                grid = np.linspace(0.0, 0.98 * self.capacity_rps, n)[1:]
            if kind == self.kind:
                grid = np.concatenate([grid, lv[lv < self.capacity_rps] if kind == "rate" else lv])
            loads = np.unique(grid)
        out = self.predict(loads, kind, stats).sort_values("load", ignore_index=True)
        out["model"] = self.model
        return out

    # -- planning -------------------------------------------------------------------------
    def plan(
        self,
        *,
        p50: float | None = None,
        p95: float | None = None,
        p99: float | None = None,
        mean: float | None = None,
        rpm: float | None = None,
        tpm: float | None = None,
        tokens_per_request: float | None = None,
        max_utilization: float | None = None,
    ) -> Plan:
        """Find the largest load that keeps a latency statistic under a target.

        The bounds hold for every parameter set on the conservative end of the 95% intervals
        (:meth:`_pessimistic`), so an estimate a little off does not push the load past the
        knee.

        Parameters
        ----------
        p50, p95, p99, mean : float, optional
            The target in seconds for one statistic of the fitted metric (give at most one).
        rpm : float, optional
            Requests-per-minute limit of the provider.
        tpm : float, optional
            Tokens-per-minute limit (needs ``tokens_per_request`` or token counts in the data).
        tokens_per_request : float, optional
            Tokens one request counts against ``tpm`` (default: mean prompt + completion).
        max_utilization : float, optional
            Keep the rate under this share of capacity, e.g. 0.7 ("lambda under 70% of c mu").

        Returns
        -------
        Plan
            The bounds, the utilization there, which bound binds, and whether the target can
            be met at all.
        """
        asked = {"p50": p50, "p95": p95, "p99": p99, "mean": mean}
        targets = {k: float(v) for k, v in asked.items() if v is not None}
        if len(targets) > 1:
            raise ValueError(f"target: give one of p50/p95/p99/mean, got {sorted(targets)}")
        if not targets and rpm is None and tpm is None and max_utilization is None:
            raise ValueError("target: give p95=..., mean=..., rpm=..., tpm=... or max_utilization")
        for name, v in {**targets, "rpm": rpm, "tpm": tpm}.items():
            if v is not None and not v > 0:
                raise ValueError(f"{name}: must be positive")
        if max_utilization is not None and not 0 < max_utilization <= 1:
            raise ValueError("max_utilization: must be in (0, 1]")
        cap = self.capacity_rps
        worst = self._pessimistic()
        cap_low = min(self._model.capacity(p) for p in worst)
        limits = {}
        if rpm is not None:
            limits["rpm limit"] = rpm / 60.0
        if tpm is not None:
            tok = tokens_per_request
            if tok is None:
                obs = self._problem.all
                tok = np.nansum([obs.tokens, obs.prompt_tokens])
                if not tok > 0:
                    raise ValueError(
                        "tokens_per_request: needed with tpm (the data has no token counts)"
                    )
            limits["tpm limit"] = tpm / 60.0 / tok
        limit = min(limits.values(), default=np.inf)
        ucap = cap_low * max_utilization if max_utilization is not None else np.inf
        target, notes = "", ["bounds on the conservative end of the 95% intervals"]
        max_rate, max_n, nearest, feasible = cap_low, None, np.nan, True
        if targets:
            ((stat, value),) = targets.items()
            target = f"{self.metric} {stat} <= {value:g} s"
            nearest = max(
                self._stat_at(p, 1e-9 * self._model.capacity(p), "rate", stat) for p in worst
            )
            max_rate = min(self._max_rate(p, stat, value) for p in worst)
            ns = [
                self._largest_n(lambda n, p=p: self._stat_at(p, n, "concurrency", stat) <= value)
                for p in worst
            ]
            known = [n for n in ns if n is not None]
            max_n = min(known) if len(known) == len(ns) else None
            if not max_rate > 0:
                feasible = False
                max_rate, max_n = np.nan, None
                notes.insert(
                    0,
                    f"no load meets {target}: even a single request on an idle station takes "
                    f"{nearest:.3g} s at the {stat} (conservative end); the nearest feasible "
                    f"target is {stat} <= {nearest:.3g} s",
                )
        limit_n = (
            _min_or_none(self._max_concurrency_for_rate(p, limit) for p in worst)
            if np.isfinite(limit)
            else None
        )
        bounds = {"latency target": max_rate, **limits, "utilization cap": ucap}
        if not feasible:
            binding, rate = "none", np.nan
        else:
            binding = min(bounds, key=lambda k: bounds[k])
            rate = bounds[binding]
            if not np.isfinite(rate):  # only limits that bind nothing
                binding, rate = "capacity", cap_low
        conc = [max_n, limit_n]
        if np.isfinite(ucap):
            conc.append(_min_or_none(self._max_concurrency_for_rate(p, ucap) for p in worst))
        n_rec = _min_or_none(conc) if feasible else None
        if limit_n is None and np.isfinite(limit):
            notes.append("no concurrency reaches the rate limit: it does not bind a closed loop")
        x_at_n = self._throughput_at(self._est.p, max_n) if max_n is not None else np.nan
        return Plan(
            target=target,
            feasible=feasible,
            max_rate_rps=float(max_rate),
            utilization_at_max_rate=float(max_rate / cap),
            max_concurrency=max_n,
            utilization_at_max_concurrency=float(x_at_n / cap),
            limit_rate_rps=float(limit),
            limit_concurrency=limit_n,
            utilization_cap_rate_rps=float(ucap),
            rate_rps=float(rate),
            concurrency=n_rec,
            binding=binding,
            capacity_rps=float(cap),
            nearest_target_s=float(nearest),
            note="; ".join(notes),
        )

    def _pessimistic(self, confidence: float = 0.95) -> list[dict]:
        """Parameter sets on the slow end of the one-sided intervals, one per plausible integer.

        For each integer inside its interval (with the continuous optimum there), each
        continuous parameter moves ``z`` standard errors in the direction that slows the
        station (mu down; t0, t1, gamma, join_steps up); the plan must hold for all of them.
        """
        m, est = self._model, self._est
        nfree = len(m.free)
        se = np.sqrt(np.diag(est.cov))[:nfree]
        se = np.where(np.isfinite(se), se, 0.0)
        z = stats.norm.ppf(confidence)
        slower = np.array([-1.0 if name == "mu" else 1.0 for name in m.free])
        slower[[i for i, n in enumerate(m.free) if n == "think_s"]] = 0.0
        lo, hi = self._problem._bounds(est.k, len(est.theta))
        centres = {est.k: est.theta[:nfree]}
        if m.integer:
            a, b = self._integer_interval(1 - confidence)
            centres.update({j: v[:nfree] for j, v in est.thetas.items() if a <= j <= b})
        out = []
        for k, th in centres.items():
            shifted = np.clip(th + z * slower * se, lo[:nfree], hi[:nfree])
            out.append(self._problem.params(np.append(shifted, est.theta[nfree:]), k))
        return out

    def _stat_at(self, p: dict, load: float, kind: str, stat: str) -> float:
        pred = self._model.predict(p, np.array([load]), kind, (stat,))
        return float(pred[f"{stat}_s"][0])

    def _max_rate(self, p: dict, stat: str, value: float) -> float:
        cap = self._model.capacity(p)
        if self._stat_at(p, 1e-9 * cap, "rate", stat) > value:
            return 0.0
        lo, hi = 0.0, cap * (1 - 1e-9)
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if self._stat_at(p, mid, "rate", stat) <= value else (lo, mid)
        return lo

    @staticmethod
    def _largest_n(ok) -> int | None:
        """Largest n >= 1 with ok(n) (0 if none); None when no bound shows by 2**22."""
        if not ok(1):
            return 0
        hi = 2
        while ok(hi):
            if hi >= 2**22:
                return None
            hi *= 2
        lo = hi // 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if ok(mid) else (lo, mid)
        return lo

    def _throughput_at(self, p: dict, n: int) -> float:
        if n < 1:
            return 0.0
        pred = self._model.predict(p, np.array([n]), "concurrency", ())
        return float(pred["throughput_rps"][0])

    def _max_concurrency_for_rate(self, p: dict, rate: float) -> int | None:
        return self._largest_n(lambda n: self._throughput_at(p, n) <= rate * (1 + 1e-12))

    # -- display --------------------------------------------------------------------------
    def plot(self, kind: str = "latency", **kwargs: object) -> object:
        """Draw the fitted model over the data it was fitted to (see :mod:`llmlat.plot`).

        Parameters
        ----------
        kind : {"latency", "utilization", "throughput", "overview"}, default "latency"
            Which figure of :mod:`llmlat.plot`.
        **kwargs
            Passed to that function.

        Returns
        -------
        matplotlib.figure.Figure
            The figure.
        """
        from llmlat import plot

        figures = ("latency", "utilization", "throughput", "overview")
        if kind not in figures:
            raise ValueError(f"kind: expected one of {', '.join(figures)}, got {kind!r}")
        if self.data is None:
            raise ValueError("data: this result was not made by fit(), nothing to draw")
        if kind == "latency":
            kwargs.setdefault("metric", f"{self.metric}_s")
        return getattr(plot, kind)(self.data, fit=self, **kwargs)

    def summary(self, alpha: float = 0.05) -> Summary:
        """Statsmodels-style summary of the fit.

        Parameters
        ----------
        alpha : float, default 0.05
            Level of the confidence intervals shown.

        Returns
        -------
        statsmodels.iolib.summary2.Summary
            Printable (``print(res.summary())``) and rendered as HTML in Jupyter.
        """
        form = "closed (N clients)" if self.kind == "concurrency" else "open (Poisson arrivals)"
        info = {
            "Model:": self.model,
            "Form:": form,
            "Method:": "maximum likelihood" if self.method == "ml" else "weighted least squares",
            "Metric / stat:": f"{self.metric} / {self.stat}",
            "Levels:": str(len(self.levels)),
            "No. observations:": str(self.nobs),
            "Log-likelihood:": f"{self.llf:.4g}",
            "AIC:": f"{self.aic:.4g}",
            "BIC:": f"{self.bic:.4g}",
            "Capacity (req/s):": f"{self.capacity_rps:.4g}",
        }
        for k, v in self.fixed.items():
            info[f"{k} (fixed):"] = f"{v:.4g}"
        ci = self.conf_int(alpha)
        table = pd.DataFrame(
            {
                "coef": self.params,
                "std err": self.bse,
                f"[{alpha / 2:g}": ci["lower"],
                f"{1 - alpha / 2:g}]": ci["upper"],
            }
        )
        smry = Summary()
        smry.add_title(f"llmlat queueing fit: {self.model}")
        smry.add_dict(info)
        smry.add_df(table, float_format="%.4g")
        lv = self.levels[
            [
                "n",
                "throughput_rps",
                "throughput_pred_rps",
                f"{self.stat}_s",
                f"{self.stat}_pred_s",
                "resid_rel",
                "utilization",
            ]
        ].reset_index()
        smry.add_df(lv, float_format="%.4g")
        for note in self.notes:
            smry.add_text(f"Note: {note}")
        return smry

    def _repr_html_(self) -> str:
        return self.summary().as_html()

    def __repr__(self) -> str:
        ps = ", ".join(f"{k}={v:.4g}" for k, v in self.params.items())
        return f"<FitResult {self.model} ({self.kind}, {self.method}): {ps}; aic={self.aic:.4g}>"
