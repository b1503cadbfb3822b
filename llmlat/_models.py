"""The station models the fitting code estimates, each in its open and closed (finite) form.

A model maps a parameter dict to per-level predictions (throughput, mean and quantiles of the
response time) for a closed-loop (``concurrency``) or open-loop (``rate``) sweep, and, where the
model gives a response-time distribution, to a per-request log-likelihood. Continuous
parameters are optimised on the log scale; the integer one (servers ``c`` or slot cap
``slots``) is profiled by the caller.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy import special
from threadpoolctl import ThreadpoolController

from llmlat import queueing as q
from llmlat._aggregate import QUANTILES, Observed

__all__ = ["MODELS", "Model"]


def _log_mmc_pdf(t: np.ndarray, lam: float, mu: float, c: int) -> np.ndarray:
    """Log density of the M/M/c response time (see :func:`llmlat.queueing.mmc_response_pdf`)."""
    pw = float(q.erlang_c(c, lam / mu))
    theta = c * mu - lam
    s, d = min(theta, mu), abs(theta - mu)
    x = d * t
    with np.errstate(divide="ignore", invalid="ignore"):
        log_h = np.where(x < 1e-12, 0.0, np.log(-np.expm1(-x)) - np.log(x))
        waited = np.log(pw) + np.log(theta) + np.log(t) - s * t + log_h
        no_wait = np.log1p(-pw) - mu * t
    return np.log(mu) + np.logaddexp(no_wait, waited)


def _mmck_mix(lam: float, mu: float, c: int, k: int, tol: float = 1e-10):
    """M/M/c/K: (departures waited for, weights) of an admitted arrival's response time.

    An admitted arrival finds n < K in the system (probability p_n / (1 - p_K), PASTA) and
    waits for max(n - c + 1, 0) departures at rate c mu before its own service.
    """
    p = q._mmck_states(np.array([float(lam)]), mu, c, k)[0, :-1]
    w = np.bincount(np.maximum(np.arange(k) - c + 1, 0), weights=p)
    keep = np.flatnonzero(w > tol * w.max())
    return keep.astype(np.float64), w[keep] / w[keep].sum()


#: Smallest system (K) whose refusals of a non-exponential service the fit counts
#: (:meth:`llmlat.fitting._estimate._Problem._refusals_count`): a queue of a few places refuses
#: at every load. On K alone, so the fit's terms do not change with the profiled c.
_REFUSALS_FROM_K = 8

#: Grid steps per service time on which :func:`_mgck_wait_cdf` tabulates the wait's law (at
#: most 8 times as many in all).
_GRID = 128

#: Places past K on which :func:`_mdck_cached` solves the chain's shape (at most c).
_MARGIN = 16

#: Places of :func:`_mg1k_chain` solved together.
_CHAIN_BLOCK = 32


@functools.cache
def _blas() -> ThreadpoolController:
    """The BLAS libraries loaded (found once: a look costs milliseconds)."""
    return ThreadpoolController()


def _mdck_states(lam: np.ndarray, mu: float, c: int, k: int) -> np.ndarray:
    """Constant service (M/D/c/K): probabilities of 0..K in the system, per arrival rate.

    Seen one service time D = 1 / mu apart, the system holds the requests that were waiting
    (all those in service have left) plus the arrivals since, a Poisson count of mean
    ``lam D``: an exact chain for the uncapped queue. Behind the cap the states below K keep
    that chain's shape (Tijms' approximation for M/G/c/c+N; exact for one server), solved on
    K + c states (a shape that exists past capacity too), and the full state takes what the
    carried load leaves: ``lam (1 - p_K) D`` busy servers on average.
    """
    lam = np.atleast_1d(np.asarray(lam, dtype=np.float64))
    return _mdck_cached(lam.tobytes(), float(mu), int(c), int(k)).copy()


@functools.lru_cache(maxsize=256)
def _mdck_cached(key: bytes, mu: float, c: int, k: int) -> np.ndarray:
    """:func:`_mdck_states` for the rates in ``key`` (a fit asks each parameter set's states
    for its mean, its throughput and its refusals).

    The chain is solved on the number waiting, y' = min(max(y + A - c, 0), Y), Y + c = K + c
    or, where the M/M/c/K chain (whose queue is longer) leaves no mass, less; the number in
    the system is then the waiting plus the arrivals since.
    """
    a_all = np.frombuffer(key, dtype=np.float64) / mu
    tails = q._mmck_states(np.frombuffer(key, dtype=np.float64), mu, c, k)
    big = tails > 1e-16 * tails.max(axis=1, keepdims=True)
    seen = k - np.argmax(big[:, ::-1], axis=1)  # the last state with mass
    tops = np.maximum(np.where(seen < k, seen + 1, k + min(c, _MARGIN)), c + 1)
    # one thread: a threaded BLAS stalls on these small solves on a loaded machine (30 s a fit)
    with _blas().limit(limits=1, user_api="blas"):
        return _mdck_rows(a_all, tops.tolist(), c, k)


def _mdck_rows(a_all: np.ndarray, tops: list[int], c: int, k: int) -> np.ndarray:
    """:func:`_mdck_cached`'s states, one row per offered load ``a_all`` (busy servers) on
    a chain truncated at ``tops`` in the system.

    The dense solve is most of a capped fit's time at many servers: what surrounds it is
    drawn for all the loads at once (each element as one row alone would draw it).
    """
    out = np.empty((len(a_all), k + 1))
    pmfs = q._poisson_pmf(np.arange(max(tops) + 1), a_all[:, None])
    served = np.arange(c + 1)
    all_served = special.pdtr(c - served, a_all[:, None])
    servers = np.minimum(np.arange(k), c)
    for row, (a, top) in enumerate(zip(a_all, tops, strict=True)):
        size = top - c + 1
        pmf = pmfs[row, : top + 1]
        # eqs[j, i] = pmf[j - i + c], the chance of moving from i to j waiting: a Toeplitz
        # matrix, read off one padded vector (2 size - 1 long) as diag[size - 1 + j - i]
        diag = np.concatenate([np.zeros(max(size - 1 - c, 0)), pmf[max(c - size + 1, 0) :]])
        step = diag.strides[0]
        eqs = np.lib.stride_tricks.as_strided(
            diag[size - 1 :], shape=(size, size), strides=(step, -step), writeable=False
        ).copy()
        eqs.flat[:: size + 1] -= 1.0
        eqs[0] = 0.0
        first = min(c, size - 1) + 1
        eqs[0, :first] = all_served[row, :first]  # all served
        eqs[0, 0] -= 1.0
        eqs[-1] = 1.0  # the top keeps any more: its balance is implied; sum to 1 instead
        rhs = np.zeros(size)
        rhs[-1] = 1.0
        waiting = np.clip(np.linalg.solve(eqs, rhs), 0.0, None)
        shape = np.zeros(k)
        # in the system: the waiting plus the arrivals since
        kept = min(top, k)
        shape[:kept] = np.convolve(pmf, waiting)[:kept]
        if shape.sum() <= 0.0:  # far past capacity: admitted into the last place
            shape[kept - 1] = 1.0
        shape /= shape.sum()
        busy = servers @ shape
        full = np.clip((a - busy) / (c + a - busy), 0.0, 1.0)
        out[row, :k] = (1.0 - full) * shape
        out[row, k] = full
    return out


def _mgck_mix(p: dict) -> float:
    """Behind a queue cap with service CV ``cv`` up to 1: the constant-service law's weight,
    ``1 - cv^2``, in its mixture with the exponential one (0 from CV 1 on)."""
    return max(1.0 - p.get("cv_s", 1.0) ** 2, 0.0)


def _mgck_states(lam: np.ndarray, p: dict) -> np.ndarray:
    """Probabilities of 0..K in the system behind a queue cap, per arrival rate.

    Exponential service: the M/M/c/K chain, exactly. One server with a measured service CV:
    the M/G/1/K chain with gamma service, exactly (:func:`_mg1k_states`). More servers past
    CV 1: :func:`_fast_server_states`. More servers and a CV below 1: the constant-service
    states of :func:`_mdck_states` and the exponential chain's, mixed in ``cv^2``
    (:func:`_mgck_mix`), as Cosmetatos and Kimura interpolate M/D/c and M/M/c. Against exact
    simulations of 10^6 requests behind a queue of 2c (c = 4 to 64, CV 0.05 and 0.5, 50-120%
    load; ``bench_mgc.py --capped``) the refused share is within 0.5 point (2 x
    10^6, CV 0.2-0.7: -0.3 to +0.1; ``bench_mgc.py --capped``); the exponential chain's is
    0.049 at c = 4 and 90% load, where 0.019 are refused.
    """
    lam = np.atleast_1d(np.asarray(lam, dtype=np.float64))
    parts = _mgck_parts(lam, p)
    return np.sum([weight * states for weight, states, _ in parts], axis=0)


def _mgck_parts(lam: np.ndarray, p: dict) -> list[tuple[float, np.ndarray, str]]:
    """Per arrival rate, the laws :func:`_mgck_states` mixes: (weight, states, kind), kind
    ``"exp"`` for the exponential one, ``"const"`` for the constant-service one (weighted by
    :func:`_mgck_mix`), ``"mg1"`` for one server's exact law and ``"fast"`` for several past
    CV 1 (:func:`_fast_server_states`), each alone."""
    mu, c, k = p["mu"], p["c"], p["k_sys"]
    if c == 1 and "cv_s" in p:
        return [(1.0, _mg1k_states(lam, mu, k, p["cv_s"]), "mg1")]
    if p.get("cv_s", 1.0) > 1.0:
        return [(1.0, _fast_server_states(lam, p), "fast")]
    const = _mgck_mix(p)
    parts = [(1.0 - const, q._mmck_states(lam, mu, c, k), "exp")]
    if const > 0.0:
        parts.append((const, _mdck_states(lam, mu, c, k), "const"))
    return parts


def _mmck_wait(lam: np.ndarray, p: dict) -> tuple[np.ndarray, np.ndarray]:
    """Behind a queue cap: per arrival rate, the probability that an admitted request waits
    and its mean wait.

    Each law of :func:`_mgck_parts` by its own states: the exponential one waits for
    n - c + 1 departures at rate c mu, the constant-service one its queue's mean by Little's
    law, ``L_q / (lam (1 - p_K))``; a measured CV up to 1 mixes them. One server (any CV) and
    several past CV 1: Little's law on the states of :func:`_mgck_parts`.
    """
    lam = np.atleast_1d(np.asarray(lam, dtype=np.float64))
    c, k = p["c"], p["k_sys"]
    n = np.arange(k + 1)
    waits, means = np.zeros(len(lam)), np.zeros(len(lam))
    for weight, states, kind in _mgck_parts(lam, p):
        admitted = 1.0 - states[:, -1]
        waits += weight * states[:, c:k].sum(axis=1) / admitted
        if kind != "exp":
            with np.errstate(divide="ignore", invalid="ignore"):
                mean = states @ np.maximum(n - c, 0) / (lam * admitted)
            means += weight * np.nan_to_num(mean)
        else:
            spells = np.maximum(n[:k] - c + 1, 0) / (c * p["mu"])
            means += weight * states[:, :k] @ spells / admitted
    return waits, means


def _mgck_wait_cdf(lam: float, p: dict) -> tuple[np.ndarray, np.ndarray]:
    """Behind a queue cap: the wait of an admitted request, P(W <= x) on a grid of x.

    Exponential service: n found means n - c + 1 departures at rate c mu (Erlang).
    Constant service D (Crommelin's argument, as Franx 2001 uses for M/D/c, in
    :func:`llmlat.queueing._mdc_wait_tail`): a request waits at most kD + u (0 <= u < D)
    exactly when those ahead of it at time u + kD number fewer than c, and those ahead of it
    D - u before its arrival that were waiting then, plus the arrivals since, come to fewer
    than (k + 1) c; with the time-average states of
    :func:`_mdck_states` below K. Behind the cap no admitted request waits as long as
    ``ceil((K - c) / c) D``: the law's mass beyond it (arrivals counted that the full system
    refused) is put there. One server: the exact M/G/1/K law of :func:`_mg1k_wait_cdf`, for
    any CV (mixing in ``cv^2`` read its p95 3-5% low at CV 0.2-0.5 and 8-40% high past 1).
    More servers and a CV past 1: :func:`_fast_server_wait_cdf`.
    """
    mu, c, k = p["mu"], p["c"], p["k_sys"]
    if c == 1 and "cv_s" in p:
        return _mg1k_wait_cdf(lam, mu, k, p["cv_s"])
    if p.get("cv_s", 1.0) > 1.0:
        return _fast_server_wait_cdf(lam, p)
    lam_a = np.array([float(lam)])
    parts = _mgck_parts(lam_a, p)
    d = 1.0 / mu
    bound = np.ceil((k - c) / c) * d  # no admitted request waits this long
    jobs = max(k - c, 1)
    far = max(bound, (jobs + 6.0 * np.sqrt(jobs) + 6.0) / (c * mu))
    x = np.arange(0.0, far + d / _GRID, max(d / _GRID, far / (8 * _GRID)))
    cdf = np.zeros(len(x))
    for weight, states, kind in parts:
        admitted = states[0, :k] / states[0, :k].sum()
        if kind == "const":
            # the uncapped law's argument on the admitted number waiting, which ends below K
            waiting = np.bincount(np.maximum(np.arange(k) - c, 0), weights=admitted)
            tail = q._mdc_wait_tail(x / d, lam * d, c, waiting, 0.0)
            part = np.where(x < bound, 1.0 - tail, 1.0)
        else:
            need = np.cumsum(np.bincount(np.maximum(np.arange(k) - c + 1, 0), weights=admitted))
            j = np.arange(len(need))
            served = q._poisson_pmf(j[None, :], (c * mu * x)[:, None])
            part = served @ need + (1.0 - served.sum(axis=1))
        cdf += weight * part
    return x, np.clip(cdf, 0.0, 1.0)


def _mg1k_chain(lam: np.ndarray, mu: float, k: int, cv: float) -> np.ndarray:
    """M/G/1/K with gamma service (mean ``1 / mu``, CV ``cv``): the number a departure leaves
    behind, 0..K-1, exactly; one row per arrival rate.

    A service of shape ``s = 1 / cv^2`` and rate ``s mu`` sees a negative binomial count J of
    Poisson arrivals, ``P(J >= m) = I_{rho / (s + rho)}(m, s)`` (the regularized incomplete
    beta function, ``rho = lam / mu``); a departure leaving i (or 0, the next service
    starting on an arrival) is followed by one leaving ``min(max(i, 1) - 1 + J, K - 1)``,
    those past the cap refused. Across the cut between j and j + 1 the chain moves down only
    from j + 1 with no arrival, so ``pi_{j+1} P(J = 0) = pi_0 P(J >= j + 1) + sum_{1 <= i <= j}
    pi_i P(J >= j - i + 2)``: a sum of positive terms, from pi_0 up (no cancellation). An
    admitted arrival sees this law too.

    The places go in blocks (a capped fit asks for this chain about a thousand times): in a
    block, the terms of its own places are a strictly lower triangular Toeplitz matrix N
    (divided by P(J = 0)), so the block is ``(I - N)^-1`` applied to what the places below
    it give, and ``(I - N)^-1 = (I + N)(I + N^2)(I + N^4)...`` (N is nilpotent): products
    of positive terms still.
    """
    lam = np.atleast_1d(np.asarray(lam, dtype=np.float64))
    shape, rho = 1.0 / cv**2, lam / mu
    ahead, log_none = _nbinom_tails(rho, shape, k)
    none = np.exp(log_none)
    pi = np.zeros((len(lam), k))
    pi[:, 0] = 1.0
    if k < 2:
        return pi
    # past capacity pi grows by up to 1 / P(J = 0) + 1 a place: blocks it cannot overflow in
    size = int(np.clip(200.0 / np.log1p(np.exp(-log_none.min())), 1, min(_CHAIN_BLOCK, k - 1)))
    gap = np.arange(size)[:, None] - np.arange(size)[None, :]
    step = np.where(gap > 0, ahead[:, np.clip(gap + 1, 0, k - 1)], 0.0) / none[:, None, None]
    inv, power, terms = np.eye(size) + step, step, 2
    while terms < size:
        power = power @ power  # N^terms
        inv = inv + inv @ power
        terms *= 2
    for start in range(1, k, size):
        stop = min(start + size, k)
        below = pi[:, :1] * ahead[:, start:stop]  # from pi_0, then from the places 1..start-1
        held = np.arange(start, stop)[:, None] - np.arange(1, start)[None, :] + 1
        below += np.einsum("rni,ri->rn", ahead[:, held], pi[:, 1:start])
        m = stop - start
        pi[:, start:stop] = np.einsum("rab,rb->ra", inv[:, :m, :m], below / none[:, None])
        top = pi.max(axis=1, keepdims=True)
        if top.max() > 1e100:
            pi /= top
    return pi / pi.sum(axis=1, keepdims=True)


def _nbinom_tails(rho: np.ndarray, shape: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """P(J >= m) for m = 0..k-1, one row per load ``rho``, and log P(J = 0): J the Poisson
    arrivals (``rho`` on average) during a gamma service of shape ``shape``, a negative
    binomial count.

    From the top down, with no cancellation: P(J >= k - 1) is the regularized incomplete
    beta function ``I_{rho / (s + rho)}(k - 1, s)``, and each P(J >= m) below it adds P(J =
    m), from P(J = 0) = (s / (s + rho))^s up by the ratios ``(m + s) / (m + 1) rho / (s +
    rho)`` (summed as logarithms): one incomplete beta function a load instead of k.
    """
    x = rho / (shape + rho)
    log_none = -shape * np.log1p(rho / shape)
    out = np.ones((len(rho), k))
    if k < 2:
        return out, log_none
    m = np.arange(k - 2)
    with np.errstate(divide="ignore"):  # no load: no arrival
        steps = np.log((m + shape) / (m + 1.0))[None, :] + np.log(x)[:, None]
    logs = np.concatenate([np.zeros((len(rho), 1)), np.cumsum(steps, axis=1)], axis=1)
    pmf = np.exp(log_none[:, None] + logs)  # P(J = j), j = 0..k-2
    top = special.betainc(k - 1.0, shape, x)[:, None]
    out[:, 1:-1] = top + np.cumsum(pmf[:, :0:-1], axis=1)[:, ::-1]
    out[:, -1:] = top
    return out, log_none


def _mg1k_states(lam: np.ndarray, mu: float, k: int, cv: float) -> np.ndarray:
    """M/G/1/K with gamma service: probabilities of 0..K in the system per arrival rate, exactly.

    From the departures' law ``pi`` (:func:`_mg1k_chain`): ``p_n = pi_n / (pi_0 + rho)`` below
    K and ``p_K = 1 - 1 / (pi_0 + rho)``, ``rho = lam / mu`` (the rate of departures, ``mu (1 -
    p_0)``, equals that of admitted arrivals, ``lam (1 - p_K)``).
    """
    lam = np.atleast_1d(np.asarray(lam, dtype=np.float64))
    out = np.zeros((len(lam), k + 1))
    pi = _mg1k_chain(lam, mu, k, cv)
    out[:, :k] = pi / (pi[:, :1] + (lam / mu)[:, None])
    out[:, k] = 1.0 - out[:, :k].sum(axis=1)
    return out


def _poisson_tails(y: np.ndarray, top: int) -> np.ndarray:
    """P(N >= n) for n = 1..top (rows) and N Poisson of each mean in ``y`` (columns).

    From the top down, with no cancellation: P(N >= top) is the regularized incomplete gamma
    function, and each P(N >= n) below it adds P(N = n) (one incomplete gamma function a
    mean instead of ``top``).
    """
    out = np.empty((top, len(y)))
    out[-1] = special.gammainc(top, y)
    if top > 1:
        n = np.arange(1, top)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):  # a mean of 0: no arrival
            pmf = np.exp(n * np.log(y) - y - special.gammaln(n + 1.0))
        out[:-1] = out[-1] + np.cumsum(np.nan_to_num(pmf[::-1]), axis=0)[::-1]
    return out


def _mg1k_wait_cdf(
    lam: float, mu: float, k: int, cv: float, points: int = 8 * _GRID
) -> tuple[np.ndarray, np.ndarray]:
    """M/G/1/K with gamma service: the FCFS wait of an admitted request, P(W <= x) on a grid.

    An admitted arrival that finds n (1 <= n < K) waits for the rest R of the service under
    way and n - 1 whole services. R depends on n: the service began with m in the system
    (services start at rate ``sigma_m``, proportional to ``pi_m``, plus ``pi_0`` for m = 1:
    :func:`_mg1k_chain`), and n - m arrived during the u it has run, so (the supplementary
    variable's density of the time-average state) ``P(n, R in dr) ~ sum_m sigma_m int
    Poisson(n - m; lam u) b(u + r) du dr``, b the service density: exact, tabulated on a grid
    of ``h`` (a whole number of steps per mean service; the Poisson weights integrated over
    each step of u, R's masses by the service CDF, one FFT correlation), each n's mass scaled
    to ``pi_n``, then convolved with the gamma law of n - 1 services. Exact at constant
    service on the grid's points; ``points`` grid steps in all (at most :data:`_GRID` a mean
    service), which at 1,024 moves the p95 by 0.03% from four times as many.
    """
    shape = 1.0 / cv**2
    rate = shape * mu
    pi = _mg1k_chain(np.array([lam]), mu, k, cv)[0]
    far = float(special.gammainccinv(shape * max(k - 1, 1) + 1.0, 1e-9)) / rate
    # a whole number of steps per mean service: near-constant services land on grid points
    per = int(np.ceil(min(float(_GRID), points / (far * mu))))
    h = 1.0 / (mu * per)
    n_x = int(np.ceil(far / h))
    x = np.arange(n_x + 1) * h
    if k < 2 or lam <= 0.0:
        return x, np.ones(n_x + 1)
    n = np.arange(1, k)
    # w[n - 1](u) = sum_m sigma_m Poisson(n - m; lam u), integrated over each step of u
    starts = pi[1:].copy()
    starts[0] += pi[0]
    ahead = n[:, None] - n[None, :]
    toeplitz = np.where(ahead >= 0, starts[np.clip(ahead, 0, None)], 0.0)
    w = toeplitz @ np.diff(_poisson_tails(lam * x, k - 1), axis=1) / lam
    # the service's mass in [u + i h, u + (i + 1) h): half-shifted cells
    served = np.diff(special.gammainc(shape, rate * (np.arange(2 * n_x + 2) + 0.5) * h))
    size = 1 << int(np.ceil(np.log2(3 * n_x + 2)))
    spec = np.conj(np.fft.rfft(w, size)) * np.fft.rfft(served, size)
    rest = np.fft.irfft(spec, size)[:, :n_x]
    rest = np.clip(rest, 0.0, None)
    total = rest.sum(axis=1)
    rest *= np.where(total > 0, pi[1:] / np.where(total > 0, total, 1.0), 0.0)[:, None]
    # n - 1 whole services: one's mass at each grid point (the cell around it), to the power
    single = special.gammainc(shape, rate * (np.arange(n_x) + 0.5) * h)
    one = np.fft.rfft(np.diff(single, prepend=0.0), size)
    spec = np.zeros(size // 2 + 1, dtype=complex)
    for part in np.fft.rfft(rest, size)[::-1]:  # Horner: sum_n R_n S^(n - 1)
        spec = spec * one + part
    mass = np.clip(np.fft.irfft(spec, size)[:n_x], 0.0, None)
    cdf = np.concatenate([[pi[0]], pi[0] + np.cumsum(mass)])
    cdf[-1] = 1.0  # what lies past the grid, at its end
    return x, np.clip(cdf, 0.0, 1.0)


def _fast_server_states(lam: np.ndarray, p: dict) -> np.ndarray:
    """Behind a queue cap, c > 1 servers with a service CV past 1: probabilities of 0..K in
    the system, per arrival rate.

    Below c, the M/M/c/K chain's shape; from c on, that of one server c times as fast behind
    the same queue (M/G/1/(K - c + 1), exactly: :func:`_mg1k_states`), its n - c + 1 in the
    system, with the CV of :func:`_fast_server_cv`. Their two weights make the probabilities
    sum to 1 and the busy servers carry the admitted load, ``sum min(n, c) p_n = lam (1 -
    p_K) / mu``: exact for one server and for exponential service (the M/M/c/K chain).
    Against exact simulations behind a queue of 2c (c = 2 to 64, CV 1.5 to 3, 50-120% load,
    10^6 requests a point, 4 x 10^5 at c = 64; ``bench_mgc.py --capped``) the refused share
    reads -0.5 to +0.2 point, P(wait) -1.2 to +1.0 point and the mean -1.9% to +1.1%; with
    the service's own CV they had read -0.5 to +1.3, -6.2 to +1.0 and -4.7% to +2.6%, the
    M/M/c/K chain's refused share 0.049 where 0.101 are refused (c = 4, CV 2, 90% load),
    and the mean by whole service spells (the law before those) up to 6.5% high.
    """
    lam = np.atleast_1d(np.asarray(lam, dtype=np.float64))
    c, k = int(p["c"]), int(p["k_sys"])
    key = (lam.tobytes(), float(p["mu"]), c, k, _fast_server_cv(p["cv_s"], c, k))
    return _fast_server_cached(*key).copy()


#: How much of the service's variability the fast server of :func:`_fast_server_states` gives
#: up on many servers: its CV is ``cv ** (1 - _SUPERPOSED (c - 1) / K)``.
_SUPERPOSED = 0.4


def _fast_server_cv(cv: float, c: int, k: int) -> float:
    """The service CV of :func:`_fast_server_states`' one server c times as fast, K places.

    c servers' completions over the time a short queue drains vary less than those of one
    server c times as fast with the same CV (over a short while they are nearly Poisson;
    only over a long one do they vary as much), so a fast server with the service's CV
    stays full too long: its P(wait) read up to 6 points low behind a queue of 2c and up to
    17 behind one of c / 4, its refused share up to 1.3 points high and its mean past
    capacity up to 4.7% low (c = 2 to 64, CV 1.5 to 3). ``cv ** (1 - 0.4 (c - 1) / K)``
    gives up more of the CV the more servers there are and the shorter the queue (K - c) is
    against them; its one constant fitted exact simulations of those cases (queues of c / 4,
    2c and 4c; 10^6 to 5 x 10^6 requests a point), where P(wait) then reads -1.3 to +1.8
    points, the refused share -0.5 to +0.3 and the mean -2.4% to +1.2%. It keeps one server
    (c = 1), exponential service and no queue (K = c, insensitive) exact.
    """
    return float(cv) ** (1.0 - _SUPERPOSED * (c - 1) / k)


@functools.lru_cache(maxsize=256)
def _fast_server_cached(key: bytes, mu: float, c: int, k: int, cv: float) -> np.ndarray:
    """:func:`_fast_server_states` for the rates in ``key`` (a fit asks each parameter set's
    states for its mean, its throughput and its refusals)."""
    lam = np.frombuffer(key, dtype=np.float64)
    fast = _mg1k_states(lam, c * mu, k - c + 1, cv)
    slow = q._mmck_states(lam, mu, c, k)
    a = (lam / mu)[:, None]
    below_c = slow[:, :c]
    n = np.arange(c)
    # the two weights in closed form, over the load a: each a sum of terms of one sign, the
    # chains' own balances (c (1 - f_0) = a (1 - f_K) for the fast server, the same for the
    # M/M/c/K chain) taking out the differences that cancel near no load and past capacity
    fast_full = fast[:, -1:]
    det = (1.0 - fast_full) * (below_c @ (c - n)[:, None]) / c
    det += fast_full * below_c.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):  # no load: the empty system
        lack = np.where(
            a < c,
            slow[:, c:].sum(axis=1, keepdims=True) * (c - a) / a + slow[:, -1:],
            ((1.0 - n / a) * below_c).sum(axis=1, keepdims=True),
        )
        above = np.where(a > 0, lack / det, 0.0)
    below = fast[:, :1] / det
    return np.concatenate([below * slow[:, :c], above * fast[:, 1:]], axis=1)


def _fast_server_wait_cdf(lam: float, p: dict) -> tuple[np.ndarray, np.ndarray]:
    """Behind a queue cap, c > 1 servers with a service CV past 1: the wait of an admitted
    request, P(W <= x) on a grid.

    It waits with the probability of :func:`_fast_server_states`, and then as in one server
    c times as fast with the CV of :func:`_fast_server_cv` and the same queue (M/G/1/(K - c
    + 1), exactly: :func:`_mg1k_wait_cdf`) given that it waits: the same law those states
    take from c on, so the wait's mean is theirs by Little's law. Against exact simulations
    behind a queue of 2c (c = 2 to 64, CV 1.5 to 3, 50-120% load, 10^6 requests a point, 4
    x 10^5 at c = 64; ``bench_mgc.py --capped``) the response's p95 reads -1.1% to +1.4%
    and its p99 -1.0% to +0.8% (-1.7% to +0.9% and -0.5% to +0.6% behind queues of c / 4
    and 4c); with the service's own CV they had read up to 4.6% and 3.9%
    high (c = 2 and 4 at CV 3), with the M/M/c/K chain's probability of waiting up to 5.7%
    and 3.2% high, and the gamma law by whole service spells (the law before those) the p95
    up to 7% high and the p99 up to 17% low.
    """
    mu, c, k = p["mu"], p["c"], p["k_sys"]
    # a coarse grid, 8 steps a place (0.1-0.5% on the p95): a plan asks for hundreds of these
    places = k - c + 1
    cv = _fast_server_cv(p["cv_s"], c, k)
    x, fast = _mg1k_wait_cdf(lam, c * mu, places, cv, points=max(2 * _GRID, 8 * places))
    states = _fast_server_states(np.array([float(lam)]), p)[0]
    waits = states[c:k].sum() / (1.0 - states[k])
    if fast[0] >= 1.0:
        return x, np.ones(len(x))
    return x, 1.0 - waits + waits * (fast - fast[0]) / (1.0 - fast[0])


def _mmck_quantile(prob: float, loads: np.ndarray, p: dict) -> np.ndarray:
    """Response-time quantile of admitted requests behind a queue cap.

    Exponential service: the exact mixture of :func:`_mmck_mix`. A measured service CV: the
    wait of :func:`_mgck_wait_cdf` plus an independent service, gamma with mean ``1 / mu``
    and that CV. Against exact simulations of 10^6 requests behind a queue of 2c (c = 1 to
    64, 50-120% load, CV 0.05-2; ``bench_mgc.py --capped``): one server's law is exact
    (within the simulation's 0.1-0.8%); on 4 to 64 servers (2 x 10^6 requests) the p95 reads
    -1.2% to +1.1% and the p99 -1.4% to +1.8% at CV 0.2-0.7 (the mixture in ``cv^2``), and
    on 2 to 64 servers at CV 1.5-3 (10^6 requests, 4 x 10^5 at c = 64) -1.1% to +1.4%
    (p95) and -1.0% to +0.8% (p99; :func:`_fast_server_wait_cdf`). The gamma law with the
    mean and variance of the wait by whole service spells (the law before) had read 4
    near-constant servers 6% low at 70% load, and the p99 of 64 at CV 2 17% low at 120%.
    """
    mu, c, k = p["mu"], p["c"], p["k_sys"]
    out = np.empty(len(loads))
    cv = p.get("cv_s")
    if cv is not None:
        shape = 1.0 / cv**2
        for i, lam in enumerate(loads):
            x, f = _mgck_wait_cdf(float(lam), p)
            # the wait's mass in each grid step at the step's middle, the atom at 0 at 0
            at = np.concatenate([[0.0], 0.5 * (x[1:] + x[:-1])])
            mass = np.diff(f, prepend=0.0)
            keep = mass > 1e-12
            at, mass = at[keep], mass[keep]
            cdf = lambda t, at=at, mass=mass: (  # noqa: E731
                special.gammainc(shape, shape * mu * np.clip(t[..., None] - at, 0.0, None)) @ mass
            )
            out[i] = q._invert_smooth_cdf(cdf, np.array([prob]), 1.0 / mu + x[-1], 1e-9)[0]
        return out
    for i, lam in enumerate(loads):
        m, w = _mmck_mix(lam, mu, c, k)
        cdf = lambda t, m=m, w=w: q.hypoexp_cdf(t[..., None], m, mu, c) @ w  # noqa: E731
        out[i] = q.invert_cdf(cdf, prob, 1.0 / mu + float(w @ m) / (c * mu))
    return out


@dataclass(frozen=True)
class Model:
    """One station model; see :data:`MODELS` for the instances.

    Attributes
    ----------
    name : str
        The name users pass to ``fit(model=...)``.
    integer : str or None
        Name of the profiled integer parameter, if any.
    free : tuple of str
        Continuous parameters estimated on the log scale.
    kinds : tuple of str
        Sweep kinds the model applies to.
    distribution : bool
        Whether a per-request likelihood (maximum likelihood) is available.
    """

    name: str
    integer: str | None
    free: tuple[str, ...]
    kinds: tuple[str, ...] = ("concurrency", "rate")
    distribution: bool = True

    @property
    def family(self) -> str:
        """``"batch"`` or ``"mmc"`` (the M/M/c family: mm1, mmc, mgc, closed)."""
        return "batch" if self.name == "batch" else "mmc"

    def params(self, theta: np.ndarray, k: int | None, fixed: dict) -> dict:
        """Natural-scale parameters from log-scale ``theta``, the integer and fixed values."""
        p = dict(fixed)
        p.update(zip(self.free, np.exp(theta), strict=True))
        if self.integer:
            if k is None:
                raise ValueError(f"{self.integer}: the model needs its integer parameter")
            p[self.integer] = int(k)
        if self.name == "mm1":
            p["c"] = 1
        return p

    def rate(self, p: dict):
        """Total completion rate as a function of the number at the station."""
        if self.family == "batch":
            args = (p["slots"], p["t0_s"], p["t1_s"], p["tokens"], p["gamma"])
            return lambda n: q.batch_service_rate(n, *args)
        return lambda n: p["mu"] * np.minimum(n, p["c"])

    def capacity(self, p: dict) -> float:
        """Largest throughput the station can sustain, requests/s."""
        return float(self.capacities(p))

    def capacities(self, p: dict) -> np.ndarray:
        """:meth:`capacity` of each parameter set when the parameters are columns."""
        if self.family == "batch":
            b = p["slots"]
            return q.batch_service_rate(b, b, p["t0_s"], p["t1_s"], p["tokens"], p["gamma"])
        return np.asarray(p["c"] * p["mu"], dtype=np.float64)

    def predict(
        self,
        p: dict,
        loads: np.ndarray,
        kind: str,
        stats: tuple[str, ...],
        think: np.ndarray | None = None,
    ) -> dict:
        """Predicted ``throughput_rps`` and ``<stat>_s`` for each load (``inf`` past saturation).

        The batch family adds ``itl_s``: the step time of the mean batch at that load, the mean
        inter-token latency of a streamed request.

        ``think`` (closed loop) gives each load its own think time instead of ``p["think_s"]``.
        """
        loads = np.asarray(loads, dtype=np.float64)
        if kind == "concurrency" and think is not None and "think_s" not in self.free:
            parts = [
                self.predict({**p, "think_s": float(z)}, np.array([n]), kind, stats)
                for n, z in zip(loads, np.broadcast_to(think, loads.shape), strict=True)
            ]
            return {k: np.concatenate([d[k] for d in parts]) for k in parts[0]}
        out = {}
        if self.family == "batch":
            args = (p["slots"], p["t0_s"], p["t1_s"], p["tokens"], p["gamma"])
            join = p.get("join_steps", 0.0)
            # a request's own time outside the decode steps: the network and client round
            # trip and its prefill (measured at one client: fitting._estimate._overhead)
            overhead = p.get("overhead_s", 0.0)
            if kind == "rate":
                df = q._batch_open(np.atleast_1d(loads), *args)
                busy = df["batch_mean"]
                step = p["t0_s"] + p["t1_s"] * busy ** p["gamma"]
                # past the cap the slots are B servers of a service as variable as the
                # output length, not exponential: the wait for a slot scaled as
                # Allen-Cunneen's, (1 + cv^2) / 2
                cv2 = p.get("tokens_cv", 1.0) ** 2
                wait = df["wait_mean_s"]
                with np.errstate(invalid="ignore"):
                    mean = df["response_mean_s"] - wait * (1.0 - cv2) / 2.0
                mean = mean + join * step + overhead
            else:
                # a request joins the batch at the next step boundary: that wait holds no
                # slot, so in a closed loop it acts as think time, as the overhead does; an
                # idle server starts a step at once, and the other N - 1 clients keep it busy
                # unless all of them are between requests (each is, a share
                # away / (tokens + away) of the time, in steps)
                b = np.minimum(loads, p["slots"])
                step = p["t0_s"] + p["t1_s"] * b ** p["gamma"]
                own = overhead / step
                busy_at_send = 1.0 - ((join + own) / (p["tokens"] + join + own)) ** (loads - 1.0)
                away = join * busy_at_send + own
                share = away / (p["tokens"] + away)
                # the step it sits out is the others' batch: the other N - 1 less those between
                # requests, without itself
                others = np.minimum((loads - 1.0) * (1.0 - share), p["slots"])
                delay = join * busy_at_send * (p["t0_s"] + p["t1_s"] * others ** p["gamma"])
                x, ls = q._closed_means(loads, p["think_s"] + delay + overhead, self.rate(p))
                mean = ls / x + delay + overhead
                busy = np.minimum(ls, p["slots"])
                # a request sees the batches it is in: size-biased, E[b^2] / E[b]. Below the
                # cap the batch is N less those between requests (binomial, share ``share``),
                # its variance over its mean is ``share``; a queue for slots fills the gaps.
                # Counted in steps, not time (the chain's mean weighs the longer steps of the
                # larger batches more: 0.02-0.06% on the step time below the cap)
                batch = np.where(loads > p["slots"], busy, loads * (1.0 - share))
                gaps = np.clip((p["slots"] - batch) / np.fmax(p["slots"] * share, 1e-12), 0, 1)
                # clients in step (equal output lengths) are away together, never in each
                # other's gaps: they see the whole batch, min(N, slots), but for one. Below
                # the cap the server idles while they are away; the first back starts a step
                # alone and stays a step ahead, so the others' last step lacks it: 1 of the
                # L - 1 steps their inter-token latency times
                in_step = p.get("in_step", 0.0)
                ahead = np.where(loads <= p["slots"], (b - 1.0) / b, 0.0)
                step_mates = b - ahead / max(p["tokens"] - 1.0, 1.0)
                seen = in_step * step_mates + (1.0 - in_step) * (batch + share * gaps)
            # the decode step time at the batch a request sees (what a streamed request's
            # inter-token latency measures), and the mean time decoding; the rest of ``mean``
            # is waiting
            if kind == "rate":  # a request's own steps: more of them in the larger batches
                itl = df["step_seen_s"]
            else:
                itl = p["t0_s"] + p["t1_s"] * seen ** p["gamma"]
            service = p["tokens"] * (p["t0_s"] + p["t1_s"] * busy ** p["gamma"])
        elif kind == "rate" and "k_sys" in p:  # a queue cap: M/M/c/K states
            mean = _mmck_wait(loads, p)[1] + 1.0 / p["mu"]
        elif kind == "rate":  # the open M/G/c model's mean, with the measured service CV
            mean = q._mgc_wait_mean(loads, p["mu"], p["c"], p.get("cv_s", 1.0)) + 1.0 / p["mu"]
        elif "cv_s" in p and np.all(p["think_s"] > 0):
            # general service with think time: the closed M/G/c law, by the think time's CV
            args = (p["mu"], p["c"], p["think_s"], p["cv_s"], p.get("think_cv", 1.0))
            mean = q._closed_mgc_mean(loads.astype(np.int64), *args)
            x = loads / (mean + p["think_s"])
        else:
            x, ls = q._closed_means(loads, p["think_s"], self.rate(p))
            mean = ls / x
        if kind == "rate" and "k_sys" in p and self.family == "mmc":
            out["throughput_rps"] = loads * (1.0 - self.blocking(p, loads))
        else:
            out["throughput_rps"] = np.minimum(loads, self.capacities(p)) if kind == "rate" else x
        out["mean_s"] = mean
        if self.family == "batch":
            out["itl_s"] = np.asarray(itl, dtype=np.float64)
        for s in stats:
            prob = QUANTILES[s]
            if prob is None:
                continue
            if self.family == "batch":
                out[f"{s}_s"] = self._batch_quantile(p, prob, mean, service)
            else:
                out[f"{s}_s"] = self._quantile(p, loads, kind, prob)
        return out

    @staticmethod
    def _batch_quantile(p: dict, prob: float, mean: np.ndarray, service: np.ndarray):
        """Response-time quantile of continuous batching, an approximation.

        A request decodes its own L tokens at the step time of the mean batch, so its time in
        the batch is L / mean(L) times the mean one; the wait for a slot (and for the next
        step) is taken at its mean. The quantile is that of L, measured (``tokens_q``).
        """
        ratio = p.get("tokens_q", {}).get(prob, 1.0)
        with np.errstate(invalid="ignore"):
            return np.where(np.isfinite(mean), mean + (ratio - 1.0) * service, np.inf)

    @staticmethod
    def blocking(p: dict, loads: np.ndarray) -> np.ndarray:
        """Share of arrivals refused by a queue cap at each open-loop rate (M/M/c/K; with a
        measured service CV, :func:`_mgck_states`)."""
        return _mgck_states(np.atleast_1d(loads), p)[:, -1]

    def _quantile(self, p: dict, loads: np.ndarray, kind: str, prob: float) -> np.ndarray:
        if kind == "rate" and "k_sys" in p:
            return _mmck_quantile(prob, loads, p)
        # a measured service CV (set only where it is clearly not 1): the general service law,
        # open or closed by the load's kind (a plan asks an open fit for its concurrency too)
        if "cv_s" in p and kind == "rate":
            return q.mgc_response_quantile(prob, loads, p["mu"], p["c"], p["cv_s"])
        if "cv_s" in p:
            return q.closed_mgc_response_quantile(
                prob,
                loads.astype(np.int64),
                p["mu"],
                p["c"],
                p["think_s"],
                p["cv_s"],
                p.get("think_cv", 1.0),
            )
        if kind == "rate":
            stable = loads < p["c"] * p["mu"]
            res = np.full(loads.shape, np.inf)
            if stable.any():
                res[stable] = q.mmc_response_quantile(prob, loads[stable], p["mu"], p["c"])
            return res
        return q.closed_mmc_response_quantile(
            prob, loads.astype(np.int64), p["mu"], p["c"], p["think_s"]
        )

    def loglikeobs(self, p: dict, obs: Observed) -> np.ndarray:
        """Per-request log-likelihood of the measured times (M/M/c family only)."""
        levels = obs.levels["level"].to_numpy()
        c, mu = p["c"], p["mu"]
        parts = []
        if obs.kind == "rate" and "k_sys" in p:
            for lam, t in zip(levels, obs.request_times, strict=True):
                m, w = _mmck_mix(lam, mu, c, p["k_sys"])
                parts.append(q.hypoexp_mix_logpdf(t, m, w, mu, c))
            return np.concatenate(parts)
        if obs.kind == "rate":
            for lam, t in zip(levels, obs.request_times, strict=True):
                if lam >= c * mu:
                    parts.append(np.full(t.shape, -1e6))  # unstable: not a steady state
                else:
                    parts.append(_log_mmc_pdf(t, lam, mu, c))
            return np.concatenate(parts)
        think = p.get("level_think_s") if "think_s" not in self.free else None
        if think is None:
            mixes = q._closed_mix(levels.astype(np.int64), mu, c, p["think_s"])
        else:
            mixes = [
                q._closed_mix([int(n)], mu, c, float(z))[0]
                for n, z in zip(levels, think, strict=True)
            ]
        for (m, w), t in zip(mixes, obs.request_times, strict=True):
            if len(m) == 1:
                parts.append(q.hypoexp_logpdf(t, m[0], mu, c))
            else:
                parts.append(q.hypoexp_mix_logpdf(t, m, w, mu, c))
        return np.concatenate(parts)

    def int_range(self, obs: Observed) -> tuple[int, int]:
        """Integers worth profiling: from 1 to the point where the data cannot tell more."""
        lv = obs.levels
        if obs.kind == "concurrency":
            return 1, max(int(lv["level"].max()), 1)
        # open loop: busy servers ~ lam * service time; 4x that is a queue-free station
        busy = float(lv["level"].max() * np.nanmin(lv["mean_s"]))
        hi = max(int(np.ceil(4 * busy)), 8)
        return 1, hi if obs.system_k is None else min(hi, obs.system_k)

    def start(self, k: int | None, obs: Observed, fixed: dict) -> np.ndarray:
        """Starting values of the log-scale continuous parameters."""
        lv = obs.levels
        means = lv["mean_s"].to_numpy()
        if not np.isfinite(means).any():
            means = lv["p50_s"].to_numpy() / np.log(2)
        if self.family == "batch":
            return self._batch_start(lv["level"].to_numpy(), means, k, fixed)
        c = 1 if self.name == "mm1" or k is None else int(k)
        mu = 1.0 / float(np.nanmin(means))
        if obs.kind == "rate" and obs.system_k is None:
            mu = max(mu, 1.2 * float(lv["level"].max()) / c)
        theta = [np.log(mu)]
        if "think_s" in self.free:
            z = fixed.get("think_s_start", 0.0)
            theta.append(np.log(z if z > 0 else 0.05 * float(np.nanmin(means))))
        return np.asarray(theta)

    def _batch_start(self, n: np.ndarray, means: np.ndarray, k: int | None, fixed: dict):
        tokens = fixed["tokens"]
        ok = np.isfinite(means) & (n <= (k or np.inf))
        if ok.sum() >= 2:
            slope, icept = np.polyfit(n[ok], means[ok] / tokens, 1)
        else:
            slope, icept = 0.0, float(np.nanmin(means)) / tokens
        if "itl_levels" in fixed and k is not None:  # streamed: the step times say it best
            levels, itl, se = fixed["itl_levels"]
            icept, slope = _segmented_step(levels, itl, se, k)
        base = float(np.nanmin(means)) / tokens
        t0 = icept if icept > 0.05 * base else 0.5 * base
        t1 = slope if slope > 1e-6 * base else 0.01 * base
        theta = [np.log(t0), np.log(t1)]
        if "gamma" in self.free:
            theta.append(0.0)
        if "join_steps" in self.free:
            theta.append(np.log(0.5))
        return np.asarray(theta)


def _segmented_step(n: np.ndarray, itl: np.ndarray, se: np.ndarray, slots: int):
    """Step-time line of a threshold regression of ITL on min(N, slots) (weighted least squares).

    The inter-token latency at a level is the step time of a batch of min(N, slots); at a
    given cap that is a straight line, t0 + t1 * min(N, slots). Solved directly (statsmodels'
    WLS gives the same line, at 20 ms a call, once per cap profiled: a third of a fit).
    """
    x = np.minimum(n, slots).astype(np.float64)
    if np.ptp(x) == 0:
        return 0.0, 0.0
    w = 1.0 / np.fmax(se, 1e-6 * itl)
    design = np.column_stack([np.ones_like(x), x]) * w[:, None]
    t0, t1 = np.linalg.lstsq(design, itl * w, rcond=None)[0]
    return float(t0), float(t1)


def _batch(*extra: str) -> Model:
    return Model("batch", "slots", ("t0_s", "t1_s", *extra), distribution=False)


#: Model name -> Model. ``batch_linear``: the issue's linear step time, plus ``join_steps``
#: (0..1), the wait for the next step boundary before a request joins the batch, which holds no
#: slot; ``batch`` adds the step-time exponent ``gamma``, kept only when it earns its parameter
#: (AIC); ``batch_few``: the linear form without the join wait, for sweeps with few levels.
MODELS: dict[str, Model] = {
    "mm1": Model("mm1", None, ("mu",)),
    "mmc": Model("mmc", "c", ("mu",)),
    "closed": Model("closed", "c", ("mu", "think_s"), kinds=("concurrency",)),
    "mgc": Model("mgc", "c", ("mu",), kinds=("rate",), distribution=False),
    "batch_few": _batch(),
    "batch_linear": _batch("join_steps"),
    "batch": _batch("gamma", "join_steps"),
}
