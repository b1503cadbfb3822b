"""Check a capacity plan by measuring it: one confirmation level at the recommended load.

``llmlat.verify_plan(fit, plan)`` reruns the fitted sweep as its metadata recorded it (target,
load shape, retries, timeouts; the built-in simulator with its full configuration) at one level,
the plan's concurrency for a closed-loop sweep or its rate for an open-loop one, long enough to
pass the steady check after the start-up transient, and compares the target statistic measured
in steady state, with its 95% interval from :mod:`llmlat.stats`, to the target.
It sits above the fitting code (as the demo and the report do), which never talks HTTP: the
plan stays plain data, with the check attached to it as ``plan.check``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["MIN_CHECK_REQUESTS", "verify_plan"]

#: Steady-state requests a check measures at least: enough for a p95 to within a few ranks.
MIN_CHECK_REQUESTS = 200

# options recorded in meta["load"] that the check sets itself: the level, where to save (never
# over the fitted sweep's file), the run's identity; headers are recorded by name only
_NOT_REPEATED = (
    *("concurrency", "rate", "trace", "requests", "duration_s", "warmup", "warmup_s"),
    *("save", "overwrite", "run_id", "progress", "headers"),
)


def verify_plan(
    fit: Any, plan: Any, payload: Any = None, *, kind: str | None = None, **options: Any
) -> Any:
    """Measure a plan's recommended load and compare it with the plan's target.

    The confirmation sweep repeats the fitted one as its metadata recorded it (the endpoint or
    the built-in simulator with its configuration, load shape, retries, timeouts, seed) at one
    level: the plan's concurrency (closed loop) or rate (open loop), after a start-up transient
    of up to ``2 N`` requests (N the level's mean number in flight; a closed level's clients
    start one by one over a cycle, and the early ones send again meanwhile), with at least
    ``max(200, 3 N)``
    requests in steady state, so the level passes the steady check; an open-loop check also
    lasts ten relaxation times of the queue at its utilization (``1 / (X_max (1 - sqrt(rho))^2)``,
    Morse's M/M/1 figure), since near capacity a short check under-states the steady p95. On
    the simulator it costs seconds.

    Parameters
    ----------
    fit : FitResult
        The fit the plan came from; its ``data`` must be a :class:`~llmlat.results.SweepResult`
        whose metadata says how it was measured.
    plan : Plan
        A feasible plan with a latency target.
    payload : optional
        What to send (see :func:`llmlat.sweep`). A dataset keeps only a summary of its
        payload, so a sweep of a real endpoint needs it again; the simulator does not.
    kind : {"concurrency", "rate"}, optional
        Check the plan's concurrency in a closed loop or its rate as Poisson arrivals; by
        default the fitted sweep's own kind.
    **options
        Sweep options replacing the recorded ones (e.g. ``url``, ``headers``, ``requests``,
        ``seed``).

    Returns
    -------
    PlanCheck
        The measured statistic with its 95% interval, the target, and whether it held
        (``passed``; ``describe()`` in words). Also stored as ``plan.check``, so the plan's
        ``describe()`` and repr report it.
    """
    from llmlat._engine import sweep

    if not plan.feasible or not plan.statistic:
        raise ValueError("plan: only a feasible plan with a latency target can be checked")
    meta = getattr(fit.data, "meta", None) or {}
    if "load" not in meta:
        raise ValueError(
            "data: the fit was not made from a sweep with its metadata (a per-level table or "
            "a bare DataFrame), so there is no run to repeat; sweep the load with llmlat.sweep"
        )
    kind = kind or fit.kind
    if kind == "concurrency":
        if plan.concurrency is None:
            raise ValueError("plan: no concurrency bound to check (the station never gets slow)")
        load: float = int(plan.concurrency)
        population = float(load)
        relax = 0.0
    elif kind == "rate":
        load = float(plan.rate_rps)
        # Little's law: the mean number in flight at the recommended rate
        mean_s = fit.predict([load], kind="rate", stats=("mean",)).iloc[0, -1]
        population = math.ceil(load * float(mean_s))
        rho = min(load / fit.capacity_rps, 0.99)
        relax = 10.0 * load / (fit.capacity_rps * (1.0 - math.sqrt(rho)) ** 2)
    else:
        raise ValueError(f"kind: expected 'concurrency' or 'rate', got {kind!r}")
    config = _rerun_options(meta, payload, options)
    steady = max(MIN_CHECK_REQUESTS, 3 * int(population), math.ceil(relax))
    config.setdefault("requests", steady + 2 * int(population))  # the transient is cut first
    config.setdefault("warmup", 0)
    config.setdefault("progress", False)
    result = sweep(payload, **{kind: [load]}, **config)
    plan.check = _measure(result, plan, fit.metric, kind, load)
    return plan.check


def _rerun_options(meta: dict, payload: Any, options: dict) -> dict:
    """Sweep options that repeat the recorded run, with ``options`` on top."""
    recorded = {k: v for k, v in meta["load"].items() if k not in _NOT_REPEATED}
    if meta.get("simulator") is not None:  # the built-in simulator, or one recorded with it
        recorded.update(url=None, simulator=meta["simulator"])
    else:
        if payload is None:
            raise ValueError(
                "payload: the sweep measured an endpoint, and its dataset keeps only a summary "
                f"of what it sent ({meta.get('payload_summary')}); pass the same payload"
            )
        for name in ("url", "api", "model", "api_key_env"):  # older datasets: top level only
            if recorded.get(name) is None and meta.get(name) is not None:
                recorded[name] = meta[name]
    if meta["load"].get("headers") and "headers" not in options:
        raise ValueError(
            f"headers: the dataset keeps only their names ({meta['load']['headers']}); pass "
            "headers={...} again"
        )
    if meta.get("seed") is not None:
        recorded["seed"] = meta["seed"]
    return {**recorded, **options}


def _measure(result: Any, plan: Any, metric: str, kind: str, load: float) -> Any:
    """Measure the target statistic of the check's steady-state requests."""
    from llmlat import stats
    from llmlat.fitting._plan import PlanCheck

    req = result.requests.sort_values("t_end", kind="stable")
    phase = stats.phases(req)
    keep = (phase == "measure") & stats.ok_mask(req)
    values = stats.column(req, f"{metric}_s")[keep]
    values = values[np.isfinite(values)]
    q = stats.QUANTILES[plan.statistic]
    if q is None:
        est, low, high = stats.mean_interval(values)
    else:
        est, low, high = stats.quantile_interval(values, q)
    summary = result.summary()
    steady = summary["steady"].iloc[0] if len(summary) else None
    return PlanCheck(
        kind=kind,
        load=load,
        requests=len(req),
        n_steady=len(values),
        n_failed=int((~stats.ok_mask(req)).sum()),
        statistic=plan.statistic,
        target_s=plan.target_s,
        measured_s=est,
        lower_s=low,
        upper_s=high,
        steady=None if steady is None or steady is pd.NA else bool(steady),
        result=result,
    )
