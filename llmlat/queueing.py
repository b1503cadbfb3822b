"""Closed-form queueing models, vectorised over load and numerically stable.

Conventions: ``lam`` is the arrival rate (requests/s), ``mu`` the service rate of one server
(requests/s), ``c`` the number of servers, ``a = lam / mu`` the offered load in Erlangs and
``rho = a / c`` the utilization. Every function broadcasts its array arguments with numpy; a
model evaluated past saturation (``rho >= 1``) returns ``inf`` waits rather than raising, so a
curve over a load grid can be drawn up to the wall.

The numerics return numpy arrays: the private cores (``_mmc``, ``_closed``, ``_batch_open``, ...)
give a dict of named arrays, which the fitting code uses directly; only the public functions that
tabulate several metrics (:func:`mmc`, :func:`closed_mmc`, :func:`batch_open`, ...) wrap it in a
:class:`pandas.DataFrame`, at the edge.

Erlang B and C use the recursion on ``1 / B`` (no factorials, no cancellation), exact for any
number of servers; the closed system (N clients, think time Z) and the continuous-batching
server are birth-death chains solved in log space, so they stay finite for thousands of clients.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple, TypeAlias

import numpy as np
import pandas as pd
from scipy import linalg, optimize, special

__all__ = [
    "batch_closed",
    "batch_open",
    "batch_service_rate",
    "closed_arrival_distribution",
    "closed_mgc_response_quantile",
    "closed_mmc",
    "closed_mmc_response_cdf",
    "closed_mmc_response_quantile",
    "closed_queue",
    "erlang_b",
    "erlang_c",
    "hypoexp_cdf",
    "hypoexp_logpdf",
    "hypoexp_mix_logpdf",
    "hypoexp_pdf",
    "invert_cdf",
    "littles_law",
    "mgc_allen_cunneen",
    "mgc_response_quantile",
    "mm1",
    "mmc",
    "mmc_response_cdf",
    "mmc_response_pdf",
    "mmc_response_quantile",
    "mmck",
]

ArrayLike: TypeAlias = float | int | np.ndarray | pd.Series | list
#: Named arrays of one model over a load grid (a DataFrame's columns, before the edge).
Columns: TypeAlias = dict[str, np.ndarray]


def _arr(x: ArrayLike) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def erlang_b(c: ArrayLike, a: ArrayLike) -> np.ndarray:
    """Erlang B blocking probability of an M/M/c/c loss system.

    Uses the recursion ``1/B(k) = 1 + (k / a) / B(k-1)``, which only adds positive terms and so
    is exact to rounding for any ``c`` (tested to 10,000 servers); an underflow to 0 is the
    correct value in float64.

    Parameters
    ----------
    c : int or array_like of int
        Number of servers (>= 0).
    a : float or array_like
        Offered load in Erlangs (``lam / mu``, >= 0).

    Returns
    -------
    numpy.ndarray
        Blocking probability, broadcast over ``c`` and ``a``.

    Raises
    ------
    ValueError
        If ``c`` is negative or not integral, or ``a`` is negative.
    """
    c_arr = np.asarray(c)
    a_arr = _arr(a)
    if np.any(c_arr < 0) or np.any(np.asarray(c_arr, dtype=np.float64) % 1 != 0):
        raise ValueError("c: number of servers must be a non-negative integer")
    if np.any(a_arr < 0):
        raise ValueError("a: offered load must be >= 0")
    if c_arr.ndim == 0 and a_arr.ndim == 0:
        return np.asarray(_erlang_b_scalar(int(c_arr), float(a_arr)))
    c_arr, a_arr = np.broadcast_arrays(c_arr.astype(np.int64), a_arr)
    inv = np.ones(a_arr.shape)
    out = np.ones(a_arr.shape)
    c_max = int(c_arr.max(initial=0))
    single = bool(np.all(c_arr == c_max))
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        ratio = 1.0 / a_arr
        for k in range(1, c_max + 1):
            inv *= k * ratio
            inv += 1.0
            if not single:
                hit = c_arr == k
                if hit.any():
                    out = np.where(hit, 1.0 / inv, out)
        if single:
            out = 1.0 / inv
    # a = 0 means no traffic: no blocking unless there are no servers at all
    out = np.where((a_arr == 0) & (c_arr > 0), 0.0, out)
    return out


def _erlang_b_scalar(c: int, a: float) -> float:
    if a == 0:
        return 0.0 if c > 0 else 1.0
    inv = 1.0
    for k in range(1, c + 1):
        inv = 1.0 + inv * k / a
        if inv > 1e300:  # B has underflowed to 0
            return 0.0
    return 1.0 / inv


def erlang_c(c: ArrayLike, a: ArrayLike) -> np.ndarray:
    """Erlang C: probability that an arrival waits in an M/M/c queue.

    Parameters
    ----------
    c : int or array_like of int
        Number of servers (>= 1).
    a : float or array_like
        Offered load in Erlangs (``lam / mu``).

    Returns
    -------
    numpy.ndarray
        ``P(wait > 0)``; 1 at or past saturation (``a >= c``).
    """
    b = erlang_b(c, a)
    rho = _arr(a) / np.asarray(c, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = b / (1.0 - rho * (1.0 - b))
    return np.where(rho >= 1.0, 1.0, np.clip(out, 0.0, 1.0))


def _expm1_ratio(x: np.ndarray) -> np.ndarray:
    """``(1 - exp(-x)) / x`` with the limit 1 at 0 (stable for either sign)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = -np.expm1(-x) / x
    return np.where(np.abs(x) < 1e-12, 1.0, out)


def mmc(lam: ArrayLike, mu: float, c: int = 1) -> pd.DataFrame:
    """Steady-state metrics of the M/M/c queue over a load grid.

    Parameters
    ----------
    lam : float or array_like
        Arrival rate in requests/s.
    mu : float
        Service rate of one server in requests/s.
    c : int, default 1
        Number of servers.

    Returns
    -------
    pandas.DataFrame
        One row per ``lam``: ``lam``, ``utilization``, ``p_wait``, ``wait_mean_s``,
        ``response_mean_s``, ``queue_mean`` (Lq) and ``in_system_mean`` (L). Waits are ``inf``
        at or past saturation.
    """
    _check_rates(mu=mu, c=c)
    return pd.DataFrame(_mmc(np.atleast_1d(_arr(lam)), mu, c))


def _mmc(lam: np.ndarray, mu: float, c: int, cv_s: float = 1.0) -> Columns:
    """Compute the columns of :func:`mmc` (Allen-Cunneen's wait for ``cv_s != 1``), unvalidated."""
    a = lam / mu
    rho = a / c
    pw = erlang_c(c, a)
    with np.errstate(divide="ignore"):
        wq = np.where(rho < 1.0, pw / np.maximum(c * mu - lam, 0.0), np.inf)
    wq = wq * (1.0 + cv_s**2) / 2.0
    w = wq + 1.0 / mu
    return {
        "lam": lam,
        "utilization": rho,
        "p_wait": pw,
        "wait_mean_s": wq,
        "response_mean_s": w,
        "queue_mean": lam * wq,
        "in_system_mean": lam * w,
    }


def mm1(lam: ArrayLike, mu: float) -> pd.DataFrame:
    """Steady-state metrics of the M/M/1 queue (closed forms).

    Parameters
    ----------
    lam : float or array_like
        Arrival rate in requests/s.
    mu : float
        Service rate in requests/s.

    Returns
    -------
    pandas.DataFrame
        Same columns as :func:`mmc`; here ``p_wait = rho``, ``W = 1 / (mu - lam)``.
    """
    _check_rates(mu=mu, c=1)
    return pd.DataFrame(_mm1(np.atleast_1d(_arr(lam)), mu))


def _mm1(lam: np.ndarray, mu: float) -> Columns:
    """Compute the columns of :func:`mm1` in closed form, unvalidated."""
    rho = lam / mu
    with np.errstate(divide="ignore"):
        w = np.where(rho < 1.0, 1.0 / np.maximum(mu - lam, 0.0), np.inf)
    return {
        "lam": lam,
        "utilization": rho,
        "p_wait": np.minimum(rho, 1.0),
        "wait_mean_s": w - 1.0 / mu,
        "response_mean_s": w,
        "queue_mean": np.where(rho < 1.0, rho**2 / np.maximum(1.0 - rho, 1e-300), np.inf),
        "in_system_mean": lam * w,
    }


def mmc_response_cdf(t: ArrayLike, lam: ArrayLike, mu: float, c: int = 1) -> np.ndarray:
    """CDF of the M/M/c (FCFS) response time, wait plus service.

    The wait is 0 with probability ``1 - C`` and otherwise exponential with rate
    ``theta = c mu - lam``; adding the exponential service gives a closed form, evaluated with
    ``expm1`` so it stays exact when ``theta`` is close to ``mu``.

    Parameters
    ----------
    t : float or array_like
        Response time in seconds.
    lam : float or array_like
        Arrival rate in requests/s (broadcast with ``t``).
    mu : float
        Service rate of one server.
    c : int, default 1
        Number of servers.

    Returns
    -------
    numpy.ndarray
        ``P(T <= t)``; 0 everywhere past saturation.
    """
    t_arr, lam_arr = np.broadcast_arrays(_arr(t), _arr(lam))
    return _mmc_cdf(t_arr, lam_arr, mu, c, erlang_c(c, lam_arr / mu))


def _mmc_cdf(t_arr: np.ndarray, lam_arr: np.ndarray, mu: float, c: int, pw: np.ndarray):
    theta = c * mu - lam_arr
    tt = np.maximum(t_arr, 0.0)
    # P(Exp(theta) + Exp(mu) > t) = e^{-s t} (1 + s t (1 - e^{-d t}) / (d t)) with
    # s = min(theta, mu), d = |theta - mu|: no overflow or cancellation for either order
    s = np.minimum(theta, mu)
    tail_wait = np.exp(-s * tt) * (1.0 + s * tt * _expm1_ratio(np.abs(theta - mu) * tt))
    cdf = 1.0 - (1.0 - pw) * np.exp(-mu * tt) - pw * tail_wait
    cdf = np.where(theta > 0, np.clip(cdf, 0.0, 1.0), 0.0)
    return np.where(t_arr < 0, 0.0, cdf)


def mmc_response_pdf(t: ArrayLike, lam: ArrayLike, mu: float, c: int = 1) -> np.ndarray:
    """Density of the M/M/c (FCFS) response time (see :func:`mmc_response_cdf`).

    Parameters
    ----------
    t : float or array_like
        Response time in seconds.
    lam : float or array_like
        Arrival rate in requests/s.
    mu : float
        Service rate of one server.
    c : int, default 1
        Number of servers.

    Returns
    -------
    numpy.ndarray
        The density; 0 past saturation and for ``t < 0``.
    """
    t_arr, lam_arr = np.broadcast_arrays(_arr(t), _arr(lam))
    pw = erlang_c(c, lam_arr / mu)
    theta = c * mu - lam_arr
    tt = np.maximum(t_arr, 0.0)
    s = np.minimum(theta, mu)
    conv = theta * mu * tt * np.exp(-s * tt) * _expm1_ratio(np.abs(theta - mu) * tt)
    pdf = (1.0 - pw) * mu * np.exp(-mu * tt) + pw * conv
    return np.where((theta > 0) & (t_arr >= 0), pdf, 0.0)


