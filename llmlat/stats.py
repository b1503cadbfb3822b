"""Per-level estimates and their intervals: the one place llmlat computes them.

The summary table, the fitting code's observations, the figures and the report all take their
per-level numbers from here, so a level's p95, its interval and its throughput are the same
wherever they are shown.

Definitions (per level of one sweep):

- **Transient.** A closed-loop level with N > 1 clients starts empty, its client 0 alone and the
  others spread over that client's first cycle (so near-constant servers do not start in phase,
  see ``Sweeper._stagger``); every send up to its last client's first (warmup rows
  included; at least the first N, :func:`_first_round`) belongs to that start-up. An open-loop
  level's start-up is cut by MSER-5 on the latencies in send order (batches of 5; the
  truncation point that minimises the standard error of the remaining mean, searched over
  the first half), only when the part cut is faster on average than the rest (a
  queue that starts empty starts fast; cutting an early burst of slow requests biases low),
  on the answered rows' latencies; every row sent before the first kept one is transient, its
  refusals too (a capped queue refuses nothing until it has filled). Behind a queue cap, when
  the latencies before a level's first 429 keep growing, the queue was filling: every row
  sent before that refusal is transient, however long the fill.
  Measured rows in the transient are marked ``"transient"`` by :func:`phases`; they stay in the
  data, count in ``n`` and the error rates, and are left out of every latency statistic and of
  the fits.
- **Steady window** (:func:`steady_window`): from the later of the level's first completion and
  the end of its transient, to its last send (after which the level drains with fewer requests
  in flight). The transient ends when its last row has ended (a closed loop's first round
  sent at once, as the engine did before it spread the clients) or, where its sends spread
  past the first completion (an open loop, a closed loop's spread start), at its last send:
  an overloaded open level's transient rows end long after that, and waiting for them left
  a short, late window whose rate ran 10-15% low at c = 64. Where nothing was cut
  (a queue that does not build up) the window starts once the level holds its mean number in
  flight: from its first completion it was still filling, and the fill went uncounted (-11%
  at 50 arrivals holding 10, -20% at 200 holding 50). A saturated open level (its queue
  grows, or fills its cap) is counted while all its servers are busy (:func:`_busy`): from
  when they all are to when the queue left at its last send no longer keeps them so; its
  latencies' transient is half of it, and counting from its end dropped half the
  completions. An open level's
  **throughput** is the ok completions ending inside it (rows of every phase: a warmup request
  still keeps the server busy) over its length.
- **A closed level's throughput** is Little's law, ``X = N / mean(R + Z)``, on the requests sent
  past the first round and before the last N sends (``R`` their latencies, ``Z`` the think time
  after each, to its client's next send, from the rows' ``worker`` (:func:`think_times`); a
  client's last request thinks the mean). Without the clients it is ``L / mean(R)``, ``L`` the
  mean number in flight from the first of their sends to the level's last, for clients that do
  not think (L at least 90% of N). Only for a level where every measured request succeeded: one
  that fails requests is past a limit of the server, which completes requests at its capacity
  however they come, and its failures and retries come in waves that a few rounds do not average
  out; such a level is counted in the window. Each cycle is its client's whatever the order
  requests end in, so no window edge cuts a round of bunched completions in two; the last N are
  left out as the drain holds them (a batching server decodes them faster). Counted in the
  window, clients thinking twice the service ran -4% to +9% at three rounds (c = 1-16, N =
  2-32); by their cycles, -1.3% to +2.0%. The window above counted m completions over the m gaps
  before the last send, ``m / (m - 1)`` times too many on average (+14% at 30 requests on one
  server), and on levels of a few rounds left too little to count (-33% at 10 clients on 16
  servers). The ratio's bias, its relative variance (gaps between completions or the latencies'
  batch means, whichever is larger), is taken off, and the interval is the Student-t one of that
  variance: on exact M/M/c closed loops of three rounds (c = 1, 4, 16, N = 1 to 100, 300 seeds)
  the mean error is within +2.6% and the 95% interval covers 92-99%.
- **Completion slope** (:func:`completion_slope`): the least-squares slope of the cumulative
  count of ok completions on their times in the steady window. The fit reads an open level
  past capacity with near-constant service by it: a count over the window cuts each busy
  server's cycle at its own phase (0.73% sd at c = 64, against the slope's 0.22%).
- When fewer than :data:`MIN_WINDOW_SHARE` of a level's ok completions are left to either
  (a level too short to have a steady part, e.g. 40 requests at 40 clients) the throughput
  is ok completions over the level's whole span, which fill and drain bias low, and the
  level's ``steady`` check fails.
- **Drain** (:func:`drain_mask`): after the first completion that follows a level's last send
  the level only empties (no request replaces one that ends), so a batching server decodes
  the requests still running in ever smaller batches: their inter-token latency and wait run
  low (the last 20 of 150 requests at 50 clients on 32 slots decoded up to 40% faster than
  the steady state). The drain is every row sent from the first one that ends after that
  completion (by send order, as the start-up: the requests that end late are the long ones);
  the batch fit leaves it out.
- **Fill** (:func:`fill_mask`): an open batching level starts with an idle server, so its first
  requests decode in smaller batches; the batch fit leaves out the rows sent before the
  longest service has passed, or before MSER-5's cut on the step times, when those are faster.
- **Means** with overlapping batch means over request order (:func:`batch_means`; batches of at
  least a closed level's N requests): consecutive requests share queue states, so their
  latencies are correlated and ``std / sqrt(n)`` is too small. With levels of a few rounds the
  batch-means variance still runs low (about half the truth at N = 2c); the calibration
  benchmark reports the coverage this gives. An open level near saturation is correlated over
  more requests than it holds: at 80-90% load (levels of 1,000 arrivals, 30 seeds) the
  level mean's spread across seeds is 1.5-4.2 times its batch-means error on 4 and 16
  exponential servers, 2.2-3.9 times at service CV 2 (1.1-1.4 on 4 servers behind a cap of
  8), whose means are skewed (most levels read low, a few far high); fewer, longer batches
  see little more (10, 5 or 3 of them: still 1.9-2.8 times short on 16 servers at CV 2). The
  fit floors it by the queue's own law (``fitting._fit._open_vif``): these errors alone are
  not a level's interval near saturation.
- **Quantiles** interpolate linearly (numpy's default); their intervals are the order statistics
  of :func:`scipy.stats.quantile_test` (distribution-free), which hold for independent draws;
  with ``min_batch`` they are widened about the estimate by the square root of the batch-means
  variance inflation (:func:`variance_inflation`), as the fits widen a level's quantile.
- **Proportions** (a 429 share, :func:`proportion_interval`): Wilson's score interval on an
  effective sample size, ``n`` over the batch-means variance inflation (refusals come in runs).
- **Goodput** (:func:`throughput_interval` with weights: the completions meeting an SLO) and
  **SLO attainment** (:func:`proportion_interval` of ``meets_slo``).
- **SLOs** (:func:`check_slo`, :func:`meets_slo`): bounds on ``ttft_s``, ``itl_s`` (a request's
  mean inter-token latency) and ``latency_s``; a failed request never meets one.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "CONFIDENCE",
    "MIN_WINDOW_SHARE",
    "QUANTILES",
    "SLO_COLUMNS",
    "batch_means",
    "check_slo",
    "closed_clients",
    "column",
    "completion_slope",
    "drain_mask",
    "fill_mask",
    "first_sends",
    "grows",
    "level_batch",
    "mean_interval",
    "meets_slo",
    "mser5",
    "ok_mask",
    "phases",
    "proportion_interval",
    "quantile_interval",
    "quantile_interval_ordered",
    "row_times",
    "send_rate",
    "steady_window",
    "think_times",
    "throughput",
    "throughput_interval",
    "transient_mask",
    "variance_inflation",
]

#: Confidence of every interval shown by default.
CONFIDENCE = 0.95
#: stat name -> quantile probability (None: the mean).
QUANTILES: dict[str, float | None] = {
    "mean": None,
    "p50": 0.5,
    "p90": 0.9,
    "p95": 0.95,
    "p99": 0.99,
}
#: A steady window holding fewer of the level's ok completions than this is too short to use.
MIN_WINDOW_SHARE = 0.2
#: A closed level is counted by Little's law when its clients have at least this share of
#: their time a request in flight (no think time, but the client's own gap between requests).
_BUSY = 0.9
# batch means: at most this many batches, and at least this many rows per batch
_MAX_BATCHES = 20
_MIN_BATCH = 5


def column(frame: pd.DataFrame, name: str) -> np.ndarray:
    """Return a column as float64 values, all NaN when the column is missing.

    Parameters
    ----------
    frame : pandas.DataFrame
        Any table.
    name : str
        Column name.

    Returns
    -------
    numpy.ndarray
        The values in a new array (``<NA>`` and what is not a number as NaN).
    """
    if name not in frame.columns:
        return np.full(len(frame), np.nan)
    values = frame[name]
    # numbers convert directly, 5x faster than coercing them (a summary reads about 25
    # columns a level); a copy, which the caller may write into
    if not (pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values)):
        values = pd.to_numeric(values, errors="coerce")
    return values.to_numpy(dtype=np.float64, na_value=np.nan, copy=True)


def ok_mask(frame: pd.DataFrame) -> np.ndarray:
    """Rows that succeeded: ``ok``, else a 2xx ``status``, else every row.

    Parameters
    ----------
    frame : pandas.DataFrame
        A requests table.

    Returns
    -------
    numpy.ndarray
        Boolean mask.
    """
    if "ok" in frame.columns:
        return frame["ok"].fillna(False).to_numpy(bool)
    if "status" in frame.columns:
        status = column(frame, "status")
        return (status >= 200) & (status < 300)
    return np.ones(len(frame), bool)


def row_times(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of each row: ``t_scheduled`` (else ``t_sent``, else end - latency), ``t_end``.

    Parameters
    ----------
    frame : pandas.DataFrame
        A requests table.

    Returns
    -------
    tuple of numpy.ndarray
        ``(start, end)``, NaN where unknown.
    """
    latency = column(frame, "latency_s")
    end = column(frame, "t_end")
    start = column(frame, "t_scheduled")
    start = np.where(np.isnan(start), column(frame, "t_sent"), start)
    start = np.where(np.isnan(start), end - latency, start)
    end = np.where(np.isnan(end), start + latency, end)
    return start, end


