"""Seaborn figures of a sweep: latency, utilization, throughput, ECDF, errors, limits, overview.

Each function (but those of :data:`TABLE_FIGURES`: :func:`comparison` draws the table of
:func:`llmlat.compare_runs`, :func:`policies` that of :func:`llmlat.policy_lab`) takes a
:class:`~llmlat.results.SweepResult` or a requests table with the columns of
:data:`llmlat.schema.REQUEST_COLUMNS`, draws on ``ax`` (or on a new figure) and returns the
:class:`matplotlib.figure.Figure`. Figures are built with the object-oriented API, never through
pyplot, so nothing leaks into global state and Jupyter shows a returned figure exactly once.

Warmup rows are left out. Latency statistics are taken over successful requests only; failures
are counted, never mixed into the percentiles, and the error rate is shown beside them.

:func:`latency`, :func:`utilization`, :func:`throughput`, :func:`errors` and :func:`overview`
also take a per-level table (one row per load level, as :func:`llmlat.fit` reads it, e.g. from
:func:`llmlat.datasets.load`): its own statistics are drawn, without confidence intervals, and
what only per-request rows can show (429 shares, distributions) is left out with a note.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, PercentFormatter

from llmlat import stats as _st
from llmlat._aggregate import QUANTILES, is_level_table
from llmlat._summary import summarize

if TYPE_CHECKING:  # pragma: no cover
    from llmlat.fitting import FitResult
    from llmlat.results import SweepResult

    Data: TypeAlias = SweepResult | pd.DataFrame

__all__ = [
    "comparison",
    "ecdf",
    "errors",
    "latency",
    "limits",
    "overview",
    "policies",
    "throughput",
    "utilization",
]

#: Figures of a table that another function made (:func:`llmlat.compare_runs`,
#: :func:`llmlat.policy_lab`), not of one sweep: ``SweepResult.plot`` does not offer them.
TABLE_FIGURES = ("comparison", "policies")

#: Confidence of the error bars drawn around observed percentiles.
CI_LEVEL = _st.CONFIDENCE
# statistic -> quantile probability (None: the mean)
_STATS = _st.QUANTILES
_DEFAULT_STATS = ("p50", "p95")
_METRIC_LABELS = {
    "latency_s": "latency",
    "service_s": "service time",
    "ttft_s": "time to first token",
    "tpot_s": "time per output token",
    "itl_mean_s": "mean inter-token latency",
    "itl_p50_s": "median inter-token latency",
    "itl_max_s": "max inter-token latency",
    "retry_wait_s": "retry wait",
    "lag_s": "send lag",
}
_LEVEL_LABELS = {
    "concurrency": "concurrency (requests in flight)",
    "rate": "offered rate (req/s)",
    "trace": "trace level",
}
_STYLE = "whitegrid"
_FIGSIZE = (6.4, 4.4)
_GRID_CELL = (5.6, 4.0)
_MAX_TICKS = 12
_UTILIZATION_MARKS = (0.7, 0.9)
# a level whose throughput is below this share of its no-queueing bound shows saturation
_SATURATED = 0.9


# ---------------------------------------------------------------- input


class _Sweep(NamedTuple):
    """The measured rows of a sweep and what the summary needs beside them.

    For a per-level table (``per_level``), ``requests`` and ``every`` are that table, one row per
    level sorted by level.
    """

    requests: pd.DataFrame  # warmup rows removed
    attempts: pd.DataFrame | None
    levels: pd.DataFrame | None
    meta: dict
    every: pd.DataFrame  # warmup rows kept: summarize() counts their completions too
    per_level: bool = False


def _tables(data: Any, metric: str = "latency_s") -> _Sweep:
    """Validate ``data`` and return its measured requests with the other tables.

    A DataFrame is a per-level table when :func:`llmlat._aggregate.is_level_table` says so for
    ``metric`` or for latency (which every requests table has).
    """
    if isinstance(data, pd.DataFrame):
        names = {metric.removesuffix("_s"), "latency"}
        if any(is_level_table(data, name) for name in names):
            return _level_table(data)
        sweep = _Sweep(data, None, None, {}, data)
    elif isinstance(getattr(data, "requests", None), pd.DataFrame):
        sweep = _Sweep(
            data.requests,
            getattr(data, "attempts", None),
            getattr(data, "levels", None),
            getattr(data, "meta", None) or {},
            data.requests,
        )
    else:
        raise ValueError(
            f"data: expected a SweepResult or a requests DataFrame, got {type(data).__name__}"
        )
    requests = sweep.requests
    for column in ("level", "ok"):
        _need(requests, column)
    # the phase of llmlat.stats: warmup rows out; transient rows kept for the counts only
    requests = requests.assign(phase=_st.phases(requests))
    requests = requests[(requests["phase"] != "warmup").to_numpy(bool)]
    if requests.empty:
        raise ValueError("data: no measured (non-warmup) requests to plot")
    _one_kind(requests)
    if "run_id" in requests:
        # runs that cover different levels (SweepResult.concat) plot as one sweep
        runs = requests.groupby("level")["run_id"].nunique()
        if (runs > 1).any():
            level = runs.index[runs > 1][0]
            raise ValueError(f"run_id: level {level:g} was measured in several runs; pick one run")
    return sweep._replace(requests=requests)


def _level_table(table: pd.DataFrame) -> _Sweep:
    """Validate a per-level table and return it, sorted by level, as the sweep to plot."""
    _need(table, "level")
    if table.empty:
        raise ValueError("data: the per-level table has no rows to plot")
    _one_kind(table)
    twice = table["level"][table["level"].duplicated()]
    if len(twice):
        raise ValueError(f"level: level {twice.iloc[0]:g} has several rows; plot one sweep")
    table = table.sort_values("level", ignore_index=True)
    return _Sweep(table, None, None, {}, table, per_level=True)


def _one_kind(frame: pd.DataFrame) -> None:
    kinds = frame["level_kind"].dropna().unique() if "level_kind" in frame else []
    if len(kinds) > 1:
        raise ValueError(f"level_kind: mixed kinds {sorted(kinds)}; plot each kind separately")


def _need(requests: pd.DataFrame, column: str) -> None:
    if column not in requests.columns:
        raise ValueError(f"data: missing column {column!r}")


def _ok(requests: pd.DataFrame) -> np.ndarray:
    return requests["ok"].fillna(False).to_numpy(bool)


def _floats(column: pd.Series) -> np.ndarray:
    return pd.to_numeric(column, errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def _level_kind(requests: pd.DataFrame) -> str | None:
    if "level_kind" not in requests:
        return None
    kinds = requests["level_kind"].dropna()
    return str(kinds.iloc[0]) if len(kinds) else None


def _level_label(kind: str | None) -> str:
    return _LEVEL_LABELS.get(kind or "", "load level")


def _metric_label(metric: str) -> str:
    name = _METRIC_LABELS.get(metric, metric.removesuffix("_s").replace("_", " "))
    return f"{name} (s)" if metric.endswith("_s") else name


# ---------------------------------------------------------------- statistics


def _summary(sweep: _Sweep) -> pd.DataFrame:
    """Per-level counts, rates and throughput from :func:`llmlat._summary.summarize`.

    Adds ``attempt_429_rate``: the share of HTTP attempts answered 429, known only with an
    attempts table. A per-level table gives the same columns (see :func:`_level_summary`).
    """
    if sweep.per_level:
        table = _level_summary(sweep.requests)
    else:
        table = summarize(sweep.every, sweep.attempts, sweep.levels)
    # a per-level table without counts keeps its rows
    table = table[~(table["n"] <= 0)].sort_values("level", ignore_index=True)
    attempts = table["n"] + table["retries"].astype("Float64")
    table["attempt_429_rate"] = (table["http_429"] / attempts).astype(float)
    return table


def _level_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Give the :func:`_summary` columns a per-level table has; the others are NaN or <NA>.

    ``ok`` and ``error_rate`` come from ``n`` and ``n_failed``; the 429 counts, the steady-state
    and client-bound checks need per-request rows.
    """

    def col(name: str) -> np.ndarray:
        return _floats(table[name]) if name in table else np.full(len(table), np.nan)

    n, failed = col("n"), col("n_failed")
    unknown = pd.array([pd.NA] * len(table), dtype="boolean")
    return pd.DataFrame(
        {
            "level": col("level"),
            "n": n,
            "ok": n - failed,
            "error_rate": failed / n,
            "rate_limited_rate": np.nan,
            "http_429": pd.array([pd.NA] * len(table), dtype="Int64"),
            "retries": pd.array([pd.NA] * len(table), dtype="Int64"),
            "throughput_rps": col("throughput_rps"),
            "latency_mean_s": col("latency_mean_s"),
            "steady": unknown,
            "client_bound": unknown,
        }
    )


