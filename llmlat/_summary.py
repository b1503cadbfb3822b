"""Per-level statistics of any tidy requests table: the numbers behind ``SweepResult.summary()``.

:func:`summarize` needs only a ``level`` column; every other column of
:data:`llmlat.schema.REQUEST_COLUMNS` it uses is optional, and a statistic whose inputs are
missing is NaN (or ``<NA>``), never guessed. So the same function serves a fresh sweep, a
recovered partial one and a public dataset converted to the record schema.

Definitions (per level; warmup rows are left out unless asked for):

- ``n``, ``ok``: rows and successful rows. ``ok_rate = ok / n``, ``error_rate = 1 - ok_rate``.
  Without an ``ok`` column a row is ok when its ``status`` is 2xx, or always without a status.
- ``rate_limited_rate``: share of logical requests whose final outcome was a 429
  (``error_kind == "rate_limited"`` or ``status == 429``). ``http_429``: HTTP attempts answered
  429 on the way, from the attempts table (``<NA>`` without one). ``retries``: attempts beyond the
  first, summed.
- A row starts at ``t_scheduled`` (else ``t_sent``, else ``t_end - latency_s``) and ends at
  ``t_end`` (else start + ``latency_s``). ``span_s`` runs from the level's first start to its
  last end.
- ``n_transient``: measured rows in the level's start-up transient (:mod:`llmlat.stats`: the
  first N completions of a closed level of N > 1 clients, MSER-5 on an open level). They count
  in ``n`` and the rates above, never in the latency statistics below.
- ``throughput_rps``: the level's ok completion rate (:func:`llmlat.stats.throughput`: a closed
  level's by Little's law over its middle rounds, N over the mean cycle of request and think
  time, when every request succeeded; an open level's, or a closed one's that failed
  requests, in its steady window, from the end of the transient (an open level's fill) to
  the last send; over the whole span, biased low by fill and drain, when the level is too
  short). ``output_tokens_per_s``: ``completion_tokens`` of the
  same completions over the same time (NaN if any lacks the count: an undercount would be a
  silent guess).
- ``target_rate_rps``: the level of a ``rate`` sweep. ``achieved_rate_rps``: sends per second
  past the level's opening (:func:`llmlat.stats.send_rate`: ``t_sent``, else ``t_scheduled``,
  from the first send of an open level, or the last of a closed level's first round (its N
  clients' first sends), to the last send), so a client that fell behind its schedule shows
  it; on a steady closed level it is the throughput.
- ``mean_in_flight``: the sum of ``latency_s`` over ``span_s`` (the time-average number of
  requests in flight, failures included: they held a slot too).
- ``latency_*_s``, ``ttft_*_s``, ``itl_*_s``: mean and percentiles (linear interpolation) over the
  ok rows past the transient; ``itl_*`` are taken over each request's mean inter-token
  latency (``itl_mean_s``).
  ``lag_p99_s``: the 99th percentile of the send lag behind the schedule.
- ``littles_law_rel_err``: Little's law checked on the middle half of the span (edges trimmed,
  where the level ramps up and drains): ``lambda * W / L - 1``, with ``L`` the time-average
  number in flight inside the window, ``lambda`` the rows started in it per second and ``W``
  their mean latency. Near 0 in a steady state; large when the queue grows or drains.
- ``steady``: the level reached a steady state, by three checks that must all pass:
  enough data past the start-up transient (``n - n_transient >= max(20, 3 * population)``,
  the population being the concurrency of a ``concurrency`` level and the mean number in
  flight otherwise, and a steady part long enough for the throughput); a constant completion
  rate (completions in the two halves of the time between the first and last end differ by
  at most 10% plus two Poisson standard deviations); and no latency drift (the median latency of the
  rows started in the second half of the span is within a factor 1.5 of the first half's, or
  the difference is not significant by a Mann-Whitney test at the 1% level). ``<NA>`` when the
  times needed are missing.
- ``loop_lag_p99_s``: from the levels table (the engine's view of itself), the 99th percentile
  of the client's event-loop lag: how late the client may have read a byte, and so how much it
  may have added to any latency it timed.
- ``inflation``: ``loop_lag_p99_s`` over the smallest latency the level reports, the median of
  TTFT, of ITL or of the whole latency (ok rows; all rows when none succeeded): the fraction by
  which that figure may be inflated (0.2: up to 20%). An ITL under 1 ms is left out: tokens that
  close together came in one read, which a lag delays as a whole without widening their gaps.
- ``client_bound``: the client's CPU use exceeded 80% of a core, or ``inflation`` exceeds 0.1,
  so the client, not the server, may have inflated the latencies. ``<NA>`` without a levels
  row. A sharded sweep has a levels row per shard: the busiest shard's CPU and lag count, so a
  level is flagged when any shard was busy.

With an SLO (``slo={"ttft_s": ..., "itl_s": ..., "latency_s": ...}``, see
:func:`llmlat.stats.meets_slo`: a failed request never meets it) six more columns follow
(:data:`SLO_SUMMARY_COLUMNS`):

- ``slo_attainment``: the share of the level's measured requests past the transient that met
  every bound, with ``slo_attainment_low``/``_high``, a Wilson interval on the effective number
  of requests (:func:`llmlat.stats.proportion_interval`: runs of misses count as fewer draws).
- ``goodput_rps``: requests meeting the SLO completed per second, counted like
  ``throughput_rps`` (same requests or steady window), with ``goodput_low_rps``/
  ``goodput_high_rps`` (:func:`llmlat.stats.throughput_interval` with weights: a closed
  level's from the relative variance of its rate and of the share meeting the SLO, an open
  level's by batch means over sub-windows, never narrower than a Poisson count's).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from llmlat import stats as _stats
from llmlat.cost import COST_COLUMNS, Prices, level_cost

__all__ = [
    "BRIEF_COLUMNS",
    "PERCENTILES",
    "SLO_SUMMARY_COLUMNS",
    "SUMMARY_COLUMNS",
    "brief",
    "summarize",
]

#: Percentiles reported for latency, TTFT and ITL.
PERCENTILES = (50, 90, 95, 99)

_DISTRIBUTIONS = {"latency": "latency_s", "ttft": "ttft_s", "itl": "itl_mean_s"}

#: Column name -> dtype of the table :func:`summarize` returns, in order (``run_id`` is
#: inserted first when the table holds more than one run).
SUMMARY_COLUMNS: dict[str, str] = {
    "level_kind": "string",
    "level": "float64",
    "n": "int64",
    "n_transient": "int64",
    "ok": "int64",
    "ok_rate": "float64",
    "error_rate": "float64",
    "rate_limited_rate": "float64",
    "http_429": "Int64",
    "retries": "Int64",
    "span_s": "float64",
    "throughput_rps": "float64",
    "output_tokens_per_s": "float64",
    "target_rate_rps": "float64",
    "achieved_rate_rps": "float64",
    "mean_in_flight": "float64",
    **{
        f"{name}_{stat}_s": "float64"
        for name in _DISTRIBUTIONS
        for stat in ("mean", *(f"p{p}" for p in PERCENTILES))
    },
    "lag_p99_s": "float64",
    "littles_law_rel_err": "float64",
    "steady": "boolean",
    "loop_lag_p99_s": "float64",
    "inflation": "float64",
    "client_bound": "boolean",
    "stopped_by": "string",
}

#: Columns :func:`summarize` appends when given an SLO (see the module docstring).
SLO_SUMMARY_COLUMNS: dict[str, str] = {
    "slo_attainment": "float64",
    "slo_attainment_low": "float64",
    "slo_attainment_high": "float64",
    "goodput_rps": "float64",
    "goodput_low_rps": "float64",
    "goodput_high_rps": "float64",
}

# steady-state and client-bound thresholds (see the module docstring)
_MIN_REQUESTS = 20
_MIN_ROUNDS = 3
_RATE_SLACK = 0.10
_DRIFT_FACTOR = 1.5
_DRIFT_ALPHA = 0.01
_CPU_BOUND = 0.8
_LAG_BOUND = 0.10
_ITL_FLOOR_S = 0.001  # below: tokens read together (see the module docstring)

_PHASES = ("measure", "warmup")


#: The summary columns worth a terminal's or a notebook's width, in order.
BRIEF_COLUMNS = (
    "level",
    "n",
    "ok_rate",
    "rate_limited_rate",
    "throughput_rps",
    "achieved_rate_rps",
    "mean_in_flight",
    "latency_p50_s",
    "latency_p95_s",
    "latency_p99_s",
    "ttft_p50_s",
    "ttft_p95_s",
    "itl_p50_s",
    "steady",
    "client_bound",
)


def brief(summary: pd.DataFrame) -> pd.DataFrame:
    """Keep the key columns of a summary (:data:`BRIEF_COLUMNS`) for display.

    ``achieved_rate_rps`` is kept only for open-loop levels, where it can differ from the
    target; ``run_id`` leads when the summary spans several runs.

    Parameters
    ----------
    summary : pandas.DataFrame
        A table from :func:`summarize`.

    Returns
    -------
    pandas.DataFrame
        The same rows, fewer columns.
    """
    open_loop = "level_kind" in summary.columns and (summary["level_kind"] == "rate").any()
    columns = [
        c for c in BRIEF_COLUMNS if c in summary.columns and (open_loop or c != "achieved_rate_rps")
    ]
    if "run_id" in summary.columns:
        columns.insert(0, "run_id")
    return summary[columns]


def summarize(
    requests: pd.DataFrame,
    attempts: pd.DataFrame | None = None,
    levels: pd.DataFrame | None = None,
    *,
    phase: str | None = "measure",
    prices: Prices | dict[str, float] | None = None,
    slo: dict[str, float] | None = None,
) -> pd.DataFrame:
    """Summarize a tidy requests table: one row per level.

    Parameters
    ----------
    requests : pandas.DataFrame
        One row per logical request with at least a ``level`` column; the other columns of
        :data:`llmlat.schema.REQUEST_COLUMNS` are used when present.
    attempts : pandas.DataFrame, optional
        One row per HTTP attempt (:data:`llmlat.schema.ATTEMPT_COLUMNS`), for ``http_429``.
    levels : pandas.DataFrame, optional
        The engine's per-level table (:data:`llmlat.schema.LEVEL_COLUMNS`), for
        ``client_bound`` and ``stopped_by``; its levels appear even when no request finished.
    phase : {"measure", "warmup"} or None, default "measure"
        Which rows to summarize (rows without a ``phase`` column count as measured);
        None takes every row.
    prices : Prices or mapping, optional
        Token prices (:class:`llmlat.cost.Prices`): adds the columns of
        :data:`llmlat.cost.COST_COLUMNS` (cost per 1,000 requests and per hour at the level's
        measured throughput, from the tokens the server reported).
    slo : dict of str to float, optional
        Bounds in seconds on ``ttft_s``, ``itl_s`` and ``latency_s``: adds the SLO attainment
        and goodput columns (:data:`SLO_SUMMARY_COLUMNS`).

    Returns
    -------
    pandas.DataFrame
        One row per (``level_kind``, ``level``), sorted, with the columns of
        :data:`SUMMARY_COLUMNS` (preceded by ``run_id`` when ``requests`` holds several runs,
        followed by :data:`SLO_SUMMARY_COLUMNS` with an SLO). The statistics are defined in
        the module docstring.

    Raises
    ------
    ValueError
        If ``requests`` has no ``level`` column, ``phase`` is not a known phase or ``slo`` is
        not a valid SLO.
    """
    if "level" not in requests.columns:
        raise ValueError("requests: missing column 'level'")
    if phase is not None and phase not in _PHASES:
        raise ValueError(f"phase: expected one of {_PHASES} or None, got {phase!r}")
    if prices is not None:
        prices = Prices.coerce(prices)
    slo = _stats.check_slo(slo)
    requests = requests.assign(_phase=_stats.phases(requests))
    if slo is not None:
        requests = requests.assign(_meets=_stats.meets_slo(requests, slo))
    rows = requests
    if phase is not None:
        rows = requests[(requests["_phase"] == "warmup") == (phase == "warmup")]
    keys = _keys(requests)
    groups = dict(iter(rows.groupby(keys, sort=False, dropna=False))) if len(rows) else {}
    # every phase, for the completions inside a level's steady window
    every = dict(iter(requests.groupby(keys, dropna=False))) if len(requests) else {}
    level_rows = _level_rows(levels, keys)
    tried = _tried_429(rows, attempts, keys)
    out = []
    for key, frame in ((k, groups.get(k, rows.iloc[:0])) for k in _sorted(groups, level_rows)):
        whole = every.get(key, frame)
        stats = _level_stats(frame, dict(zip(keys, key, strict=True)), whole, phase)
        stats["http_429"] = pd.NA if tried is None else tried.get(key, 0)
        stats.update(_client_stats(level_rows.get(key), _smallest_latency(frame, stats)))
        if prices is not None:
            stats.update(level_cost(frame, stats["throughput_rps"], prices))
        if slo is not None:
            stats.update(_slo_stats(frame, whole, stats, phase))
        out.append(stats)
    columns = dict(SUMMARY_COLUMNS)
    if prices is not None:
        columns.update(COST_COLUMNS)
    if "run_id" in keys:
        columns = {"run_id": "string", **columns}
    if slo is not None:
        columns.update(SLO_SUMMARY_COLUMNS)
    table = pd.DataFrame(out, columns=list(columns))
    return table.astype(columns)


# ---------------------------------------------------------------- grouping


def _keys(requests: pd.DataFrame) -> list[str]:
    keys = ["level_kind", "level"] if "level_kind" in requests.columns else ["level"]
    if "run_id" in requests.columns and requests["run_id"].nunique() > 1:
        keys.insert(0, "run_id")
    return keys


def _sorted(groups: dict, level_rows: dict) -> list[tuple]:
    return sorted(set(groups) | set(level_rows), key=_sort_key)


def _sort_key(key: tuple) -> tuple:
    return tuple((0, "", v) if isinstance(v, float | int) else (1, str(v), 0) for v in key)


def _level_rows(levels: pd.DataFrame | None, keys: list[str]) -> dict[tuple, pd.Series]:
    if levels is None or levels.empty or not set(keys) <= set(levels.columns):
        return {}
    rows: dict[tuple, list[pd.Series]] = {}
    for _, row in levels.iterrows():
        rows.setdefault(tuple(row[k] for k in keys), []).append(row)
    return {key: _busiest(group) for key, group in rows.items()}


def _busiest(rows: list[pd.Series]) -> pd.Series:
    """One level run by several shards: the busiest shard's CPU and lag flag it.

    Shards that issued nothing there (fewer workers than shards) are left out; the first stop
    reason other than the planned one (an error or interrupt) is kept.
    """
    if len(rows) == 1:
        return rows[0]
    table = pd.DataFrame(rows)
    if "issued" in table and (table["issued"] > 0).any():  # a shard with no share idled
        table = table[table["issued"] > 0]
    row = table.iloc[0].copy()
    for column in ("cpu_util", "loop_lag_p99_s"):
        if column in table:
            row[column] = table[column].max()
    if "stopped_by" in table:
        unusual = table["stopped_by"][~table["stopped_by"].isin(["requests", "duration"])]
        if len(unusual):
            row["stopped_by"] = unusual.iloc[0]
    return row


def _tried_429(
    rows: pd.DataFrame, attempts: pd.DataFrame | None, keys: list[str]
) -> dict[tuple, int] | None:
    """Count 429 attempts per level key, of the requests in ``rows`` only; None if unknown."""
    if attempts is None or "status" not in attempts.columns or (attempts.empty and len(rows)):
        return None
    hits = attempts[(attempts["status"] == 429).fillna(False).to_numpy(bool)]
    join = [c for c in ("run_id", "level", "request_id") if c in hits and c in rows]
    if "request_id" not in join:
        return None
    hits = hits[join].merge(rows[list(dict.fromkeys(join + keys))].drop_duplicates(join), on=join)
    return {k: len(g) for k, g in hits.groupby(keys, dropna=False)}


# ---------------------------------------------------------------- statistics


_column = _stats.column


def _rate_limited(frame: pd.DataFrame) -> float:
    if not len(frame) or not {"error_kind", "status"} & set(frame.columns):
        return math.nan
    limited = _column(frame, "status") == 429
    if "error_kind" in frame.columns:
        limited |= (frame["error_kind"] == "rate_limited").fillna(False).to_numpy(bool)
    return float(limited.mean())


def _describe(values: np.ndarray, name: str) -> dict[str, float]:
    values = values[~np.isnan(values)]
    if not len(values):
        return {f"{name}_{s}_s": math.nan for s in ("mean", *(f"p{p}" for p in PERCENTILES))}
    stats = {f"{name}_mean_s": float(values.mean())}
    for p, v in zip(PERCENTILES, np.percentile(values, PERCENTILES), strict=True):
        stats[f"{name}_p{p}_s"] = float(v)
    return stats


def _level_stats(
    frame: pd.DataFrame,
    key: dict[str, Any],
    every: pd.DataFrame,
    phase: str | None,
) -> dict[str, Any]:
    n = len(frame)
    ok = _stats.ok_mask(frame)
    n_ok = int(ok.sum())
    # latency statistics: past the transient (a warmup summary keeps its own rows)
    steady = (frame["_phase"] != "transient").to_numpy(bool) | (phase is None)
    start, end = _stats.row_times(frame)
    done = ~np.isnan(start) & ~np.isnan(end)
    span = float(end[done].max() - start[done].min()) if done.any() else math.nan
    span = span if span > 0 else math.nan
    latency = _column(frame, "latency_s")
    in_flight = float(np.nansum(latency)) / span if not np.isnan(latency).all() else math.nan
    kind = key.get("level_kind")
    kind = kind if isinstance(kind, str) else None
    w_start, w_end = _stats.row_times(every)
    w_ok = _stats.ok_mask(every)
    w_cut = (every["_phase"] == "transient").to_numpy(bool)
    w_measured = ((every["_phase"] == "warmup") == (phase == "warmup")).to_numpy(bool)
    w_measured = w_measured | (phase is None)
    clients, workers = _stats.closed_clients(kind, key["level"]), _column(every, "worker")
    rps, windowed = _stats.throughput(
        w_start, w_end, w_ok, w_cut, w_measured, clients=clients, workers=workers
    )
    tokens = _column(every, "completion_tokens")
    tps = _stats.throughput(
        w_start, w_end, w_ok, w_cut, w_measured, tokens, clients=clients, workers=workers
    )[0]
    stats: dict[str, Any] = {
        **key,
        "level_kind": kind,
        "n": n,
        "n_transient": int((~steady).sum()),
        "ok": n_ok,
        "ok_rate": n_ok / n if n else math.nan,
        "error_rate": 1 - n_ok / n if n else math.nan,
        "rate_limited_rate": _rate_limited(frame),
        "retries": int(np.clip(_column(frame, "attempts") - 1, 0, None).sum())
        if "attempts" in frame.columns
        else pd.NA,
        "span_s": span,
        "throughput_rps": rps,
        "output_tokens_per_s": tps,
        "target_rate_rps": float(key["level"]) if kind == "rate" else math.nan,
        "achieved_rate_rps": _stats.send_rate(every, w_measured, clients),
        "mean_in_flight": in_flight,
    }
    for name, col in _DISTRIBUTIONS.items():
        stats.update(_describe(_column(frame, col)[ok & steady], name))
    lag = _column(frame, "lag_s")
    lag = lag[~np.isnan(lag)]
    stats["lag_p99_s"] = float(np.percentile(lag, 99)) if len(lag) else math.nan
    stats["littles_law_rel_err"] = _little(start[done], end[done], span)
    population = float(key["level"]) if kind == "concurrency" else stats["mean_in_flight"]
    # counted past the start-up transient: its rows say nothing of the steady state
    enough = windowed and int(steady.sum()) >= max(
        _MIN_REQUESTS, _MIN_ROUNDS * math.ceil(population) if population == population else 0
    )
    stats["steady"] = _steady(start[done], end[done], latency[done], enough, population)
    return stats


def _slo_stats(
    frame: pd.DataFrame, every: pd.DataFrame, key: dict[str, Any], phase: str | None
) -> dict[str, float]:
    """SLO attainment and goodput of one level, with intervals (see the module docstring)."""
    past = (frame["_phase"] != "transient").to_numpy(bool) | (phase is None)
    start = _stats.row_times(frame)[0][past]
    hits = frame["_meets"].to_numpy(bool)[past][np.argsort(start, kind="stable")]
    batch = _stats.level_batch(key.get("level_kind"), key["level"])
    share, low, high = _stats.proportion_interval(hits, min_batch=batch)
    w_start, w_end = _stats.row_times(every)
    measured = ((every["_phase"] == "warmup") == (phase == "warmup")).to_numpy(bool)
    good, g_low, g_high = _stats.throughput_interval(
        w_start,
        w_end,
        _stats.ok_mask(every),
        (every["_phase"] == "transient").to_numpy(bool),
        measured | (phase is None),
        weights=every["_meets"].to_numpy(np.float64),
        min_batch=batch,
        clients=_stats.closed_clients(key.get("level_kind"), key["level"]),
        workers=_column(every, "worker"),
    )
    return {
        "slo_attainment": share,
        "slo_attainment_low": low,
        "slo_attainment_high": high,
        "goodput_rps": good,
        "goodput_low_rps": g_low,
        "goodput_high_rps": g_high,
    }


def _little(start: np.ndarray, end: np.ndarray, span: float) -> float:
    """Return ``lambda * W / L - 1`` on the middle half of the span (see the module docstring)."""
    if not len(start) or math.isnan(span):
        return math.nan
    a = float(start.min()) + span / 4
    b = a + span / 2
    inside = np.clip(np.minimum(end, b) - np.maximum(start, a), 0, None).sum() / (b - a)
    arrived = (start >= a) & (start < b)
    if inside <= 0:
        return math.nan
    return float((end[arrived] - start[arrived]).sum() / (b - a) / inside - 1)


def _steady(
    start: np.ndarray, end: np.ndarray, latency: np.ndarray, enough: bool, population: float
) -> Any:
    if len(start) < 2 or math.isnan(population):
        return pd.NA
    if not enough:
        return False
    first, last = end.min(), end.max()
    c1 = int((end < (first + last) / 2).sum())
    c2 = len(end) - c1
    if abs(c1 - c2) > _RATE_SLACK * (c1 + c2) + 2 * math.sqrt(c1 + c2):
        return False
    return not _drifts(start, latency)


def _drifts(start: np.ndarray, latency: np.ndarray) -> bool:
    known = ~np.isnan(latency)
    start, latency = start[known], latency[known]
    late = start >= (start.min() + start.max()) / 2
    early_lat, late_lat = latency[~late], latency[late]
    if not len(early_lat) or not len(late_lat):
        return False
    a, b = float(np.median(early_lat)), float(np.median(late_lat))
    if min(a, b) > 0 and 1 / _DRIFT_FACTOR <= b / a <= _DRIFT_FACTOR:
        return False
    from scipy.stats import mannwhitneyu  # lazy: scipy is slow to import

    return bool(mannwhitneyu(early_lat, late_lat).pvalue < _DRIFT_ALPHA)


def _smallest_latency(frame: pd.DataFrame, stats: dict[str, Any]) -> float:
    """Return the smallest median latency the level reports (TTFT, ITL, whole latency)."""
    itl = stats["itl_p50_s"]
    medians = [
        stats["ttft_p50_s"],
        stats["latency_p50_s"],
        itl if itl >= _ITL_FLOOR_S else math.nan,
    ]
    medians = [m for m in medians if not math.isnan(m)]
    if medians:
        return min(medians)
    latency = _column(frame, "latency_s")  # nothing succeeded: the failures' latency
    return float(np.nanmedian(latency)) if (~np.isnan(latency)).any() else math.nan


def _client_stats(row: pd.Series | None, smallest: float) -> dict[str, Any]:
    if row is None:
        return {"loop_lag_p99_s": math.nan, "inflation": math.nan, "client_bound": pd.NA,
                "stopped_by": pd.NA}  # fmt: skip
    cpu = _float(row.get("cpu_util"))
    lag = _float(row.get("loop_lag_p99_s"))
    inflation = lag / smallest if smallest > 0 else math.nan  # NaN stays NaN
    flags = [cpu > _CPU_BOUND] if not math.isnan(cpu) else []
    if not math.isnan(inflation):
        flags.append(inflation > _LAG_BOUND)
    return {
        "loop_lag_p99_s": lag,
        "inflation": inflation,
        "client_bound": any(flags) if flags else pd.NA,
        "stopped_by": row.get("stopped_by", pd.NA),
    }


def _float(value: Any) -> float:
    return math.nan if value is None or pd.isna(value) else float(value)
