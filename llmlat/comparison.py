"""Compare sweeps level by level: what changed, by how much, and whether the data can tell.

:func:`compare_runs` (and :meth:`llmlat.SweepResult.compare`) puts several sweeps of the same
target side by side, each against a baseline (the first run): per level, the difference of the
median and 95th-percentile latency, the throughput and the 429 share, each with an interval.
:func:`compare_fits` puts their fitted models side by side.

Every per-run number and interval comes from :mod:`llmlat.stats` (the same definitions as the
summary table: warmup and start-up transient left out of latencies, throughput over the steady
window):

- p50 / p95: order-statistic intervals of the ok latencies, widened by the batch-means variance
  inflation of the level (:func:`llmlat.stats.quantile_interval_ordered`);
- throughput: a closed level's by Little's law over its middle rounds, an open level's by batch
  means over equal sub-windows of the steady window, never narrower than a Poisson count's
  interval (:func:`llmlat.stats.throughput_interval`);
- 429 share (requests whose final answer was a 429): Wilson's interval on the batch-means
  effective sample size (:func:`llmlat.stats.proportion_interval`).

**Difference intervals** combine the two runs' intervals conservatively: each run's interval is
taken at confidence ``1 - alpha / 2`` (Bonferroni), and the difference interval is
``[low_run - high_base, high_run - low_base]``. When both per-run intervals cover their truth,
which happens with probability at least ``1 - alpha``, the difference interval covers the true
difference; so its coverage is at least the confidence asked for (usually more: it is wider
than an interval built for the difference itself). A difference is ``significant`` when its
interval excludes 0.

Levels measured in only one of two runs are kept as rows that say so (``present``), with no
difference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from llmlat import stats as _stats

if TYPE_CHECKING:  # pragma: no cover
    from llmlat.results import SweepResult

__all__ = ["COMPARE_COLUMNS", "METRICS", "compare_fits", "compare_runs", "level_estimates"]

#: The compared statistics: name -> what it is.
METRICS = {
    "latency_p50_s": "median latency of ok requests, seconds",
    "latency_p95_s": "95th-percentile latency of ok requests, seconds",
    "throughput_rps": "ok completions per second",
    "rate_limited_rate": "share of requests whose final answer was a 429",
}
_QUANTILE = {"latency_p50_s": 0.5, "latency_p95_s": 0.95}

#: Columns of :func:`compare_runs`, in order.
COMPARE_COLUMNS = (
    "run",
    "baseline",
    "level_kind",
    "level",
    "metric",
    "present",
    "baseline_value",
    "value",
    "diff",
    "diff_low",
    "diff_high",
    "rel_diff",
    "significant",
    "n_baseline",
    "n",
)


def level_estimates(result: SweepResult, confidence: float = _stats.CONFIDENCE) -> pd.DataFrame:
    """Per level of one sweep: each of :data:`METRICS` with its interval.

    Parameters
    ----------
    result : SweepResult
        One sweep, or several concatenated that measured different levels.
    confidence : float, default 0.95
        Coverage of each interval.

    Returns
    -------
    pandas.DataFrame
        One row per (``level_kind``, ``level``, ``metric``): ``value``, ``low``, ``high`` and
        ``n`` (the rows the statistic is taken over).

    Raises
    ------
    ValueError
        If a level was measured by several runs of the result (each has its own clock).
    """
    requests = result.requests
    rows: list[tuple] = []
    columns = ["level_kind", "level", "metric", "value", "low", "high", "n"]
    dtypes = {"level_kind": "string", "level": "float64", "metric": "string", "n": "int64"}
    dtypes.update(value="float64", low="float64", high="float64")
    if not len(requests):
        return pd.DataFrame(rows, columns=columns).astype(dtypes)
    phase = _stats.phases(requests)
    start, end = _stats.row_times(requests)
    ok = _stats.ok_mask(requests)
    latency = _stats.column(requests, "latency_s")
    workers = _stats.column(requests, "worker")
    refused = (requests["error_kind"] == "rate_limited").fillna(False).to_numpy(bool) | (
        _stats.column(requests, "status") == 429
    )
    runs = requests["run_id"].astype("string").fillna("")
    for (kind, level), idx in requests.groupby(["level_kind", "level"], sort=True).indices.items():
        if runs.iloc[idx].nunique() > 1:  # their clocks start apart: one window cannot hold both
            raise ValueError(
                f"result: level {level:g} was measured by several runs "
                f"({', '.join(sorted(runs.iloc[idx].unique()))}); compare them as separate runs"
            )
        idx = idx[np.argsort(start[idx], kind="stable")]  # request order
        ph = phase[idx]
        batch = _stats.level_batch(kind, level)
        steady = ok[idx] & (ph == "measure") & np.isfinite(latency[idx])
        values = latency[idx][steady]
        for metric, q in _QUANTILE.items():
            est = _stats.quantile_interval_ordered(values, q, confidence, batch)
            rows.append((kind, level, metric, *est, len(values)))
        measured = ph != "warmup"
        est = _stats.throughput_interval(
            start[idx], end[idx], ok[idx], ph == "transient", measured, confidence,
            min_batch=batch, clients=_stats.closed_clients(kind, level), workers=workers[idx],
        )  # fmt: skip
        rows.append((kind, level, "throughput_rps", *est, int((ok[idx] & measured).sum())))
        hits = refused[idx][measured]
        est = _stats.proportion_interval(hits, confidence, batch)
        rows.append((kind, level, "rate_limited_rate", *est, len(hits)))
    return pd.DataFrame(rows, columns=columns).astype(dtypes)


def compare_runs(
    runs: Sequence[SweepResult] | Mapping[str, SweepResult],
    *,
    confidence: float = _stats.CONFIDENCE,
) -> pd.DataFrame:
    """Compare sweeps level by level against the first (the baseline).

    Parameters
    ----------
    runs : sequence of SweepResult, or dict of name to SweepResult
        Two or more sweeps; the first is the baseline. Without names a run is called by its
        ``run_id`` (``run<i>`` when it has none or two share one).
    confidence : float, default 0.95
        Coverage of each difference interval (see the module docstring for how it is built).

    Returns
    -------
    pandas.DataFrame
        Tidy, one row per (run, level, metric) with the columns of :data:`COMPARE_COLUMNS`:
        ``present`` is ``"both"``, ``"baseline only"`` or ``"run only"``; ``diff`` is
        ``value - baseline_value`` with its interval ``[diff_low, diff_high]``; ``rel_diff``
        is ``diff / baseline_value``; ``significant`` says the interval excludes 0 (``<NA>``
        when it cannot be told). ``n`` and ``n_baseline`` count the rows each statistic uses.

    Raises
    ------
    ValueError
        With fewer than two runs, or a confidence outside (0, 1).
    """
    named = _named(runs)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: expected a number in (0, 1), got {confidence!r}")
    each = 1 - (1 - confidence) / 2  # Bonferroni over the two runs of a difference
    names = list(named)
    base_name = names[0]
    base = level_estimates(named[base_name], each)
    keys = ["level_kind", "level", "metric"]
    out = []
    for name in names[1:]:
        other = level_estimates(named[name], each)
        merged = base.merge(other, on=keys, how="outer", suffixes=("_b", ""), indicator=True)
        merged["present"] = merged["_merge"].map(
            {"both": "both", "left_only": "baseline only", "right_only": "run only"}
        )
        diff = merged["value"] - merged["value_b"]
        low = merged["low"] - merged["high_b"]
        high = merged["high"] - merged["low_b"]
        known = np.isfinite(low) & np.isfinite(high)
        significant = pd.array(np.where(known, (low > 0) | (high < 0), False), dtype="boolean")
        significant[~known.to_numpy()] = pd.NA
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(merged["value_b"] != 0, diff / merged["value_b"], math.nan)
        out.append(
            pd.DataFrame(
                {
                    "run": name,
                    "baseline": base_name,
                    "level_kind": merged["level_kind"],
                    "level": merged["level"],
                    "metric": merged["metric"],
                    "present": merged["present"].astype("string"),
                    "baseline_value": merged["value_b"],
                    "value": merged["value"],
                    "diff": diff,
                    "diff_low": low,
                    "diff_high": high,
                    "rel_diff": rel,
                    "significant": significant,
                    "n_baseline": merged["n_b"].astype("Int64"),
                    "n": merged["n"].astype("Int64"),
                }
            )
        )
    table = pd.concat(out, ignore_index=True)
    order = {m: i for i, m in enumerate(METRICS)}
    table = table.sort_values(
        ["run", "level_kind", "level", "metric"],
        key=lambda c: c.map(order) if c.name == "metric" else c,
        kind="stable",
    )
    table = table.astype({"run": "string", "baseline": "string"}).reset_index(drop=True)
    table.attrs["confidence"] = confidence
    return table[list(COMPARE_COLUMNS)]


def compare_fits(
    runs: Sequence[SweepResult] | Mapping[str, SweepResult],
    model: str = "auto",
    **options: Any,
) -> pd.DataFrame:
    """Fit each sweep and put the fitted parameters side by side.

    Parameters
    ----------
    runs : sequence of SweepResult, or dict of name to SweepResult
        The sweeps, named as in :func:`compare_runs`.
    model : str, default "auto"
        Passed to :func:`llmlat.fit` for every run (``"auto"`` may choose differently per run;
        name one model to compare like with like).
    **options
        Further keywords of :func:`llmlat.fit`.

    Returns
    -------
    pandas.DataFrame
        One row per (run, parameter): ``model``, ``param``, ``estimate``, ``low``, ``high``
        (95% interval, NaN where the data do not identify it), ``identified``,
        ``capacity_rps`` and ``note`` (why a run could not be fitted: then ``param`` is NA).
    """
    from llmlat.fitting import fit

    rows = []
    for name, result in _named(runs).items():
        try:
            fitted = fit(result, model, **options)
        except ValueError as exc:
            rows.append(
                (name, model, pd.NA, math.nan, math.nan, math.nan, pd.NA, math.nan, str(exc))
            )
            continue
        ci = fitted.conf_int()
        ident = fitted.identified
        for param, value in fitted.params.items():
            rows.append(
                (
                    name,
                    fitted.model,
                    param,
                    float(value),
                    float(ci.loc[param, "lower"]),
                    float(ci.loc[param, "upper"]),
                    bool(ident[param]),
                    float(fitted.capacity_rps),
                    "; ".join(fitted.notes) or pd.NA,
                )
            )
    columns = [
        "run",
        "model",
        "param",
        "estimate",
        "low",
        "high",
        "identified",
        "capacity_rps",
        "note",
    ]
    dtypes = {
        "run": "string",
        "model": "string",
        "param": "string",
        "identified": "boolean",
        "note": "string",
    }
    return pd.DataFrame(rows, columns=columns).astype(dtypes)


def _named(runs: Sequence[SweepResult] | Mapping[str, SweepResult]) -> dict[str, SweepResult]:
    """Name each run: the given names, else its run_id (``run<i>`` when missing or repeated)."""
    from llmlat.results import SweepResult

    if isinstance(runs, Mapping):
        named = {str(k): v for k, v in runs.items()}
    else:
        runs = list(runs)
        ids = [r.run_id if isinstance(r, SweepResult) else None for r in runs]
        named = {
            (rid if rid and ids.count(rid) == 1 else f"run{i}"): r
            for i, (rid, r) in enumerate(zip(ids, runs, strict=True))
        }
    if len(named) < 2:
        raise ValueError(f"runs: expected at least two sweeps to compare, got {len(named)}")
    for name, r in named.items():
        if not isinstance(r, SweepResult):
            raise ValueError(f"runs: {name} is a {type(r).__name__}, not a SweepResult")
    return named