def mser5(values: np.ndarray) -> int:
    """MSER-5 truncation point of a sequence: how many leading values to drop.

    Parameters
    ----------
    values : numpy.ndarray
        Observations in time order (NaN-free).

    Returns
    -------
    int
        A multiple of 5, at most half the sequence; 0 for fewer than 20 values.
    """
    k = len(values) // 5
    if k < 4:
        return 0
    means = values[: 5 * k].reshape(k, 5).mean(axis=1)
    # standard error of the mean of batches d.. for every d, from suffix sums
    rev = means[::-1]
    count = np.arange(1, k + 1)[::-1]
    s1 = np.cumsum(rev)[::-1]
    s2 = np.cumsum(rev**2)[::-1]
    sse = s2 - s1**2 / count
    score = sse / count**2
    half = k // 2 + 1
    return 5 * int(np.argmin(score[:half]))


def grows(values: np.ndarray, factor: float = 1.5, alpha: float = 0.001) -> bool:
    """Whether a sequence keeps growing: a queue that never reaches a steady state.

    Parameters
    ----------
    values : numpy.ndarray
        Latencies in send order (NaN-free).
    factor : float, default 1.5
        The last quarter's mean must exceed the first quarter's by this factor...
    alpha : float, default 0.001
        ...and the rank correlation with the send order be significant at this level.

    Returns
    -------
    bool
        False for fewer than 8 values.
    """
    n = len(values)
    if n < 8:
        return False
    q = n // 4
    if not values[-q:].mean() > factor * values[:q].mean():
        return False
    from scipy.stats import spearmanr  # lazy: scipy is slow to import

    rho, p = spearmanr(np.arange(n), values)
    return bool(rho > 0 and p < alpha)


def transient_mask(
    kind: str | None,
    level: float,
    start: np.ndarray,
    end: np.ndarray,
    latency: np.ndarray,
    measured: np.ndarray,
    refused: np.ndarray | None = None,
    workers: np.ndarray | None = None,
) -> np.ndarray:
    """Measured rows of one level that belong to its start-up transient.

    Parameters
    ----------
    kind : {"concurrency", "rate"} or None
        The level's kind (other kinds have no transient cut).
    level : float
        Its value (the number of clients of a closed-loop level).
    start, end, latency : numpy.ndarray
        Per row of the level, all phases (see :func:`row_times`); ``latency`` NaN for rows
        that say nothing of the queue (refused, failed).
    measured : numpy.ndarray
        Boolean: the row is not a warmup row.
    refused : numpy.ndarray, optional
        Boolean: the row was refused with 429 (open loop: the queue's fill, see below).
    workers : numpy.ndarray, optional
        The client of each row (closed loop: the start-up lasts to the last one's first send).

    Returns
    -------
    numpy.ndarray
        Boolean mask over the level's rows (never a warmup row).
    """
    cut = np.zeros(len(start), bool)
    if kind == "concurrency" and level > 1:
        cut = _first_round(start, int(level), workers)
    elif kind == "rate":
        idx = np.flatnonzero(measured & np.isfinite(latency) & np.isfinite(start))
        idx = idx[np.argsort(start[idx], kind="stable")]
        d = mser5(latency[idx])
        # a level starting empty starts with short latencies; MSER also "cuts" an early burst
        # of long ones (it lowers the remaining variance), which would bias the mean low
        if d and latency[idx[:d]].mean() < latency[idx[d:]].mean():
            # every row sent before the first kept one (refusals too: a capped queue refuses
            # nothing until it has filled)
            cut = np.isfinite(start) & (start < start[idx[d]])
        cut |= _fill(start, latency, measured, refused)
    return cut & measured