def invert_cdf(
    cdf: Callable[[np.ndarray], np.ndarray], q: ArrayLike, scale: ArrayLike, iters: int = 80
) -> np.ndarray:
    """Invert a vectorised CDF by bracketing and bisection.

    Parameters
    ----------
    cdf : callable
        Maps an array of times (the broadcast shape of ``q`` and ``scale``) to probabilities.
    q : float or array_like
        Probabilities in (0, 1).
    scale : float or array_like
        A typical time (e.g. the mean); the bracket starts at ``[0, scale]`` and doubles.
    iters : int, default 80
        Bisection steps (80 halvings reach float64 resolution).

    Returns
    -------
    numpy.ndarray
        The ``q``-quantiles; ``inf`` where the CDF never reaches ``q``.
    """
    q_arr, s_arr = np.broadcast_arrays(_arr(q), _arr(scale))
    if np.any((q_arr <= 0) | (q_arr >= 1)):
        raise ValueError("q: quantile probabilities must be in (0, 1)")
    lo = np.zeros(q_arr.shape)
    hi = np.where(np.isfinite(s_arr) & (s_arr > 0), s_arr, 1.0).copy()
    for _ in range(200):
        below = cdf(hi) < q_arr
        if not below.any():
            break
        hi = np.where(below, hi * 2.0, hi)
    never = cdf(hi) < q_arr
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        below = cdf(mid) < q_arr
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return np.where(never, np.inf, 0.5 * (lo + hi))


def mmc_response_quantile(q: ArrayLike, lam: ArrayLike, mu: float, c: int = 1) -> np.ndarray:
    """Quantiles of the M/M/c response time, inverting :func:`mmc_response_cdf` numerically.

    Parameters
    ----------
    q : float or array_like
        Probabilities, e.g. 0.5, 0.95, 0.99 (broadcast with ``lam``).
    lam : float or array_like
        Arrival rate in requests/s.
    mu : float
        Service rate of one server.
    c : int, default 1
        Number of servers.

    Returns
    -------
    numpy.ndarray
        Response-time quantiles in seconds; ``inf`` past saturation.
    """
    q_arr, lam_arr = np.broadcast_arrays(_arr(q), _arr(lam))
    scale = mmc(lam_arr.ravel(), mu, c)["response_mean_s"].to_numpy().reshape(lam_arr.shape)
    pw = erlang_c(c, lam_arr / mu)
    return invert_cdf(lambda t: _mmc_cdf(t, lam_arr, mu, c, pw), q_arr, scale)


def mgc_allen_cunneen(lam: ArrayLike, mu: float, c: int = 1, cv_s: float = 1.0) -> pd.DataFrame:
    """M/G/c mean waits by the Allen-Cunneen approximation (Poisson arrivals).

    ``Wq = C(c, a) / (c mu - lam) * (1 + cv_s**2) / 2``: exact for M/M/c (``cv_s = 1``) and
    for M/G/1 (Pollaczek-Khinchine).

    Parameters
    ----------
    lam : float or array_like
        Arrival rate in requests/s.
    mu : float
        Service rate of one server (1 / mean service time).
    c : int, default 1
        Number of servers.
    cv_s : float, default 1.0
        Coefficient of variation of the service time (std / mean).

    Returns
    -------
    pandas.DataFrame
        Same columns as :func:`mmc`.
    """
    if cv_s < 0:
        raise ValueError("cv_s: coefficient of variation must be >= 0")
    _check_rates(mu=mu, c=c)
    return pd.DataFrame(_mmc(np.atleast_1d(_arr(lam)), mu, c, cv_s))


def mgc_response_quantile(
    q: ArrayLike, lam: ArrayLike, mu: float, c: int = 1, cv_s: float = 1.0
) -> np.ndarray:
    """Approximate M/G/c response-time quantiles: gamma service plus an interpolated wait.

    The service time is gamma with mean ``1 / mu`` and coefficient of variation ``cv_s``, and
    independent of the request's wait (FCFS). One server: the exact M/G/1 wait at any CV
    (:func:`_mg1_wait`). Several, ``cv_s <= 1``: the wait interpolates in ``cv_s**2`` between
    the exact M/D/c wait (constant service ``1 / mu``; Crommelin's law,
    :func:`_mdc_wait_tail`) and the exact M/M/c wait, as Cosmetatos and Kimura interpolate the
    mean: the probability of waiting linearly, and the wait given that at each tail
    probability (:func:`_mgc_interpolated_wait`); exact at CV 0 and 1. Several, ``cv_s >
    1``: a request waits with probability ``C(c, a)`` (Erlang C), then for an exponential time
    with Allen-Cunneen's mean. Against 5-10 x 10^6-request simulations
    (``benchmarks/bench_mgc.py``, c in {1, 4, 16, 64}, loads 50-90%): within 1% at the p95
    and 1.4% at the p99 for CV 0.05-1, and 1.5% and 1.8% for CV 1.5-2 (at 95% load the
    simulation's own error is 1.5-4%). Erlang C with an exponential wait at every CV (the
    law until issue 10u) read 16 servers at CV 0.05 1.7-2.6% low and one server's 4-8% high,
    and one server at CV 2 3.7% (p95) and 6.4% (p99) low.

    Parameters
    ----------
    q : float or array_like
        Probabilities in (0, 1) (broadcast with ``lam``).
    lam : float or array_like
        Arrival rate in requests/s.
    mu : float
        Service rate of one server (1 / mean service time).
    c : int, default 1
        Number of servers.
    cv_s : float, default 1.0
        Coefficient of variation of the service time (std / mean), > 0.

    Returns
    -------
    numpy.ndarray
        Response-time quantiles in seconds; ``inf`` past saturation.
    """
    if not cv_s > 0:
        raise ValueError("cv_s: coefficient of variation must be > 0")
    q_arr, lam_arr = np.broadcast_arrays(_arr(q), _arr(lam))
    stable = lam_arr < c * mu
    if cv_s > 1.0 and c > 1:
        pw = np.where(stable, erlang_c(c, np.where(stable, lam_arr, 0.0) / mu), 1.0)
        # conditional wait ~ Exp(theta), theta = P(wait) / Wq
        theta = np.where(stable, 2.0 * (c * mu - lam_arr) / (1.0 + cv_s**2), 1.0)
        out = _service_plus_wait_quantile(q_arr, mu, cv_s, pw, theta)
        return np.where(stable, out, np.inf)
    out = np.full(q_arr.shape, np.inf)
    if stable.any():
        out[stable] = _mgc_interpolated_quantile(q_arr[stable], lam_arr[stable], mu, c, cv_s)
    return out


#: Gauss-Legendre nodes and weights on (-1/2, 1/2), for averages over the service law's
#: probability.
_NODES = tuple(0.5 * v for v in np.polynomial.legendre.leggauss(256))


def _mgc_interpolated_quantile(
    q: np.ndarray, lam: np.ndarray, mu: float, c: int, cv_s: float
) -> np.ndarray:
    """Quantiles of :func:`mgc_response_quantile`'s law at stable rates (c = 1 or CV <= 1).

    ``q`` and ``lam`` are 1-d, one probability and rate per element. Each rate's wait is
    tabulated once; the inversion runs on every element at once (a curve of 200 rates took
    200 inversions of about 20 steps each).
    """
    shape = 1.0 / cv_s**2
    rates, which = np.unique(lam, return_inverse=True)
    order = np.argsort(which, kind="stable")  # each rate's elements one slice
    bounds = np.searchsorted(which[order], np.arange(len(rates) + 1))
    if c == 1:
        laws = [_mg1_wait(float(r), mu, cv_s) for r in rates]
    else:
        laws = [_mgc_interpolated_wait(float(r), mu, c, cv_s**2) for r in rates]
    pw = np.array([law[0] for law in laws])[which[order], None]
    scale = 1.0 / mu + np.array([law[2] for law in laws])[which[order]]
    nodes, weights = _NODES
    service = special.gammaincinv(shape, nodes + 0.5) / (shape * mu)

    def cdf(t: np.ndarray) -> np.ndarray:
        # E_S[P(0 < W <= t - S)]; the wait's atom at 0 goes with the service law, exactly
        x = t[:, None] - service
        tail = np.empty(x.shape)
        for (_, log_tail, _), a, b in zip(laws, bounds[:-1], bounds[1:], strict=True):
            tail[a:b] = log_tail(x[a:b])
        waited = np.where(x > 0, -pw * np.expm1(tail), 0.0) @ weights
        return (1.0 - pw[:, 0]) * special.gammainc(shape, shape * mu * t) + waited

    out = np.empty(len(q))
    out[order] = _invert_smooth_cdf(cdf, q[order], scale)
    return out


def _mgc_interpolated_wait(
    lam: float, mu: float, c: int, w: float
) -> tuple[float, Callable[[np.ndarray], np.ndarray], float]:
    """Tabulate the wait of :func:`mgc_response_quantile`, ``w = cv_s**2 <= 1``, at one rate.

    A request waits with probability ``(1 - w) P_D + w C`` (M/D/c's and Erlang C's); given
    that, its wait's quantile function is ``(1 - w)`` the M/D/c one plus ``w`` the M/M/c one
    (exponential, rate ``c mu - lam``), at each conditional tail probability: comonotone, so
    the tail decays at the harmonic interpolation of the two rates, ``1 / rate = (1 - w) /
    rate_D + w / rate_M``. Near saturation ``rate_D ~ 2 rate_M``, so that is the heavy-traffic
    ``rate_M 2 / (1 + cv^2)``, where mixing the two CDFs keeps the M/M/c tail and read the p99
    of one server at CV 0.5 13-15% high.

    Returns
    -------
    tuple
        ``(p_wait, log_tail, mean_wait)``: ``log_tail(x)`` is ``log P(W > x | W > 0)`` for
        ``x > 0`` in seconds, tabulated on the M/D/c conditional tail and extended at its
        asymptotic rate; the mean wait in seconds.
    """
    a, theta = lam / mu, c * mu - lam
    queue, r = _mdc_queue(a, c)
    decay = -c * np.log(r)  # P(W_D > x D) ~ r^(c x): the M/D/c tail's rate per D
    # dense near 0, where the M/D/c law bends at each D; its far tail is exponential
    x = (1.0 + 36.0 / decay) * np.linspace(0.0, 1.0, 513) ** 2
    tail = _mdc_wait_tail(x, a, c, queue, r)
    wait_d, wait_m = tail[0], float(erlang_c(c, a))
    keep = np.concatenate([[True], np.diff(tail) < 0]) & (tail > 0) | (x == 0)
    with np.errstate(divide="ignore", invalid="ignore"):  # no wait at all: the atom alone
        level = np.nan_to_num(np.log(tail[keep] / wait_d))
    waits = (1.0 - w) * x[keep] / mu - w * level / theta
    rate = 1.0 / ((1.0 - w) / (decay * mu) + w / theta)

    def log_tail(t: np.ndarray) -> np.ndarray:
        return np.interp(t, waits, level) - rate * np.clip(t - waits[-1], 0.0, None)

    # Little: E[W_D | W_D > 0] = E[Y] / lam / P_D
    mean_d = float(_mdc_queue_mean(a, c)) / lam / wait_d if wait_d > 0 else 0.0
    pw = (1.0 - w) * wait_d + w * wait_m
    return pw, log_tail, pw * ((1.0 - w) * mean_d + w / theta)