def _level_column(metric: str, stat: str) -> str:
    """Name the per-level table's column of ``stat``: latency_s, p50 -> latency_p50_s."""
    return f"{metric.removesuffix('_s')}_{stat}_s"


def _stats_of(sweep: _Sweep, metric: str, stats: Sequence[str] | None) -> tuple[str, ...]:
    """Check ``metric`` and ``stats`` against the data; resolve the default statistics.

    A per-level table must have a column for every requested statistic. Without ``stats`` it
    shows :data:`_DEFAULT_STATS`, each replaced by the nearest quantile the table has when it
    lacks one (p99 for p95 in a table of p50/p90/p99), or its mean when it has no quantile.
    """
    if stats is not None:
        _check_stats(stats)
    if not sweep.per_level:
        _need(sweep.requests, metric)
        return tuple(_DEFAULT_STATS if stats is None else stats)
    table = sweep.requests
    have = [
        s
        for s in _STATS
        if _level_column(metric, s) in table
        and np.isfinite(_floats(table[_level_column(metric, s)])).any()
    ]
    if not have:
        columns = ", ".join(_level_column(metric, s) for s in _STATS)
        raise ValueError(f"data: the per-level table has no statistic of {metric!r} ({columns})")
    if stats is not None:
        for stat in stats:
            if stat not in have:
                raise ValueError(
                    f"stats: the per-level table has no {stat!r} of {metric!r} (no column "
                    f"{_level_column(metric, stat)!r}); available: {', '.join(have)}"
                )
        return tuple(stats)
    chosen: list[str] = []
    for want in _DEFAULT_STATS:
        quantiles = [s for s in have if _STATS[s] is not None and s not in chosen]
        if quantiles:
            target = _STATS[want]
            assert target is not None  # the defaults are quantiles
            chosen.append(min(quantiles, key=lambda s: abs(float(_STATS[s] or 0.0) - target)))
    return tuple(chosen or have[:1])


def _percentiles(sweep: _Sweep, metric: str, stats: Sequence[str]) -> pd.DataFrame:
    """Per-level estimates of each statistic of ``metric`` over ok requests, with CI bounds.

    A per-level table gives its own statistics and no CI: ``low`` and ``high`` are NaN.
    """
    if sweep.per_level:
        table = sweep.requests
        n = _floats(table["n"]) if "n" in table else np.nan
        return pd.concat(
            [
                pd.DataFrame(
                    {
                        "level": _floats(table["level"]),
                        "stat": stat,
                        "n": n,
                        "value": _floats(table[_level_column(metric, stat)]),
                        "low": np.nan,
                        "high": np.nan,
                    }
                )
                for stat in stats
            ],
            ignore_index=True,
        )
    requests = sweep.requests
    rows = []
    ok = requests[_ok(requests) & (requests["phase"] == "measure").to_numpy(bool)]
    kind = _level_kind(requests)
    for level, group in ok.groupby("level", sort=True):
        start, _ = _st.row_times(group)
        values = _floats(group[metric])[np.argsort(start, kind="stable")]
        values = values[np.isfinite(values)]
        batch = _st.level_batch(kind, level)
        for stat in stats:
            q = _STATS[stat]
            ci = (
                _st.mean_interval(values, CI_LEVEL, batch)
                if q is None
                else _st.quantile_interval(values, q, CI_LEVEL)
            )
            rows.append((level, stat, len(values), *ci))
    return pd.DataFrame(rows, columns=["level", "stat", "n", "value", "low", "high"])


