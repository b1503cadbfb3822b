"""The compact per-level table a person reads first: columns of the summary, no new numbers.

``%%llmsweep``, :class:`~llmlat.results.SweepResult`'s reprs, ``llmlat sweep`` and the report
show it: level, n, ok %, 429 %, throughput, latency p50 / p95 / p99 and TTFT p95, one row per
level, and a ``notes`` column saying when a row's numbers are not to be trusted as they stand
(not a steady state, the client itself was the bottleneck). Every value is a column of
:meth:`~llmlat.results.SweepResult.summary` (only rates are shown as percentages); the full
summary is one call (or ``--full``) away.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["COMPACT_COLUMNS", "compact", "to_text"]

#: Summary column -> the compact table's heading, in order.
COMPACT_COLUMNS = {
    "level": "level",
    "n": "n",
    "ok_rate": "ok %",
    "rate_limited_rate": "429 %",
    "throughput_rps": "throughput /s",
    "latency_p50_s": "p50 s",
    "latency_p95_s": "p95 s",
    "latency_p99_s": "p99 s",
    "ttft_p95_s": "TTFT p95 s",
    "slo_attainment": "SLO %",  # with an SLO only
    "goodput_rps": "goodput /s",
    "cost_per_1k_requests_usd": "$ / 1k req",  # with prices only
}
_PERCENT = ("ok_rate", "rate_limited_rate", "slo_attainment")
# summary flag -> (the value that deserves a note, the note)
_NOTES = {"steady": (False, "not steady"), "client_bound": (True, "client-bound")}


def compact(summary: pd.DataFrame) -> pd.DataFrame:
    """Return the compact per-level table of a summary.

    Parameters
    ----------
    summary : pandas.DataFrame
        A per-level summary (:meth:`SweepResult.summary`).

    Returns
    -------
    pandas.DataFrame
        The columns of :data:`COMPACT_COLUMNS` that the summary has, under their short
        headings (``run_id`` first when the summary spans runs), rates in percent, and
        ``notes``.
    """
    kept = [c for c in COMPACT_COLUMNS if c in summary.columns]
    table = summary[kept].copy()
    for column in _PERCENT:
        if column in table:
            table[column] = table[column] * 100.0
    table = table.rename(columns=COMPACT_COLUMNS)
    if "run_id" in summary.columns:
        table.insert(0, "run_id", summary["run_id"])
    notes = pd.Series([""] * len(summary), index=summary.index, dtype=object)
    for column, (flagged, note) in _NOTES.items():
        if column in summary.columns:
            hit = (summary[column] == flagged).fillna(False).to_numpy(bool)
            notes[hit] = [f"{n}, {note}" if n else note for n in notes[hit]]
    if notes.astype(bool).any():
        table["notes"] = notes
    return table.reset_index(drop=True)


def _number(value: Any) -> str:
    return f"{value:.4g}"


def to_text(table: pd.DataFrame, *, html: bool = False) -> str:
    """Format a table for a terminal (or as HTML): 4 significant digits, ``-`` when missing.

    Parameters
    ----------
    table : pandas.DataFrame
    html : bool, default False
        An HTML table instead of text.

    Returns
    -------
    str
    """
    if html:
        return table.to_html(index=False, float_format=_number, na_rep="-", border=0)
    return table.to_string(index=False, float_format=_number, na_rep="-")
