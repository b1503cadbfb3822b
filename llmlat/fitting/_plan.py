"""The answer of a capacity plan: :class:`Plan`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd


def _min_or_none(values) -> int | None:
    """Smallest of the values that are not None (None if all are)."""
    known = [v for v in values if v is not None]
    return min(known) if known else None


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
        Rate allowed by the RPM/TPM limits (``inf`` if none given).
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
        Which bound sets ``rate_rps``: ``"latency target"``, ``"rpm limit"``, ``"tpm limit"``
        or ``"utilization cap"`` (``"none"`` when the target is infeasible).
    capacity_rps : float
        The fitted capacity (point estimate).
    nearest_target_s : float
        The smallest value of the target statistic the fit allows (a single request on an
        idle station, on the conservative end): any target above it is feasible.
    note : str
        Plain-language caveats: infeasible targets, the conservative end used.
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
        values = pd.Series(self.__dict__, dtype=object)
        if text:
            values = values.map(_cell)
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
        n = (
            f"at most {self.concurrency} requests in flight"
            if self.concurrency is not None
            else "no concurrency bound (the station never gets that slow)"
        )
        return (
            f"Plan for {goal}: {n}, or {self.rate_rps:.3g} requests/s open loop "
            f"({self.rate_rps / self.capacity_rps:.0%} of the fitted capacity "
            f"{self.capacity_rps:.3g} requests/s); bound: {self.binding}; {self.note}."
        )

    def __repr__(self) -> str:
        return f"Plan({self.target or 'limits only'})\n{self.to_frame(text=True).to_string()}"
