"""The client policy lab: one provider, driven by different client designs, side by side.

A client's design decides how much load a provider really sees. Retrying a 429 at once
multiplies the attempts exactly when the provider has no room; backing off spreads them out;
jitter de-synchronises clients that were refused together; honouring ``Retry-After`` waits as
long as the provider asked; a semaphore (a cap on requests in flight) or a client-side RPM token
bucket keeps the excess in the client's own queue, where it shows as latency rather than as
refusals. :func:`policy_lab` runs the same load (same seed, so the same send times) once per
design and reports, per design and level:

- ``amplification``: HTTP attempts over logical requests, i.e. attempts/s over requests/s at
  the provider: the extra load the design creates;
- ``rate_limited_rate``: requests whose final answer was a 429 (lost to the user), and
  ``attempt_429_rate``: attempts answered 429 (how hard the provider had to push back);
- ``goodput_rps`` (ok completions per second, the summary's ``throughput_rps``) and the latency
  p50 / p95 of answered requests, counted from the scheduled send (so a client-side wait is
  latency too), p95 with its interval (:func:`llmlat.stats.quantile_interval_ordered`).

Every design is a set of sweep options (:class:`~llmlat.config.SweepConfig` fields: the retry
policy, ``max_in_flight``, ``client_rpm``): :func:`designs` gives the standard ones.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from llmlat import stats as _stats

__all__ = ["LAB_COLUMNS", "designs", "policy_lab"]

#: Columns of :func:`policy_lab`, in order.
LAB_COLUMNS = (
    "design",
    "options",
    "level_kind",
    "level",
    "n",
    "requests_per_s",
    "attempts_per_s",
    "amplification",
    "rate_limited_rate",
    "attempt_429_rate",
    "ok_rate",
    "goodput_rps",
    "latency_p50_s",
    "latency_p95_s",
    "latency_p95_low_s",
    "latency_p95_high_s",
)


def designs(
    retries: int = 3, cap: int | None = None, rpm: float | None = None
) -> dict[str, dict[str, Any]]:
    """Return the standard client designs, each as sweep options.

    Parameters
    ----------
    retries : int, default 3
        Retries of the designs that retry.
    cap : int, optional
        Adds ``"semaphore <cap>"``: at most ``cap`` requests in flight (``max_in_flight``),
        with jittered backoff honouring ``Retry-After``.
    rpm : float, optional
        Adds ``"token bucket <rpm>/min"``: at most ``rpm`` attempts per minute from the client
        (``client_rpm``), with jittered backoff honouring ``Retry-After``.

    Returns
    -------
    dict of str to dict
        Design name -> options: ``"no retries"``, ``"immediate retries"`` (no backoff, hint
        ignored), ``"exponential"`` (no jitter, hint ignored), ``"full jitter"`` (hint ignored),
        ``"jitter + Retry-After"``, then the capped designs asked for.
    """
    out: dict[str, dict[str, Any]] = {
        "no retries": {"retries": 0},
        "immediate retries": {
            "retries": retries,
            "backoff_base_s": 0.0,
            "honour_retry_after": False,
        },
        "exponential": {"retries": retries, "backoff_jitter": False, "honour_retry_after": False},
        "full jitter": {"retries": retries, "backoff_jitter": True, "honour_retry_after": False},
        "jitter + Retry-After": {
            "retries": retries,
            "backoff_jitter": True,
            "honour_retry_after": True,
        },
    }
    if cap is not None:
        out[f"semaphore {cap}"] = {**out["jitter + Retry-After"], "max_in_flight": cap}
    if rpm is not None:
        out[f"token bucket {rpm:g}/min"] = {**out["jitter + Retry-After"], "client_rpm": rpm}
    return out


def policy_lab(
    payload: Any = None,
    designs: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    settle_s: float = 0.0,
    **options: Any,
) -> pd.DataFrame:
    """Run one load against one target once per client design; compare what each caused.

    Parameters
    ----------
    payload : dict, str, list, callable or None
        What to send, as for :func:`llmlat.sweep`.
    designs : dict of str to dict, optional
        Design name -> sweep options that make the design (default: :func:`designs` with
        its defaults; pass ``designs(cap=..., rpm=...)`` for the capped ones).
    settle_s : float, default 0.0
        Pause between designs, so a real server drains its queue (without ``url`` each design
        gets a fresh simulator, and no pause is needed).
    **options
        Sweep options shared by every design (the target, ``rate=``, ``duration_s=``, ``seed``,
        ``backoff_base_s``...); a design's own options win.

    Returns
    -------
    pandas.DataFrame
        One row per (design, level) with the columns of :data:`LAB_COLUMNS` (see the module
        docstring); ``options`` is the design's options as text.

    Raises
    ------
    ValueError
        For an invalid option (naming it) or an empty ``designs``.
    """
    from llmlat._engine import sweep

    chosen = dict(globals()["designs"]() if designs is None else designs)
    if not chosen:
        raise ValueError("designs: expected at least one design")
    options.setdefault("progress", False)
    rows = []
    for i, (name, own) in enumerate(chosen.items()):
        if i and settle_s > 0:
            time.sleep(settle_s)
        result = sweep(payload, **{**options, **own})
        text = ", ".join(f"{k}={v!r}" for k, v in own.items())
        rows.append(_design_rows(result, name, text))
    table = pd.concat(rows, ignore_index=True)
    return table.astype({"design": "string", "options": "string", "level_kind": "string"})


def _design_rows(result: Any, name: str, options: str) -> pd.DataFrame:
    """One design's rows: the summary's numbers plus attempts and the p95 interval."""
    summary = result.summary().set_index(["level_kind", "level"])
    req = result.requests
    phase = _stats.phases(req)
    measured = req[phase != "warmup"]
    tries = result.attempts.merge(measured[["request_id"]], on="request_id")
    out = []
    start, _ = _stats.row_times(req)
    ok = _stats.ok_mask(req)
    latency = _stats.column(req, "latency_s")
    for (kind, level), row in summary.iterrows():
        at = tries[tries["level"] == level]
        n = int(row["n"])
        span = float(row["span_s"])
        idx = np.flatnonzero((req["level"] == level).to_numpy(bool) & (phase == "measure") & ok)
        idx = idx[np.argsort(start[idx], kind="stable")]
        values = latency[idx][np.isfinite(latency[idx])]
        batch = _stats.level_batch(kind, level)
        _, low, high = _stats.quantile_interval_ordered(values, 0.95, min_batch=batch)
        status = _stats.column(at, "status")
        out.append(
            {
                "design": name,
                "options": options,
                "level_kind": kind,
                "level": level,
                "n": n,
                "requests_per_s": n / span if span > 0 else np.nan,
                "attempts_per_s": len(at) / span if span > 0 else np.nan,
                "amplification": len(at) / n if n else np.nan,
                "rate_limited_rate": row["rate_limited_rate"],
                "attempt_429_rate": float(np.mean(status == 429)) if len(at) else np.nan,
                "ok_rate": row["ok_rate"],
                "goodput_rps": row["throughput_rps"],
                "latency_p50_s": row["latency_p50_s"],
                "latency_p95_s": row["latency_p95_s"],
                "latency_p95_low_s": low,
                "latency_p95_high_s": high,
            }
        )
    return pd.DataFrame(out, columns=list(LAB_COLUMNS))
