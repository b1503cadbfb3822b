"""Turn what the user measured into per-level statistics the fitting code can use.

Accepts a SweepResult (anything with a ``.requests`` table), a requests table with the record
schema, or an already-aggregated per-level table (one row per level, e.g. converted from a
public benchmark). Optional columns may be missing; what cannot be computed is NaN and the
fitting code says what it needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from llmlat import stats

__all__ = [
    "NO_STEADY",
    "QUANTILES",
    "Observed",
    "finite_or",
    "is_level_table",
    "latency_levels",
    "observe",
    "offered_rate",
    "queue_cap",
    "resample",
    "served_short",
]

#: stat name -> quantile probability (None: the mean): the statistics a fit can use.
QUANTILES: dict[str, float | None] = {
    k: v for k, v in stats.QUANTILES.items() if k in ("mean", "p50", "p95", "p99")
}
_Z = 1.959963984540054

#: why a level was left out when it was answered but kept nothing past its start-up
NO_STEADY = "no steady state"


@dataclass
class Observed:
    """Per-level statistics of one metric, plus the per-request times when available.

    ``levels`` has one row per level (sorted) with ``level``, ``n`` (its steady requests),
    ``n_sent`` (every request sent, the start-up's too), ``n_failed``,
    ``throughput_rps``, ``tokens_mean`` (output tokens), ``think_s`` (closed loop: mean time a
    client spent between requests), ``mean_s``, ``std_s``, ``p50_s``, ``p95_s``, ``p99_s``, a
    standard error ``se_<stat>_s`` for each statistic (by batch means over request order, see
    :mod:`llmlat.stats`) and ``vif``: the variance of the mean over its independent-draws value
    (1 for independent requests; larger when consecutive requests share queue states); where
    requests streamed, ``itl_s`` (mean inter-token latency: the decode step time) and
    ``se_itl_s``; where output lengths were recorded, ``se_at_length_s`` (the mean latency's
    error at the level's mean output length, :func:`_ratio_errors`); open loop, ``slope_rps``
    and ``n_slope`` (the completions' slope over time and their count,
    :func:`llmlat.stats.completion_slope`). ``times`` holds each level's steady-state times in
    request order, ``itl_times`` (streamed) each request's mean inter-token latency in the same
    order. A closed loop's ``think_cv`` is each level's think-time CV (:func:`_think_time`),
    and ``together`` the share of its runs whose clients first sent at once
    (:func:`_started_together`).
    """

    kind: str
    metric: str
    levels: pd.DataFrame
    think_s: float
    tokens: float
    prompt_tokens: float
    times: list[np.ndarray] | None = None
    notes: list[str] = field(default_factory=list)
    #: quantile probability -> that quantile of the output length over its mean (ok rows)
    tokens_q: dict[float, float] = field(default_factory=dict)
    #: level left out -> why (refused, no success, no steady state)
    dropped: dict[float, str] = field(default_factory=dict)
    #: open loop: the most requests the server holds (in service plus waiting) when its 429s
    #: come from a queue cap (:func:`queue_cap`), else None
    system_k: int | None = None
    #: coefficient of variation of the output length (ok rows), NaN when unknown
    tokens_cv: float = np.nan
    #: share of pairs of requests (ok rows) of the same output length, NaN when unknown: 1 for
    #: fixed lengths (``max_tokens`` with ``ignore_eos``), which keep closed clients in step
    tokens_same: float = np.nan
    #: streamed: per level, each request's mean inter-token latency, in the order of ``times``
    itl_times: list[np.ndarray] | None = None

    @property
    def request_times(self) -> list[np.ndarray]:
        """Each level's times (``times``), or a ValueError for a per-level table."""
        if self.times is None:
            raise ValueError("data: this needs per-request times, not a per-level table")
        return self.times


def _stats_from_times(times: list[np.ndarray], batch: list[int]) -> dict[str, np.ndarray]:
    out: dict[str, list[float]] = {k: [] for k in ("n", "mean_s", "std_s", "vif")}
    for name in QUANTILES:
        out[f"se_{name}_s"] = []
        if name != "mean":
            out[f"{name}_s"] = []
    for t, size in zip(times, batch, strict=True):
        n = len(t)
        std = float(np.std(t, ddof=1)) if n > 1 else np.nan
        mean, se, _ = stats.batch_means(t, size)
        vif = (se / (std / np.sqrt(n))) ** 2 if n > 1 and std > 0 else 1.0
        out["n"].append(n)
        out["mean_s"].append(mean)
        out["std_s"].append(std)
        out["se_mean_s"].append(se)
        out["vif"].append(vif)
        for name, q in QUANTILES.items():
            if q is None:
                continue
            est, lo, hi = stats.quantile_interval(t, q, stats.CONFIDENCE)
            out[f"{name}_s"].append(est)
            # the order-statistic interval holds for independent draws: widen it as the mean's
            width = (hi - lo) if np.isfinite(hi - lo) else np.nan
            out[f"se_{name}_s"].append(width / (2 * _Z) * np.sqrt(vif))
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}


def _think_time(req: pd.DataFrame, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per level: mean gap between a worker's previous end and its next scheduled send, and
    the gaps' coefficient of variation.

    In a closed loop this is think time plus the client's own time between requests; a client
    that cannot keep up shows it here (and Little's law N = X (W + gap) still holds). Each run
    of a level on its own (:func:`llmlat.stats.think_times`): its workers and clock are its own.
    The CV tells the closed law how steady the think time is (0: the engine's constant
    ``think_time_s``, whose clients fall into step; 1: exponential); NaN with fewer than two
    gaps or none above zero.
    """
    start, end = stats.row_times(req)
    workers = stats.column(req, "worker")
    think = np.full(len(req), np.nan)
    keys = [k for k in ("run_id", "level") if k in req]
    for idx in req.groupby(keys, sort=False, dropna=False).indices.values():
        think[idx] = stats.think_times(start[idx], end[idx], workers[idx])
    by_level = pd.Series(think).groupby(req["level"].to_numpy(dtype=np.float64))
    mean = by_level.mean().reindex(levels).to_numpy(dtype=np.float64)
    std = by_level.std(ddof=0).reindex(levels).to_numpy(dtype=np.float64)
    count = by_level.count().reindex(levels).to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        cv = np.where((count >= 2) & (mean > 0), std / mean, np.nan)
    return mean, cv


def _started_together(req: pd.DataFrame, levels: np.ndarray) -> np.ndarray:
    """Per closed level: the share of its runs whose clients all first sent at once.

    At once: every client's first send (warmup rows included) within a tenth of the level's
    median latency, as llmlat started a level before it spread its clients over client 0's
    first cycle (``Sweeper._stagger``). Started at once, clients of fixed output lengths
    decode in step for good; spread, they keep their phases apart. NaN without client ids.
    """
    start, _ = stats.row_times(req)
    workers = stats.column(req, "worker")
    latency = stats.column(req, "latency_s")
    level = stats.column(req, "level")
    keys = [k for k in ("run_id", "level") if k in req]
    runs: dict[float, list[float]] = {}
    for idx in req.groupby(keys, sort=False, dropna=False).indices.values():
        firsts = stats.first_sends(start[idx], workers[idx])
        if len(firsts) < 2:
            continue
        scale = float(np.nanmedian(latency[idx])) if np.isfinite(latency[idx]).any() else 0.0
        at_once = float(firsts.max() - firsts.min()) <= 0.1 * scale
        runs.setdefault(float(level[idx[0]]), []).append(float(at_once))
    return np.array([np.mean(runs[v]) if v in runs else np.nan for v in levels])


def _kind(frame: pd.DataFrame, level_kind: str | None) -> str:
    if level_kind is None:
        if "level_kind" not in frame:
            raise ValueError("level_kind: column missing; pass level_kind='concurrency' or 'rate'")
        kinds = pd.unique(frame["level_kind"].dropna().astype(str))
        if len(kinds) != 1:
            raise ValueError(f"level_kind: expected one kind of sweep, found {list(kinds)}")
        level_kind = str(kinds[0])
    if level_kind not in ("concurrency", "rate"):
        raise ValueError(
            f"level_kind: {level_kind!r} cannot be fitted; need a 'concurrency' (closed-loop) "
            "or 'rate' (open-loop) sweep"
        )
    return level_kind


def _from_requests(
    req: pd.DataFrame, metric: str, level_kind: str | None, max_refused: float | None
) -> Observed:
    col = f"{metric}_s"
    if col not in req or "level" not in req:
        raise ValueError(f"data: requests table needs columns 'level' and {col!r}")
    kind = _kind(req, level_kind)
    phase = stats.phases(req)
    rates = _rates(req, phase)
    all_rows = req
    req = req[phase != "warmup"]
    steady = phase[phase != "warmup"] == "measure"
    values = req[col].to_numpy(dtype=np.float64, na_value=np.nan)
    answered = stats.ok_mask(req)
    ok = np.isfinite(values) & answered
    if not ok.any():
        kinds = req["error_kind"].value_counts().to_dict() if "error_kind" in req else {}
        raise ValueError(
            f"ok: every request failed ({kinds or 'no successful rows'}); nothing to fit. "
            "Check the endpoint, the key and the rate limits, then measure again"
        )
    notes = []
    lv_all = req["level"].to_numpy(dtype=np.float64)
    start, end = stats.row_times(req)
    hit = _refusals(req)
    system_k = queue_cap(start, end, answered, hit, lv_all) if kind == "rate" else None
    refused = np.empty(0)
    if max_refused is not None:
        refused = _refused_levels(req, lv_all, max_refused)
        if refused.size == np.unique(lv_all).size:
            raise ValueError(
                f"max_refused: every level had more than {max_refused:.0%} of its requests "
                "refused with 429 or retried; measure at lower load, or pass max_refused=None "
                "to fit them anyway"
            )
        if refused.size and kind == "rate" and system_k is not None:
            refused = np.empty(0)  # the M/M/c/K form describes them
        elif refused.size and kind == "rate":
            notes.append(
                f"levels {_fmt(refused)}: more than {max_refused:.0%} of their requests were "
                "refused with 429 or retried; fitted as overloaded (their throughput measures "
                "capacity, their latency is not used)"
            )
        elif refused.size:
            ok &= ~np.isin(lv_all, refused)
            notes.append(
                f"levels {_fmt(refused)} left out: more than {max_refused:.0%} of their "
                "requests were refused with 429 or retried, which a queueing model without "
                "admission control does not describe (max_refused=None keeps them)"
            )
    dropped = {} if kind == "rate" else {float(v): "refused (429) or retried" for v in refused}
    levels = np.unique(lv_all[ok & steady])
    for v in np.setdiff1d(np.setdiff1d(np.unique(lv_all), levels), refused):
        at = lv_all == v
        if not (answered & at).any():
            why = "no successful request"
        elif metric == "latency" or (ok & at).any():
            # answered (so timed): nothing in the steady window, a level too short for its
            # start-up (or, the batch fit's, for its start-up and drain, left out by the caller)
            why = NO_STEADY
        else:
            why = f"no {col} value"
        dropped[float(v)] = why
        notes.append(f"level {v:g} left out: {why}")
    ok &= steady
    order = np.lexsort((np.nan_to_num(start[ok]), lv_all[ok]))
    lv_ok, val_ok = lv_all[ok][order], values[ok][order]
    cuts = np.searchsorted(lv_ok, levels[1:])
    times = np.split(val_ok, cuts)
    batch = _batches(kind, levels)
    table = pd.DataFrame({"level": levels, **_stats_from_times(times, batch)})
    failed = pd.Series(~answered).groupby(lv_all).sum()
    table["n_failed"] = failed.reindex(levels).to_numpy()
    table["throughput_rps"] = rates["throughput_rps"].reindex(levels).to_numpy(dtype=np.float64)
    if "completion_tokens" in req:
        tok = pd.to_numeric(req["completion_tokens"], errors="coerce")
        tok = tok.to_numpy(np.float64, na_value=np.nan)
        table["tokens_mean"] = (
            pd.Series(tok[ok]).groupby(lv_all[ok]).mean().reindex(levels).to_numpy()
        )
        if metric == "latency":
            table["se_at_length_s"] = _ratio_errors(times, np.split(tok[ok][order], cuts), batch)
    else:
        table["tokens_mean"] = np.nan
    # every request sent, the start-up's too (a closed one's last to its last client's first)
    table["n_sent"] = pd.Series(lv_all).groupby(lv_all).size().reindex(levels).to_numpy(float)
    if kind == "concurrency":
        table["think_s"], table["think_cv"] = _think_time(req, levels)
        table["together"] = _started_together(all_rows, levels)
    else:
        table["think_s"] = table["think_cv"] = table["together"] = np.nan
    itl_times = None
    if "itl_mean_s" in req:  # streamed: the decode step time of each level
        itl = pd.to_numeric(req["itl_mean_s"], errors="coerce")
        itl = itl.to_numpy(np.float64, na_value=np.nan)
        itl_times = np.split(itl[ok][order], cuts)
        table["itl_s"], table["se_itl_s"] = _itl_stats(itl_times, batch)
    table["cv_alone"], table["n_alone"] = _alone_cv(start, end, values, ok, lv_all, levels)
    if kind == "rate":
        per = pd.DataFrame({"lv": lv_all, "hit": hit, "t": start, "steady": steady})
        per = per.groupby("lv")
        # refusals past the transient: behind a cap, a level starting empty refuses nothing
        # until its queue has filled
        calm = per.apply(_refusal_counts)
        table["n_offered"] = calm["n"].reindex(levels).to_numpy(dtype=np.float64)
        table["n_refused"] = calm["refused"].reindex(levels).to_numpy(dtype=np.float64)
        table["vif_refused"] = calm["vif"].reindex(levels).to_numpy(dtype=np.float64)
        # the arrival rate realised in the level, so "served less than offered" is not judged
        # against the Poisson noise of the arrivals
        table["offered_rps"] = rates["offered_rps"].reindex(levels).to_numpy(dtype=np.float64)
        # the completions' slope: a level past capacity measures it without the window's edge
        table["slope_rps"] = rates["slope_rps"].reindex(levels).to_numpy(dtype=np.float64)
        table["n_slope"] = rates["n_slope"].reindex(levels).to_numpy(dtype=np.float64)
    # an open level that refuses requests truncates its queue: its latency is not an M/M/c one,
    # unless the refusals are a queue cap, which the M/M/c/K form describes
    shed = _refused_levels(req, lv_all, _SHED) if kind == "rate" else refused
    if system_k is not None:
        shed = np.empty(0)
        notes.append(
            f"429s from a queue cap: the server refuses when it holds {system_k} requests (in "
            "service or waiting); fitted as M/M/c/K with the blocking in the likelihood"
        )
    table["overloaded"] = _overloaded(table, kind, np.union1d(refused, shed), system_k)
    if kind == "rate" and system_k is None:  # served less than offered, latency growing
        # the whole level, transient included: a queue that never stops growing is all transient
        whole = np.isfinite(values) & answered
        growing = np.array(
            [
                stats.grows(values[whole & (lv_all == v)][np.argsort(start[whole & (lv_all == v)])])
                for v in levels
            ],
            dtype=bool,
        )
        # a stable level near saturation also grows while it fills from empty; overload shows
        # as a throughput short of the offered rate beyond the arrivals' noise
        table["overloaded"] |= growing & _short(table, _SIGMAS, 0.0)
        table["overloaded"] |= _past_capacity(table)
    w = table["n"].to_numpy(dtype=np.float64)
    good = np.isfinite(table["think_s"].to_numpy())
    think = float(np.average(table["think_s"][good], weights=w[good])) if good.any() else np.nan
    tok = _mean_col(req, "completion_tokens", ok)
    ptok = _mean_col(req, "prompt_tokens", ok)
    obs = Observed(
        kind,
        metric,
        table,
        think,
        tok,
        ptok,
        times,
        notes,
        dropped=dropped,
        system_k=system_k,
        itl_times=itl_times,
    )
    if "completion_tokens" in req and tok > 0:
        lengths = pd.to_numeric(req["completion_tokens"], errors="coerce").to_numpy(
            np.float64, na_value=np.nan
        )[ok]
        lengths = lengths[np.isfinite(lengths)]
        probs = [v for v in QUANTILES.values() if v is not None]
        obs.tokens_q = dict(zip(probs, np.quantile(lengths, probs) / tok, strict=True))
        obs.tokens_cv = float(np.std(lengths) / np.mean(lengths)) if len(lengths) > 1 else np.nan
        if len(lengths) > 1:
            counts = np.unique(lengths, return_counts=True)[1].astype(np.float64)
            obs.tokens_same = float(counts @ (counts - 1) / (len(lengths) * (len(lengths) - 1)))
    return obs


def _ratio_errors(
    times: list[np.ndarray], tokens: list[np.ndarray], batch: list[int]
) -> np.ndarray:
    """Per level: the error of its mean latency at its mean output length, as a ratio estimate.

    A level's latency scales with its requests' output lengths, whose spread is most of its
    variance (30-100 times in standard error on a simulated batching sweep): a fit comparing
    the levels at one output length judges them by the error of the mean of
    ``latency - R * tokens`` (R the level's ratio of means), by batch means over request order
    as the level's other errors. NaN where a row lacks its length.
    """
    se = np.full(len(times), np.nan)
    for i, (lat, tok, size) in enumerate(zip(times, tokens, batch, strict=True)):
        if len(lat) > 2 and np.all(np.isfinite(tok)) and tok.mean() > 0:
            se[i] = stats.batch_means(lat - lat.mean() / tok.mean() * tok, size)[1]
    return se


def _itl_stats(itls: list[np.ndarray], batch: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per level: mean inter-token latency of the requests and its batch-means error.

    NaN where fewer than two requests streamed two tokens or more.
    """
    mean, se = np.full(len(itls), np.nan), np.full(len(itls), np.nan)
    for i, (v, size) in enumerate(zip(itls, batch, strict=True)):
        v = v[np.isfinite(v)]
        if len(v) >= 2:
            mean[i], se[i], _ = stats.batch_means(v, size)
    return mean, se


def _refusal_counts(level: pd.DataFrame) -> pd.Series:
    """One level's steady rows: how many, how many refused, and the refusals' ``vif``.

    Refusals come in runs (while the queue stays full), so they carry less information than
    as many independent draws: batch means over send order measure by how much.
    """
    hits = level.loc[level["steady"]].sort_values("t")["hit"].to_numpy(dtype=np.float64)
    n, refused, vif = len(hits), float(hits.sum()), 1.0
    if 0 < refused < n:
        se = stats.batch_means(hits)[1]
        vif = max(se**2 / (hits.var(ddof=1) / n), 1.0)
    return pd.Series({"n": float(n), "refused": refused, "vif": vif})


#: Fewest requests sent into an idle server for their spread to estimate the service CV.
MIN_ALONE = 20


def _alone_cv(
    start: np.ndarray,
    end: np.ndarray,
    values: np.ndarray,
    ok: np.ndarray,
    lv_all: np.ndarray,
    levels: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per level: CV of the times of requests sent while nothing else was in flight, and n.

    Such a request waited for nobody, whatever the number of servers: its time is a service
    time alone, where a whole level's spread also holds the waits (at 30% load on one server
    they turn a CV of 0.05 into 0.4).
    """
    cv, count = np.full(len(levels), np.nan), np.zeros(len(levels))
    for i, v in enumerate(levels):
        here = (lv_all == v) & np.isfinite(start) & np.isfinite(end)
        s, e = np.sort(start[here]), np.sort(end[here])
        at = start[here & ok]
        # in flight at a send: sent before it (itself excluded), not yet ended
        busy = np.searchsorted(s, at, "left") - np.searchsorted(e, at, "right")
        t = values[here & ok][busy <= 0]
        count[i] = len(t)
        if len(t) >= MIN_ALONE:
            cv[i] = float(np.std(t, ddof=1) / np.mean(t))
    return cv, count


def _refusals(req: pd.DataFrame) -> np.ndarray:
    """Rows refused with 429 (``rate_limited``) or retried."""
    hit = np.zeros(len(req), dtype=bool)
    if "error_kind" in req:
        hit |= req["error_kind"].eq("rate_limited").fillna(False).to_numpy(dtype=bool)
    if "attempts" in req:
        hit |= (pd.to_numeric(req["attempts"], errors="coerce") > 1).fillna(False).to_numpy(bool)
    return hit


def _refused_levels(req: pd.DataFrame, levels: np.ndarray, share: float) -> np.ndarray:
    """Levels where more than ``share`` of the rows were refused (429) or retried."""
    rates = pd.Series(_refusals(req)).groupby(levels).mean()
    return rates.index[rates > share].to_numpy(dtype=np.float64)


#: Refusals needed to call them a queue cap, and the share of them that must find the same
#: number of requests held (within one: the client's clock sees sends and ends a little late).
_CAP_MIN = 10
_CAP_SHARE = 0.8


def queue_cap(
    start: np.ndarray, end: np.ndarray, ok: np.ndarray, refused: np.ndarray, levels: np.ndarray
) -> int | None:
    """The system size K of an open sweep whose 429s come from a queue cap, else None.

    At each refusal, count the admitted requests in flight (sent before, ended after) at its
    level. A server that refuses when it holds K requests (the M/M/c/K station) shows the same
    count at almost every refusal; a rate limiter (token buckets) refuses at any count.

    Parameters
    ----------
    start, end : numpy.ndarray
        Per row: send and end times (:func:`llmlat.stats.row_times`).
    ok : numpy.ndarray
        Boolean: the row was admitted and answered.
    refused : numpy.ndarray
        Boolean: the row was refused (429).
    levels : numpy.ndarray
        Per row: its level.

    Returns
    -------
    int or None
        K, when at least :data:`_CAP_MIN` refusals and :data:`_CAP_SHARE` of them agree.
    """
    counts = []
    for v in np.unique(levels[refused]):
        here = (levels == v) & ok & np.isfinite(start) & np.isfinite(end)
        s, e = np.sort(start[here]), np.sort(end[here])
        at = start[refused & (levels == v)]
        at = at[np.isfinite(at)]
        counts.append(np.searchsorted(s, at, "right") - np.searchsorted(e, at, "right"))
    if not counts or sum(len(c) for c in counts) < _CAP_MIN:
        return None
    held = np.concatenate(counts)
    k = int(np.median(held))
    return k if k >= 1 and np.mean(np.abs(held - k) <= 1) >= _CAP_SHARE else None


def _rates(req: pd.DataFrame, phase: np.ndarray) -> pd.DataFrame:
    """Per level: the summary's rates, :func:`llmlat.stats.throughput` and ``send_rate``.

    One definition for the summary table and the fit; several runs of one level are averaged.
    ``offered_rps`` is the level's sends per second as realised (:func:`llmlat.stats.send_rate`);
    ``slope_rps`` the completions' slope (:func:`llmlat.stats.completion_slope`) over
    ``n_slope`` completions in all runs.
    """
    start, end = stats.row_times(req)
    ok = stats.ok_mask(req)
    workers = stats.column(req, "worker")
    kinds = req["level_kind"].astype("string") if "level_kind" in req else None
    keys = [k for k in ("run_id", "level") if k in req]
    rates: dict[float, list[tuple[float, float, float, float]]] = {}
    for key, idx in req.groupby(keys, sort=False, dropna=False).indices.items():
        level = float(key[-1] if isinstance(key, tuple) else key)
        kind = None if kinds is None or kinds.iloc[idx[0]] is pd.NA else str(kinds.iloc[idx[0]])
        clients = stats.closed_clients(kind, level)
        measured = phase[idx] != "warmup"
        x = stats.throughput(
            start[idx], end[idx], ok[idx], phase[idx] == "transient", measured, clients=clients,
            workers=workers[idx],
        )[0]  # fmt: skip
        sends = stats.send_rate(req.iloc[idx], measured, clients)
        slope, n = stats.completion_slope(
            start[idx], end[idx], ok[idx], phase[idx] == "transient", measured
        )
        rates.setdefault(level, []).append((x, sends, slope, n))
    rows = {k: [*np.mean(v, axis=0)[:3], sum(r[3] for r in v)] for k, v in rates.items()}
    names = ["throughput_rps", "offered_rps", "slope_rps", "n_slope"]
    return pd.DataFrame(rows, index=names).T


#: An open level is overloaded when its throughput falls short of the offered rate by more than
#: this many Poisson standard errors (and by more than :data:`_SHORT` of it).
_SIGMAS = 2.0
_SHORT = 0.02
#: An open level refusing more than this share of its requests is fitted by its throughput.
_SHED = 0.01


def _overloaded(
    table: pd.DataFrame, kind: str, refused: np.ndarray, system_k: int | None = None
) -> np.ndarray:
    """Open levels past capacity: served clearly less than offered, or refusing.

    Their latency describes a queue that grows (or a queue cap), not a steady state; their
    throughput is the capacity. A closed level is never overloaded (its clients wait), nor a
    level behind a queue cap (the M/M/c/K form describes it).
    """
    if kind != "rate" or system_k is not None:
        return np.zeros(len(table), bool)
    return served_short(table) | np.isin(table["level"].to_numpy(np.float64), refused)


def _past_capacity(table: pd.DataFrame) -> np.ndarray:
    """Open levels offered at least the capacity that the clearly overloaded levels measure.

    A level just past capacity, measured for a short while, serves about what it is offered
    (a batching server packs its growing queue into bigger batches; a finite run ends before
    the backlog shows): its throughput is not short of the offered rate, yet its latency is that
    of a growing queue. The levels served clearly less than offered measure the capacity (the
    median of their throughputs, robust to a drain or start-up window at one of them); a level
    offered that much or more is past it too.
    """
    flag = table["overloaded"].to_numpy(bool)
    x = table["throughput_rps"].to_numpy(dtype=np.float64)
    known = flag & np.isfinite(x)
    if not known.any():
        return np.zeros(len(table), bool)
    return offered_rate(table) >= float(np.median(x[known]))


def offered_rate(table: pd.DataFrame) -> np.ndarray:
    """Return each open level's arrival rate as realised (:func:`~llmlat.stats.send_rate`), else
    nominal.

    Parameters
    ----------
    table : pandas.DataFrame
        Per-level table with ``level`` and, from a requests table, ``offered_rps``.

    Returns
    -------
    numpy.ndarray
        Requests per second, one per level.
    """
    return finite_or(table, "offered_rps", table["level"].to_numpy(dtype=np.float64))


def finite_or(table: pd.DataFrame, column: str, fallback: np.ndarray) -> np.ndarray:
    """Return ``column``'s values where the table has it and they are finite, else ``fallback``."""
    if column not in table:
        return fallback
    values = table[column].to_numpy(dtype=np.float64)
    return np.where(np.isfinite(values), values, fallback)


def served_short(table: pd.DataFrame) -> np.ndarray:
    """Return the open levels served clearly less than offered (the overload rule).

    Short by more than :data:`_SIGMAS` Poisson errors and by more than :data:`_SHORT` of the
    offered rate.

    Parameters
    ----------
    table : pandas.DataFrame
        Per-level table (``level``, ``n``, ``throughput_rps``; ``offered_rps``, ``n_sent``).

    Returns
    -------
    numpy.ndarray
        Boolean, one per level.
    """
    return _short(table, _SIGMAS, _SHORT)


def _short(table: pd.DataFrame, sigmas: float, share: float) -> np.ndarray:
    """Open levels served less than offered by ``sigmas`` Poisson errors and ``share``."""
    lam = offered_rate(table)
    n = table["n"].to_numpy(dtype=np.float64)
    if "offered_rps" in table:  # the realised arrivals, all of them
        n = table["n_sent"].to_numpy(dtype=np.float64)
    x = table["throughput_rps"].to_numpy(dtype=np.float64)
    short = x < lam * (1 - np.fmax(sigmas / np.sqrt(np.fmax(n, 1.0)), share))
    return short & np.isfinite(x)


def latency_levels(obs: Observed) -> Observed:
    """The levels whose latency a steady-state model describes (not overloaded).

    Parameters
    ----------
    obs : Observed
        Every level.

    Returns
    -------
    Observed
        The same with the overloaded levels left out.
    """
    if "overloaded" not in obs.levels or not obs.levels["overloaded"].any():
        return obs
    keep = ~obs.levels["overloaded"].to_numpy(bool)
    times, itl = (
        None if v is None else [t for t, k in zip(v, keep, strict=True) if k]
        for v in (obs.times, obs.itl_times)
    )
    return replace(obs, levels=obs.levels[keep].reset_index(drop=True), times=times, itl_times=itl)


def _fmt(levels: np.ndarray) -> str:
    return "[" + ", ".join(f"{v:g}" for v in levels) + "]"


def _mean_col(frame: pd.DataFrame, col: str, mask: np.ndarray) -> float:
    if col not in frame:
        return np.nan
    v = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    v = v[mask]
    return float(np.nanmean(v)) if np.isfinite(v).any() else np.nan


def _from_levels(tab: pd.DataFrame, metric: str, level_kind: str | None) -> Observed:
    kind = _kind(tab, level_kind)
    tab = tab.sort_values("level").reset_index(drop=True)

    def col(name: str) -> np.ndarray:
        if name not in tab:
            return np.full(len(tab), np.nan)
        return pd.to_numeric(tab[name], errors="coerce").to_numpy(np.float64, na_value=np.nan)

    out = pd.DataFrame({"level": col("level"), "n": col("n")})
    out["std_s"] = col(f"{metric}_std_s")
    out["mean_s"] = col(f"{metric}_mean_s")
    out["se_mean_s"] = out["std_s"] / np.sqrt(out["n"])
    out["vif"] = 1.0  # a per-level table says nothing of the requests' correlation
    for name, q in QUANTILES.items():
        if q is None:
            continue
        out[f"{name}_s"] = col(f"{metric}_{name}_s")
        # normal-shape approximation of the quantile's standard error from the std
        dens = np.exp(-0.5 * _probit(q) ** 2) / np.sqrt(2 * np.pi)
        out[f"se_{name}_s"] = np.sqrt(q * (1 - q) / out["n"]) * out["std_s"] / dens
    out["n_failed"] = col("n_failed")
    out["throughput_rps"] = col("throughput_rps")
    out["tokens_mean"] = col("completion_tokens_mean")
    if "itl_mean_s" in tab:
        out["itl_s"] = col("itl_mean_s")
        out["se_itl_s"] = col("itl_std_s") / np.sqrt(out["n"])
    out["think_s"] = col("think_s")
    out["overloaded"] = _overloaded(out, kind, np.empty(0))
    if kind == "rate":
        out["overloaded"] |= _past_capacity(out)
    think = col("think_s")
    return Observed(
        kind,
        metric,
        out,
        float(np.nanmean(think)) if np.isfinite(think).any() else np.nan,
        float(np.nanmean(col("completion_tokens_mean")))
        if "completion_tokens_mean" in tab
        else np.nan,
        float(np.nanmean(col("prompt_tokens_mean"))) if "prompt_tokens_mean" in tab else np.nan,
    )


def _probit(q: float) -> float:
    from scipy.special import ndtri

    return float(ndtri(q))


def is_level_table(frame: pd.DataFrame, metric: str = "latency") -> bool:
    """Whether ``frame`` holds per-level statistics of ``metric`` rather than per-request times.

    Parameters
    ----------
    frame : pandas.DataFrame
        A requests table or a per-level table.
    metric : str, default "latency"
        The time, without the ``_s`` suffix (``"latency"``, ``"ttft"``, ...).

    Returns
    -------
    bool
        True when ``frame`` has no ``<metric>_s`` column but some ``<metric>_<stat>_s`` column
        of a statistic of :data:`QUANTILES`, i.e. one row per load level.
    """
    return f"{metric}_s" not in frame and any(f"{metric}_{s}_s" in frame for s in QUANTILES)


def observe(
    data: object,
    metric: str = "latency",
    level_kind: str | None = None,
    max_refused: float | None = None,
) -> Observed:
    """Aggregate a SweepResult, requests table or per-level table into :class:`Observed`.

    Parameters
    ----------
    data : SweepResult or pandas.DataFrame
        Anything with a ``.requests`` DataFrame, a requests table with ``level`` and
        ``<metric>_s``, or a per-level table with ``level`` and ``<metric>_mean_s`` /
        ``<metric>_p50_s`` / ... (optional: ``n``, ``<metric>_std_s``, ``throughput_rps``,
        ``think_s``, ``completion_tokens_mean``, ``prompt_tokens_mean``, ``level_kind``).
    metric : {"latency", "ttft"}, default "latency"
        Which time to model.
    level_kind : {"concurrency", "rate"}, optional
        Overrides (or supplies) the ``level_kind`` column.
    max_refused : float, optional
        Leave out the levels (of a requests table) where more than this share of the measured
        requests was refused with 429 or needed a retry, saying so in ``notes``.

    Returns
    -------
    Observed
        The per-level statistics.

    Raises
    ------
    ValueError
        For an unusable table; the message names the missing or bad field.
    """
    if metric not in ("latency", "ttft"):
        raise ValueError(f"metric: expected 'latency' or 'ttft', got {metric!r}")
    meta = getattr(data, "meta", None)
    frame = getattr(data, "requests", data)
    if not isinstance(frame, pd.DataFrame):
        raise ValueError("data: expected a SweepResult or a pandas DataFrame")
    if len(frame) == 0:
        raise ValueError("data: the table is empty")
    if f"{metric}_s" in frame:
        obs = _from_requests(frame, metric, level_kind, max_refused)
    elif is_level_table(frame, metric):
        obs = _from_levels(frame, metric, level_kind)
    else:
        raise ValueError(
            f"data: need a requests table with {metric + '_s'!r} or a per-level table with "
            f"{metric + '_mean_s'!r} (or _p50_s/_p95_s)"
        )
    if isinstance(meta, dict) and obs.kind == "concurrency":
        # the sweep's configured think time (the engine records it under meta["load"])
        for where in (meta.get("load") or {}, meta):
            z = where.get("think_time_s") if isinstance(where, dict) else None
            if isinstance(z, int | float) and np.isfinite(z):
                obs = replace(obs, think_s=float(z))
                break
    return obs


def resample(obs: Observed, rng: np.random.Generator) -> Observed:
    """Bootstrap replicate: a moving-block bootstrap of every level's requests in order.

    Blocks are as long as the batches of :func:`llmlat.stats.batch_means`, so a replicate keeps
    the correlation of consecutive requests (resampling single requests would hide it and give
    intervals too narrow). A streamed request's inter-token latency goes with its latency: the
    same blocks resample both.

    Parameters
    ----------
    obs : Observed
        Statistics built from a requests table (``obs.times`` is set).
    rng : numpy.random.Generator
        Seeded source of randomness.

    Returns
    -------
    Observed
        Same levels and throughput, statistics recomputed from the resampled times.
    """
    if obs.times is None:
        raise ValueError("data: bootstrap needs per-request data, not a per-level table")
    batch = _batches(obs.kind, obs.levels["level"].to_numpy())
    picks = []
    for t, size in zip(obs.times, batch, strict=True):
        n = len(t)
        size = min(max(size, int(np.ceil(n / 20))), n)
        starts = rng.integers(0, n - size + 1, int(np.ceil(n / size)))
        picks.append(np.concatenate([np.arange(a, a + size) for a in starts])[:n])
    times = [t[idx] for t, idx in zip(obs.times, picks, strict=True)]
    table = obs.levels.copy()
    for k, v in _stats_from_times(times, batch).items():
        table[k] = v
    if obs.itl_times is None:
        return replace(obs, levels=table, times=times)
    itl = [v[idx] for v, idx in zip(obs.itl_times, picks, strict=True)]
    table["itl_s"], table["se_itl_s"] = _itl_stats(itl, batch)
    return replace(obs, levels=table, times=times, itl_times=itl)


def _batches(kind: str, levels: np.ndarray) -> list[int]:
    """Fewest requests per batch: a closed level's requests a round (N) apart share a state."""
    return [stats.level_batch(kind, v) for v in levels]