# ---------------------------------------------------------------- drawing helpers


class _ShownFigure(Figure):
    """A Figure that Jupyter renders as one PNG although pyplot never saw it.

    IPython's inline PNG formatter exists only once the inline backend was activated (e.g. by
    ``%matplotlib inline``); without it a bare Figure would print as ``<Figure size ...>``.
    When the formatter exists it takes precedence over this method, so the image appears once.
    """

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", bbox_inches="tight")
        return buffer.getvalue()


def _axes(ax: Axes | None, figsize: tuple[float, float] = _FIGSIZE) -> Axes:
    if ax is not None:
        return ax
    with sns.axes_style(_STYLE):
        fig = _ShownFigure(figsize=figsize, layout="constrained")
        return fig.add_subplot()


def _figure_of(ax: Axes) -> Figure:
    """Return the figure an Axes draws on (the root one for an Axes of a subfigure)."""
    fig = ax.figure
    return fig if isinstance(fig, Figure) else fig.figure


def _wide(values: np.ndarray | pd.Series) -> bool:
    """Whether positive ``values`` span more than one decade (so a log axis reads better)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    return len(v) > 1 and v.max() / v.min() > 10.0


def _level_axis(ax: Axes, levels: np.ndarray, kind: str | None) -> None:
    ax.set_xlabel(_level_label(kind))
    if _wide(levels):
        ax.set_xscale("log")
        if len(np.unique(levels)) <= _MAX_TICKS:
            # swept values as plain numbers read better than powers of ten
            ax.set_xticks(np.unique(levels), [f"{v:g}" for v in np.unique(levels)])
            ax.xaxis.set_minor_formatter(NullFormatter())


def _grid(levels: np.ndarray, n: int = 200) -> np.ndarray:
    lo, hi = float(np.min(levels)), float(np.max(levels))
    return np.geomspace(lo, hi, n) if _wide(levels) else np.linspace(lo, hi, n)


def _fit_metric(fit: FitResult, metric: str) -> None:
    if f"{fit.metric}_s" != metric:
        raise ValueError(f"fit: it models {fit.metric}_s, so it cannot be drawn over {metric}")


def _fit_kind(fit: FitResult, kind: str | None) -> str:
    """Return the model form that matches the sweep: closed for concurrency, open for rate."""
    if kind is None:
        return str(fit.kind)
    if kind not in ("concurrency", "rate"):
        raise ValueError(f"level_kind: a fitted model cannot be drawn over a {kind!r} sweep")
    return kind


def _fit_curve(
    fit: FitResult, loads: np.ndarray | None, kind: str | None, stats: Sequence[str]
) -> pd.DataFrame:
    """Tabulate the fitted model over ``loads`` (its own grid when None) in the sweep's form.

    Only the statistics a fit predicts are tabulated (not p90): the others get no curve.
    """
    kind = _fit_kind(fit, kind)
    stats = [s for s in stats if s in QUANTILES]
    if loads is not None:
        loads = _grid(loads)
        if kind == "concurrency":  # the closed form takes whole numbers of clients
            loads = np.unique(np.maximum(np.round(loads), 1.0))
    return fit.curve(loads, kind=kind, stats=tuple(stats))


def _fit_column(fit: FitResult, stat: str) -> str:
    return f"{fit.metric}_{stat}_s"


def _fitted(curve: pd.DataFrame, fit: FitResult, stat: str) -> bool:
    """Whether ``curve`` holds a drawable fitted ``stat``."""
    column = _fit_column(fit, stat)
    return column in curve and bool(curve[column].notna().any())


def _check_stats(stats: Sequence[str]) -> None:
    unknown = [s for s in stats if s not in _STATS]
    if unknown or not stats:
        raise ValueError(f"stats: expected some of {list(_STATS)}, got {list(stats)}")


def _cap_ylim(ax: Axes, points: pd.DataFrame) -> None:
    """Keep a fitted curve that runs off to infinity near saturation from flattening the data."""
    observed_top = points["high"].fillna(points["value"]).max()  # no CI from a per-level table
    if np.isfinite(observed_top) and ax.get_ylim()[1] > 1.6 * observed_top:
        ax.set_ylim(top=1.6 * observed_top)


def _note(ax: Axes, text: str) -> None:
    ax.text(0.01, 0.99, text, transform=ax.transAxes, va="top", fontsize="small", color="0.35")


def _caveats(
    ax: Axes, levels: pd.DataFrame, *, failures: bool = True, lines: Sequence[str] = ()
) -> None:
    """Say what the points leave out or cannot vouch for, from the summary's checks."""
    lines = list(lines)
    failed = int((levels["n"] - levels["ok"]).sum())
    if failures and failed:
        total = int(levels["n"].sum())
        lines.append(f"ok requests only: {failed} of {total} failed ({failed / total:.1%})")
    for column, text in (("steady", "no steady state"), ("client_bound", "client-bound")):
        flagged = levels["level"][levels[column].eq(column == "client_bound").fillna(False)]
        if len(flagged):
            lines.append(f"{text} at level {', '.join(f'{v:g}' for v in flagged)}")
    if lines:
        _note(ax, "\n".join(lines))


# short reasons for the figures' notes (FitResult.left_out says them in full)
_LEFT_OUT_SHORT = {"refused (429) or retried": "429s"}
_LEFT_OUT_LABEL = "left out of the fit"


def _left_out(fit: FitResult | None, latency: bool) -> dict[float, str]:
    """Levels a fit did not use -> short reason; overloaded ones too for a latency figure."""
    if fit is None:
        return {}
    out = {v: _LEFT_OUT_SHORT.get(why, why) for v, why in fit.left_out.items()}
    if latency and "overloaded" in fit.levels:
        over = fit.levels.index[fit.levels["overloaded"].to_numpy(bool)]
        out.update({float(v): "overloaded, throughput only" for v in over})
    return dict(sorted(out.items()))


