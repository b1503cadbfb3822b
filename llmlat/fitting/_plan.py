"""The answer of a capacity plan: :class:`Plan`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd


def _min_or_none(values) -> int | None:
    """Smallest of the values that are not None (None if all are)."""
    known = [v for v in values if v is not None]
    return min(known) if known else None


@dataclass
class PlanCheck:
    """A confirmation sweep at a plan's recommended load (``plan(..., verify=True)``).

    Attributes
    ----------
    kind : str
        ``"concurrency"`` or ``"rate"``: the fitted sweep's kind, repeated.
    load : float
        The level measured: the plan's concurrency, or its rate in requests/s.
    requests : int
        Requests issued at that level (the start-up transient included).
    n_steady : int
        Successful requests measured in steady state (the transient cut).
    n_failed : int
        Requests that failed (429s, errors, timeouts).
    statistic : str
        The target statistic, e.g. ``"p95"``.
    target_s : float
        The plan's target, seconds.
    measured_s, lower_s, upper_s : float
        The statistic measured in steady state and its 95% interval (order statistics for a
        quantile, batch means for the mean; :mod:`llmlat.stats`).
    steady : bool or None
        Whether the level passed the summary's steady check (None: unknown).
    result : SweepResult
        The check sweep itself.
    """

    kind: str
    load: float
    requests: int
    n_steady: int
    n_failed: int
    statistic: str
    target_s: float
    measured_s: float
    lower_s: float
    upper_s: float
    steady: bool | None
    result: Any = field(repr=False, default=None)

    @property
    def passed(self) -> bool:
        """Whether the measured statistic met the target and no request failed."""
        return bool(self.measured_s <= self.target_s) and self.n_failed == 0

    def describe(self) -> str:
        """Say what the check measured against the target, and whether the plan held.

        Returns
        -------
        str
        """
        at = f"{self.load:g} in flight" if self.kind == "concurrency" else f"{self.load:.3g} req/s"
        if not self.n_steady:
            return (
                f"Check at {at}: FAILED, no successful steady-state request out of "
                f"{self.requests} ({self.n_failed} failed)."
            )
        interval = ", ".join(
            f"{v:.3g}" if np.isfinite(v) else "too few requests"
            for v in (self.lower_s, self.upper_s)
        )
        seen = (
            f"measured {self.statistic} {self.measured_s:.3g} s [95% CI {interval}] over "
            f"{self.n_steady} steady-state requests, target {self.target_s:g} s"
        )
        if not self.passed:
            why = f"{self.n_failed} of {self.requests} requests failed" if self.n_failed else ""
            if self.measured_s > self.target_s:
                why = "; ".join(filter(None, ["the target is broken", why]))
                if not self.lower_s > self.target_s:
                    why += " (the interval reaches below it: measure longer to be sure)"
            verdict = f"FAILED, {why}"
        elif self.upper_s <= self.target_s:
            verdict = "holds"
        else:
            verdict = "holds at the estimate, but the interval reaches above the target"
        text = f"Check at {at}: {verdict}: {seen}."
        if self.steady is False:
            text += " The level did not reach a steady state: measure longer (requests=...)."
        return text


# what the text views of a plan withhold when the fit does not identify the capacity
_CAPACITY_FIELDS = ("capacity_rps", "utilization_at_max_rate", "utilization_at_max_concurrency")


def _cell(value: object) -> object:
    """One plan value as read by a person (see :meth:`Plan.to_frame`)."""
    if value is None:
        return "no bound"
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return "no bound" if math.isinf(value) else f"{value:.4g}"
    return value


@dataclass
class Plan:
    """The answer of :meth:`FitResult.plan` (all rates in requests/s).

    Every bound is taken on the conservative end of the fit's uncertainty: the worst of the
    parameter sets inside the 95% intervals (one-sided), not the point estimate, so the
    recommended load meets the target unless the model itself is wrong.

    Attributes
    ----------
    target : str
        The constraint, e.g. ``"latency p95 <= 2 s"`` (empty if only limits were given).
    feasible : bool
        Whether some load meets the target. When not, the rates and concurrencies are NaN /
        None and ``note`` says what the nearest feasible target is.
    max_rate_rps : float
        Largest open-loop arrival rate meeting the target (NaN when none does).
    utilization_at_max_rate : float
        ``max_rate_rps`` over the fitted capacity.
    max_concurrency : int or None
        Largest closed-loop concurrency meeting the target (with the fitted think time); None
        when none does.
    utilization_at_max_concurrency : float
        Throughput at ``max_concurrency`` over the capacity.
    limit_rate_rps : float
        Rate allowed by the RPM/TPM limits and the budget (``inf`` if none given).
    limit_concurrency : int or None
        Largest concurrency whose throughput stays under ``limit_rate_rps``; None when no
        concurrency reaches it (the limit does not bind a closed loop).
    utilization_cap_rate_rps : float
        ``max_utilization`` times the capacity (``inf`` if not given).
    rate_rps : float
        The recommended rate: the smallest of the bounds above.
    concurrency : int or None
        The recommended concurrency: the smallest of the concurrency bounds (None: no bound).
    binding : str
        Which bound sets ``rate_rps``: ``"latency target"``, ``"rpm limit"``, ``"tpm limit"``,
        ``"budget"`` (``budget_usd_per_hour``) or ``"utilization cap"`` (``"none"`` when the
        target is infeasible).
    capacity_rps : float
        The fitted capacity (point estimate).
    nearest_target_s : float
        The smallest value of the target statistic the fit allows (a single request on an
        idle station, on the conservative end): any target above it is feasible.
    note : str
        Plain-language caveats: infeasible targets, the conservative end used.
    statistic : str
        The target statistic (``"p95"``, ...; empty if only limits were given).
    target_s : float
        The target value in seconds (NaN if only limits were given).
    capacity_identified : bool
        False when the fit does not identify its integer (servers or slot cap): then
        ``capacity_rps`` and the utilizations are the optimiser's, not answers, and the text
        views say "not identified".
    check : PlanCheck or None
        The confirmation sweep at the recommended load (:func:`llmlat.verify_plan`).
    budget_rate_rps : float
        Rate the spend budget allows, ``budget_usd_per_hour / 3600 / cost_per_request_usd``
        (``inf`` without a budget); part of ``limit_rate_rps``.
    """

    target: str
    feasible: bool
    max_rate_rps: float
    utilization_at_max_rate: float
    max_concurrency: int | None
    utilization_at_max_concurrency: float
    limit_rate_rps: float
    limit_concurrency: int | None
    utilization_cap_rate_rps: float
    rate_rps: float
    concurrency: int | None
    binding: str
    capacity_rps: float
    nearest_target_s: float
    note: str = ""
    statistic: str = ""
    target_s: float = math.nan
    capacity_identified: bool = True
    check: PlanCheck | None = None
    budget_rate_rps: float = math.inf

    def to_frame(self, text: bool = False) -> pd.DataFrame:
        """Return the plan as a one-column table.

        Parameters
        ----------
        text : bool, default False
            Format the values for reading: 4 significant digits, "no bound" for a bound that
            is absent (``inf`` or None) and "n/a" for one that does not apply (NaN), so no
            search bound or NaN shows as a value.

        Returns
        -------
        pandas.DataFrame
            Field name -> value.
        """
        values = pd.Series({k: v for k, v in self.__dict__.items() if k != "check"}, dtype=object)
        if text:
            values = values.map(_cell)
            if not self.capacity_identified:
                for name in _CAPACITY_FIELDS:
                    values[name] = "not identified"
        return pd.DataFrame({"value": values})

    def describe(self) -> str:
        """Say the plan in one sentence (what the demo and the report print).

        Returns
        -------
        str
            The recommended load and its binding bound, or why no load meets the target.
        """
        goal = self.target or "the limits given"
        if not self.feasible:
            return f"Plan for {goal}: {self.note}."
        checked = f" {self.check.describe()}" if self.check is not None else ""
        n = (
            f"at most {self.concurrency} requests in flight"
            if self.concurrency is not None
            else "no concurrency bound (the station never gets that slow)"
        )
        share = (
            f"{self.rate_rps / self.capacity_rps:.0%} of the fitted capacity "
            f"{self.capacity_rps:.3g} requests/s"
            if self.capacity_identified
            else "the capacity is not identified"
        )
        return (
            f"Plan for {goal}: {n}, or {self.rate_rps:.3g} requests/s open loop ({share}); "
            f"bound: {self.binding}; {self.note}.{checked}"
        )

    def __repr__(self) -> str:
        table = self.to_frame(text=True).to_string()
        checked = f"\n{self.check.describe()}" if self.check is not None else ""
        return f"Plan({self.target or 'limits only'})\n{table}{checked}"