def _mg1_wait(
    lam: float, mu: float, cv_s: float
) -> tuple[float, Callable[[np.ndarray], np.ndarray], float]:
    """Tabulate the exact M/G/1 FCFS wait, gamma service (mean ``1 / mu``, CV ``cv_s``).

    Pollaczek-Khinchine as a compound geometric sum (Benes): the wait is the sum of
    ``N ~ Geometric`` (``P(N = n) = (1 - rho) rho^n``) independent equilibrium residual
    services, density ``mu (1 - B(r))``; on a grid that is one FFT, ``(1 - rho) / (1 - rho
    R(w))``. The grid reaches where the tail, decaying at the rate ``eta`` that solves
    ``lam (E[exp(eta S)] - 1) = eta``, is below 1e-13 of the probability of waiting.

    Returns
    -------
    tuple
        As :func:`_mgc_interpolated_wait`: ``(p_wait, log_tail, mean_wait)``.
    """
    rho, shape = lam / mu, 1.0 / cv_s**2
    rate = shape * mu
    if rho <= 0.0:  # nobody waits
        return 0.0, lambda t: np.zeros(np.shape(t)), 0.0

    # eta = rate (1 - e^-y): lam (E[exp(eta S)] - 1) - eta, increasing past its root in y
    def excess(y: float) -> float:
        with np.errstate(over="ignore"):  # inf past the root is still past it
            return lam * np.expm1(shape * y) + rate * np.expm1(-y)

    low = top = 1.0  # excess < 0 between 0 and its root, > 0 past it
    while excess(top) <= 0.0:
        low, top = top, 2.0 * top
    while excess(low) >= 0.0:
        low *= 0.5
    eta = -rate * np.expm1(-optimize.brentq(excess, low, top))
    far = 30.0 / eta + 8.0 / rate
    n = int(min(1 << 14, max(1 << 10, np.ceil(far * mu * 32.0))))
    h = far / n

    def residual_cdf(t: np.ndarray) -> np.ndarray:  # mu E[min(S, t)]
        return mu * t * special.gammaincc(shape, rate * t) + special.gammainc(shape + 1.0, rate * t)

    # each grid point holds the residual's mass within half a step of it
    edges = residual_cdf((np.arange(n) + 0.5) * h)
    mass = np.diff(edges, prepend=0.0)
    spec = np.fft.rfft(mass, 2 * n)
    wait = np.fft.irfft((1.0 - rho) / (1.0 - rho * spec), 2 * n)[:n]
    tail = 1.0 - np.cumsum(wait)  # P(W > (i + 1/2) h)
    x = (np.arange(n) + 0.5) * h
    keep = tail > 1e-13 * rho
    level = np.log(np.clip(tail[keep], 1e-300, None) / rho)
    x = np.concatenate([[0.0], x[keep]])
    level = np.concatenate([[0.0], level])

    def log_tail(t: np.ndarray) -> np.ndarray:
        return np.interp(t, x, level) - eta * np.clip(t - x[-1], 0.0, None)

    return rho, log_tail, rho * (1.0 + cv_s**2) / (2.0 * (mu - lam))


def _invert_smooth_cdf(
    cdf: Callable[[np.ndarray], np.ndarray],
    q: np.ndarray,
    scale: float | np.ndarray,
    rtol: float = 1e-11,
) -> np.ndarray:
    """:func:`invert_cdf` for a continuous CDF with ``cdf(0) < q``, by the Illinois method.

    Regula falsi that halves the stale end's value keeps the bracket and converges
    superlinearly: about 10 evaluations where bisection takes 80, which matters where a plan
    inverts the law at hundreds of loads. ``scale`` is the first upper end tried (one for
    all, or one per element), doubled until the CDF reaches ``q``. ``inf`` where it never does.
    """
    lo, hi = np.zeros(q.shape), np.broadcast_to(np.asarray(scale, np.float64), q.shape).copy()
    f_lo, f_hi = -q.astype(np.float64), cdf(hi) - q
    for _ in range(200):
        if not (f_hi < 0).any():
            break
        lo, f_lo = np.where(f_hi < 0, hi, lo), np.where(f_hi < 0, f_hi, f_lo)
        hi = np.where(f_hi < 0, 2.0 * hi, hi)
        f_hi = cdf(hi) - q
    never = f_hi < 0
    kept = np.zeros(q.shape)  # -1: lo moved last, +1: hi moved last
    for _ in range(100):
        if not (hi - lo > rtol * hi).any():
            break
        with np.errstate(invalid="ignore", divide="ignore"):
            x = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        x = np.where(np.isfinite(x) & (x > lo) & (x < hi), x, 0.5 * (lo + hi))
        f_x = cdf(x) - q
        left = f_x < 0
        f_hi = np.where(left & (kept < 0), 0.5 * f_hi, f_hi)
        f_lo = np.where(~left & (kept > 0), 0.5 * f_lo, f_lo)
        lo, f_lo = np.where(left, x, lo), np.where(left, f_x, f_lo)
        hi, f_hi = np.where(left, hi, x), np.where(left, f_hi, f_x)
        kept = np.where(left, -1.0, 1.0)
    return np.where(never, np.inf, 0.5 * (lo + hi))


def _poisson_pmf(i: ArrayLike, mean: ArrayLike) -> np.ndarray:
    """P(Poisson(mean) = i), broadcast; a mean of 0 puts everything on 0."""
    return np.exp(special.xlogy(i, mean) - mean - special.gammaln(np.asarray(i) + 1.0))


@functools.lru_cache(maxsize=256)
def _mdc_queue(a: float, c: int, states: int | None = None) -> tuple[np.ndarray, float]:
    """Stationary distribution of the number waiting in an M/D/c queue.

    With constant service D and c servers, everyone in service at time t has left by t + D and
    everyone waiting has started, so the number in the system moves as
    ``N(t + D) = max(N(t) - c, 0) + A`` with ``A ~ Poisson(a)`` the arrivals of one D
    (Crommelin 1932): the number waiting, ``Y = max(N - c, 0)``, as
    ``Y' = max(Y + A - c, 0)``, at any instant t (a time average, so also what a Poisson
    arrival sees). That chain is solved exactly on ``0..states`` (a banded linear system) with
    its geometric tail beyond, ``P(Y = y) ~ r^y``, where ``1 / r`` is the root above 1 of
    ``z^c = exp(a (z - 1))`` (the other roots outside the unit disk are larger, so their
    terms have died out by ``states``; the default ``max(4 c, 64)`` agrees with 4,000 solved
    states to 1e-12).

    Parameters
    ----------
    a : float
        Offered load ``lam D`` in Erlangs, ``0 <= a < c``.
    c : int
        Servers.
    states : int, optional
        Largest number waiting solved for explicitly (default ``max(4 c, 64)``).

    Returns
    -------
    tuple
        ``(queue, r)``: ``queue[y] = P(Y = y)`` for ``y = 0..states`` and the tail's ratio, so
        ``P(Y = y) = queue[-1] r^(y - states)`` beyond.
    """
    if a <= 0:
        return np.ones(1), 0.0
    n = c + 64 if states is None else states
    spread = 8.0 * np.sqrt(a) + 12.0
    m_lo, m_hi = max(int(a - spread), 0), int(a + spread)
    m = np.arange(m_lo, m_hi + 1)
    arrivals = _poisson_pmf(m, a)
    # the tail's decay: x = -log r > 0 solves a (e^x - 1) = c x
    lo = np.log(c / a)
    hi = 2.0 * lo
    while a * np.expm1(hi) < c * hi:
        hi *= 2.0
    x = optimize.brentq(lambda v: a * np.expm1(v) - c * v, lo, hi, xtol=1e-300)
    r = float(np.exp(-x))
    # balance of y' = 1..n: P(y') = sum_y P(y) P(A = y' - y + c), with P(y > n) = P(n) r^(y - n);
    # row 0 pins P(0) = 1 (its balance is implied by the others) and the sum normalises
    upper, lower = c - m_lo, max(m_hi - c, 0)  # band: column - row in [-lower, upper]
    d = np.arange(upper, -lower - 1, -1)[:, None]  # the band's rows, top down
    m = c - d
    coef = np.where((m >= m_lo) & (m <= m_hi), arrivals[np.clip(m - m_lo, 0, m_hi - m_lo)], 0.0)
    row = np.arange(n + 1)[None, :] - d  # the equation (y') of each band entry
    band = np.where((row >= 1) & (row <= n), (d == 0) - coef, 0.0)
    row = np.arange(1, n + 1)[None, :]
    past = row + d > n  # P(y) for y > n: P(n) r^(y - n), folded into column n
    folded = np.where(past, -coef * r ** np.where(past, row + d - n, 0), 0.0).sum(axis=0)
    band[upper + row[0, -upper:] - n, n] += folded[-upper:] if upper else 0.0
    band[upper, 0] = 1.0
    rhs = np.zeros(n + 1)
    rhs[0] = 1.0
    p = linalg.solve_banded((lower, upper), band, rhs, check_finite=False)
    p /= p.sum() + p[-1] * r / (1.0 - r)
    return p, r


def _mgc_wait_mean(lam: np.ndarray, mu: float, c: int, cv_s: float) -> np.ndarray:
    """Mean wait of the open M/G/c model per arrival rate, ``inf`` at or past capacity.

    For ``cv_s <= 1`` the interpolation ``(1 - cv_s**2) Wq(M/D/c) + cv_s**2 Wq(M/M/c)`` of
    the exact means (Cosmetatos; Kimura), the mean of :func:`mgc_response_quantile`'s wait
    to 0.2% of the response time; Allen-Cunneen's ``(1 + cv_s**2) / 2 Wq(M/M/c)`` reads
    near-constant service's wait 2-40% short (16 servers at 95% to 30% load): the mean response
    time of 4 servers at CV 0.05 and 70-90% load 1.0-1.2% below 10^7-request simulations, this
    one 0.1-0.2% (``benchmarks/bench_mgc.py``). For ``cv_s > 1``, Allen-Cunneen's.
    """
    lam = np.asarray(lam, dtype=np.float64)
    stable = lam < c * mu
    a = np.where(stable, lam, 0.0) / mu
    with np.errstate(divide="ignore", invalid="ignore"):
        mmc = np.where(stable, erlang_c(c, a) / (c * mu - lam), np.inf)
        if cv_s > 1.0:
            return mmc * (1.0 + cv_s**2) / 2.0
        mdc = np.where(stable, _mdc_queue_mean(a, c) / lam, np.inf)
    w = cv_s**2
    return np.where(lam > 0, (1.0 - w) * np.nan_to_num(mdc) + w * mmc, 0.0)


