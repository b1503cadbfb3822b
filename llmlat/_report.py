"""A self-contained HTML report of one sweep: summary, fitted model, plan and figures.

``llmlat report DATASET`` and ``llmlat demo`` both end here. The report folder holds
``index.html``, the figures as PNG files beside it, the full per-level summary as
``summary.csv`` (the page shows the compact table) and the dataset itself, so it can be
zipped, published or opened offline.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Report", "build_report", "write_report"]

# llmlat.plot function -> how it uses a fit: overlays it, needs it, or takes none
_FIGURES = {
    "latency": "overlay",
    "throughput": "overlay",
    "utilization": "required",
    "ecdf": None,
    "errors": None,
}

_SUMMARY_CSV = "summary.csv"  # the full per-level summary, linked from the page

_CSS = """
body{font-family:system-ui,sans-serif;max-width:70em;margin:2em auto;padding:0 1em;color:#222}
h1{margin-bottom:.2em} .meta{color:#555} table{border-collapse:collapse;font-size:.85em}
.scroll{max-width:100%;overflow-x:auto}
td,th{border:1px solid #ccc;padding:.25em .5em;text-align:right} th{background:#f3f3f3}
.warn{background:#fff4e0;border-left:4px solid #e90;padding:.5em 1em}
figure{display:inline-block;margin:.5em} img{max-width:34em} pre{background:#f7f7f7;padding:1em}
"""


@dataclass
class Report:
    """What went into a report, returned by :func:`build_report`.

    Attributes
    ----------
    path : pathlib.Path
        The ``index.html`` written.
    fit : FitResult or None
        The fitted model, or None when the data could not identify one.
    plan : Plan or None
        The capacity plan for the target, when a fit and a target were given.
    figures : list of pathlib.Path
        The PNG files written beside the page.
    notes : list of str
        Why a section is missing (e.g. the fit's error), shown in the page too.
    next_levels : pandas.DataFrame or None
        What to measure next (levels and request counts), as
        :meth:`~llmlat.fitting.FitResult.next_levels` tabulates it: the fit's own advice, or
        the refusal's when the data could not identify a model (:class:`llmlat.NeedsData`).
        None or empty when there is nothing to add.
    """

    path: Path
    fit: Any = None
    plan: Any = None
    figures: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    next_levels: Any = None

    def next_levels_text(self) -> str:
        """Return :attr:`next_levels` as lines under "measure next:" ("" if none).

        One line per row: what it pins, the level and its requests in all (how many of them
        were measured), and why; a row that is not a level gives its remedy alone.
        """
        if self.next_levels is None or self.next_levels.empty:
            return ""
        lines = ["measure next:"]
        for row in self.next_levels.itertuples():
            if np.isnan(row.level):
                lines.append(f"  {row.param}: {row.why}")
                continue
            count = "" if np.isnan(row.requests) else f": {row.requests:,.0f} requests"
            had = f" ({row.measured:,.0f} measured)" if row.measured > 0 else " (new level)"
            lines.append(f"  {row.param}: level {row.level:g}{count}{had}; {row.why}")
        return "\n".join(lines)


def build_report(
    result: Any,
    out: str | Path,
    *,
    model: str = "auto",
    p95_s: float | None = None,
    limits: dict[str, float | str] | None = None,
    fit: Any = None,
    title: str = "llmlat report",
    notes: list[str] | None = None,
    prices: Any = None,
) -> Report:
    """Fit, plan and write the report of a sweep.

    Parameters
    ----------
    result : SweepResult
        The measured sweep.
    out : str or path
        The report folder (created; files in it are overwritten).
    model : str, default "auto"
        The queueing model to fit (see :func:`llmlat.fit`), unless ``fit`` is given.
    p95_s : float, optional
        A p95 latency target in seconds: the report then holds the plan for it.
    limits : dict of str to float or "auto", optional
        The provider's per-minute limits for the plan, as :meth:`FitResult.plan` takes them
        (``rpm``, ``tpm``, ``itpm``, ``otpm``; ``"auto"``: the ones it declared in its
        rate-limit headers).
    fit : FitResult, optional
        An existing fit to report instead of fitting ``model``.
    title : str, default "llmlat report"
        The page title.
    notes : list of str, optional
        Lines shown at the top of the page (e.g. how the fit was made).
    prices : llmlat.Prices or mapping, optional
        Token prices for the summary's cost columns (default: the sweep's ``prices=``).

    Returns
    -------
    Report
        The page's path, the fit and plan used, and notes on anything left out.
    """
    from llmlat.fitting import NeedsData
    from llmlat.fitting import fit as fit_model

    notes = list(notes or [])
    next_levels = None
    if fit is None:
        try:
            fit = fit_model(result, model=model)
        except NeedsData as exc:
            notes.append(f"No model fitted: {exc}")
            next_levels = exc.next_levels()
        except ValueError as exc:
            notes.append(f"No model fitted: {exc}")
    plan = None
    limits = dict(limits or {})
    if p95_s is not None or limits:
        if fit is None:
            notes.append("No capacity plan: it needs a fitted model (see the note above).")
        else:
            plan = fit.plan(p95=p95_s, **limits)
    return write_report(
        result,
        out,
        fit=fit,
        plan=plan,
        title=title,
        notes=notes,
        prices=prices,
        next_levels=next_levels,
    )


def write_report(
    result: Any,
    out: str | Path,
    *,
    fit: Any = None,
    plan: Any = None,
    title: str = "llmlat report",
    notes: list[str] | None = None,
    prices: Any = None,
    next_levels: Any = None,
) -> Report:
    """Write the report folder for a sweep and (optionally) its fit and plan.

    Parameters
    ----------
    result : SweepResult
        The measured sweep; saved into the folder as ``sweep.parquet``.
    out : str or path
        The report folder (created; files in it are overwritten).
    fit : FitResult, optional
        Adds the model summary and the fitted curves to the figures.
    plan : Plan, optional
        Adds the capacity plan.
    title : str, default "llmlat report"
        The page title.
    notes : list of str, optional
        Lines shown at the top of the page (e.g. why there is no fit).
    prices : llmlat.Prices or mapping, optional
        Token prices for the summary's cost columns (default: the sweep's ``prices=``).
    next_levels : pandas.DataFrame, optional
        What to measure next, shown as a table (default: the fit's ``next_levels()``).

    Returns
    -------
    Report
        The page's path and what it holds.
    """
    import matplotlib

    from llmlat import plot

    out = Path(out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    result.save(out / "sweep.parquet")
    if next_levels is None and fit is not None:
        next_levels = fit.next_levels()
    report = Report(
        path=out / "index.html",
        fit=fit,
        plan=plan,
        notes=list(notes or []),
        next_levels=next_levels,
    )
    with matplotlib.rc_context({"figure.dpi": 100}):
        for name, uses_fit in _FIGURES.items():
            if uses_fit == "required" and fit is None:
                continue
            kwargs = {"fit": fit} if uses_fit else {}
            try:
                figure = getattr(plot, name)(result, **kwargs)
            except ValueError as exc:
                report.notes.append(f"Figure {name} left out: {exc}")
                continue
            path = out / "figures" / f"{name}.png"
            figure.savefig(path, bbox_inches="tight")
            report.figures.append(path)
    summary = result.summary(prices=prices)
    # the page shows the compact table; every column is in summary.csv beside it
    summary.to_csv(out / _SUMMARY_CSV, index=False)
    report.path.write_text(_page(result, summary, report, title), encoding="utf-8")
    return report


def _page(result: Any, summary: Any, report: Report, title: str) -> str:
    from llmlat._display import compact, to_text

    meta = result.meta
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<p class='meta'>"
        + " · ".join(
            html.escape(f"{k}: {meta.get(k)}")
            for k in ("run_id", "url", "api", "model", "started_at", "llmlat_version", "seed")
        )
        + "</p>",
    ]
    for note in report.notes:
        parts.append(f"<p class='warn'>{html.escape(note)}</p>")
    if "client_bound" in summary and summary["client_bound"].any():
        bound = ", ".join(f"{x:g}" for x in summary.loc[summary["client_bound"], "level"])
        parts.append(
            f"<p class='warn'>The client may have inflated latencies at level(s) {bound}: "
            "its event loop lagged or its CPU was saturated.</p>"
        )
    parts += [
        "<h2>Summary per level</h2>",
        f"<div class='scroll'>{to_text(compact(summary), html=True)}</div>",
        f"<p class='meta'>Every summary column: <a href='{_SUMMARY_CSV}' download>"
        f"{_SUMMARY_CSV}</a>.</p>",
    ]
    if report.fit is not None:
        parts += [
            "<h2>Fitted model</h2>",
            f"<div class='scroll'>{report.fit.summary()._repr_html_()}</div>",
        ]
    if report.next_levels is not None and not report.next_levels.empty:
        parts += [
            "<h2>What to measure next</h2>",
            f"<div class='scroll'>{report.next_levels.to_html(index=False, na_rep='')}</div>",
        ]
    if report.plan is not None:
        parts += [
            "<h2>Capacity plan</h2>",
            f"<p>{html.escape(report.plan.describe())}</p>",
            report.plan.to_frame(text=True).to_html(),
        ]
    if report.figures:
        parts.append("<h2>Figures</h2>")
        for path in report.figures:
            rel = path.relative_to(report.path.parent).as_posix()
            parts.append(
                f"<figure><img src='{rel}' alt='{path.stem}'>"
                f"<figcaption>{path.stem}</figcaption></figure>"
            )
    parts.append(
        "<p class='meta'>Data: <a href='sweep.parquet'>sweep.parquet</a> "
        "(open with <code>llmlat.read()</code>).</p></body></html>"
    )
    return "\n".join(parts)
