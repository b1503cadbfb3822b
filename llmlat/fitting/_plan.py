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
    if type(value) is int and value == 0:  # a concurrency: one client is already past it
        return "none (see note)"
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
        when every concurrency does (no bound), 0 when one client alone misses it.
    utilization_at_max_concurrency : float
        Throughput at ``max_concurrency`` over the capacity.
    limit_rate_rps : float
        Rate allowed by the per-minute limits and the budget (``inf`` if none given).
    limit_concurrency : int or None
        Largest concurrency whose throughput stays under ``limit_rate_rps``; None when no
        concurrency reaches it (the limit does not bind a closed loop), 0 when one client
        alone exceeds it.
    utilization_cap_rate_rps : float
        ``max_utilization`` times the capacity (``inf`` if not given).
    rate_rps : float
        The recommended rate: the smallest of the bounds above.
    concurrency : int or None
        The recommended concurrency: the smallest of the concurrency bounds (None: no bound;
        0: no closed loop meets the plan, and ``note`` gives the think time that would).
    binding : str
        Which bound sets ``rate_rps``: ``"latency target"``, ``"rpm limit"``, ``"tpm limit"``,
        ``"input tpm limit"``, ``"output tpm limit"``, ``"budget"`` (``budget_usd_per_hour``),
        ``"utilization cap"`` or ``"slo attainment"`` (``"none"`` when the target is
        infeasible).
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
        if self.concurrency is None:
            n = "no concurrency bound (the station never gets that slow)"
        elif self.concurrency == 0:
            n = "no closed loop (one client is past the bound)"
        else:
            n = f"at most {self.concurrency} requests in flight"
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


# ---------------------------------------------------------------- provider limits, SLO target

#: plan option -> (the attempts column holding what the provider declared for it, the header
#: that declares it, the bound's name in a plan)
_DECLARED = {
    "rpm": (
        "ratelimit_limit_requests",
        "x-ratelimit-limit-requests or anthropic-ratelimit-requests-limit",
        "rpm limit",
    ),
    "tpm": (
        "ratelimit_limit_tokens",
        "x-ratelimit-limit-tokens or anthropic-ratelimit-tokens-limit",
        "tpm limit",
    ),
    "itpm": (
        "ratelimit_limit_input_tokens",
        "anthropic-ratelimit-input-tokens-limit",
        "input tpm limit",
    ),
    "otpm": (
        "ratelimit_limit_output_tokens",
        "anthropic-ratelimit-output-tokens-limit",
        "output tpm limit",
    ),
}
#: the token limits ``tpm="auto"`` plans with, where the provider declared them
_TOKEN_LIMITS = ("tpm", "itpm", "otpm")


def bound_name(limit: str) -> str:
    """Return the name a plan gives the bound of a per-minute limit (``Plan.binding``).

    Parameters
    ----------
    limit : {"rpm", "tpm", "itpm", "otpm"}

    Returns
    -------
    str
        For example ``"output tpm limit"`` for ``"otpm"``.
    """
    return _DECLARED[limit][2]


def _last_declared(name: str, data: Any) -> float:
    """Return a declared limit's last value (by the attempt's end), NaN when none was recorded."""
    column = _DECLARED[name][0]
    attempts = getattr(data, "attempts", None)
    if not isinstance(attempts, pd.DataFrame) or column not in attempts:
        return math.nan
    order = attempts["t_end"] if "t_end" in attempts else pd.RangeIndex(len(attempts))
    values = attempts[column].astype("Float64").set_axis(np.asarray(order)).sort_index()
    values = values.dropna()
    return float(values.iloc[-1]) if len(values) else math.nan


def declared_limit(name: str, data: Any) -> float:
    """Return the per-minute limit the provider declared in its headers (``rpm="auto"``).

    The last value recorded (by the attempt's end): a provider that changes a limit mid-run
    is planned against its latest word.

    Parameters
    ----------
    name : {"rpm", "tpm", "itpm", "otpm"}
        Which limit: requests, tokens, or Anthropic's separate input and output tokens.
    data : SweepResult
        The fitted data, with its attempts table.

    Returns
    -------
    float
        Requests (or tokens) per minute.

    Raises
    ------
    ValueError
        One line naming the option, when no attempt recorded the header.
    """
    value = _last_declared(name, data)
    if math.isnan(value):
        raise ValueError(
            f"{name}: 'auto' needs the limit the provider declares ({_DECLARED[name][1]} "
            f"headers), and no attempt in the data recorded one; pass {name}=<per minute>"
        )
    return value