def _mark_left_out(
    ax: Axes, x: np.ndarray, y: np.ndarray, levels: np.ndarray, left: dict[float, str]
) -> None:
    """Draw the points of levels left out of the fit hollow (one legend entry)."""
    out = np.isin(levels, list(left)) & np.isfinite(y)
    if not out.any():
        return
    labelled = any(line.get_label() == _LEFT_OUT_LABEL for line in ax.get_lines())
    ax.plot(
        x[out],
        y[out],
        "o",
        mfc="white",
        mec="0.25",
        zorder=3,
        label="_nolegend_" if labelled else _LEFT_OUT_LABEL,
    )


def _left_out_line(left: dict[float, str]) -> list[str]:
    if not left:
        return []
    return ["left out of the fit: " + ", ".join(f"{v:g} ({why})" for v, why in left.items())]


# ---------------------------------------------------------------- public figures


def latency(
    data: Data,
    fit: FitResult | None = None,
    *,
    metric: str = "latency_s",
    stats: Sequence[str] | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Plot observed latency percentiles per load level, with CIs and fitted curves.

    Parameters
    ----------
    data : SweepResult, requests DataFrame or per-level table
        A sweep, a requests table with the record schema (warmup rows are ignored), or a
        per-level table as :func:`llmlat.fit` takes it (``level``, ``level_kind`` and
        ``<metric>_mean_s`` / ``_p50_s`` / ... columns, e.g. from :func:`llmlat.datasets.load`).
    fit : FitResult, optional
        A model fitted to the same metric; its curve of each statistic is drawn over the
        points, in the sweep's form (closed for concurrency, open for rate). A fit predicts
        no p90, so that statistic gets no curve. Levels the fit left out (429s, no steady
        state) or fitted by their throughput only (overloaded) are drawn hollow and named.
    metric : str, default "latency_s"
        The per-request time column to summarise, e.g. ``"ttft_s"``; for a per-level table,
        the time whose ``<metric>_<stat>_s`` columns are drawn (``latency_s`` ->
        ``latency_p50_s``).
    stats : sequence of str, optional
        Statistics to show, from ``"mean"``, ``"p50"``, ``"p90"``, ``"p95"``, ``"p99"``.
        Default ``("p50", "p95")``; for a per-level table that lacks one of them, the nearest
        quantile it has (``("p50", "p99")`` for a table of p50/p90/p99).
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure when omitted.

    Returns
    -------
    matplotlib.figure.Figure
        The figure holding the plot.

    Raises
    ------
    ValueError
        On empty data, a missing column, an unknown statistic or one the per-level table
        lacks (the message lists those it has), no successful request, or a fit of another
        metric.

    Notes
    -----
    Error bars are distribution-free order-statistic confidence intervals at ``CI_LEVEL``
    over the successful requests of the level (Student-t for the mean). A per-level table
    carries no such interval, so its points are drawn without error bars. The x axis is
    logarithmic when the levels span more than a decade.
    """
    sweep = _tables(data, metric)
    stats = _stats_of(sweep, metric, stats)
    kind = _level_kind(sweep.requests)
    levels = _summary(sweep)
    curve = None
    if fit is not None:
        _fit_metric(fit, metric)
        curve = _fit_curve(fit, levels["level"].to_numpy(), kind, ("mean", *stats))
    points = _percentiles(sweep, metric, stats)
    if points["value"].isna().all():
        raise ValueError(f"data: no successful request with a {metric!r} value")
    ax = _axes(ax)
    palette = sns.color_palette(n_colors=len(stats))
    left = _left_out(fit, latency=True)
    for stat, color in zip(stats, palette, strict=True):
        own = points[points["stat"] == stat]
        _errorbar(ax, own, "level", color, joined=curve is None)
        x = own["level"].to_numpy(float)
        _mark_left_out(ax, x, own["value"].to_numpy(float), x, left)
        if fit is not None and curve is not None and _fitted(curve, fit, stat):
            ax.plot(
                curve["load"],
                curve[_fit_column(fit, stat)],
                color=color,
                label=f"{fit.model} fit {stat}",
            )
    _level_axis(ax, levels["level"].to_numpy(), kind)
    ax.set_ylabel(_metric_label(metric))
    ax.set_ylim(bottom=0)
    _cap_ylim(ax, points)
    ax.set_title(f"{_METRIC_LABELS.get(metric, metric).capitalize()} vs load")
    _caveats(ax, levels, lines=_left_out_line(left))
    ax.legend(loc="lower right", fontsize="small")
    return _figure_of(ax)


def _errorbar(ax: Axes, points: pd.DataFrame, x: str, color: Any, *, joined: bool) -> None:
    """Draw one statistic's per-level estimates, with their CI as error bars when known."""
    value = points["value"].to_numpy(float)
    ci = points["low"].notna().any()  # a per-level table has no CI
    ax.errorbar(
        points[x].to_numpy(float),
        value,
        yerr=[value - points["low"].to_numpy(float), points["high"].to_numpy(float) - value]
        if ci
        else None,
        fmt="o-" if joined else "o",
        lw=1,
        color=color,
        capsize=3,
        label=f"observed {points['stat'].iloc[0]}" + (f" ({CI_LEVEL:.0%} CI)" if ci else ""),
    )


def utilization(
    data: Data, fit: FitResult, *, stats: Sequence[str] | None = None, ax: Axes | None = None
) -> Figure:
    """Plot latency against utilization (measured throughput over the fitted capacity c*mu).

    Parameters
    ----------
    data : SweepResult, requests DataFrame or per-level table
        A sweep, a requests table with the record schema, or a per-level table as
        :func:`llmlat.fit` takes it (with ``throughput_rps``).
    fit : FitResult
        The fitted model: it gives the capacity, the metric and the curve. Levels it left
        out, or fitted by their throughput only, are drawn hollow and named.
    stats : sequence of str, optional
        Statistics to show, from ``"mean"``, ``"p50"``, ``"p90"``, ``"p95"``, ``"p99"``;
        by default as in :func:`latency`.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure when omitted.

    Returns
    -------
    matplotlib.figure.Figure
        The figure holding the plot, with dotted marks at 70% and 90% utilization.

    Raises
    ------
    ValueError
        Without a fit, on empty data, a missing column, an unknown statistic or one the
        per-level table lacks.

    Notes
    -----
    A level's utilization is its measured throughput (ok requests per second, as in
    :func:`llmlat._summary.summarize`; a per-level table's ``throughput_rps``) over
    ``fit.capacity_rps``, so closed- and open-loop sweeps share this axis. The solid curve is
    the fitted model in the sweep's form against its own utilization. For a concurrency sweep
    the open form (the same station fed by Poisson arrivals, what the 70% / 90% rules of thumb
    are about) is drawn dashed beside it. Points of a per-level table are drawn without error
    bars: it carries no confidence intervals.
    """
    if fit is None:
        raise ValueError("fit: utilization needs a FitResult (the capacity c*mu comes from it)")
    metric = f"{fit.metric}_s"
    sweep = _tables(data, metric)
    stats = _stats_of(sweep, metric, stats)
    if sweep.per_level:
        _need(sweep.requests, "throughput_rps")
    kind = _fit_kind(fit, _level_kind(sweep.requests))
    # a closed loop's own curve is flat, then vertical at 100%; the open form is the curve
    # that Poisson traffic (and so capacity planning) would see on the same station
    curves = {form: _fit_curve(fit, None, form, ("mean", *stats)) for form in {kind, "rate"}}
    levels = _summary(sweep)
    util = pd.Series(levels["throughput_rps"].to_numpy() / fit.capacity_rps, index=levels["level"])
    points = _percentiles(sweep, metric, stats)
    points["utilization"] = points["level"].map(util)
    ax = _axes(ax)
    palette = sns.color_palette(n_colors=len(stats))
    left = _left_out(fit, latency=True)
    for stat, color in zip(stats, palette, strict=True):
        own = points[points["stat"] == stat]
        _errorbar(ax, own, "utilization", color, joined=False)
        _mark_left_out(
            ax,
            own["utilization"].to_numpy(float),
            own["value"].to_numpy(float),
            own["level"].to_numpy(float),
            left,
        )
        for form, curve in sorted(curves.items(), key=lambda item: item[0] != kind):
            if _fitted(curve, fit, stat):
                open_form = form != kind
                ax.plot(
                    curve["utilization"],
                    curve[_fit_column(fit, stat)],
                    color=color,
                    ls="--" if open_form else "-",
                    lw=1 if open_form else 1.5,
                    label=f"{fit.model} fit {stat}" + (", Poisson arrivals" if open_form else ""),
                )
    for mark in _UTILIZATION_MARKS:
        ax.axvline(mark, color="0.45", ls=":", lw=1)
        ax.text(
            mark,
            1.0,
            f" {mark:.0%}",
            transform=ax.get_xaxis_transform(),
            va="top",
            fontsize="small",
            color="0.35",
        )
    ax.set_xlim(0, max(1.02, 1.05 * np.nanmax(points["utilization"])))
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel(f"utilization (throughput / {_capacity_label(fit)})")
    ax.set_ylabel(_metric_label(metric))
    ax.set_ylim(bottom=0)
    _cap_ylim(ax, points)
    ax.set_title(f"{_METRIC_LABELS.get(metric, metric).capitalize()} vs utilization")
    _caveats(ax, levels, lines=_left_out_line(left))
    ax.legend(loc="center left", fontsize="small")
    return _figure_of(ax)


def throughput(data: Data, fit: FitResult | None = None, ax: Axes | None = None) -> Figure:
    """Plot throughput against load, with the asymptotic bounds and the saturation knee.

    Parameters
    ----------
    data : SweepResult, requests DataFrame or per-level table
        A sweep, a requests table with the record schema, or a per-level table as
        :func:`llmlat.fit` takes it; its ``throughput_rps`` is drawn.
    fit : FitResult, optional
        When given, its throughput curve is drawn, and its capacity (c*mu, or the batching
        throughput at the slot cap) as a horizontal line that bounds the knee; levels it left
        out are drawn hollow and named.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure when omitted.

    Returns
    -------
    matplotlib.figure.Figure
        The figure holding the plot.

    Raises
    ------
    ValueError
        On empty data, missing time columns, or a per-level table without ``throughput_rps``.

    Notes
    -----
    The knee is where the two asymptotic bounds of operational analysis cross: throughput
    cannot exceed the capacity ``X_max`` (the fit's c*mu, else the highest measured
    throughput), nor ``N / (R0 + Z)`` for a closed loop of ``N`` clients (``R0`` = the lowest
    per-level mean latency, ``Z`` = think time), nor the offered rate for an open loop. So the
    knee is at ``N* = X_max * (R0 + Z)`` clients, or at a rate of ``X_max``. Without a fit
    and while the highest level still runs within 90% of its no-queueing bound, saturation
    was not reached and no knee is drawn (the plot says so). ``R0`` of a per-level table is its
    lowest ``latency_mean_s``.
    """
    sweep = _tables(data)
    requests = sweep.requests
    for column in ("throughput_rps",) if sweep.per_level else ("t_scheduled", "t_end", "latency_s"):
        _need(requests, column)
    levels = _summary(sweep)
    kind = _level_kind(requests)
    x = levels["level"].to_numpy(dtype=float)
    ax = _axes(ax)
    palette = sns.color_palette()
    ax.plot(x, levels["throughput_rps"], "o-", color=palette[0], label="measured")
    left = _left_out(fit, latency=False)
    _mark_left_out(ax, x, levels["throughput_rps"].to_numpy(float), x, left)
    x_max = float(levels["throughput_rps"].max())  # NaN when no level has a span
    if fit is not None:
        x_max = float(fit.capacity_rps)
        curve = _fit_curve(fit, x, kind, ())
        ax.plot(curve["load"], curve["throughput_rps"], color=palette[1], label=f"{fit.model} fit")
        ax.axhline(x_max, color=palette[1], ls="--", lw=1, label=_capacity_label(fit))
    notes = _left_out_line(left)
    slope = _bound_slope(levels, kind, _think_time(sweep.meta, fit))
    if slope is not None and np.isfinite(slope) and slope > 0 and x_max > 0:
        top = levels["throughput_rps"].iloc[-1]
        if fit is None and not top < _SATURATED * slope * x[-1]:
            # still on the no-queueing line: the best throughput seen is no capacity estimate
            ax.plot(x, slope * x, color="0.6", ls="--", lw=1, label="no-queueing bound")
            notes.append("no saturation reached: the knee lies above the highest level")
        else:
            knee = x_max / slope
            grid = _grid(np.append(x, knee))
            bounds = np.minimum(grid * slope, x_max)
            ax.plot(grid, bounds, color="0.6", ls="--", lw=1, label="asymptotic bounds")
            ax.axvline(knee, color="0.3", ls=":", label=f"knee ≈ {knee:.3g}")
    _caveats(ax, levels, failures=False, lines=notes)
    _level_axis(ax, x, kind)
    ax.set_ylabel("throughput (ok req/s)")
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput vs load")
    ax.legend(loc="lower right", fontsize="small")
    return _figure_of(ax)


def _capacity_label(fit: FitResult) -> str:
    """Name the fitted capacity, saying so when the fit does not identify it."""
    shown = f"capacity {fit.capacity_rps:.3g} req/s"
    return f"fitted {shown}" if fit.capacity_identified else f"{shown}, not identified"


def _think_time(meta: dict, fit: FitResult | None) -> float:
    """Think time of a closed loop: the sweep's setting, else the fit's, else zero."""
    think = (meta.get("load") or {}).get("think_time_s")
    if think is None and fit is not None:
        think = pd.concat([fit.params, fit.fixed]).get("think_s")
    return float(think or 0.0)


def _bound_slope(levels: pd.DataFrame, kind: str | None, think_s: float) -> float | None:
    """Throughput per unit of load while nothing queues: 1 / (R0 + Z) clients, 1 for a rate."""
    if kind == "rate":
        return 1.0
    if kind != "concurrency":
        return None
    return 1.0 / (levels["latency_mean_s"].min() + think_s)


def ecdf(data: Data, metric: str = "latency_s", ax: Axes | None = None) -> Figure:
    """Plot the empirical CDF of a per-request time, one line per load level.

    Parameters
    ----------
    data : SweepResult or pandas.DataFrame
        A sweep, or a requests table with the record schema; only successful requests count.
    metric : str, default "latency_s"
        The per-request time column.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure when omitted.

    Returns
    -------
    matplotlib.figure.Figure
        The figure holding the plot; the x axis is logarithmic when the 1st and 99th
        percentiles are more than a decade apart.

    Raises
    ------
    ValueError
        On empty data, a missing column, no successful request with a value, or a per-level
        table (it has no per-request times).
    """
    sweep = _tables(data, metric)
    if sweep.per_level:
        raise ValueError("data: a per-level table has no per-request times to draw an ECDF from")
    requests = sweep.requests
    _need(requests, metric)
    ok = requests[_ok(requests) & np.isfinite(_floats(requests[metric]))]
    if ok.empty:
        raise ValueError(f"data: no successful request with a {metric!r} value")
    kind = _level_kind(requests)
    order = np.sort(ok["level"].unique())
    labels = {lv: f"{lv:g}" for lv in order}
    frame = pd.DataFrame({metric: _floats(ok[metric]), "level": ok["level"].map(labels).to_numpy()})
    ax = _axes(ax)
    sns.ecdfplot(
        frame,
        x=metric,
        hue="level",
        hue_order=[labels[lv] for lv in order],
        palette=sns.color_palette("flare", n_colors=len(order)),
        ax=ax,
    )
    low, high = np.quantile(frame[metric], [0.01, 0.99])
    if low > 0 and high / low > 10.0:
        ax.set_xscale("log")
    ax.set_xlabel(_metric_label(metric))
    ax.set_ylabel("fraction of ok requests")
    ax.set_title(f"Distribution of {_METRIC_LABELS.get(metric, metric)} per level")
    # a CDF is low where x is small, so the upper left corner stays clear
    sns.move_legend(ax, "upper left", title=_level_label(kind), fontsize="small")
    return _figure_of(ax)


def errors(data: Data, ax: Axes | None = None) -> Figure:
    """Plot the share of failed requests and of 429 responses against load.

    Parameters
    ----------
    data : SweepResult, requests DataFrame or per-level table
        A sweep, or a requests table. With a SweepResult the 429 share is taken over every HTTP
        attempt (so throttling that retries absorbed still shows); with a table alone, over the
        requests whose final outcome was a 429. A per-level table gives the failed share from
        its ``n_failed`` and ``n``; it cannot give a 429 share, which is left out with a note.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure when omitted.

    Returns
    -------
    matplotlib.figure.Figure
        The figure holding the plot.

    Raises
    ------
    ValueError
        On empty data or a missing column.
    """
    sweep = _tables(data)
    levels = _summary(sweep)
    kind = _level_kind(sweep.requests)
    ax = _axes(ax)
    palette = sns.color_palette()
    ax.plot(levels["level"], levels["error_rate"], "o-", color=palette[3], label="failed requests")
    if levels["attempt_429_rate"].notna().all():
        y, label = levels["attempt_429_rate"], "429 responses (share of attempts)"
    else:
        y, label = levels["rate_limited_rate"], "requests failed with 429"
    if sweep.per_level:
        _note(ax, "429 share not shown: it needs per-request rows")
    else:
        ax.plot(levels["level"], y, "s--", color=palette[1], label=label)
    _level_axis(ax, levels["level"].to_numpy(), kind)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    # scaled to the data (at least 0 to 5%) so that a 1% error rate is not a flat line
    top = np.nanmax([levels["error_rate"].max(), y.max(), 0.05 / 1.1])
    top = min(1.1 * top, 1.02)
    ax.set_ylim(-0.03 * top, top)  # a little room below, so a 0% line stays visible
    ax.set_ylabel("share")
    ax.set_title("Errors vs load")
    ax.legend(loc="upper right" if sweep.per_level else "upper left", fontsize="small")
    return _figure_of(ax)


def limits(data: Data, ax: Axes | None = None) -> Figure:
    """Plot the rate-limit budget the provider declared left, over the run.

    Each answered attempt that carried rate-limit headers (``x-ratelimit-*`` or
    ``anthropic-ratelimit-*``, recorded in the attempts table) is a point: the requests and
    tokens remaining as a share of the declared per-minute limit, at the time the answer came.
    Attempts answered 429 are marked along the bottom, and each level's start is a dotted line.

    Parameters
    ----------
    data : SweepResult
        A sweep with its attempts table.
    ax : matplotlib.axes.Axes, optional
        Where to draw; a new figure when omitted.

    Returns
    -------
    matplotlib.figure.Figure
        The figure holding the plot.

        When no attempt recorded a limit (the provider sent no rate-limit headers), the panel
        says so instead.

    Raises
    ------
    ValueError
        Without an attempts table.
    """
    attempts = getattr(data, "attempts", None)
    if not isinstance(attempts, pd.DataFrame):
        raise ValueError("data: expected a SweepResult (the limits are in its attempts table)")
    ax = _axes(ax)
    palette = sns.color_palette()
    drawn = False
    for i, kind in enumerate(("requests", "tokens", "input_tokens", "output_tokens")):
        limit = _st.column(attempts, f"ratelimit_limit_{kind}")
        left = _st.column(attempts, f"ratelimit_remaining_{kind}")
        known = np.isfinite(limit) & np.isfinite(left) & (limit > 0)
        if not known.any():
            continue
        drawn = True
        t = _st.column(attempts, "t_end")[known]
        order = np.argsort(t)
        share = (left[known] / limit[known])[order]
        label = f"{kind.replace('_', ' ')} left (limit {limit[known][order][-1]:g}/min)"
        ax.plot(t[order], share, ".-", ms=3, lw=0.8, color=palette[i], label=label)
    if not drawn:
        ax.set_axis_off()
        ax.set_title("Provider rate limits over the run")
        ax.text(
            0.5, 0.5, "no rate-limit headers recorded:\nthe provider declared no limits",
            transform=ax.transAxes, ha="center", va="center", color="0.35",
        )  # fmt: skip
        return _figure_of(ax)
    refused = _st.column(attempts, "status") == 429
    if refused.any():
        t = _st.column(attempts, "t_end")[refused]
        ax.plot(t, np.zeros(len(t)), "x", color=palette[4], ms=5, label="429 answers")
    levels = getattr(data, "levels", None)
    if isinstance(levels, pd.DataFrame) and len(levels):
        for start, level in zip(_st.column(levels, "t_start"), levels["level"], strict=True):
            if np.isfinite(start):
                ax.axvline(start, color="0.6", ls=":", lw=0.8)
                ax.annotate(
                    f"{level:g}", (start, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(2, -10), textcoords="offset points", fontsize="x-small", color="0.4",
                )  # fmt: skip
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(-0.05, 1.08)
    ax.set_xlabel("time since the run started (s)")
    ax.set_ylabel("budget left (share of the declared limit)")
    ax.set_title("Provider rate limits over the run")
    ax.legend(loc="lower left", fontsize="small")
    return _figure_of(ax)


def _without_rows(ax: Axes, text: str) -> Figure:
    """Leave a panel that needs per-request rows empty, saying why."""
    ax.set_axis_off()
    ax.set_title("Distribution per level")
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.35")
    return _figure_of(ax)


def overview(data: Data, fit: FitResult | None = None) -> Figure:
    """Draw the report grid: latency, throughput, errors and ECDF, plus utilization with a fit.

    Parameters
    ----------
    data : SweepResult, requests DataFrame or per-level table
        A sweep, a requests table with the record schema, or a per-level table as
        :func:`llmlat.fit` takes it. A per-level table has no per-request times: its ECDF
        panel holds a note instead, and the errors panel shows no 429 share.
    fit : FitResult, optional
        A fitted model, overlaid where it applies. It adds the utilization panel, and the
        latency panel then shows the fitted metric.

    Returns
    -------
    matplotlib.figure.Figure
        A 2x2 grid; with a fit, 2x3 (the sixth panel is the TTFT ECDF when the data has TTFTs).

    Raises
    ------
    ValueError
        On empty data or a missing column.

    Notes
    -----
    Points of a per-level table are drawn without error bars (it carries no confidence
    intervals).
    """
    metric = "latency_s" if fit is None else f"{fit.metric}_s"
    sweep = _tables(data, metric)  # validate once, before drawing anything
    requests = sweep.requests
    panels: list[Callable[[Axes], Figure]] = [
        lambda ax: latency(data, fit, metric=metric, ax=ax),
        lambda ax: throughput(data, fit, ax=ax),
        lambda ax: errors(data, ax=ax),
        (lambda ax: _without_rows(ax, "no ECDF: a per-level table\nhas no per-request times"))
        if sweep.per_level
        else (lambda ax: ecdf(data, ax=ax)),
    ]
    if fit is not None:
        panels.insert(1, lambda ax: utilization(data, fit, ax=ax))
        # a table without the column (e.g. a public dataset) gets no TTFT panel
        if (
            not sweep.per_level
            and "ttft_s" in requests
            and (_ok(requests) & np.isfinite(_floats(requests["ttft_s"]))).any()
        ):
            panels.append(lambda ax: ecdf(data, metric="ttft_s", ax=ax))
    cols = 2 if len(panels) <= 4 else 3
    with sns.axes_style(_STYLE):
        fig = _ShownFigure(figsize=(_GRID_CELL[0] * cols, _GRID_CELL[1] * 2), layout="constrained")
        axes = fig.subplots(2, cols).ravel()
    for draw, ax in zip(panels, axes, strict=False):
        draw(ax)
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    return fig


_COMPARE_LABELS = {
    "latency_p50_s": ("p50 latency", "difference, s"),
    "latency_p95_s": ("p95 latency", "difference, s"),
    "throughput_rps": ("throughput", "difference, req/s"),
    "rate_limited_rate": ("429 share", "difference"),
}


def comparison(table: pd.DataFrame, metrics: Sequence[str] | None = None) -> Figure:
    """Draw what :func:`llmlat.compare_runs` found: per level, each run minus the baseline.

    Parameters
    ----------
    table : pandas.DataFrame
        The table :func:`llmlat.compare_runs` (or :meth:`SweepResult.compare`) returns.
    metrics : sequence of str, optional
        Which of its metrics to draw, one panel each (default: all four).

    Returns
    -------
    matplotlib.figure.Figure
        One panel per metric: the difference with its interval as error bars, a line at 0;
        a level measured in only one of the runs is marked with an x on the 0 line.

    Raises
    ------
    ValueError
        If ``table`` is not a comparison table or names an unknown metric.
    """
    need = {"run", "level", "level_kind", "metric", "present", "diff", "diff_low", "diff_high"}
    if not isinstance(table, pd.DataFrame) or not need <= set(table.columns):
        raise ValueError("table: expected the table llmlat.compare_runs returns")
    metrics = list(metrics or _COMPARE_LABELS)
    unknown = [m for m in metrics if m not in _COMPARE_LABELS]
    if unknown:
        raise ValueError(f"metrics: unknown {unknown}; expected some of {list(_COMPARE_LABELS)}")
    cols = min(2, len(metrics))
    rows = -(-len(metrics) // cols)
    with sns.axes_style(_STYLE):
        fig = _ShownFigure(
            figsize=(_GRID_CELL[0] * cols, _GRID_CELL[1] * rows), layout="constrained"
        )
        axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    palette = sns.color_palette()
    runs = list(dict.fromkeys(table["run"]))
    kinds = table["level_kind"].dropna().unique()
    kind = str(kinds[0]) if len(kinds) == 1 else None
    confidence = table.attrs.get("confidence", CI_LEVEL)
    for ax, metric in zip(axes, metrics, strict=False):
        title, ylabel = _COMPARE_LABELS[metric]
        part = table[table["metric"] == metric]
        unbounded = False
        for i, run in enumerate(runs):
            rows_ = part[(part["run"] == run) & (part["present"] == "both")].sort_values("level")
            x = rows_["level"].to_numpy(float)
            y = rows_["diff"].to_numpy(float)
            lo = rows_["diff_low"].to_numpy(float)
            hi = rows_["diff_high"].to_numpy(float)
            known = np.isfinite(lo) & np.isfinite(hi)
            unbounded |= bool((~known).any())
            color = palette[i % len(palette)]
            ax.plot(
                x,
                y,
                "o-",
                lw=1,
                color=color,
                label=f"{run} - {rows_['baseline'].iloc[0]}" if len(rows_) else run,
            )
            if known.any():
                ax.errorbar(
                    x[known],
                    y[known],
                    yerr=[y[known] - lo[known], hi[known] - y[known]],
                    fmt="none",
                    color=color,
                    capsize=3,
                    lw=1,
                )
            only = part[(part["run"] == run) & (part["present"] != "both")]
            if len(only):
                ax.plot(
                    only["level"],
                    np.zeros(len(only)),
                    "x",
                    color=color,
                    ms=8,
                    label=f"measured in one run only ({run})",
                )
        ax.axhline(0, color="0.4", lw=0.8)
        if unbounded:
            _note(ax, "no bar: too few requests in a run for an interval")
        levels = part["level"].to_numpy(float)
        if len(levels):
            _level_axis(ax, levels, kind)
        if metric == "rate_limited_rate":
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}: run - baseline ({confidence:.0%} interval)")
        ax.legend(fontsize="small")
    for ax in axes[len(metrics) :]:
        ax.set_axis_off()
    return fig


def policies(table: pd.DataFrame) -> Figure:
    """Draw what :func:`llmlat.policy_lab` measured: each client design side by side.

    Parameters
    ----------
    table : pandas.DataFrame
        The table :func:`llmlat.policy_lab` returns.

    Returns
    -------
    matplotlib.figure.Figure
        Three panels of bars per design (one colour per level): load amplification (attempts
        over requests), the share of requests lost to a 429, and p95 latency of answered
        requests with its interval.

    Raises
    ------
    ValueError
        If ``table`` is not a policy-lab table.
    """
    need = {"design", "level", "amplification", "rate_limited_rate", "latency_p95_s"}
    if not isinstance(table, pd.DataFrame) or not need <= set(table.columns):
        raise ValueError("table: expected the table llmlat.policy_lab returns")
    designs = list(dict.fromkeys(table["design"]))
    levels = sorted(table["level"].unique())
    with sns.axes_style(_STYLE):
        fig = _ShownFigure(
            figsize=(_GRID_CELL[0] * 3, max(_GRID_CELL[1], 0.45 * len(designs) + 1.5)),
            layout="constrained",
        )
        axes = fig.subplots(1, 3, sharey=True)
    palette = sns.color_palette()
    y = np.arange(len(designs))
    height = 0.8 / len(levels)
    panels = (
        ("amplification", "attempts per request (load amplification)"),
        ("rate_limited_rate", "requests lost to a 429"),
        ("latency_p95_s", "p95 latency of answered requests, s"),
    )
    for ax, (column, title) in zip(axes, panels, strict=True):
        for j, level in enumerate(levels):
            part = table[table["level"] == level].set_index("design").reindex(designs)
            value = part[column].to_numpy(float)
            err = None
            if column == "latency_p95_s" and "latency_p95_low_s" in part:
                low = part["latency_p95_low_s"].to_numpy(float)
                high = part["latency_p95_high_s"].to_numpy(float)
                err = np.nan_to_num(np.vstack([value - low, high - value]), nan=0.0)
            ax.barh(
                y + (j - (len(levels) - 1) / 2) * height,
                value,
                height=height,
                xerr=err,
                color=palette[j % len(palette)],
                capsize=2,
                label=f"level {level:g}",
            )
        if column == "amplification":
            ax.axvline(1.0, color="0.4", lw=0.8)
        if column == "rate_limited_rate":
            ax.xaxis.set_major_formatter(PercentFormatter(1.0))
        ax.set_title(title, fontsize="medium")
    axes[0].set_yticks(y, designs)
    axes[0].invert_yaxis()
    if len(levels) > 1:
        axes[0].legend(fontsize="small")
    return fig