def _first_round(start: np.ndarray, clients: int, workers: np.ndarray | None) -> np.ndarray:
    """Return a closed level's first N sends, and with ``workers`` all to its last client's first.

    By send order, not completion order: the first N completions are the shortest of the first
    round, and cutting them would bias the service times left up. The clients start one by
    one (``Sweeper._stagger``), so the early ones send again before the last has started,
    while fewer than N are in the system: their short cycles ran a closed level's throughput
    15% high at 10 clients on 4 servers over three rounds (+4% with clients sent at once),
    and kept as steady rows, their short latencies read c = 17 for 16 in 4 of 10 seeded
    exact M/M/16 sweeps (10 of 10 right without them). Without client ids: the first N.
    """
    sent = np.isfinite(start)
    out = np.zeros(len(start), bool)
    n_first = min(clients, int(sent.sum()))
    if n_first:
        out[np.argsort(np.where(sent, start, np.inf), kind="stable")[:n_first]] = True
    if workers is not None:
        firsts = first_sends(start, workers)
        if len(firsts):
            out |= sent & (start <= float(firsts.max()))
    return out


def first_sends(start: np.ndarray, workers: np.ndarray) -> np.ndarray:
    """Return each client's first send of one level (rows with a known send and client).

    Parameters
    ----------
    start : numpy.ndarray
        Each row's send (:func:`row_times`).
    workers : numpy.ndarray
        Each row's client (``worker``), NaN where unknown.

    Returns
    -------
    numpy.ndarray
        One time per client, in the order of their ids.
    """
    w = np.asarray(workers, np.float64)
    known = np.isfinite(start) & np.isfinite(w)
    return pd.Series(start[known]).groupby(w[known]).min().to_numpy()


def _fill(
    start: np.ndarray, latency: np.ndarray, measured: np.ndarray, refused: np.ndarray | None
) -> np.ndarray:
    """Open loop behind a queue cap: the rows sent while the queue filled from empty.

    Past its capacity a capped queue grows until it holds K, refuses its first request and
    hovers there: the rows before that first refusal are all start-up, however many (a
    128-deep queue at 120% load fills over ~770 arrivals, more than MSER's half). The cut is
    made only where the answered latencies before the first refusal keep growing
    (:func:`grows`): a stable level that refuses now and then has no such fill.
    """
    out = np.zeros(len(start), bool)
    if refused is None:
        return out
    hit = refused & measured & np.isfinite(start)
    if not hit.any():
        return out
    first = float(start[hit].min())
    before = np.flatnonzero(measured & np.isfinite(latency) & (start < first))
    if grows(latency[before[np.argsort(start[before], kind="stable")]]):
        out = np.isfinite(start) & (start < first)
    return out


def phases(requests: pd.DataFrame) -> np.ndarray:
    """Name each row's phase: ``"warmup"``, ``"transient"`` or ``"measure"``.

    Parameters
    ----------
    requests : pandas.DataFrame
        A requests table with ``level`` (``level_kind``, ``run_id``, ``phase`` and the times are
        used when present).

    Returns
    -------
    numpy.ndarray
        One string per row, in the table's order.
    """
    n = len(requests)
    warm = np.zeros(n, bool)
    if "phase" in requests.columns:
        warm = (requests["phase"] == "warmup").fillna(False).to_numpy(bool)
    out = np.where(warm, "warmup", "measure").astype(object)
    if not n or "level" not in requests.columns:
        return out
    start, end = row_times(requests)
    # answered rows only: a refusal's latency says nothing of the queue's state
    latency = np.where(ok_mask(requests), column(requests, "latency_s"), np.nan)
    refused = None
    if "error_kind" in requests.columns:
        refused = requests["error_kind"].eq("rate_limited").fillna(False).to_numpy(bool)
    workers = column(requests, "worker")
    keys = [k for k in ("run_id", "level_kind", "level") if k in requests.columns]
    for key, idx in requests.groupby(keys, sort=False, dropna=False).indices.items():
        values = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        kind = values.get("level_kind")
        kind = kind if isinstance(kind, str) else None
        cut = transient_mask(
            kind,
            float(values["level"]),
            start[idx],
            end[idx],
            latency[idx],
            ~warm[idx],
            None if refused is None else refused[idx],
            workers[idx],
        )
        out[idx[cut]] = "transient"
    return out