def per_minute_limits(
    given: dict[str, float | str | None], data: Any
) -> tuple[dict[str, float], list[str]]:
    """Resolve a plan's per-minute limits: numbers as given, ``"auto"`` as declared.

    ``tpm="auto"`` takes every token limit the provider declared: the combined one and
    Anthropic's separate input and output ones (which its combined one does not bound: 80,000
    input and 16,000 output tokens a minute come with a combined 96,000). An ``itpm`` or
    ``otpm`` given as a number replaces the declared one.

    Parameters
    ----------
    given : dict of str to float, "auto" or None
        ``rpm``, ``tpm``, ``itpm``, ``otpm`` as passed to :meth:`FitResult.plan`.
    data : SweepResult
        The fitted data, with its attempts table (for ``"auto"``).

    Returns
    -------
    tuple
        ``(limits, declared)``: limit name -> per minute, and the ones taken from the
        provider's headers, as ``"otpm 16000"``.

    Raises
    ------
    ValueError
        One line naming the option: not positive, or ``"auto"`` with nothing declared.
    """
    limits: dict[str, float] = {}
    declared: list[str] = []
    for name, value in given.items():
        if value is None or (name in limits and value == "auto"):
            continue
        if value == "auto":
            if name == "tpm":
                found = {
                    k: _last_declared(k, data)
                    for k in _TOKEN_LIMITS
                    if given.get(k) in (None, "auto")  # a number given wins
                }
                found = {k: v for k, v in found.items() if not math.isnan(v)}
                if not found:
                    declared_limit("tpm", data)  # raises: nothing declared
            else:
                found = {name: declared_limit(name, data)}
            limits.update(found)
            declared += [f"{k} {v:g}" for k, v in found.items()]
        elif isinstance(value, str) or not value > 0:
            raise ValueError(f"{name}: must be positive, or 'auto' (the declared limit)")
        else:
            limits[name] = float(value)
    return limits, declared


def attainment_bound(
    data: Any, kind: str, slo: dict[str, float] | None, target: float
) -> tuple[float, int | None, bool, str]:
    """Return the highest measured load whose SLO attainment meets a target (low end).

    Levels are taken in order of load up to the first whose estimate misses the target; the
    bound is the highest of them whose interval (:func:`llmlat.stats.proportion_interval`)
    stays above the target. A level whose estimate meets it but whose interval reaches below
    is not shown either way: it is not the bound, does not end the search, and the note says
    to measure it longer.

    Parameters
    ----------
    data : SweepResult or pandas.DataFrame
        Per-request data (a per-level table has no attainment).
    kind : {"concurrency", "rate"}
        The sweep's kind.
    slo : dict of str to float or None
        The SLO (default: the sweep's ``slo=``).
    target : float
        The share of requests that must meet it, in (0, 1].

    Returns
    -------
    tuple
        ``(rate_rps, concurrency, feasible, note)``: the open-loop rate bound (the level, or
        a closed level's measured throughput), the closed-loop bound (None for an open sweep),
        whether any measured load meets it, and what the data said.

    Raises
    ------
    ValueError
        One line naming ``slo`` or ``slo_attainment``.
    """
    from llmlat._summary import summarize
    from llmlat.stats import check_slo

    if not 0 < target <= 1:
        raise ValueError("slo_attainment: must be in (0, 1]")
    slo = check_slo(slo) if slo is not None else getattr(data, "slo", None)
    if slo is None:
        raise ValueError("slo: slo_attainment needs an SLO: pass slo={...} or sweep with slo=")
    if hasattr(data, "summary"):
        table = data.summary(slo=slo)
    elif isinstance(data, pd.DataFrame) and "request_id" in data:
        table = summarize(data, slo=slo)
    else:
        raise ValueError("slo_attainment: needs per-request data (a SweepResult or requests table)")
    table = table[table["n"] > 0].sort_values("level")
    shown = " <= ".join(f"{k} {v:g} s" for k, v in slo.items())
    goal = f"{target:.0%} of requests meet {shown}"
    estimate = table["slo_attainment"].to_numpy(float)
    # levels up to the first whose estimate misses the target; of them, the highest whose
    # interval stays above it (one that reaches below is not shown either way)
    stop = int(np.argmin(estimate >= target)) if not (estimate >= target).all() else len(table)
    shown_ok = np.flatnonzero(table["slo_attainment_low"].to_numpy(float)[:stop] >= target)
    notes = []

    def said(row: pd.Series) -> str:
        return (
            f"level {row['level']:g} attains {row['slo_attainment']:.1%} "
            f"[{row['slo_attainment_low']:.1%}, {row['slo_attainment_high']:.1%}]"
        )

    unsure = [float(v) for i, v in enumerate(table["level"]) if i < stop and i not in set(shown_ok)]
    if unsure:
        notes.append(
            f"level{'s' * (len(unsure) > 1)} {', '.join(f'{v:g}' for v in unsure)}: the "
            "estimate meets the target but the interval reaches below it; measure longer "
            "(requests=...) to tell"
        )
    if stop < len(table):
        notes.append(said(table.iloc[stop]) + ", under the target")
    if not len(shown_ok):
        return math.nan, None, False, f"no measured load shown to have {goal}: " + "; ".join(notes)
    best = table.iloc[shown_ok[-1]]
    if stop == len(table) and shown_ok[-1] == len(table) - 1:
        notes.append("every measured level meets it: measure higher loads to find where it stops")
    good = table.loc[table["goodput_rps"].idxmax()]
    notes.append(
        f"most goodput measured {good['goodput_rps']:.3g} req/s "
        f"[{good['goodput_low_rps']:.3g}, {good['goodput_high_rps']:.3g}] at level "
        f"{good['level']:g}"
    )
    level = float(best["level"])
    if kind == "concurrency":
        rate, n = float(best["throughput_rps"]), int(level)
    else:
        rate, n = level, None
    return rate, n, True, f"{goal} up to level {level:g} ({said(best)}); " + "; ".join(notes)