def _mdc_queue_mean(a: ArrayLike, c: int) -> np.ndarray:
    """Mean number waiting in an M/D/c queue (a time average), per offered load ``a < c``.

    ``sum_k 1 / (1 - z_k) + (a^2 - c (c - 1)) / (2 (c - a))`` over the c - 1 roots ``z_k`` of
    ``z^c = exp(a (z - 1))`` inside the unit disk other than 1 (Crommelin 1932), found by
    Newton's method from the contraction ``z = w_k exp(a (z - 1) / c)``, ``w_k`` the c-th
    roots of unity: the same numbers as :func:`_mdc_queue`'s distribution, in microseconds
    rather than a linear solve, for the fit's many evaluations.
    """
    a = np.asarray(a, dtype=np.float64)[..., None]
    unity = np.exp(2j * np.pi * np.arange(1, c) / c)
    z = unity * np.exp(-a / c)
    for _ in range(50):
        e = unity * np.exp(a * (z - 1.0) / c)
        step = (z - e) / (1.0 - a / c * e)
        z = z - step
        if not np.abs(step).max(initial=0.0) > 1e-14:
            break
    a = a[..., 0]
    out = np.sum(1.0 / (1.0 - z), axis=-1).real + (a * a - c * (c - 1.0)) / (2.0 * (c - a))
    return np.clip(out, 0.0, None)  # the sum's rounding where almost nobody waits


def _mdc_wait_tail(x: np.ndarray, a: float, c: int, queue: np.ndarray, r: float) -> np.ndarray:
    """``P(W > x D)`` for the FCFS wait of an M/D/c queue, ``x >= 0`` in units of D.

    Write ``x = k - s / a`` with k = 1, 2, ... and ``0 < s <= a``. A request arriving at t
    has started by t + x D iff the requests ahead of it at time ``t' = t - (s / a) D`` (those
    waiting then, ``Y(t')``, plus the arrivals ``A'`` in ``(t', t)``, Poisson with mean s)
    number at most ``k c - 1``: each D from t' on, c of them start. ``Y(t')`` is stationary
    and independent of ``A'``, so ``P(W > x D) = sum_m P(A' = m) P(Y > k c - 1 - m)``
    (Crommelin 1932; Franx 2001), summed without cancellation; at ``x = 0`` the probability
    of waiting. ``queue, r`` are :func:`_mdc_queue`'s, or a finite law of the number waiting
    with ``r = 0`` (behind a queue cap, ``llmlat._models._mgck_wait_cdf``).
    """
    n = len(queue) - 1
    above = np.concatenate([np.cumsum(queue[::-1])[::-1][1:], [0.0]])  # P(Y > y), y = 0..n
    above += queue[-1] * r / (1.0 - r)
    k = np.floor(x) + 1.0
    s = a * (k - x)
    m = np.arange(int(a + 8.0 * np.sqrt(a) + 12.0) + 1)
    arrivals = _poisson_pmf(m, s[..., None])
    j = k[..., None] * c - 1.0 - m
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        far = queue[-1] * np.exp((j - n + 1.0) * np.log(r)) / (1.0 - r)
    beyond = np.where(j <= n, above[np.clip(j, 0, n).astype(np.int64)], far)
    return (arrivals * np.where(j >= 0, beyond, 1.0)).sum(axis=-1)


#: Gauss-Legendre nodes and weights on [-1, 1] for the service-plus-wait integral: computed
#: once, as a plan evaluates that law at hundreds of loads
_LEGENDRE_64 = np.polynomial.legendre.leggauss(64)
_LEGENDRE_32 = np.polynomial.legendre.leggauss(32)


def _service_plus_wait_quantile(
    q: np.ndarray, mu: float, cv_s: float, pw: np.ndarray, theta: np.ndarray
) -> np.ndarray:
    """Quantiles of S + W: S gamma (mean 1/mu, CV cv_s); W = 0 w.p. 1 - pw, else Exp(theta)."""
    shape = 1.0 / cv_s**2
    nodes, weights = _LEGENDRE_64
    pw, theta = np.broadcast_to(pw, q.shape), np.broadcast_to(theta, q.shape)
    theta = np.where(pw > 0, theta, 1.0)

    def cdf(t: np.ndarray) -> np.ndarray:
        served = special.gammainc(shape, shape * mu * t)
        # P(E + S <= t) for E ~ Exp(theta): integrate over u = P(E <= s) on [0, P(E <= t)]
        top = -np.expm1(-theta * t)
        u = 0.5 * top[..., None] * (nodes + 1.0)
        s = -np.log1p(-u) / theta[..., None]
        rest = np.clip(t[..., None] - s, 0.0, None)
        waited = 0.5 * top * (special.gammainc(shape, shape * mu * rest) @ weights)
        return (1.0 - pw) * served + pw * waited

    scale = 1.0 / mu + pw / theta
    return _invert_smooth_cdf(cdf, q, float(np.max(scale, initial=1.0 / mu)))


def closed_mgc_response_quantile(
    q: float,
    n_clients: ArrayLike,
    mu: float,
    c: int,
    think_s: float,
    cv_s: float,
    think_cv: float = 1.0,
) -> np.ndarray:
    """Approximate response-time quantiles of N clients on c servers with general service.

    Two laws, mixed by the think time's spread (weight ``1 - exp(-think_cv Z mu)`` on the first,
    :func:`_network_weight`; no think time: the first alone):

    - **The exponential network's arrivals.** An arriving request finds k others with the
      arrival-theorem probabilities of the exponential system
      (:func:`closed_arrival_distribution`). With k < c it is served at once: its time is the
      service law, gamma with mean ``1 / mu`` and CV ``cv_s`` (exact). Otherwise it waits for
      j = k - c + 1 departures of c busy servers, mean ``j / (c mu)``. Their spread has two
      parts: the service times' own, ``j cv_s**2`` in squared spells of ``1 / (c mu)``, and the
      servers' phases: sent as another request leaves, a request waits for the i-th departure
      of a cycle (i = (j - 1) mod c + 1), the i-th least of c - 1 uniform phases for constant
      service, ``i (c - i) / (c + 1)`` squared spells, weighted by ``1 - cv_s**2``. Its wait plus
      service is taken as a gamma law with the mean and variance of that mixture. Without the
      phases' part the p95 of 5 clients on 4 near-constant servers (CV 0.05) read 18% below
      the exact simulation's (within 2.5% with it). With think time above CV 1 the first
      departure is the remainder of the services under way (:func:`_residual_first`,
      :func:`_first_departure`). Exact for exponential service, and for any think law there.
    - **Clients in step** (:func:`_in_step`), for constant think times: they come back in the
      order of their answers, so a request starts exactly at ``max(its send, the (N - c)-th
      answer after its client's previous one)``, and its wait is ``(T - Z)^+`` for T the time
      of those N - c answers.

    Against 40,000-request exact simulations (c = 1, 4, 16; Z of 0.1 to 3 service times;
    think CV 0, 0.5, 1 and 2; N from 0.6 to 1.6 times the knee ``c (1 + Z / S)``;
    ``benchmarks/bench_closed_quantile.py``; 576 cells) the p95 reads -5.0% to +34% (RMS
    5.6%) and the mean -4.8% to +28% (RMS 4.1%), where the exponential network alone read
    up to +203% and the exponential system's mean -27% to +93% (RMS 17% and 8.2%). At the
    think CVs held out from the choice of :func:`_network_weight` (0.25, 0.75, 1.5; 432
    cells) the p95 reads -2.7% to +40% (RMS 6.5%) and the mean -4.3% to +16% (RMS 3.6%).
    Use :func:`closed_mmc_response_quantile` for exponential service (exact for any think
    law).

    Parameters
    ----------
    q : float
        Probability in (0, 1).
    n_clients : int or array_like of int
        Concurrency levels N.
    mu : float
        Service rate of one server.
    c : int
        Servers.
    think_s : float
        Mean think time.
    cv_s : float
        Service-time coefficient of variation, > 0.
    think_cv : float, default 1.0
        The think time's coefficient of variation (0: constant, 1: exponential; measured by
        :func:`llmlat.stats.think_times`).

    Returns
    -------
    numpy.ndarray
        Quantiles in seconds, one per level.
    """
    if not cv_s > 0:
        raise ValueError("cv_s: coefficient of variation must be > 0")
    if not think_cv >= 0:
        raise ValueError("think_cv: coefficient of variation must be >= 0")
    nc = np.atleast_1d(np.asarray(n_clients)).astype(np.int64)
    w = _network_weight(think_cv, think_s, mu, cv_s) if think_s > 0 else 1.0
    if w == 1.0:
        waits, mean, var = _network_waits(nc, mu, c, think_s, cv_s)
        return _queued_gamma_quantile(float(q), waits, mean, var, mu, cv_s)
    step = _in_step(nc, mu, c, think_s, cv_s)
    if w == 0.0:
        return invert_cdf(step.cdf, np.full(len(nc), float(q)), step.mean)
    net, scale = _queued_gamma_cdf(*_network_waits(nc, mu, c, think_s, cv_s), mu, cv_s)

    def cdf(t: np.ndarray) -> np.ndarray:
        return w * net(t) + (1.0 - w) * step.cdf(t)

    return invert_cdf(cdf, np.full(len(nc), float(q)), np.fmax(scale, step.mean))


def _closed_mgc_mean(
    n_clients: np.ndarray, mu: float, c: int, think_s: float, cv_s: float, think_cv: float
) -> np.ndarray:
    """Mean response time of the law of :func:`closed_mgc_response_quantile`, think time > 0.

    The two laws' means mixed by the same weight: the exponential network's arrivals, each
    waiting the mean of its j departures (not the exponential system's mean, insensitive to
    the service CV: it read up to 27% low at CV 2), and the clients in step's, which meets
    Little's law by construction.
    """
    nc = np.atleast_1d(np.asarray(n_clients)).astype(np.int64)
    w = _network_weight(think_cv, think_s, mu, cv_s)
    out = np.zeros(len(nc))
    if w > 0:
        waits, mean, _ = _network_waits(nc, mu, c, think_s, cv_s)
        out += w * (1.0 / mu + waits @ mean)
    if w < 1:
        out += (1.0 - w) * _in_step(nc, mu, c, think_s, cv_s).mean
    return out


def _network_weight(think_cv: float, think_s: float, mu: float, cv_s: float) -> float:
    """Weight of the exponential network's law against the clients in step's.

    Clients stay in step while their think times' spread, ``think_cv * Z``, is small against
    a service time: ``1 - exp(-think_cv Z mu)`` on the network. Chosen among six weights
    without fitted constants on bench_closed_quantile's think CVs 0.5, 1 and 2 and checked on
    0.25, 0.75 and 1.5 (held out): weighing by the CV alone, ``min(think_cv, 1)``, read the
    mean 12% low at a think CV of 0.25 thinking three service times, where the think time's
    spread (0.75 S) already shuffles the clients; this weight's mean reads at worst -4.8%
    there and on the design cells (its p95 at worst -3.6%), and higher where the CV alone was
    right. The network is exact at service CV 1 for any think law, where the clients in step
    read -6.4% to +12.5%: between CV 0.5 and 2 the clients in step keep a share
    ``|log2 cv_s|`` of their weight. Checked at CV 0.75 and 1.4 (held out; 288 cells, think
    CV 0, 0.5 and 1): the p95 reads -4.1% to +12% and the mean -4.8% to +11%, where the
    think spread's weight alone read down to -5.3% and -6.0%.
    """
    step = float(np.exp(-float(think_cv) * float(think_s) * mu))
    return 1.0 - step * min(abs(float(np.log2(cv_s))), 1.0)