def drain_mask(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Rows of one level that ended in its drain (see the module docstring).

    Parameters
    ----------
    start, end : numpy.ndarray
        Per row of the level (see :func:`row_times`).

    Returns
    -------
    numpy.ndarray
        Boolean mask: every row sent from the first one that ended after the first completion
        following the level's last send (none for a level of one client: its last request is
        alone either way).
    """
    done = np.isfinite(start) & np.isfinite(end)
    out = np.zeros(len(start), bool)
    if not done.any():
        return out
    after = end[done & (end > start[done].max())]
    late = done & (end > after.min()) if after.size else out
    if late.any():
        # by send order, as the start-up is cut: which of the last requests sent end late
        # depends on their own length, and leaving out only those would bias the rest short
        out = np.isfinite(start) & (start >= start[late].min())
    return out


def fill_mask(start: np.ndarray, end: np.ndarray, itl: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """Rows of one open batching level sent while its batch grew from empty.

    A level starts with an idle server, so its first requests decode in smaller batches,
    faster. The latency, whose spread is mostly the output length's, hides that from the
    start-up cut of :func:`transient_mask`; the step times show it (slots 32 at 85% load: the
    first tenth of a default level read 11% short of the steady step time, and t1 came out
    1.8% low, median of 40 simulated sweeps). Below the slot cap the requests in service are
    those of an infinite-server queue, whose number is steady once the longest service has
    passed since the empty start: the rows sent before that are cut. Near the cap a queue
    forms and takes longer to forget the start, so MSER-5 (:func:`mser5`) also runs on the
    step times, in send order, over the rows ``kept``: the rows sent before its cut go too,
    when they are the faster ones.

    Parameters
    ----------
    start, end : numpy.ndarray
        Per row of the level (see :func:`row_times`).
    itl : numpy.ndarray
        Per row: its mean inter-token latency (the decode step time).
    kept : numpy.ndarray
        Boolean per row: the rows whose step times MSER-5 reads (steady, outside the drain).

    Returns
    -------
    numpy.ndarray
        Boolean mask: every row sent before the cut.
    """
    idx = np.flatnonzero(kept & np.isfinite(start) & np.isfinite(end))
    if not len(idx):
        return np.zeros(len(start), bool)
    idx = idx[np.argsort(start[idx], kind="stable")]
    cut = np.nanmin(start) + float(np.max(end[idx] - start[idx]))  # from the empty start
    d = mser5(itl[idx])
    if d and itl[idx[:d]].mean() < itl[idx[d:]].mean():
        cut = max(cut, start[idx[d]])
    return np.isfinite(start) & (start < cut)


def steady_window(
    start: np.ndarray, end: np.ndarray, transient: np.ndarray, ok: np.ndarray | None = None
) -> tuple[float, float]:
    """Return the level's steady window ``(a, b]`` (see the module docstring).

    Parameters
    ----------
    start, end : numpy.ndarray
        Per row of the level, every phase.
    transient : numpy.ndarray
        Boolean: the row is in the start-up transient.
    ok : numpy.ndarray, optional
        Boolean: the row succeeded. With it, a saturated level's window is the time all its
        servers are busy (:func:`_busy`).

    Returns
    -------
    tuple of float
        ``(a, b)``; ``b <= a`` when the level has no steady part.
    """
    done = np.isfinite(start) & np.isfinite(end)
    if not done.any():
        return math.nan, math.nan
    a = float(end[done].min())
    busy = None if ok is None else _busy(start, end, ok)
    if busy is not None:
        return busy
    cut = transient & np.isfinite(start)
    if cut.any() and float(start[cut].max()) > a:
        # sends of the transient spread past the first completion (an open loop, or a closed
        # one's clients starting after client 0's first answer): the steady
        # state starts with the first kept send; the transient rows still queued then leave at
        # the steady rate (past capacity they end long after it, and waiting for them would
        # leave a short window late in the level)
        a = float(start[cut].max())
    elif (transient & done).any():
        # a closed loop's first round sent at once (older data): steady once all of it has ended
        a = max(a, float(end[transient & done].max()))
    elif float(start[done].max()) > a:
        # nothing cut (a queue that does not build up): the level still fills at its first
        # completion, where a cut transient's rows are still in flight at its end
        a = _filled(start[done], end[done], a, float(start[done].max()))
    return a, float(start[done].max())


def _filled(start: np.ndarray, end: np.ndarray, a: float, b: float) -> float:
    """Return the first time from ``a`` on that the level holds its mean number in flight.

    The completions in a window fall short of the arrivals in it by the growth of the number
    in flight across it: a level that starts empty and is counted from its first completion
    is still filling, and its fill (the mean number in flight L) was counted short: -11% at
    50 arrivals and L = 10, -20% at 200 arrivals and L = 50. Counted once the level holds L
    (the time average over the window from there on, found in a few rounds), the growth left
    is about one request. A queue that keeps growing has no such mean and is left as it is
    (its completions, at capacity, do not depend on how full it is): one whose number in
    flight rises across the window's second half by more than twice the spread a steady
    level's would (its time-weighted variance there, twice: two ends). One that grows too
    slowly to tell keeps at least half its window.
    """
    sends, ends = np.sort(start), np.sort(end)
    times, held = _in_flight(sends, ends)
    if _rising(times, held, a, b):
        return a
    first = a
    for _ in range(10):
        at = np.array([first, b])
        mean = float(np.diff(_area(sends, at) - _area(ends, at))[0]) / (b - first)
        reached = np.flatnonzero((times >= a) & (times < b) & (held >= mean))
        nxt = float(times[reached[0]]) if reached.size else a
        if nxt == first:
            break
        first = nxt
    # at most half the window: a queue growing too slowly to tell reaches its mean late
    return min(first, (a + b) / 2)


def _busy(start: np.ndarray, end: np.ndarray, ok: np.ndarray) -> tuple[float, float] | None:
    """Return the window ``(a, b]`` in which a saturated level's servers are all busy, or None.

    Saturated: its queue keeps growing (the answered latencies grow, :func:`grows`, and the
    number in flight still rises across the second half, :func:`_rising`, about its trend),
    up to its first failure (a queue cap's first refusal: the queue is full) or to its last
    send. Its c servers complete c mu from the moment all are busy, whatever the queue does,
    so the window starts there, not at the end of the latencies' transient, which on a
    queue that never stops growing is half the level (MSER-5's most): at the later of
    MSER-5 (:func:`mser5`) on the gaps between completions (longer while the servers fill)
    and the first time as many requests are in flight as the fewest servers first come,
    first served allows (a request's earlier-sent ones still in flight when it ends are in
    service beside it: c is at least one more than the most of them, and with exponential
    service that bound is c). It ends at the later of the last send and the completion
    that leaves fewer requests in flight than at the start: the queue left keeps every
    server busy until then.

    On the exact simulation at 120% load (200 seeds), against the window that started at
    the latencies' transient: the window keeps 92-95% of the level's completions (was
    37-51%); the count's sd falls from 5.1% to 3.5% at 16 exponential servers, 3.4% to 2.7%
    at 64, 6.0% to 2.8% at 64 behind 128 places, its mean error within its noise (-0.5 to
    0.0%, +-0.4-0.5); CV 0.3-0.5 within +-0.1% (sd 0.9-1.3%); CV 0.05 reads +0.3% by the
    count (the window opens on a round of completions; was -0.1%) and +0.01% by the slope
    (:func:`completion_slope`, sd 0.22% -> 0.14% at 64). Stable levels near capacity (90-100%
    load, with and without caps of 2-32 places) read as before, within their noise.
    """
    rows = ok & np.isfinite(start) & np.isfinite(end)
    done = np.isfinite(start) & np.isfinite(end)
    if rows.sum() < 20:
        return None
    failed = ~ok & np.isfinite(start)
    b = float(start[done].max())
    upto = min(float(start[failed].min()), b) if failed.any() else b
    before = np.flatnonzero(rows & (start < upto))
    before = before[np.argsort(start[before], kind="stable")]
    if not grows(end[before] - start[before]):
        return None
    times, held = _in_flight(np.sort(start[done]), np.sort(end[done]))
    ends = np.sort(end[rows])
    if not _rising(times, held, float(ends[0]), upto, detrend=True):
        return None
    gaps = np.diff(ends)
    d = mser5(gaps)
    a = float(ends[d] if d and gaps[:d].mean() > gaps[d:].mean() else ends[0])
    # the fewest servers first come, first served allows
    order = np.flatnonzero(rows)
    order = order[np.argsort(start[order], kind="stable")]
    seen: list[float] = []
    most = 0
    for e in end[order]:
        most = max(most, len(seen) - bisect.bisect_right(seen, e))
        bisect.insort(seen, e)
    reached = np.flatnonzero(held >= most + 1)
    if reached.size:
        a = max(a, float(times[reached[0]]))
    full = float(held[times <= a][-1])
    drop = np.flatnonzero((times > b) & (held < full))
    return a, max(b, float(times[drop[0]]) if drop.size else b)


def _in_flight(sends: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the times a level's number in flight changes and that number after each."""
    times = np.concatenate([sends, ends])
    order = np.argsort(times, kind="stable")
    steps = np.concatenate([np.ones(len(sends)), -np.ones(len(ends))])[order]
    return times[order], np.cumsum(steps)


def _rising(times: np.ndarray, held: np.ndarray, a: float, b: float, detrend: bool = False) -> bool:
    """Whether the number in flight keeps rising across the second half of ``(a, b)``.

    A queue that keeps growing: by more than twice the spread a steady level's number would
    have there (its time-weighted variance, twice: two ends). ``detrend`` takes the spread
    about the least-squares line instead of the mean: a steady level has no trend, so the
    two agree on it, but a queue growing at a steady pace spreads about its mean by its own
    rise (a ramp's variance is its rise squared over 12), which alone fails the test.
    """
    mid = (a + b) / 2
    late = (times > mid) & (times < b)
    if late.sum() < 2:
        return False
    span = np.diff(np.concatenate([times[late], [b]]))
    level, weight = held[late], span / span.sum()
    trend = 0.0
    if detrend:
        at = times[late] + span / 2
        at = at - np.sum(weight * at)
        slope = float(np.sum(weight * at * level) / np.sum(weight * at**2))
        trend = slope * at
    var = float(np.sum(weight * (level - trend - np.sum(weight * level)) ** 2))
    rise = float(held[times <= b][-1] - held[times <= mid][-1])
    return rise > 2 * math.sqrt(2 * var)


def _window(
    start: np.ndarray,
    end: np.ndarray,
    ok: np.ndarray,
    transient: np.ndarray,
    measured: np.ndarray,
) -> tuple[float, float, np.ndarray, bool]:
    """Return the completions :func:`throughput` counts: ``(a, b, counted, windowed)``."""
    done = ok & np.isfinite(end)
    a, b = steady_window(start[measured], end[measured], transient[measured], ok[measured])
    if math.isnan(a):
        return math.nan, math.nan, np.zeros(len(end), bool), False
    inside = done & (end > a) & (end <= b)
    if b > a and inside.sum() >= max(2, MIN_WINDOW_SHARE * (done & measured).sum()):
        return a, b, inside, True
    known = measured & np.isfinite(start) & np.isfinite(end)
    a, b = float(start[known].min()), float(end[known].max())
    return a, b, done & measured, False


def send_rate(requests: pd.DataFrame, measured: np.ndarray, clients: int | None = None) -> float:
    """Return a level's achieved send rate: its sends past its opening over the time since.

    The sends are ``t_sent`` (else ``t_scheduled``) of the measured rows, in order
    ``s_1 <= ... <= s_k``. The opening is the first send of an open level, or a closed level's
    first round, its N clients' first sends: ``s_j`` with j the measured rows among the
    level's first N sends (at least 1). The rate is ``(k - j) / (s_k - s_j)``: the sends that
    followed the opening over the time they took; on an open level the arrival rate as
    realised. A closed level that :func:`throughput` counts by Little's law (every request
    succeeded) sends as many requests as it completes, and its rate is that throughput
    (``N / mean(R + Z)`` with the clients known, ``worker``; from the opening on, a level
    whose clients think runs 4-18% low at 3-5 rounds, while they think after the first
    round). Counting the first round's N sends in a span that starts with them read 4-16%
    above the throughput at ten rounds, 55-60% at three.

    Parameters
    ----------
    requests : pandas.DataFrame
        The rows of one level, every phase.
    measured : numpy.ndarray
        Boolean per row: the rows whose sends are counted (e.g. not warmup).
    clients : int, optional
        A closed level's N (:func:`closed_clients`).

    Returns
    -------
    float
        Sends per second; NaN with fewer than two sends past the opening's first.
    """
    sent = column(requests, "t_sent")
    if np.isnan(sent).all():
        sent = column(requests, "t_scheduled")
    known = np.isfinite(sent)
    first = np.zeros(len(sent), bool)
    if clients is not None:
        workers = column(requests, "worker")
        first = _first_round(sent, clients, workers)
        start, end = row_times(requests)
        ok = ok_mask(requests)
        little = _little(start, end, ok, first & measured, measured, clients, 1, workers)
        if little is not None:
            return _little_rate(little, np.ones(len(start), bool), None)
    times = np.sort(sent[known & measured])
    j = max(1, int((first & known & measured).sum()))
    if len(times) <= j or not times[-1] > times[j - 1]:
        return math.nan
    return (len(times) - j) / float(times[-1] - times[j - 1])


def closed_clients(kind: str | None, level: float) -> int | None:
    """Return a closed level's number of clients N (None for any other level).

    Parameters
    ----------
    kind : str or None
        The level's ``level_kind``.
    level : float
        Its value.

    Returns
    -------
    int or None
        N for ``"concurrency"``, else None.
    """
    return max(1, int(level)) if kind == "concurrency" else None


def think_times(start: np.ndarray, end: np.ndarray, workers: np.ndarray | None) -> np.ndarray:
    """Return each row's think time: from its end to its client's next send.

    A closed loop's client waits this long between an answer and its next request (the
    configured think time and the client's own time from the answer's end to the next
    request's scheduled send); the server does not hold it.
    Rows of one level of one run (a client's ``worker`` number repeats across levels and
    runs, whose clocks differ).

    Parameters
    ----------
    start, end : numpy.ndarray
        Each row's start (its send as scheduled) and end (see :func:`row_times`).
    workers : numpy.ndarray or None
        Each row's client (``worker``; NaN when unknown).

    Returns
    -------
    numpy.ndarray
        Seconds, >= 0; NaN for a client's last row, a row without times or without a client,
        and every row when ``workers`` is None.
    """
    out = np.full(len(start), np.nan)
    if workers is None:
        return out
    w = np.asarray(workers, np.float64)
    idx = np.flatnonzero(np.isfinite(start) & np.isfinite(end) & np.isfinite(w))
    idx = idx[np.lexsort((start[idx], w[idx]))]
    same = w[idx][1:] == w[idx][:-1]
    out[idx[:-1][same]] = np.clip(start[idx[1:][same]] - end[idx[:-1][same]], 0.0, None)
    return out


def _closed_rows(
    start: np.ndarray, sent: np.ndarray, measured: np.ndarray, first: np.ndarray, clients: int
) -> np.ndarray:
    """Return a closed level's rows that Little's law counts.

    Measured, past the first round, and before the last N sends (the requests in flight when
    the level stops sending, which the drain holds).
    """
    rows = sent & measured & ~first
    rows[np.argsort(np.where(sent, start, np.inf), kind="stable")[: sent.sum()][-clients:]] = False
    return rows


def _cycle_ends(
    start: np.ndarray, end: np.ndarray, rows: np.ndarray, think: np.ndarray
) -> np.ndarray | None:
    """Return the rows' cycle ends, ``end + Z`` (a client's last row: the rows' mean Z)."""
    if not np.isfinite(think[rows]).any():
        return None
    z = think[rows]
    return end[rows] + np.where(np.isfinite(z), z, float(np.nanmean(z)))


def _little(
    start: np.ndarray,
    end: np.ndarray,
    ok: np.ndarray,
    transient: np.ndarray,
    measured: np.ndarray,
    clients: int | None,
    min_batch: int,
    workers: np.ndarray | None = None,
) -> tuple[np.ndarray, float, float, float] | None:
    """Return a closed level's Little's law terms: ``(rows, cycle s, relative variance, df)``.

    With the rows' clients known (``workers``), the rate is ``N / mean(R + Z)``: each measured
    row past the first round whose client sent again has a cycle ``R + Z``, from its send to
    its client's next (the request, failed or not, and the think time after it), and "cycle s"
    is their sum over N. Without them, it is ``L / mean(R)``: ``R`` the latencies of the
    measured rows past the first round and before the last N sends (the requests in flight
    when the level stops sending, which the drain holds), ``L`` the mean number of requests in
    flight from the first of their sends to the level's last (about N: the clients' own gaps
    between requests), "cycle s" ``sum(R) / L``; only when every measured request succeeded
    and the clients do not think (``L`` at least :data:`_BUSY` of N). None for an open level,
    or when fewer than :data:`MIN_WINDOW_SHARE` of the level's ok completions (and 2) are left.

    The relative variance of the summed times (the rate's bias, see :func:`throughput`): they
    add up to the integral of the rows open (in flight, or in their cycle) between the
    level's events (completions, or sends), ``sum(m_k X_k)`` over the gaps ``X_k`` between
    them, so it is ``sum(m_k^2) Var(X)`` with the gaps' variance by overlapping batch means
    before the last send (batches of at least N gaps); or, when larger, the times' own
    batch-means variance (requests that share no queue vary by their service times, which the
    gaps between many completions understate).
    """
    if clients is None or (measured & ~ok).any():
        # a level that failed requests is past a limit of the server, which serves at its
        # capacity whatever the clients do, and its failures come in waves (the refused
        # retry together after a back-off) that a few rounds do not average out: the demo's
        # 300 requests at 100 clients past a 64-request limit read 6.7 req/s by Little's law
        # over the cycles for a capacity of 5.1 (the window 5.31, the completions' slope
        # 5.28). Its completions are counted in the window (the four failing cells of
        # benchmarks/bench_level_rates.py, 100 seeds: the window -2.2% to +3.6%, covering
        # 0.86-1.00; the cycles -2.7% to +4.4%, covering 0.99)
        return None
    sent = np.isfinite(start) & np.isfinite(end)
    first = transient | (_first_round(start, clients, workers) if clients > 1 else False)
    rows = _closed_rows(start, sent, measured, first, clients)
    s = start[rows]
    ends = _cycle_ends(start, end, rows, think_times(start, end, workers))
    cycles = ends is not None
    if ends is not None:
        e, events = ends, np.sort(start[sent])  # a cycle ends at its client's next send
    else:
        e, events = end[rows], np.sort(end[sent])
    if rows.sum() < max(2, MIN_WINDOW_SHARE * (ok & measured & sent).sum()):
        return None
    total = float(np.sum(e - s))
    if cycles:
        scale = float(clients)
    else:
        starts = np.sort(start[sent])
        a, b = float(s.min()), float(starts[-1])
        if not b > a:
            return None
        at = np.array([a, b])
        scale = float(np.diff(_area(starts, at) - _area(events, at))[0]) / (b - a)
        if not scale >= _BUSY * clients:
            # clients that think between requests: L and mean(R) both vary, and the bias
            # taken off for R alone ran -6% to +8% at three rounds (M/M/c, think time twice
            # the service); their cycles need the clients (worker)
            return None
    if not (total > 0 and scale > 0):
        return None
    # the rows' times as the integral of their number open between events
    done = np.unique(events)
    cuts = np.unique(
        np.concatenate([[s.min()], done[(done > s.min()) & (done < e.max())], [e.max()]])
    )
    gaps = np.diff(cuts)
    if len(gaps) < 2:
        return rows, total / scale, 0.0, math.nan
    area = _area(np.sort(s), cuts) - _area(np.sort(e), cuts)
    m = np.divide(np.diff(area), gaps, out=np.zeros(len(gaps)), where=gaps > 0)
    # the gaps' variance before the last send: the drain's gaps, as fewer requests remain, grow
    steady = gaps[cuts[1:] <= float(np.max(start[sent]))]
    steady = steady if len(steady) >= 2 else gaps
    size = max(min_batch, clients)
    rel2 = float(np.sum(m**2)) * _obm_variance(steady, size) / total**2
    df = _batch_df(len(steady), size)
    mean, se, df_rows = batch_means((e - s)[np.argsort(s, kind="stable")], size)
    if (se / mean) ** 2 > rel2:
        rel2, df = (se / mean) ** 2, df_rows
    return rows, total / scale, min(rel2, 0.5), float(df)


def _little_rate(
    little: tuple[np.ndarray, float, float, float], ok: np.ndarray, weights: np.ndarray | None
) -> float:
    """Return the rows' ok (weighted) completions over their cycle time, less its bias."""
    rows, cycle_s, rel2, _ = little
    return float(np.sum(_counts(rows, ok, weights))) / cycle_s * (1.0 - rel2)


def _counts(rows: np.ndarray, ok: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    """Return what each row counts: 1 (or its weight) when it succeeded, else 0."""
    w = 1.0 if weights is None else np.asarray(weights, np.float64)[rows]
    return np.where(ok[rows], w, 0.0)


def _area(times: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``sum(max(0, t - times))`` at each ``t`` of ``at`` (``times`` sorted)."""
    count = np.searchsorted(times, at, "right")
    cum = np.concatenate([[0.0], np.cumsum(times)])
    return count * at - cum[count]


def throughput(
    start: np.ndarray,
    end: np.ndarray,
    ok: np.ndarray,
    transient: np.ndarray,
    measured: np.ndarray,
    weights: np.ndarray | None = None,
    *,
    clients: int | None = None,
    workers: np.ndarray | None = None,
) -> tuple[float, bool]:
    """Completion rate of a level (see the module docstring: closed levels by Little's law).

    Parameters
    ----------
    start, end : numpy.ndarray
        Per row of the level, every phase.
    ok : numpy.ndarray
        Boolean: the row succeeded.
    transient : numpy.ndarray
        Boolean: the row is in the start-up transient.
    measured : numpy.ndarray
        Boolean: the row is not a warmup row (the window is the measured rows').
    weights : numpy.ndarray, optional
        Count each completion with this weight (e.g. its output tokens) instead of 1.
    clients : int, optional
        A closed level's N (:func:`closed_clients`): its rate by Little's law, N over the mean
        cycle (request and think time) of the requests between its first and last rounds.
    workers : numpy.ndarray, optional
        Each row's client (``worker``), which tells a closed level's cycles; without it, the
        mean number in flight over the mean latency, for levels without think time or failures.

    Returns
    -------
    tuple
        ``(rate, windowed)``: per second, and whether the level had a steady part long enough
        (else the rate is completions over the whole span).
    """
    little = _little(start, end, ok, transient, measured, clients, 1, workers)
    if little is not None:
        return _little_rate(little, ok, weights), True
    w = np.ones(len(start)) if weights is None else np.asarray(weights, dtype=np.float64)
    a, b, counted, windowed = _window(start, end, ok, transient, measured)
    if math.isnan(a):
        return math.nan, False
    return (float(w[counted].sum()) / (b - a) if b > a else math.nan), windowed


def completion_slope(
    start: np.ndarray,
    end: np.ndarray,
    ok: np.ndarray,
    transient: np.ndarray,
    measured: np.ndarray,
) -> tuple[float, int]:
    """Completion rate of a level as the slope of its completions over time, and their count.

    The least-squares slope of the cumulative count of ok completions on their times, over
    the steady window of :func:`throughput`. Where c servers stay busy through the window
    (an open level past capacity) this reads their rate without the window's edges: a count
    over a window cuts each server's cycle at its own phase, about a quarter of a completion
    per server, which for near-constant service at c = 64 is ten times the renewal noise
    (0.73% against 0.22% over 650 completions on the exact simulation); the slope averages
    every completion's phase. For a renewal count of variance rate ``x cv^2`` its relative
    variance is ``1.2 cv^2 / n`` (a Brownian path's least-squares slope), 1.2 times the
    window count's: the window stays the rate for every other use.

    Parameters
    ----------
    start, end, ok, transient, measured : numpy.ndarray
        As for :func:`throughput`.

    Returns
    -------
    tuple
        ``(rate, n)``: per second and the completions it rests on; NaN and 0 without a steady
        window of at least 3 completions.
    """
    _, _, counted, windowed = _window(start, end, ok, transient, measured)
    t = np.sort(end[counted])
    if not windowed or len(t) < 3 or not t[-1] > t[0]:
        return math.nan, 0
    t = t - t.mean()
    k = np.arange(len(t), dtype=np.float64)
    return float(t @ (k - k.mean()) / (t @ t)), len(t)


#: SLO keys (what ``slo=`` takes) -> the request column each bounds. ``itl_s`` bounds a
#: request's mean inter-token latency (its time per output token while streaming).
SLO_COLUMNS = {"ttft_s": "ttft_s", "itl_s": "itl_mean_s", "latency_s": "latency_s"}


def check_slo(slo: Any, name: str = "slo") -> dict[str, float] | None:
    """Validate an SLO: a dict of :data:`SLO_COLUMNS` keys to positive seconds.

    Parameters
    ----------
    slo : dict or None
        E.g. ``{"ttft_s": 0.5, "latency_s": 4}`` (numbers, or text that reads as one, as the
        command line gives them).
    name : str
        The option's name, for the error.

    Returns
    -------
    dict of str to float or None
        The bounds as floats, in :data:`SLO_COLUMNS` order; None for None.

    Raises
    ------
    ValueError
        One line naming the option and the bad key or value.
    """
    if slo is None:
        return None
    keys = ", ".join(SLO_COLUMNS)
    if not isinstance(slo, dict) or not slo:
        raise ValueError(f"{name}: expected a dict of bounds in seconds with keys {keys}")
    out = {}
    for key, value in slo.items():
        if key not in SLO_COLUMNS:
            raise ValueError(f"{name}: unknown key {key!r} (expected {keys})")
        try:
            bound = float(value) if not isinstance(value, bool) else math.nan
        except (TypeError, ValueError):
            bound = math.nan
        if not (bound > 0 and math.isfinite(bound)):
            raise ValueError(
                f"{name}: {key}={value!r} is not allowed (a positive number of seconds)"
            )
        out[key] = bound
    return {k: out[k] for k in SLO_COLUMNS if k in out}


def meets_slo(requests: pd.DataFrame, slo: dict[str, float]) -> np.ndarray:
    """Which requests met every bound of an SLO.

    A failed request does not meet it. A bound on a time the request lacks fails it (a TTFT
    needs a streamed answer), except ``itl_s`` on an answer of one chunk, which has no gap to
    bound.

    Parameters
    ----------
    requests : pandas.DataFrame
        A requests table.
    slo : dict of str to float
        Validated bounds (:func:`check_slo`).

    Returns
    -------
    numpy.ndarray
        Boolean per row.
    """
    slo = check_slo(slo) or {}
    met = ok_mask(requests).copy()
    for key, bound in slo.items():
        values = column(requests, SLO_COLUMNS[key])
        within = values <= bound
        if key == "itl_s":
            within |= np.isnan(values) & (column(requests, "chunks") <= 1)
        met &= within
    return met


def throughput_interval(
    start: np.ndarray,
    end: np.ndarray,
    ok: np.ndarray,
    transient: np.ndarray,
    measured: np.ndarray,
    confidence: float = CONFIDENCE,
    weights: np.ndarray | None = None,
    min_batch: int = 1,
    *,
    clients: int | None = None,
    workers: np.ndarray | None = None,
) -> tuple[float, float, float]:
    """Return the throughput of :func:`throughput` with its interval.

    A closed level's rate (Little's law) has the Student-t interval of its relative error:
    the square root of the relative variance whose bias :func:`throughput` corrects, grown by
    the batch-means variance of the weights' mean when some completions count less.

    Any other level's window is cut into equal sub-windows (up to 20, with at least
    5 completions each on average, and at least ``2 * min_batch``: a closed level's N clients
    complete about N requests per cycle, in bunches when a batching server finishes them
    together, so a sub-window shorter than two cycles would read that rhythm as noise), taken
    as batches; the interval is the wider of the
    Student-t interval of their mean completion rate (completions bunch when requests share a
    queue state, so the counts of whole sub-windows can vary more than a Poisson count) and
    the normal interval of a Poisson count (with none counted: the exact upper bound of a
    zero count, so it is never zero-width).

    Parameters
    ----------
    start, end, ok, transient, measured : numpy.ndarray
        As for :func:`throughput`.
    confidence : float, default 0.95
        Coverage of the interval.
    weights : numpy.ndarray, optional
        0/1 per row: count only some completions, e.g. those meeting an SLO (goodput).
    min_batch : int, default 1
        Completions per cycle (a closed level's N), as for :func:`batch_means`.
    clients, workers : optional
        As for :func:`throughput`.

    Returns
    -------
    tuple of float
        ``(rate, low, high)`` per second; the bounds are NaN with fewer than 2 completions.
    """
    from scipy.stats import chi2, norm, t  # lazy: scipy is slow to import

    little = _little(start, end, ok, transient, measured, clients, min_batch, workers)
    if little is not None:
        rate = _little_rate(little, ok, weights)
        rows, cycle_s, rel2, df = little
        if math.isnan(df):
            return rate, math.nan, math.nan
        counts = _counts(rows, ok, weights)
        if not counts.any():  # none counted: the exact upper bound of a zero count
            return rate, 0.0, float(chi2.ppf(confidence, 2)) / 2 / cycle_s
        order = np.argsort(start[rows], kind="stable")
        mean, se, _ = batch_means(counts[order], max(min_batch, clients or 1))
        rel2 += (se / mean) ** 2 if counts.min() < counts.max() else 0.0
        half = float(t.ppf(0.5 + confidence / 2, max(df, 1.0))) * rate * math.sqrt(rel2)
        return rate, max(0.0, rate - half), rate + half
    rate, _ = throughput(start, end, ok, transient, measured, weights)
    if math.isnan(rate):
        return math.nan, math.nan, math.nan
    a, b, counted, _ = _window(start, end, ok, transient, measured)
    ends = end[counted]
    w = np.ones(len(ends)) if weights is None else np.asarray(weights, np.float64)[counted]
    n, count = len(ends), float(w.sum())
    if n < 2 or b <= a:
        return rate, math.nan, math.nan
    if count > 0:
        half = float(norm.ppf(0.5 + confidence / 2)) * math.sqrt(count) / (b - a)
    else:
        half = float(chi2.ppf(confidence, 2)) / 2 / (b - a)  # one-sided: the rate is >= 0
    bins = min(_MAX_BATCHES, n // max(_MIN_BATCH, 2 * min_batch))
    if bins >= 4:
        rates = np.histogram(ends, bins=bins, range=(a, b), weights=w)[0] / ((b - a) / bins)
        se = float(rates.std(ddof=1)) / math.sqrt(bins)  # the sub-windows are the batches
        half = max(half, float(t.ppf(0.5 + confidence / 2, bins - 1)) * se)
    return rate, max(0.0, rate - half), rate + half


def level_batch(kind: str | None, level: float) -> int:
    """Return the ``min_batch`` of a level's statistics: how many requests share a state.

    A closed level's N clients each send again when their request ends, so requests a round
    (N) apart share a state; an open level's arrivals are independent of the queue.

    Parameters
    ----------
    kind : str or None
        The level's ``level_kind``.
    level : float
        Its value (N for ``"concurrency"``).

    Returns
    -------
    int
        N for a closed level (at least 1), else 1.
    """
    return max(1, int(level)) if kind == "concurrency" else 1


def batch_means(values: np.ndarray, min_batch: int = 1) -> tuple[float, float, float]:
    """Mean and its standard error by overlapping batch means over the sequence's order.

    Parameters
    ----------
    values : numpy.ndarray
        Observations in request order (NaN-free).
    min_batch : int, default 1
        Fewest rows per batch (e.g. a closed level's population: requests a round apart share a
        queue state).

    Returns
    -------
    tuple
        ``(mean, se, df)``: the standard error (never below the independent-draws one) and its
        degrees of freedom (Meketon and Schmeiser's overlapping batch means: about 1.5 times the
        number of non-overlapping batches, less one). With fewer than two batches' worth of data
        the standard error is the independent-draws one, with ``n - 1`` degrees of freedom.
    """
    n = len(values)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(values.mean())
    if n < 2:
        return mean, math.nan, math.nan
    iid = math.sqrt(float(values.var(ddof=1)) / n)
    if n < 2 * _batch_size(n, min_batch):
        return mean, iid, _batch_df(n, min_batch)
    return mean, max(math.sqrt(_obm_variance(values, min_batch) / n), iid), _batch_df(n, min_batch)


def _batch_size(n: int, min_batch: int) -> int:
    return max(_MIN_BATCH, int(min_batch), math.ceil(n / _MAX_BATCHES))


def _batch_df(n: int, min_batch: int) -> float:
    """Degrees of freedom of a batch-means variance of ``n`` values (n - 1 below two batches)."""
    size = _batch_size(n, min_batch)
    return 1.5 * (n / size - 1) if n >= 2 * size else n - 1.0


def _obm_variance(values: np.ndarray, min_batch: int) -> float:
    """``n`` times the variance of the mean by overlapping batch means (no floor).

    With fewer than two batches' worth of values (at least 2), the independent-draws variance.
    """
    n = len(values)
    size = _batch_size(n, min_batch)
    if n < 2 * size:
        return float(values.var(ddof=1))
    sums = np.concatenate([[0.0], np.cumsum(values - values.mean())])
    means = (sums[size:] - sums[:-size]) / size
    return n * size / ((n - size + 1) * (n - size)) * float(np.sum(means**2))


def mean_interval(
    values: np.ndarray, confidence: float = CONFIDENCE, min_batch: int = 1
) -> tuple[float, float, float]:
    """Mean with a Student-t interval on its batch-means standard error.

    Parameters
    ----------
    values : numpy.ndarray
        Observations in request order (NaN-free).
    confidence : float, default 0.95
        Coverage of the interval.
    min_batch : int, default 1
        As for :func:`batch_means`.

    Returns
    -------
    tuple of float
        ``(mean, low, high)``; the bounds are NaN for fewer than 2 values.
    """
    from scipy.stats import t as student  # lazy: scipy is slow to import

    mean, se, df = batch_means(values, min_batch)
    if math.isnan(se):
        return mean, math.nan, math.nan
    half = float(student.ppf(0.5 + confidence / 2, df)) * se
    return mean, mean - half, mean + half


def quantile_interval(
    values: np.ndarray, q: float, confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """Quantile (linear interpolation) with its distribution-free order-statistic interval.

    Parameters
    ----------
    values : numpy.ndarray
        Observations (NaN-free).
    q : float
        Probability in (0, 1).
    confidence : float, default 0.95
        Coverage of the interval.

    Returns
    -------
    tuple of float
        ``(estimate, low, high)``; a bound the sample is too small to give is NaN.
    """
    from scipy.stats import binom  # lazy: scipy is slow to import

    n = len(values)
    if n == 0:
        return math.nan, math.nan, math.nan
    est = float(np.quantile(values, q))
    if n < 2:
        return est, math.nan, math.nan
    # the ranks of scipy.stats.quantile_test(...).confidence_interval(), without its search
    x = np.sort(values)
    alpha = 1.0 - confidence
    lo_rank = int(binom.ppf(alpha / 2, n, q))
    hi_rank = int(binom.isf(alpha / 2, n, q))
    low = float(x[lo_rank - 1]) if lo_rank >= 1 else math.nan
    high = float(x[hi_rank]) if hi_rank < n else math.nan
    return est, low, high


def variance_inflation(values: np.ndarray, min_batch: int = 1) -> float:
    """How much correlation in request order inflates the variance of the mean, at least 1.

    Parameters
    ----------
    values : numpy.ndarray
        Observations in request order (NaN-free).
    min_batch : int, default 1
        As for :func:`batch_means`.

    Returns
    -------
    float
        ``(batch-means se / independent-draws se)**2``; 1 when it cannot be told.
    """
    n = len(values)
    if n < 2:
        return 1.0
    std = float(np.std(values, ddof=1))
    if not std > 0:
        return 1.0
    se = batch_means(values, min_batch)[1]
    return max(1.0, (se / (std / math.sqrt(n))) ** 2)


def quantile_interval_ordered(
    values: np.ndarray, q: float, confidence: float = CONFIDENCE, min_batch: int = 1
) -> tuple[float, float, float]:
    """:func:`quantile_interval` of values in request order, widened for their correlation.

    Parameters
    ----------
    values : numpy.ndarray
        Observations in request order (NaN-free).
    q : float
        Probability in (0, 1).
    confidence : float, default 0.95
        Coverage of the interval.
    min_batch : int, default 1
        As for :func:`batch_means` (a closed level's N).

    Returns
    -------
    tuple of float
        ``(estimate, low, high)``: each side of the order-statistic interval stretched by the
        square root of :func:`variance_inflation`; a bound the sample cannot give is NaN.
    """
    est, low, high = quantile_interval(values, q, confidence)
    scale = math.sqrt(variance_inflation(values, min_batch))
    return est, est - (est - low) * scale, est + (high - est) * scale


def proportion_interval(
    hits: np.ndarray, confidence: float = CONFIDENCE, min_batch: int = 1
) -> tuple[float, float, float]:
    """Return a share with Wilson's score interval on the batch-means effective sample size.

    Parameters
    ----------
    hits : numpy.ndarray
        0/1 (or boolean) outcomes in request order.
    confidence : float, default 0.95
        Coverage of the interval.
    min_batch : int, default 1
        As for :func:`batch_means`.

    Returns
    -------
    tuple of float
        ``(share, low, high)``; all NaN without data.
    """
    from scipy.stats import norm  # lazy: scipy is slow to import

    x = np.asarray(hits, dtype=np.float64)
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan
    p = float(x.mean())
    m = n / variance_inflation(x, min_batch)
    z = float(norm.ppf(0.5 + confidence / 2))
    centre = (p + z * z / (2 * m)) / (1 + z * z / m)
    half = z / (1 + z * z / m) * math.sqrt(p * (1 - p) / m + z * z / (4 * m * m))
    # exact at the edges (the score interval's bound there is 0 or 1, up to rounding)
    low = 0.0 if p == 0 else max(0.0, centre - half)
    return p, low, 1.0 if p == 1 else min(1.0, centre + half)