def _network_waits(
    nc: np.ndarray, mu: float, c: int, think_s: float, cv_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the exponential network's chance of waiting for j departures, and their moments.

    Rows = levels, columns = j (``waits``, zero at j = 0); ``mean[j]``, ``var[j]``.
    """
    seen = closed_arrival_distribution(nc, think_s, _mmc_rate(mu, c))
    j = np.clip(np.arange(seen.shape[1]) - c + 1, 0, None).astype(np.float64)
    mean, var = _departures(j, mu, c, cv_s)
    if think_s > 0 and cv_s > 1:
        w = think_s * mu / (1 + think_s * mu)
        if c == 1:
            mean, var = _residual_first(mean, var, j > 0, mu, cv_s, w)
        else:
            mean = np.where(j > 0, mean - 1.0 / (c * mu) + _first_departure(c, cv_s, w) / mu, mean)
    return seen * (j > 0), mean, var


def _departures(j: np.ndarray, mu: float, c: int, cv_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of the time to j departures of c busy servers (gamma, CV ``cv_s``).

    The service times' own spread, ``j cv_s**2`` squared spells of ``1 / (c mu)``, and the
    servers' phases: the j-th departure is the i-th of a cycle of c (i = (j - 1) mod c + 1),
    the i-th least of c - 1 uniform phases for constant service, ``i (c - i) / (c + 1)``
    squared spells, weighted by ``1 - cv_s**2``.
    """
    i = np.where(j > 0, (j - 1) % c + 1, 0)
    var = (j * cv_s**2 + i * (c - i) / (c + 1.0) * (1.0 - cv_s**2)) / (c * mu) ** 2
    return j / (c * mu), var


def _first_departure(c: int, cv_s: float, w: float) -> float:
    """Mean time to the first of c busy servers' departures, in service times, CV past 1.

    A request sent a while after its answer finds c services under way, each with the
    length-biased remainder of a stationary renewal process; sent just after (weight ``1 -
    w``, ``w = Z / (Z + S)`` as in :func:`_residual_first`), one of them has just begun. For
    exponential service it is ``1 / c``; at CV 2 it is 1.95 / c at 4 servers and 1.58 / c at
    16. Taking ``1 / c`` read the mean 5-9% low at 4 servers, CV 2, think time 1-3 service
    times.
    """
    eq, fresh = _first_departure_parts(int(c), float(cv_s))
    return w * eq + (1.0 - w) * fresh


@functools.lru_cache(maxsize=64)
def _first_departure_parts(c: int, cv_s: float) -> tuple[float, float]:
    """``E min`` of c stationary remainders, and of c - 1 and one whole service (mean 1)."""
    from scipy import integrate

    k = 1.0 / cv_s**2

    def rest(t: float) -> float:  # P(remainder > t) = E[(S - t)^+] for unit mean
        return float(special.gammaincc(k + 1, k * t) - t * special.gammaincc(k, k * t))

    eq = integrate.quad(lambda t: rest(t) ** c, 0, np.inf, limit=200)[0]
    fresh = integrate.quad(
        lambda t: rest(t) ** (c - 1) * special.gammaincc(k, k * t), 0, np.inf, limit=200
    )[0]
    return eq, fresh


#: Idle-spell nodes of :func:`_in_step` (midpoints of a uniform law on [0, 2 mean]).
_IDLE_NODES = 2.0 * (np.arange(16) + 0.5) / 16


class _InStep(NamedTuple):
    """The clients-in-step law of each level (:func:`_in_step`)."""

    mean: np.ndarray
    throughput: np.ndarray
    #: P(response <= t), one time per level
    cdf: Callable[[np.ndarray], np.ndarray]


def _in_step(nc: np.ndarray, mu: float, c: int, think_s: float, cv_s: float) -> _InStep:
    """Response law of N clients thinking a constant time Z on c FCFS servers.

    Clients come back in the order of their answers, so a request waits ``(T - Z)^+``, T the
    time of the N - c answers after its client's previous one (exact; pinned by a test).
    T is taken as B + I: B the N - c departures of c busy servers (gamma, with
    :func:`_departures`' moments at j = N - c: service and phases), I the servers' idle spells in
    between, uniform on [0, 2 E I] (with service noise the clients' phases drift apart until
    two collide; a reflected walk spreads them evenly). E I is set by Little's law: T's mean
    is (N - c) / X for throughput X, and the mean response ``S + E (B + I - Z)^+`` must be
    ``N / X - Z``; the left side rises slower than the right in E I, so the root is unique.
    Below the knee T mostly ends before Z (no one waits), past it I vanishes and the wait is
    B - Z. A request is served at once with N <= c.

    Measured with constant think times (40,000-request exact simulations, c = 1, 4, 16,
    bench_closed_quantile): the mean within -2.2% to +8.5% at service CV 0.05, -4.0% to +6.9%
    at CV 0.5 and -4.6% to +28% at CV 2 (high past the knee on several servers, where the
    busy departures' gamma law is too wide), the p95 within -4.4% to +34% (high below the
    knee thinking long, where the simulated clients stay in step and the law spreads their
    idle spells), -5.0% to +6.8% and -3.1% to +13%; the exponential network read up to +93%
    (mean) and +203% (p95) at CV 0.05 and the mean 27% low at CV 2.
    """
    s = 1.0 / mu
    z = float(think_s)
    nc = np.asarray(nc, dtype=np.int64)
    j = np.clip(nc - c, 0, None).astype(np.float64)
    mb, vb = _departures(j, mu, c, cv_s)
    queued = j > 0
    kb = np.where(queued, mb**2 / np.where(queued, vb, 1.0), 1.0)
    tb = np.where(queued, vb / np.where(queued, mb, 1.0), 1.0)

    def excess(n: int, ib: float) -> float:  # E (B + I - Z)^+ at level n
        a = z - ib * _IDLE_NODES
        ap = np.clip(a, 0.0, None)
        e = (
            mb[n] * special.gammaincc(kb[n] + 1.0, ap / tb[n])
            - ap * special.gammaincc(kb[n], ap / tb[n])
            + (ap - a)
        )
        return float(e.mean())

    idle = np.zeros(len(nc))
    for n in map(int, np.flatnonzero(queued)):
        grow = float(nc[n] / j[n])  # N / X - Z rises by this per unit of E I

        def gap(ib: float, n: int = n, grow: float = grow) -> float:
            return s + excess(n, ib) - (grow * (mb[n] + ib) - z)

        lo = max(j[n] * (z + s) / nc[n] - mb[n], 0.0)  # X at most N / (Z + S) and c mu
        if gap(lo) <= 0:
            idle[n] = lo
            continue
        hi = max(j[n] * (s + z) / c - mb[n], lo) + s
        while gap(hi) > 0:
            hi *= 2.0
        idle[n] = optimize.brentq(gap, lo, hi, xtol=1e-12 * (mb[n] + s), rtol=1e-12)
    wait = np.array([excess(n, idle[n]) if queued[n] else 0.0 for n in range(len(nc))])
    mean = s + wait
    throughput = nc / (mean + z)

    k = 1.0 / cv_s**2

    @functools.cache
    def nodes() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # P(R <= t) over the idle nodes: served at once when B <= Z - I, else S + B - (Z - I);
        # B's part on Gauss-Legendre nodes in its probability above Z - I (only for a
        # quantile: a fit asks for the mean alone)
        x, weights = _LEGENDRE_32
        a = z - idle[:, None] * _IDLE_NODES[None, :]  # (levels, idle)
        below = np.where(
            queued[:, None],
            special.gammainc(kb[:, None], np.clip(a, 0.0, None) / tb[:, None]) * (a > 0),
            1.0,
        )
        u = np.clip(below[..., None] + (1.0 - below[..., None]) * 0.5 * (x + 1.0), 0, 1 - 1e-16)
        b = special.gammaincinv(kb[:, None, None], u) * tb[:, None, None]
        extra = np.clip(b - a[..., None], 0.0, None)  # (levels, idle, nodes)
        return below, extra, (1.0 - below)[..., None] * 0.5 * weights

    def cdf(t: np.ndarray) -> np.ndarray:
        below, extra, wb = nodes()
        served = special.gammainc(k, k * mu * t)
        rest = np.clip(t[:, None, None] - extra, 0.0, None)
        late = (special.gammainc(k, k * mu * rest) * wb).sum(axis=-1)
        return (below * served[:, None] + late).mean(axis=-1)

    return _InStep(mean, throughput, cdf)


def _residual_first(
    mean: np.ndarray, var: np.ndarray, waits: np.ndarray, mu: float, cv_s: float, w: float
) -> tuple[np.ndarray, np.ndarray]:
    """One server's wait with the first of its departures the service in progress's remainder.

    With think time a request arrives at no departure, so the service it finds under way is
    length-biased: its remainder has mean ``(1 + cv_s**2) / (2 mu)``, above a whole service's
    for CV > 1, where taking a whole one read the p95 up to 10% low (CV 2, Z = S). Sent soon
    after its own answer (Z << S) it mostly finds that service just begun: the remainder law
    is mixed with a whole service's, weight ``w = Z / (Z + S)`` on the remainder.
    """
    k = 1.0 / cv_s**2
    rest = ((1.0 + cv_s**2) / (2.0 * mu), (k + 1.0) * (k + 2.0) * (cv_s**2 / mu) ** 2 / 3.0)
    whole = (1.0 / mu, (1.0 + cv_s**2) / mu**2)  # first and second moments
    m1 = (1.0 - w) * whole[0] + w * rest[0]
    m2 = (1.0 - w) * whole[1] + w * rest[1]
    first_var = m2 - m1**2
    mean = np.where(waits, mean - whole[0] + m1, mean)
    var = np.where(waits, var - (cv_s / mu) ** 2 + first_var, var)
    return mean, var


def _queued_gamma_quantile(
    q: float, waits: np.ndarray, mean: np.ndarray, var: np.ndarray, mu: float, cv_s: float
) -> np.ndarray:
    """Quantiles of a response time that waits for j departures with probability ``waits[:, j]``.

    ``mean[j]`` and ``var[j]`` are the wait's moments given j. Served at once (probability
    ``1 - waits.sum(axis=1)``) the time is the service law, gamma with mean ``1 / mu`` and CV
    ``cv_s``; a request that waits is taken as a gamma law with the mean and variance of the
    mixture of its wait plus a service. One row per level.
    """
    cdf, scale = _queued_gamma_cdf(waits, mean, var, mu, cv_s)
    return invert_cdf(cdf, np.full(len(waits), q), scale)


def _queued_gamma_cdf(
    waits: np.ndarray, mean: np.ndarray, var: np.ndarray, mu: float, cv_s: float
) -> tuple[Callable[[np.ndarray], np.ndarray], np.ndarray]:
    """Return the CDF of :func:`_queued_gamma_quantile` (a time per level) and a typical time."""
    pw = waits.sum(axis=1)
    m1 = waits @ mean
    m2 = waits @ (mean**2 + var)
    with np.errstate(divide="ignore", invalid="ignore"):
        mw, vw = m1 / pw, np.clip(m2 / pw - (m1 / pw) ** 2, 0.0, None)
    mean_s, var_s = 1.0 / mu, (cv_s / mu) ** 2
    mean_t, var_t = mean_s + np.nan_to_num(mw), var_s + np.nan_to_num(vw)
    k_s, k_t = mean_s**2 / var_s, mean_t**2 / var_t

    def cdf(t: np.ndarray) -> np.ndarray:
        alone = special.gammainc(k_s, k_s * t / mean_s)
        queued = special.gammainc(k_t, k_t * t / mean_t)
        return (1.0 - pw) * alone + pw * queued

    return cdf, mean_t


def mmck(lam: ArrayLike, mu: float, c: int, k: int) -> pd.DataFrame:
    """M/M/c/K: c servers and room for K requests in total; arrivals that find K are refused.

    Relates an observed refusal (429) rate to a queue cap. Solved in log space, so large ``K``
    and ``lam > c mu`` are fine.

    Parameters
    ----------
    lam : float or array_like
        Arrival rate in requests/s.
    mu : float
        Service rate of one server.
    c : int
        Number of servers.
    k : int
        System capacity (servers plus waiting room), ``k >= c``.

    Returns
    -------
    pandas.DataFrame
        ``lam``, ``p_block``, ``throughput_rps`` (admitted), ``utilization``, ``in_system_mean``
        and ``response_mean_s`` of admitted requests.
    """
    _check_rates(mu=mu, c=c)
    if k < c:
        raise ValueError("k: system capacity must be >= c")
    return pd.DataFrame(_mmck(np.atleast_1d(_arr(lam)), mu, c, k))


def _mmck(lam_arr: np.ndarray, mu: float, c: int, k: int) -> Columns:
    """Compute the columns of :func:`mmck`, unvalidated."""
    n = np.arange(k + 1)
    p = _mmck_states(lam_arr, mu, c, k)
    block = p[:, -1]
    x = lam_arr * (1.0 - block)
    ls = p @ n
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(x > 0, ls / x, 1.0 / mu)
    return {
        "lam": lam_arr,
        "p_block": block,
        "throughput_rps": x,
        "utilization": x / (c * mu),
        "in_system_mean": ls,
        "response_mean_s": w,
    }


def _check_rates(mu: float, c: int) -> None:
    if not np.isfinite(mu) or mu <= 0:
        raise ValueError("mu: service rate must be positive")
    if int(c) != c or c < 1:
        raise ValueError("c: number of servers must be a positive integer")


def _log_cum_rates(rate: Callable[[np.ndarray], np.ndarray], n_max: int) -> np.ndarray:
    """``L[n] = sum_{k=1..n} log rate(k)`` for n = 0..n_max, on the last axis.

    A rate whose parameters are columns gives one row per parameter set.
    """
    return _log_cum(rate(np.arange(1, n_max + 1, dtype=np.float64)))


def _log_cum(rates: np.ndarray) -> np.ndarray:
    """:func:`_log_cum_rates` from the rates at 1..n_max themselves."""
    logs = np.log(rates)
    return np.concatenate([np.zeros((*logs.shape[:-1], 1)), np.cumsum(logs, axis=-1)], axis=-1)


@functools.lru_cache(maxsize=64)
def _log_falling(key: bytes, dtype: str, n_max: int) -> np.ndarray:
    """``log N! / (N - n)!`` for each population N (rows, from ``key``) and n = 0..n_max.

    The same populations come back at every step of a fit's optimiser (a batch fit of a
    table up to N = 512: 40% of its time), so they are computed once.
    """
    nn = np.frombuffer(key, dtype=dtype).astype(np.float64)[:, None]
    n = np.arange(n_max + 1)
    out = special.gammaln(nn + 1.0) - special.gammaln(np.maximum(nn - n[None, :], 0) + 1.0)
    out[n[None, :] > nn] = -np.inf  # more at the station than the population: impossible
    out.flags.writeable = False
    return out


def _closed_distribution(
    n_clients: np.ndarray, think_s: float | np.ndarray, log_cum: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Stationary P(n at the station) for each population; rows = populations, cols = n.

    ``think_s`` is one think time or one per population. Several parameter sets at once:
    ``think_s`` and ``log_cum`` with a leading axis each (one row per set), and so the result.
    """
    n_max = int(n_clients.max(initial=0))
    n = np.arange(n_max + 1)
    nn = n_clients[:, None]
    z = np.asarray(think_s, dtype=np.float64)
    z = np.broadcast_to(z, np.broadcast_shapes(z.shape, n_clients.shape))[..., None]
    if np.all(z <= 0):
        return (n[None, :] == nn).astype(np.float64), n
    # pi(n) ~ N! / (N-n)! * Z^-n / prod_{k<=n} rate(k) (none past N); Z = 0 puts every client
    # at the station
    falling = _log_falling(n_clients.tobytes(), n_clients.dtype.str, n_max)
    # in place on one array: a fit evaluates this thousands of times (a batch fit of a table
    # up to N = 512: a quarter of its time), and each temporary costs as much as the arithmetic
    with np.errstate(invalid="ignore", divide="ignore"):
        logw = n[None, :] * np.log(np.where(z > 0, z, 1.0))
        np.subtract(falling, logw, out=logw)
        logw -= log_cum[..., None, : n_max + 1]
    if np.any(z <= 0):
        logw = np.where((z > 0) | (n[None, :] == nn), logw, -np.inf)
    logw -= logw.max(axis=-1, keepdims=True)
    p = np.exp(logw, out=logw)
    p /= p.sum(axis=-1, keepdims=True)
    return p, n


def _closed_means(
    nc: np.ndarray, think_s: float | np.ndarray, rate: Callable[[np.ndarray], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Throughput and mean number at the station for each population (no validation).

    Several parameter sets at once: a ``rate`` whose parameters are columns and ``think_s``
    with a row per set give a row per set.
    """
    if np.all(np.asarray(think_s) <= 0):  # every client is always at the station
        return rate(nc.astype(np.float64)), nc.astype(np.float64)
    n_max = int(nc.max())
    rates = rate(np.arange(1, n_max + 1, dtype=np.float64))  # once: the log sums take them too
    p, n = _closed_distribution(nc, think_s, _log_cum(rates))
    r = np.concatenate([np.zeros((*rates.shape[:-1], 1)), rates], axis=-1)
    x = p @ r if r.ndim == 1 else np.matmul(p, r[..., None])[..., 0]
    return x, p @ n


def closed_queue(
    n_clients: ArrayLike, think_s: float, rate: Callable[[np.ndarray], np.ndarray]
) -> pd.DataFrame:
    """Solve a closed system: N clients, think time Z, one station with load-dependent rate.

    The number at the station is a birth-death chain (birth ``(N - n) / Z``, death
    ``rate(n)``), exact for exponential think times and a station whose total completion rate
    depends only on how many requests it holds (M/M/c, processor sharing, continuous batching).
    Solved in log space for every population at once. ``think_s = 0`` keeps all N at the
    station: throughput ``rate(N)``.

    Parameters
    ----------
    n_clients : int or array_like of int
        Number of clients (concurrency levels), >= 1.
    think_s : float
        Mean think time Z in seconds, >= 0.
    rate : callable
        Total completion rate (requests/s) with ``n`` requests at the station, vectorised over
        an array of ``n >= 1``.

    Returns
    -------
    pandas.DataFrame
        ``n_clients``, ``throughput_rps``, ``response_mean_s`` (L / X, which equals N / X - Z)
        and ``in_system_mean`` (mean requests at the station, L).
    """
    return pd.DataFrame(_closed(_clients(n_clients, think_s), think_s, rate))


def _clients(n_clients: ArrayLike, think_s: float) -> np.ndarray:
    """Validate the concurrency levels of a closed system (as int64)."""
    nc = np.atleast_1d(np.asarray(n_clients))
    if np.any(nc < 1) or np.any(nc % 1 != 0):
        raise ValueError("n_clients: concurrency must be a positive integer")
    if think_s < 0:
        raise ValueError("think_s: think time must be >= 0")
    return nc.astype(np.int64)


def _closed(nc: np.ndarray, think_s: float, rate: Callable[[np.ndarray], np.ndarray]) -> Columns:
    """Compute the columns of :func:`closed_queue`, unvalidated."""
    x, ls = _closed_means(nc, think_s, rate)
    return {
        "n_clients": nc,
        "throughput_rps": x,
        "response_mean_s": ls / x,
        "in_system_mean": ls,
    }


def _mmc_rate(mu: float, c: int) -> Callable[[np.ndarray], np.ndarray]:
    return lambda n: mu * np.minimum(n, c)


def closed_mmc(n_clients: ArrayLike, mu: float, c: int = 1, think_s: float = 0.0) -> pd.DataFrame:
    """Finite-population M/M/c: N clients with think time Z feeding c exponential servers.

    The right model for a fixed-concurrency (closed-loop) sweep; tends to the open M/M/c as N
    grows with ``N / Z`` fixed.

    Parameters
    ----------
    n_clients : int or array_like of int
        Concurrency levels.
    mu : float
        Service rate of one server in requests/s.
    c : int, default 1
        Number of servers.
    think_s : float, default 0.0
        Mean think time in seconds.

    Returns
    -------
    pandas.DataFrame
        The columns of :func:`closed_queue` plus ``utilization`` (X / (c mu)).
    """
    _check_rates(mu=mu, c=c)
    out = _closed(_clients(n_clients, think_s), think_s, _mmc_rate(mu, c))
    out["utilization"] = out["throughput_rps"] / (c * mu)
    return pd.DataFrame(out)


def closed_arrival_distribution(
    n_clients: ArrayLike, think_s: float, rate: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """Return what an arriving request sees in a closed system (arrival theorem).

    Parameters
    ----------
    n_clients : int or array_like of int
        Concurrency levels N.
    think_s : float
        Mean think time.
    rate : callable
        Load-dependent completion rate, as in :func:`closed_queue`.

    Returns
    -------
    numpy.ndarray
        Shape ``(len(N), max(N))``: row i is P(k others at the station), k = 0..N_i - 1 (the
        stationary distribution of the same system with N_i - 1 clients).
    """
    nc = np.atleast_1d(np.asarray(n_clients)).astype(np.int64)
    others = nc - 1
    n_max = max(int(others.max(initial=0)), 0)
    log_cum = _log_cum_rates(rate, n_max) if n_max else np.zeros(1)
    p, _ = _closed_distribution(others, think_s, log_cum)
    return p


def hypoexp_cdf(t: np.ndarray, m: np.ndarray, mu: float, c: int) -> np.ndarray:
    """CDF of ``Erlang(m, c mu) + Exp(mu)``: a wait behind ``m`` departures, then service.

    Parameters
    ----------
    t : numpy.ndarray
        Times in seconds.
    m : numpy.ndarray
        Number of departures waited for (0 = no wait), broadcast with ``t``.
    mu : float
        Service rate of one server.
    c : int
        Number of servers.

    Returns
    -------
    numpy.ndarray
        ``P(T <= t)``.
    """
    t = np.maximum(t, 0.0)
    m = np.asarray(m, dtype=np.float64)
    if c == 1:  # Erlang(m + 1, mu)
        return special.gammainc(m + 1.0, mu * t)
    theta, delta = c * mu, (c - 1) * mu
    with np.errstate(divide="ignore"):
        log_b = -mu * t + m * np.log(c / (c - 1.0)) + np.log(special.gammainc(m, delta * t))
    wait = np.where(m > 0, special.gammainc(np.maximum(m, 1.0), theta * t) - np.exp(log_b), 0.0)
    return np.where(m > 0, np.clip(wait, 0.0, 1.0), -np.expm1(-mu * t))


def hypoexp_pdf(t: np.ndarray, m: np.ndarray, mu: float, c: int) -> np.ndarray:
    """Density of ``Erlang(m, c mu) + Exp(mu)`` (see :func:`hypoexp_cdf`).

    Parameters
    ----------
    t : numpy.ndarray
        Times in seconds.
    m : numpy.ndarray
        Number of departures waited for (0 = no wait).
    mu : float
        Service rate of one server.
    c : int
        Number of servers.

    Returns
    -------
    numpy.ndarray
        The density.
    """
    return np.exp(hypoexp_logpdf(t, m, mu, c))


def hypoexp_logpdf(t: np.ndarray, m: np.ndarray, mu: float, c: int) -> np.ndarray:
    """Log density of ``Erlang(m, c mu) + Exp(mu)``, computed without overflow.

    Parameters
    ----------
    t : numpy.ndarray
        Times in seconds.
    m : numpy.ndarray
        Number of departures waited for (0 = no wait).
    mu : float
        Service rate of one server.
    c : int
        Number of servers.

    Returns
    -------
    numpy.ndarray
        The log density.
    """
    t = np.maximum(t, 1e-300)
    m = np.asarray(m, dtype=np.float64)
    if m.ndim == 0 and m == 0:  # no wait: exponential service only
        return np.log(mu) - mu * t
    if c == 1:
        return (m + 1.0) * np.log(mu) + m * np.log(t) - mu * t - special.gammaln(m + 1.0)
    delta = (c - 1) * mu
    tail = m * np.log(c / (c - 1.0)) + _log_gammainc(np.maximum(m, 1.0), delta * t)
    return np.log(mu) - mu * t + np.where(m > 0, tail, 0.0)


def _log_waited_mix(x: np.ndarray, waited: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """``log sum_j exp(coef_j) P(j, x)`` over the components ``waited`` (>= 1, ascending).

    With ``C_i`` the components' weights summed over ``j <= i`` (``v_j = exp(coef_j)``, scaled
    by the largest), ``P(j, x) = P(top + 1, x) + sum_{i=j}^{top} x^i e^-x / i!`` gives
    ``sum_j v_j P(j, x) = C_top P(top + 1, x) + e^-x sum_{i=low}^{top} C_i x^i / i!``, ``low``
    the first component: one incomplete gamma and a polynomial of positive terms (no
    cancellation), summed by Horner's rule in ``x / i`` where ``x <= top`` and in ``i / x``
    past it, with its first or last term factored out in logs. Every partial sum then lies
    between ``C_low`` and ``top C_top e^x``: a few vector operations per component instead of
    a matrix of terms (half the time of a maximum-likelihood fit behind a queue cap). Weights
    more than e^600 apart, and times past 700 below the top (a partial sum out of range), are
    summed term by term (:func:`_log_waited_mix_terms`).
    """
    top, first = int(waited[-1]), int(waited[0])
    cmax = float(coef.max())
    if float(coef.min()) - cmax < -600.0:
        return _log_waited_mix_terms(x, waited, coef)
    cum = np.zeros(top + 1)
    cum[waited] = np.exp(coef - cmax)
    cum = np.cumsum(cum)
    below = x <= top
    poly = np.empty(x.shape)  # log of e^-x sum_i C_i x^i / i!
    xs = x[below]
    b = np.full(xs.shape, cum[top])
    for i in range(top - 1, first - 1, -1):
        b *= xs
        b *= 1.0 / (i + 1)
        b += cum[i]
    with np.errstate(over="ignore", invalid="ignore"):
        poly[below] = np.log(b) + first * np.log(xs) - special.gammaln(first + 1.0) - xs
    xs = x[~below]
    b = np.full(xs.shape, cum[first])
    for i in range(first + 1, top + 1):
        b *= i / xs
        b += cum[i]
    poly[~below] = np.log(b) + top * np.log(xs) - special.gammaln(top + 1.0) - xs
    log_top = _log_gammainc(np.full(x.shape, top + 1.0), x)
    with np.errstate(invalid="ignore"):
        res = np.logaddexp(np.log(cum[top]) + log_top, poly) + cmax
    bad = ~np.isfinite(res)
    if bad.any():
        res[bad] = _log_waited_mix_terms(x[bad], waited, coef)
    return res


def _log_waited_mix_terms(x: np.ndarray, waited: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """:func:`_log_waited_mix` term by term, for the times it cannot sum by Horner's rule.

    ``P(j, x) = P(top + 1, x) + sum_{i=j}^{top} x^i e^-x / i!``: every term at once, summed
    from the top down in linear space, each time scaled by its largest term (so one
    exponential per term, not a log-sum per component). A time where the components that
    carry weight all underflow (tiny x, every weight at a deep queue) is redone in log space.
    """
    top = int(waited[-1])
    i = np.arange(top, 0, -1, dtype=np.float64)  # top .. 1
    out = np.empty(x.shape)
    step = max(1, 4_000_000 // top)  # a long level behind a deep cap stays in memory
    for a in range(0, len(x), step):
        xs = x[a : a + step]
        log_t = np.empty((len(xs), top + 1))
        log_t[:, 0] = _log_gammainc(np.full(xs.shape, top + 1.0), xs)
        log_t[:, 1:] = np.log(xs)[:, None] * i - xs[:, None] - special.gammaln(i + 1.0)
        shift = log_t.max(axis=1, keepdims=True)
        cum = np.cumsum(np.exp(log_t - shift), axis=1)  # column top + 1 - j holds P(j, x)
        cmax = float(coef.max())
        with np.errstate(divide="ignore"):
            res = np.log(cum[:, top + 1 - waited] @ np.exp(coef - cmax)) + cmax + shift[:, 0]
        bad = ~np.isfinite(res)
        if bad.any():
            log_p = np.logaddexp.accumulate(log_t[bad], axis=1)[:, top + 1 - waited]
            res[bad] = special.logsumexp(log_p + coef, axis=1)
        out[a : a + step] = res
    return out


def hypoexp_mix_logpdf(
    t: np.ndarray, m: np.ndarray, w: np.ndarray, mu: float, c: int
) -> np.ndarray:
    """Log density of the mixture ``sum_j w_j [Erlang(m_j, c mu) + Exp(mu)]``.

    The regularised incomplete gamma ``P(m, x)`` is evaluated once, at the largest ``m``, and
    carried down with ``P(m, x) = P(m + 1, x) + x^m e^-x / m!``: a sum of positive terms in log
    space, so it is exact and costs one ``gammainc`` per time rather than one per component.

    Parameters
    ----------
    t : numpy.ndarray
        Times in seconds (1-d).
    m : numpy.ndarray
        Integer numbers of departures waited for, ascending, >= 0.
    w : numpy.ndarray
        Mixture weights (summing to 1).
    mu : float
        Service rate of one server.
    c : int
        Number of servers.

    Returns
    -------
    numpy.ndarray
        The log density at each ``t``.
    """
    t = np.maximum(np.asarray(t, dtype=np.float64), 1e-300)
    m = np.asarray(m, dtype=np.int64)
    logw = dict(zip(m.tolist(), np.log(w).tolist(), strict=True))
    top = int(m.max())
    acc = np.full(t.shape, -np.inf)
    if c == 1:  # Erlang(m + 1, mu): each component is explicit
        log_t = np.log(t)
        for j, lw in logw.items():
            comp = (j + 1) * np.log(mu) + j * log_t - mu * t - special.gammaln(j + 1.0)
            acc = np.logaddexp(acc, lw + comp)
        return acc
    x = (c - 1) * mu * t
    if top >= 1:
        acc = _log_waited_mix(x, m[m > 0], np.log(w[m > 0]) + m[m > 0] * np.log(c / (c - 1.0)))
    if 0 in logw:
        acc = np.logaddexp(acc, logw[0])
    return np.log(mu) - mu * t + acc


def _log_gammainc(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``log P(a, x)``; where P is out of the normal range, its series in logs.

    ``P(a, x) = x^a e^-x / Gamma(a + 1) 1F1(1; a + 1; x)``: the leading term alone read
    ``log P(901, 176)`` 0.22 low, and a subnormal ``P`` keeps only a few digits.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        p = special.gammainc(a, x)
        out = np.log(p)
    bad = ~(p > 1e-300)
    if bad.any():
        a, x = np.broadcast_arrays(a, x)
        a, x = a[bad], x[bad]
        lead = a * np.log(np.maximum(x, 1e-300)) - x - special.gammaln(a + 1.0)
        out[bad] = lead + np.log(special.hyp1f1(1.0, a + 1.0, x))
    return out


def _closed_mix(n_clients: ArrayLike, mu: float, c: int, think_s: float, tol: float = 1e-10):
    """Per level: (m values, weights) of the response-time mixture seen by an arrival."""
    p = closed_arrival_distribution(n_clients, think_s, _mmc_rate(mu, c))
    k = np.arange(p.shape[1])
    m = np.maximum(k - c + 1, 0)
    out = []
    for row in p:
        w = np.bincount(m, weights=row)
        keep = np.flatnonzero(w > tol * w.max())
        out.append((keep.astype(np.float64), w[keep] / w[keep].sum()))
    return out


def closed_mmc_response_cdf(
    t: ArrayLike, n_clients: int, mu: float, c: int = 1, think_s: float = 0.0
) -> np.ndarray:
    """CDF of the response time in the finite-population M/M/c (FCFS), by the arrival theorem.

    Parameters
    ----------
    t : float or array_like
        Times in seconds.
    n_clients : int
        Concurrency N.
    mu : float
        Service rate of one server.
    c : int, default 1
        Number of servers.
    think_s : float, default 0.0
        Mean think time.

    Returns
    -------
    numpy.ndarray
        ``P(T <= t)``.
    """
    _check_rates(mu=mu, c=c)
    t_arr = _arr(t)
    ((m, w),) = _closed_mix([n_clients], mu, c, think_s)
    return np.tensordot(hypoexp_cdf(t_arr[..., None], m, mu, c), w, axes=([-1], [0]))


def closed_mmc_response_quantile(
    q: ArrayLike, n_clients: ArrayLike, mu: float, c: int = 1, think_s: float = 0.0
) -> np.ndarray:
    """Response-time quantiles of the finite-population M/M/c, one per concurrency level.

    Parameters
    ----------
    q : float or array_like
        Probabilities in (0, 1), broadcast with ``n_clients``.
    n_clients : int or array_like of int
        Concurrency levels.
    mu : float
        Service rate of one server.
    c : int, default 1
        Number of servers.
    think_s : float, default 0.0
        Mean think time.

    Returns
    -------
    numpy.ndarray
        Quantiles in seconds.
    """
    _check_rates(mu=mu, c=c)
    q_arr, n_arr = np.broadcast_arrays(_arr(q), np.asarray(n_clients))
    levels, idx = np.unique(n_arr.ravel().astype(np.int64), return_inverse=True)
    means = closed_mmc(levels, mu, c, think_s)["response_mean_s"].to_numpy()
    mixes = _closed_mix(levels, mu, c, think_s)
    # one padded (levels x components) mixture, so every quantile is inverted at once
    width = max(len(m) for m, _ in mixes)
    m_pad = np.zeros((len(levels), width))
    w_pad = np.zeros((len(levels), width))
    for i, (m, w) in enumerate(mixes):
        m_pad[i, : len(m)], w_pad[i, : len(w)] = m, w
    m_rows, w_rows = m_pad[idx], w_pad[idx]

    def cdf(t: np.ndarray) -> np.ndarray:
        return np.sum(hypoexp_cdf(t[:, None], m_rows, mu, c) * w_rows, axis=1)

    out = invert_cdf(cdf, q_arr.ravel(), means[idx], iters=60)
    return out.reshape(q_arr.shape)


def batch_service_rate(
    n: ArrayLike, slots: float, t0_s: float, t1_s: float, tokens: float = 1.0, gamma: float = 1.0
) -> np.ndarray:
    """Completion rate of a continuous-batching server holding ``n`` requests.

    ``min(n, B) / (L * (t0 + t1 * min(n, B) ** gamma))``: up to B sequences decode together,
    each step emits one token per sequence and lasts ``t0 + t1 * batch ** gamma`` (gamma = 1 is
    the linear step-time form; MoE models often grow sub-linearly), and a request needs ``L``
    steps (its output tokens, prefill folded into ``t0``).

    Parameters
    ----------
    n : int or array_like
        Requests at the server.
    slots : float
        Slot cap B (``inf`` for no cap).
    t0_s : float
        Fixed step time in seconds.
    t1_s : float
        Step time added per sequence in the batch (to the power ``gamma``).
    tokens : float, default 1.0
        Output tokens per request L (1 makes ``t0``, ``t1`` per-request times).
    gamma : float, default 1.0
        Growth exponent of the step time with batch size.

    Returns
    -------
    numpy.ndarray
        Requests/s completed.
    """
    b = np.minimum(_arr(n), slots)
    return b / (tokens * (t0_s + t1_s * b**gamma))


def batch_open(
    lam: ArrayLike,
    slots: int,
    t0_s: float,
    t1_s: float,
    tokens: float = 1.0,
    gamma: float = 1.0,
) -> pd.DataFrame:
    """Open (Poisson arrivals) continuous-batching server as a birth-death chain.

    Beyond ``slots`` requests the completion rate is constant, so the tail is geometric and
    summed in closed form.

    Parameters
    ----------
    lam : float or array_like
        Arrival rate in requests/s.
    slots : int
        Slot cap B.
    t0_s, t1_s : float
        Step-time parameters (see :func:`batch_service_rate`).
    tokens : float, default 1.0
        Output tokens per request.
    gamma : float, default 1.0
        Step-time growth exponent.

    Returns
    -------
    pandas.DataFrame
        ``lam``, ``utilization`` (lam over the capacity at B), ``in_system_mean``,
        ``response_mean_s``, ``batch_mean``, ``step_seen_s`` (the mean step time over a
        request's own steps: its mean inter-token latency), ``wait_mean_s`` (the part of the
        response time spent waiting for a slot).
    """
    if int(slots) < 1:
        raise ValueError("slots: slot cap must be a positive integer")
    return pd.DataFrame(_batch_open(np.atleast_1d(_arr(lam)), slots, t0_s, t1_s, tokens, gamma))


def _batch_open(
    lam_arr: np.ndarray, slots: int, t0_s: float, t1_s: float, tokens: float, gamma: float
) -> Columns:
    """Compute the columns of :func:`batch_open`, unvalidated.

    Several parameter sets at once: step-time parameters that are columns (shape ``(sets, 1)``)
    give a row per set (a fit's numerical Jacobian in one pass), each row as one set alone.
    """
    b = int(slots)

    def rate(n: np.ndarray) -> np.ndarray:
        return batch_service_rate(n, b, t0_s, t1_s, tokens, gamma)

    cap = rate(np.array([b]))
    rho = lam_arr / cap
    log_cum = _log_cum_rates(rate, b)
    n = np.arange(b + 1)
    with np.errstate(divide="ignore"):
        logw = n[None, :] * np.log(lam_arr)[:, None] - log_cum[..., None, :]
    logw[..., 0] = 0.0
    shift = logw.max(axis=-1, keepdims=True)
    w = np.exp(logw - shift)
    ok = rho < 1.0
    r = np.where(ok, rho, 0.0)
    # tail n > B: w_B * r^j, j >= 1: mass w_B r/(1-r), mean sum (B+j) w_B r^j
    tail_mass = w[..., -1] * r / (1.0 - r)
    tail_n = w[..., -1] * (b * r / (1.0 - r) + r / (1.0 - r) ** 2)
    z = w.sum(axis=-1) + tail_mass
    ls = (w @ n + tail_n) / z
    busy = (w @ np.minimum(n, b) + b * tail_mass) / z
    queued = w[..., -1] * r / (1.0 - r) ** 2 / z  # mean of (n - B)+
    # a request is in a step with batch k in proportion to k times the share of steps with k,
    # the time share over the step time: its mean step is E[k] / E[k / step(k)]
    steps = t0_s + t1_s * np.fmax(np.minimum(n, b), 1) ** gamma
    share = np.minimum(n, b) / steps
    full = steps[..., -1:]
    per_step = (w @ share if share.ndim == 1 else np.matmul(w, share[..., None])[..., 0]) + (
        b / full * tail_mass
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        resp = np.where(ok, ls / lam_arr, np.inf)
        seen = np.where(ok, busy * z / per_step, full)
    return {
        "lam": lam_arr,
        "utilization": rho,
        "in_system_mean": np.where(ok, ls, np.inf),
        "response_mean_s": resp,
        "batch_mean": np.where(ok, busy, b),
        "step_seen_s": seen,
        "wait_mean_s": np.where(ok, queued / lam_arr, np.inf),
    }


def batch_closed(
    n_clients: ArrayLike,
    slots: float,
    t0_s: float,
    t1_s: float,
    tokens: float = 1.0,
    gamma: float = 1.0,
    think_s: float = 0.0,
) -> pd.DataFrame:
    """Solve a closed continuous-batching server: N clients, think time Z.

    Parameters
    ----------
    n_clients : int or array_like of int
        Concurrency levels.
    slots : float
        Slot cap B (may be ``inf``).
    t0_s, t1_s : float
        Step-time parameters (see :func:`batch_service_rate`).
    tokens : float, default 1.0
        Output tokens per request.
    gamma : float, default 1.0
        Step-time growth exponent.
    think_s : float, default 0.0
        Mean think time.

    Returns
    -------
    pandas.DataFrame
        The columns of :func:`closed_queue` (whose chain this is) plus ``utilization`` (X over
        the capacity at B,
        or at the largest N when the cap is not reached).
    """
    nc = _clients(n_clients, think_s)

    def rate(n: np.ndarray) -> np.ndarray:
        return batch_service_rate(n, slots, t0_s, t1_s, tokens, gamma)

    out = _closed(nc, think_s, rate)
    cap = float(rate(np.array([min(slots, float(nc.max()))]))[0])
    out["utilization"] = out["throughput_rps"] / cap
    return pd.DataFrame(out)


def littles_law(
    *,
    in_system: ArrayLike | None = None,
    throughput: ArrayLike | None = None,
    response_s: ArrayLike | None = None,
) -> np.ndarray:
    """Little's law ``L = X * W``: give two of the three, get the third.

    Parameters
    ----------
    in_system : float or array_like, optional
        Mean number in the system L (for a closed loop with no think time, the concurrency).
    throughput : float or array_like, optional
        Throughput X in requests/s.
    response_s : float or array_like, optional
        Mean time in the system W in seconds.

    Returns
    -------
    numpy.ndarray
        The missing quantity.

    Raises
    ------
    ValueError
        Unless exactly two of the three are given.
    """
    given = [v is not None for v in (in_system, throughput, response_s)]
    if sum(given) != 2:
        raise ValueError("littles_law: give exactly two of in_system, throughput, response_s")
    if in_system is None:
        return _arr(throughput) * _arr(response_s)
    if throughput is None:
        return _arr(in_system) / _arr(response_s)
    return _arr(in_system) / _arr(throughput)


def _mmck_states(lam: np.ndarray, mu: float, c: int, k: int) -> np.ndarray:
    """M/M/c/K: probabilities of 0..k in the system (one row per arrival rate), in log space."""
    n = np.arange(k + 1)
    servers = np.minimum(np.maximum(n, 1), c)
    log_rate = np.concatenate([[0.0], np.cumsum(np.log(mu * servers[1:]))])
    with np.errstate(divide="ignore"):  # no load: log 0, and n log 0 is -inf past n = 0
        logw = special.xlogy(n[None, :], lam[:, None]) - log_rate[None, :]
    p = np.exp(logw - logw.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def _mmck_refusal_vif(lam: np.ndarray, mu: float, c: int, k: int) -> np.ndarray:
    """M/M/c/K: variance inflation of the refused count over binomial draws, per arrival rate.

    Refusals come in runs (while the system stays full), so over a long window the count of
    refused arrivals varies far more than ``n p (1 - p)``: past capacity it is about
    arrivals less departures, ``(lam + c mu) T`` against ``lam T p (1 - p)`` (a vif of 13 at
    120% load). Exactly: refusals are a counting process of rate ``f(x) = lam 1{x = K}``
    modulated by the birth-death chain of the system size; its asymptotic variance rate is
    ``lam pi_K + 2 pi (f~ D f~)`` with ``f~ = f - pi f`` and the chain's deviation matrix D
    (the refused arrivals do not move the chain, so no cross term). On a birth-death chain
    ``g = D f~`` steps by ``g_{n+1} - g_n = -F_n / (pi_n lam)``, ``F_n`` the sum of
    ``pi_m f~_m`` up to n (the flow across each cut), so ``pi (f~ g) = lam p^2 sum_n
    S_n^2 / pi_n`` over n < K, ``S_n`` the probability of n or fewer: a sum of positive
    terms, in log space, where a dense solve of the chain took a 2 ms linear system (and a
    threaded BLAS's stall on a loaded machine). Returns that over ``lam pi_K (1 - pi_K)``
    (1 where nothing is refused).
    """
    lam = np.atleast_1d(np.asarray(lam, dtype=np.float64))
    n = np.arange(k + 1)
    servers = np.minimum(np.maximum(n, 1), c)
    log_rate = np.concatenate([[0.0], np.cumsum(np.log(mu * servers[1:]))])
    with np.errstate(divide="ignore"):  # no load: log 0, and n log 0 is -inf past n = 0
        logw = special.xlogy(n[None, :], lam[:, None]) - log_rate[None, :]
    log_pi = logw - special.logsumexp(logw, axis=1, keepdims=True)
    log_below = np.logaddexp.accumulate(log_pi, axis=1)
    p = np.exp(log_pi[:, -1])
    # p sum_n S_n^2 / pi_n, each term bounded (pi_K / pi_n is large only where S_n is small)
    runs = np.exp(log_pi[:, -1:] + 2.0 * log_below[:, :-1] - log_pi[:, :-1]).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        vif = np.maximum((1.0 + 2.0 * runs) / (1.0 - p), 1.0)
    return np.where((p > 0.0) & (p < 1.0) & (lam > 0.0), vif, 1.0)
