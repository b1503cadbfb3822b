"""The fitted model: :class:`FitResult` (params, intervals, predictions, summary, plan)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, stats
from statsmodels.iolib.summary2 import Summary

from llmlat import queueing
from llmlat._aggregate import NO_STEADY, QUANTILES, resample
from llmlat._models import Model
from llmlat._notice import and_list as _and
from llmlat.fitting._estimate import (
    _BATCH_MEAN_ERROR,
    _PLAUSIBLE,
    _Estimate,
    _estimate,
    _Problem,
    advice_row,
    advice_table,
    sent_requests,
)
from llmlat.fitting._estimate import round_up as _round_up
from llmlat.fitting._plan import (
    Plan,
    _min_or_none,
    attainment_bound,
    bound_name,
    per_minute_limits,
)

#: What leaves a latency-only batch fit's slot set open (:meth:`FitResult._law_sets_integer`).
_LAW_ERROR = f"the latency law's own error ({_BATCH_MEAN_ERROR:.1%} of a level's mean)"
#: A continuous parameter whose 95% interval spans more than this factor is not identified.
_WIDEST = 100.0
#: An estimate this close to an end of its range (log scale) sits on it.
_ON_END = 1e-3
#: Parameters whose range ends mean something, with what: their interval is the profile
#: likelihood's, one-sided when the estimate sits on an end, where the likelihood has no
#: curvature (other ranges end at search limits: an estimate there is "not identified").
_PHYSICAL_ENDS = {
    "join_steps": "a request that arrives mid-step joins the batch at once (0) or one whole "
    "decode step later (1)",
}

#: Step times (ITL) whose residuals exceed their errors this many times over (rms) miss the batch
#: model: the slot cap then rests on the latency alone and is not presented as identified. The
#: synthetic batch sweeps reach 4 (128 slots, 1 seed in 10; mostly under 1.3), the simulator
#: behind HTTP at levels 1..60 17 to 19.
_STEP_MISFIT = 6.0

#: The spread of the integer the advice of :meth:`FitResult.next_levels` aims at: rounding an
#: estimate with this standard deviation gives the truth in 98% of sweeps in theory. Measured by
#: following the advice (``bench_calibration.py --follow``): c exact in 0.96-1.00 of seeds
#: (see :meth:`FitResult.next_levels`). With the profile's curvature alone 0.92-0.96 (open
#: c = 64: 46 of 50, 17 of its first 20), as the levels the advice does not lengthen keep their
#: share of it and a level past capacity then counted half its completions: an open sweep's
#: two advised levels are now asked what their own errors need (:meth:`FitResult._pair_requests`).
_SD_PINNED = 0.5 / float(stats.norm.ppf(0.99))

#: What to measure to pin down a parameter the data leave open.
_NEXT = {
    "mu": "measure more requests at the lightest levels",
    "t0_s": "measure more levels below the knee",
    "t1_s": "measure more levels below the knee",
    "gamma": "measure more levels below the knee",
    "join_steps": "stream the responses (TTFT) at light load to see the wait for the next "
    "decode step (at most one step: it moves latency by one step time)",
    "think_s": "measure with a known think time (think_time_s=...) or pass think_s=...",
}


#: The closed M/G/c law with think time against exact simulation, by service CV: the range of
#: the mean's error, then the p95's (``benchmarks/bench_closed_quantile.py``: c = 1, 4, 16,
#: think CV 0-2 with 0.25, 0.75 and 1.5 held out, service CV 0.75 and 1.4 held out, Z of
#: 0.1-3 S, N of 0.6-1.6 knees).
_CLOSED_THINK_ERRORS = {
    "0.05": (("-4.8%", "+15%"), ("-4.4%", "+40%")),
    "0.5-0.75": (("-4.0%", "+12%"), ("-5.0%", "+15%")),
    "1.4-2": (("-4.8%", "+28%"), ("-4.1%", "+13%")),
}


@dataclass
class FitResult:
    """A fitted queueing model (statsmodels-style results).

    Attributes
    ----------
    model : str
        Model name.
    kind : str
        ``"concurrency"`` (closed form fitted) or ``"rate"`` (open form).
    metric, stat, method : str
        What was fitted and how (``"ml"`` or ``"wls"``).
    params : pandas.Series
        Estimates on the natural scale: ``c`` and ``mu`` (requests/s per server) for the M/M/c
        family (plus ``think_s`` for ``closed``); ``slots``, ``t0_s``, ``t1_s`` (and ``gamma``)
        for ``batch``.
    bse : pandas.Series
        Standard errors (delta method from the log scale; NaN for integers).
    fixed : pandas.Series
        Values held fixed (measured think time, tokens per request, service CV).
    llf, aic, bic : float
        Log-likelihood and information criteria (integers count as parameters).
    nobs : int
        Requests (``ml``) or levels (``wls``).
    df_model : int
        Number of estimated parameters.
    levels : pandas.DataFrame
        Per level: observed and predicted statistic and throughput, residuals, utilization.
    capacity_rps : float
        Implied capacity (c * mu, or batching throughput at the slot cap).
    profile : pandas.Series
        Profile log-likelihood over the integer parameter.
    unidentified : dict of str to str
        Parameters the data do not pin down (at a search bound, a flat likelihood, or an
        integer that no sustained queue shows), each with why and what to measure next
        (:meth:`next_levels` gives that as a table).
        Their value in ``params`` is only the optimiser's: :meth:`summary`, ``repr`` and the
        report say "not identified" instead, and :meth:`conf_int` gives no interval (NaN),
        or for the integer only the lower end the data support.
    notes : list of str
        Caveats found while fitting (including every ``unidentified`` message).
    indistinguishable : list of str
        ``model="auto"`` only: the other models the data cannot tell from this one (AIC
        within 2, or of another family and fitting every level mean within its errors);
        :meth:`summary` shows them. Empty when the choice is clear (or the model was given).
    data : SweepResult or pandas.DataFrame
        The data passed to :func:`fit` (a reference, not a copy), for :meth:`plot`.
    """

    _problem: _Problem = field(repr=False)
    _est: _Estimate = field(repr=False)
    notes: list[str] = field(default_factory=list)
    data: object = field(default=None, repr=False)
    indistinguishable: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        pr, est = self._problem, self._est
        m = pr.model
        self.model, self.kind, self.metric = m.name, pr.obs.kind, pr.obs.metric
        self.stat, self.method = pr.stat, pr.method
        names = ([m.integer] if m.integer else []) + list(m.free)
        self.params = pd.Series({n: est.p[n] for n in names}, dtype=np.float64)
        nfree = len(m.free)
        se_log = np.sqrt(np.diag(est.cov))[:nfree]
        bse = {m.integer: np.nan} if m.integer else {}
        bse.update({n: est.p[n] * s for n, s in zip(m.free, se_log, strict=True)})
        self.bse = pd.Series(bse, dtype=np.float64)
        keep = ("think_s", "think_cv", "tokens", "gamma", "cv_s", "overhead_s")
        self.fixed = pd.Series(
            {k: v for k, v in est.p.items() if k in keep and k not in names}, dtype=np.float64
        )
        self.scale = float(np.exp(est.theta[nfree])) if pr.method == "wls" else np.nan
        self.llf, self.nobs = est.llf, pr.nobs
        self.df_model = pr.df_model(est.theta)
        self.aic = -2 * self.llf + 2 * self.df_model
        self.bic = -2 * self.llf + np.log(self.nobs) * self.df_model
        self.capacity_rps = m.capacity(est.p)
        self.profile = pd.Series(est.profile, name="llf", dtype=np.float64)
        self.profile.index.name = m.integer
        self._lower_bound = False
        self._ends: dict[float, dict[str, tuple[float, float]]] = {}  # by alpha: _ranged
        if m.integer:
            hi = m.int_range(pr.obs)[1]
            self._lower_bound = bool(hi in self._integer_set(0.05))
        # the floor the step times alone put on the slot cap: the integer's lower end when
        # they and the latency disagree (set by _identification)
        self._step_floor: int | None = None
        self._advice: list[dict] = []  # next_levels' rows, filled with the notes they explain
        self.unidentified: dict[str, str] = {}  # read by the raw intervals computed first
        self.unidentified = self._identification()
        self.notes.extend(self.unidentified.values())
        self.notes.extend(self._integer_spread())
        self.notes.extend(self._end_notes())
        self.levels = self._levels_table()

    # -- per-level view -------------------------------------------------------------------
    def _levels_table(self) -> pd.DataFrame:
        obs = self._problem.all.levels
        s = self.stat
        p = self._est.p
        pred = self._model.predict(
            p, obs["level"].to_numpy(), self.kind, (s,), p.get("level_think_s")
        )
        out = pd.DataFrame({"level": obs["level"], "n": obs["n"]})
        out["throughput_rps"] = obs["throughput_rps"]
        out["throughput_pred_rps"] = pred["throughput_rps"]
        out[f"{s}_s"] = obs[f"{s}_s"]
        out[f"{s}_pred_s"] = pred[f"{s}_s"]
        if self._model.family == "batch" and self.kind == "concurrency":
            # at each level's own mean output length, as the fit compares them (a level whose
            # requests ran short is not a miss of the model)
            ratio = obs["tokens_mean"].to_numpy(dtype=np.float64) / p["tokens"]
            ratio = np.where(np.isfinite(ratio), ratio, 1.0)
            out[f"{s}_pred_s"] *= ratio
            # its clients cycle as much slower: the throughput of those requests
            out["throughput_pred_rps"] /= ratio
        out["resid_s"] = out[f"{s}_s"] - out[f"{s}_pred_s"]
        out["resid_rel"] = out["resid_s"] / out[f"{s}_pred_s"]
        if "overloaded" in obs:  # fitted by its throughput only
            out["overloaded"] = obs["overloaded"].to_numpy(bool)
        x = out["throughput_rps"].where(out["throughput_rps"].notna(), out["throughput_pred_rps"])
        out["utilization"] = x / self.capacity_rps
        return out.set_index("level")

    @property
    def _model(self) -> Model:
        return self._problem.model

    @property
    def resid(self) -> pd.Series:
        """Observed minus predicted statistic per level, seconds."""
        return self.levels["resid_s"]

    @property
    def utilization(self) -> pd.Series:
        """Measured throughput of each level over the fitted capacity."""
        return self.levels["utilization"]

    @property
    def left_out(self) -> dict[float, str]:
        """Levels of the data the fit did not use -> why (429s, no steady state, ...).

        Overloaded open-loop levels are not here: they are fitted by their throughput (see
        ``levels["overloaded"]``).
        """
        return dict(sorted(self._problem.all.dropped.items()))

    @property
    def capacity_identified(self) -> bool:
        """Whether the data identify the capacity (its integer: servers or slot cap)."""
        return self._model.integer not in self.unidentified

    @property
    def identified(self) -> pd.Series:
        """Whether the data pin each parameter down (see ``unidentified`` for why not)."""
        return pd.Series({n: n not in self.unidentified for n in self.params.index}, dtype=bool)

    @property
    def fittedvalues(self) -> pd.Series:
        """Predicted statistic (``stat``) per level, seconds."""
        return self.levels[f"{self.stat}_pred_s"]

    def cov_params(self) -> pd.DataFrame:
        """Covariance of the continuous parameters on the natural scale (delta method).

        The integer parameter has no covariance (it is profiled, see :meth:`conf_int`); its
        row and column are NaN.

        Returns
        -------
        pandas.DataFrame
            Indexed by parameter, like :attr:`params`.
        """
        m = self._model
        nfree = len(m.free)
        scale = np.array([self._est.p[n] for n in m.free])
        cov = self._est.cov[:nfree, :nfree] * np.outer(scale, scale)
        out = pd.DataFrame(np.nan, index=self.params.index, columns=self.params.index)
        out.loc[list(m.free), list(m.free)] = cov
        return out

    # -- uncertainty ----------------------------------------------------------------------
    def conf_int(
        self, alpha: float = 0.05, method: str = "auto", n_boot: int = 100, seed: int = 0
    ) -> pd.DataFrame:
        """Confidence intervals of the parameters.

        Parameters
        ----------
        alpha : float, default 0.05
            1 - confidence level.
        method : {"auto", "asymptotic", "bootstrap"}, default "auto"
            ``asymptotic`` (and ``auto``, the one :meth:`summary` shows): Wald intervals on
            the log scale from the correlation-weighted likelihood (so they stay positive),
            widened to span the optimum at every integer inside the integer's interval, which
            is the profile-likelihood set; for a parameter whose range has meaningful ends
            (``join_steps``, from 0 to 1 decode step), the profile-likelihood interval, one-sided
            when its estimate sits on an end. ``bootstrap``: a moving-block bootstrap of each
            level's requests in order, refit, percentiles.
        n_boot : int, default 100
            Bootstrap replicates.
        seed : int, default 0
            Seed of the bootstrap.

        Returns
        -------
        pandas.DataFrame
            Columns ``lower`` and ``upper``, one row per parameter; NaN for a parameter the
            data do not identify (``unidentified`` says why), and no upper end (``inf``) for
            an unidentified integer, whose lower end is what the data support.
        """
        if not 0 < alpha < 1:
            raise ValueError("alpha: must be in (0, 1)")
        if method not in ("auto", "asymptotic", "bootstrap"):
            raise ValueError(
                f"method: expected 'auto', 'asymptotic' or 'bootstrap', got {method!r}"
            )
        if method == "bootstrap":
            out = self._bootstrap(alpha, n_boot, seed)
        else:
            out = pd.DataFrame(self._wald(alpha), index=["lower", "upper"]).T
        for name in self.unidentified:
            if name == self._model.integer:  # the lower end the data support, no upper one
                out.loc[name, "upper"] = np.inf
            else:  # no interval from the data: not a number
                out.loc[name] = np.nan
        return out

    def _wald(self, alpha: float) -> dict[str, tuple[float, float]]:
        """Compute the asymptotic intervals of :meth:`conf_int`, before identification."""
        z = self._quantile(1 - alpha / 2)
        m = self._model
        nfree = len(m.free)
        th = self._est.theta[:nfree]
        se = np.sqrt(np.diag(self._est.cov))[:nfree]
        # a bounded parameter's interval stays within its bounds (join_steps in [0.001, 1])
        lo, hi = self._problem._bounds(self._est.k, len(self._est.theta))
        rows = {}
        centres = [th]
        if m.integer:
            rows[m.integer] = self._integer_interval(alpha)
            # the joint set projected: each continuous interval spans its optimum at every
            # integer inside the integer's interval (c and mu trade off against each other)
            a, b = rows[m.integer]
            centres += [v[:nfree] for j, v in self._est.thetas.items() if a <= j <= b]
        low, high = np.min(centres, axis=0), np.max(centres, axis=0)
        with np.errstate(over="ignore", invalid="ignore"):  # an unidentified parameter: (0, inf)
            for i, name in enumerate(m.free):
                rows[name] = (
                    float(np.exp(max(low[i] - z * se[i], lo[i]))),
                    float(np.exp(min(high[i] + z * se[i], hi[i]))),
                )
        # one with a physical range: its profile interval (no curvature on an end)
        rows.update(self._ranged(alpha))
        return rows

    def _quantile(self, prob: float) -> float:
        """Return the normal quantile, or t on the least-squares residual degrees of freedom."""
        dof = self._est.dof
        return float(stats.norm.ppf(prob) if dof is None else stats.t.ppf(prob, dof))

    def _integer_set(self, alpha: float) -> pd.Index:
        """Integers inside the ``1 - alpha`` profile set.

        Maximum likelihood: the likelihood-ratio (chi-square) cut. Least squares: an F test
        on the increase of the residual sum of squares in units of the quasi-likelihood scale
        (the concentrated likelihood gives RSS_k / RSS_best = exp(2 (llf_best - llf_k) / n)),
        so the integer's interval carries the model's error as the continuous ones do (a
        closed batching fit's at least the law's own, :attr:`_Problem.phi_integer`).
        """
        dof = self._est.dof
        cut = stats.chi2.ppf(1 - alpha, 1) if dof is None else stats.f.ppf(1 - alpha, 1, dof)
        return self.profile.index[self._deviance() <= cut]

    def _integer_interval(self, alpha: float, raw: bool = False) -> tuple[float, float]:
        """Return the integer's profile set's range; unbounded above when not identified."""
        inside = self._integer_set(alpha)
        lo, hi = float(inside.min()), float(inside.max())
        if self._lower_bound or (not raw and self._model.integer in self.unidentified):
            hi = np.inf
        if not raw and self._step_floor is not None:
            lo = min(lo, float(self._step_floor))
        return lo, hi

    def next_levels(self) -> pd.DataFrame:
        """Tabulate what to measure next to pin down what the data leave open (empty: pinned).

        The fit's notes give the same advice in words (they are written from this table).
        A row is a level to measure, or to measure longer: one of the sweep's (``measured`` >
        0) run for ``requests`` in all, or a new one. Three cases yield rows:

        - the integer (c, or the slot cap) is not identified: levels past those measured (no
          saturation), between its interval and the first refused level (a closed loop whose
          queue shows at one level at most), or streamed levels around it (step times that
          disagree with the latency);
        - the integer (c, or the slot cap) is identified but its 95% set holds more than one
          value: the levels whose data pin it (open loop: the level past capacity and the
          lightest; closed: those around the knee, and new levels of c and c + 1 clients in
          the set above its lowest value: N clients queue on N - 1 servers and never on N),
          measured until the spread of c is small enough for c to come out exact (from the
          profile likelihood's curvature, which shrinks as the requests grow; in an open
          M/M/c sweep at least what the two advised levels' own errors need for c = X / mu):
          following it gave the true c in 96-100% of simulated sweeps with exponential service
          (`benchmarks/bench_calibration.py --follow`, 20-50 seeds: open c = 16 48 of 49, 20
          of 20 at about 22,000 more requests, 64 50 of 50, 20 of 20 at about 390,000;
          capped c = 16 49 of 50, 64 20 of 20 at about 430,000; closed c = 64 48 of 50, the
          two misses pinned at 63 before any advice; batching, 32 slots, latency only: 18 of
          20, the two misses pinned wrong before any advice); a closed batching fit on the
          latency alone whose set the law's own error sets (more requests narrow it only to
          what that error allows): the levels from the set's lowest value up, streamed, as
          long as measured;
        - a continuous parameter is not identified (``param`` names it): the lightest level
          for ``mu``; ``level`` is NaN where the remedy is not a level (``why`` says what).

        Returns
        -------
        pandas.DataFrame
            One row per piece of advice: ``param`` (what it pins), ``level`` (a concurrency or
            a rate in requests/s, as the sweep's levels; NaN when the advice is not a level),
            ``requests`` (to measure at that level in all; NaN when the data give no count),
            ``measured`` (requests sent there: 0 for a new level) and ``why``.
        """
        return advice_table(self._advice)

    def _ask(self, param: str, level: float, requests: float, why: str) -> dict:
        """Add one row of :meth:`next_levels` and return it (the note's text is made from it)."""
        measured = self._measured(level) if np.isfinite(level) else np.nan
        row = advice_row(param, float(level), float(requests), measured, why)
        self._advice.append(row)
        return row

    def _measured(self, level: float) -> float:
        """Count the requests sent at a level of the data (0 for a new level).

        A closed level's steady-state ones and its start-up, the first round of N.
        """
        lv = self._problem.all.levels
        n = sent_requests(lv, self.kind)
        at = n[np.isclose(lv["level"].to_numpy(dtype=np.float64), level)]
        return float(at.iloc[0]) if len(at) else 0.0

    def _length(self, level: float) -> float:
        """Return the requests a new level should hold: the top level's (closed: per client)."""
        top = float(self._problem.obs.levels["level"].max())
        n = self._measured(top)
        return _round_up(n * level / top if self.kind == "concurrency" else n)

    def _length_again(self, level: float) -> float:
        """Return the requests a level left out for want of a steady state should hold.

        A closed level loses its start-up (one round of N) and about a round of drain
        whatever its length; past them it needs a steady part as long as the top kept level's
        (per client). An open level: twice the top level's.
        """
        if self.kind != "concurrency":
            return _round_up(2 * self._length(level))
        lv = self._problem.obs.levels
        top = lv.loc[lv["level"].idxmax()]
        return _round_up(2 * level + float(top["n"]) * level / float(top["level"]))

    def _growth(self) -> float:
        """How many times longer the levels must run for the integer to come out exact.

        Its spread, from the curvature of the profile likelihood (the deviance's parabola
        over the 95% set and one integer either side), falls as one over the square root of
        the requests: to :data:`_SD_PINNED`.
        """
        dev = self._deviance()
        a, b = self._integer_interval(0.05, raw=True)
        near = dev[(dev.index >= a - 1) & (dev.index <= b + 1) & np.isfinite(dev)]
        k = near.index.to_numpy(dtype=np.float64)
        curve = np.polyfit(k, near.to_numpy(), 2)[0] if len(near) >= 3 else 0.0
        # deviance ~ (k - c)^2 / sd^2; a flat or bent-down profile: the set's width instead
        var = 1 / curve if curve > 0 else ((b - a + 1) / (2 * stats.norm.ppf(0.975))) ** 2
        return max(1.0, var / _SD_PINNED**2)

    def _pair_requests(self, top: float, light: float) -> float:
        """Return the requests each of two open levels needs for c = X / mu to come out exact.

        The level past capacity measures the capacity X by its throughput, the lightest the
        service time 1 / mu by its mean latency; measured n times as long, their relative
        variances fall as their own counts, so c's spread reaches :data:`_SD_PINNED` at
        ``c^2 (n_x rel_x^2 + n_l rel_l^2) / sd^2`` requests each. :meth:`_growth` scales the
        whole profile, but the levels the advice does not lengthen keep their share of its
        curvature, and a level past capacity counts only the completions while its servers
        are all busy (:func:`llmlat.stats.completion_slope`'s ``n``): at open c = 64 the
        spread after following the profile alone was 0.23-0.30, not 0.215 (c exact 46 of
        50). 0 when the fit measured no throughput at ``top``.
        """
        pr = self._problem
        if self._model.family != "mmc":
            return 0.0
        at = np.flatnonzero(np.isclose(pr.level_over, top))
        first = pr.obs.levels.iloc[0]
        if not at.size or not np.isclose(first["level"], light):
            return 0.0
        i = int(at[-1])
        rel_x = pr.se_over[i] / pr.x_over[i]
        rel_l = first["se_mean_s"] / first["mean_s"]
        var = self._measured(top) * rel_x**2 + self._measured(light) * rel_l**2
        need = float(self.params[self._model.integer]) ** 2 * var / _SD_PINNED**2
        return need if np.isfinite(need) else 0.0

    def _deviance(self) -> pd.Series:
        """Twice the profile log-likelihood's drop from its best, per integer (as a chi-square).

        Least squares: the F statistic of :meth:`_integer_set` instead.
        """
        prof = self.profile
        return self._drop_statistic(prof.max() - prof, self._problem.phi_integer)

    def _drop_statistic(self, drop: Any, phi_floor: float = 1.0) -> Any:
        """Return a log-likelihood drop as a test statistic.

        Twice the drop (chi-square), or under least squares the F statistic of the residual sum
        of squares' increase (:meth:`_integer_set`), its scale at least ``phi_floor``.
        """
        est = self._est
        if est.dof is None:
            return 2 * drop
        n = len(self._problem.se)
        rss_best = float(np.exp(2 * est.theta[-1])) * n
        return rss_best * np.expm1(2 * drop / n) / max(est.phi, phi_floor)

    def _ranged(self, alpha: float) -> dict[str, tuple[float, float]]:
        """Profile-likelihood intervals of the parameters of :data:`_PHYSICAL_ENDS`.

        Such a parameter often sits on an end of its range, where the likelihood has no
        curvature (no Wald interval): each end of its interval is where, held away from the
        estimate (the others refitted from it, the integer at its estimate), the drop
        statistic reaches the ``1 - alpha`` cut of chi-square or F on one degree of freedom;
        the range's end when it does not reach it there. That cut holds the truth in at least
        ``1 - alpha`` of fits, on an end (where the statistic is 0 half the time) or inside.
        Computed once per ``alpha``.
        """
        key = round(alpha, 9)  # 1 - 0.95 is not 0.05
        if key in self._ends:
            return self._ends[key]
        m, pr, est = self._model, self._problem, self._est
        lo, hi = pr._bounds(est.k, len(est.theta))
        start = est.theta if est.k is None else est.thetas.get(est.k, est.theta)
        best = float(self.profile.max()) if len(self.profile) else est.llf
        dof = est.dof
        cut = stats.chi2.ppf(1 - alpha, 1) if dof is None else stats.f.ppf(1 - alpha, 1, dof)
        out = {}
        for i, name in enumerate(m.free):
            if name not in _PHYSICAL_ENDS:
                continue
            th = float(est.theta[i])
            seen: dict[float, float] = {}  # brentq asks for the range's end again

            def excess(v: float, i: int = i, seen: dict = seen) -> float:
                if v not in seen:
                    drop = best - pr.held(est.k, start, i, v)[1]
                    seen[v] = float(self._drop_statistic(drop)) - cut
                return seen[v]

            limits = []
            for end in (lo[i], hi[i]):
                # the range's end first (one refit where the data allow it all, as on the
                # latency-only tables), then the crossing, to 1% of the value
                inside = abs(end - th) < _ON_END or not excess(end) > 0
                limits.append(end if inside else optimize.brentq(excess, th, end, xtol=0.01))
            out[name] = (float(np.exp(limits[0])), float(np.exp(limits[1])))
        self._ends[key] = out
        return out

    def _on_end(self, name: str) -> bool:
        """Whether a parameter's estimate sits on an end of its range."""
        i = self._model.free.index(name)
        lo, hi = self._problem._bounds(self._est.k, len(self._est.theta))
        th = self._est.theta[i]
        return bool(min(th - lo[i], hi[i] - th) < _ON_END)

    def _integer_spread(self) -> list[str]:
        """Return a note when the integer is identified but its 95% set holds several values.

        Its value is then one of those the data allow, not the truth (five open levels of
        1,000 arrivals pin c = 64 to about +-4): say so, and what would pin it (the rows of
        :meth:`next_levels`). An open sweep's capacity c mu is what an overloaded level's
        throughput measures, its service time what the lightest level's latency measures.
        A batching fit's slot cap alike (a closed sweep at 128 slots: {128, 129} in 3 of 4
        seeds, which it did not say).
        """
        m = self._model
        if not m.integer or m.integer in self.unidentified:
            return []
        a, b = self._integer_interval(0.05)
        if b == a:
            return []
        lv = self._problem.obs.levels
        grow = self._growth()
        servers = "servers" if m.family == "mmc" else "slots"
        if self.kind == "rate":
            # the highest level past capacity (overloaded, or refusing behind a queue cap)
            alle = self._problem.all.levels
            past = alle["level"] > self.capacity_rps
            if "overloaded" in alle:
                past |= alle["overloaded"].to_numpy(bool)
            light = float(lv["level"].iloc[0])
            if past.any():
                top = float(alle.loc[past, "level"].iloc[-1])
                n = grow * max(self._measured(top), self._measured(light))
                n = _round_up(max(n, self._pair_requests(top, light)))
                start = f"measure the level {top:g} past capacity"
            else:
                top = float(f"{1.2 * self.capacity_rps:.3g}")
                n = _round_up(grow * max(self._measured(v) for v in lv["level"]))
                start = f"add a level past capacity ({top:g} req/s)"
            row = self._ask(m.integer, top, n, "its throughput measures the capacity")
            light_row = self._ask(m.integer, light, n, "the service time")
            how = (
                f"{start} for about {n:,.0f} requests ({row['why']}) and the lightest level "
                f"{light_row['level']:g} about as long ({light_row['why']})"
            )
        elif self._law_sets_integer():
            # more requests narrow the sampling error, not the law's: the step times pin it
            loads = lv["level"].to_numpy(dtype=np.float64)
            past = loads[loads >= a]
            rows = self._ask_streamed(m.integer, past)
            plural = "s" if len(rows) > 1 else ""
            how = (
                f"stream the responses (inter-token latency) at the level{plural} "
                f"{_and(r['level'] for r in rows)}, as long as measured: more requests narrow "
                f"these {servers} only to what {_LAW_ERROR} allows"
            )
        else:
            loads = lv["level"].to_numpy(dtype=np.float64)
            near = (loads >= a / 2) & (loads <= 2 * b)
            knee = "waits and throughput around the knee"
            around = loads[near] if near.any() else loads
            asks = {float(v): (self._measured(v), knee) for v in around}
            # N clients queue on N - 1 servers (every request waits for a departure) and
            # never on N: levels of c and c + 1 clients tell c from its neighbours, which the
            # knee's levels hardly do (at equal capacity c mu their means agree to first
            # order): without them, c = 65 stayed as likely as 64 after 4,000+ more requests
            # at 32..128 clients, while 63 was ruled out by the level at 64
            fitted = int(self.params[m.integer])
            for k in (fitted, fitted + 1):
                if a < k <= b and k >= 2 and not np.isclose(loads, k).any():
                    why = f"its requests queue if {m.integer} < {k:g}, never if >= {k:g}"
                    asks[float(k)] = (self._length(k), why)
            rows = [
                self._ask(m.integer, v, _round_up(grow * n), why)
                for v, (n, why) in sorted(asks.items())
            ]
            how = (
                f"measure the level{'s' if len(rows) > 1 else ''} "
                f"{_and(r['level'] for r in rows)} for about "
                f"{_and((r['requests'] for r in rows), ',.0f')} requests (their waits and "
                f"throughput pin the knee; N clients queue only on fewer than N {servers})"
            )
        return [
            f"{m.integer} = {self.params[m.integer]:g} is one of {a:g}..{b:g} (95% set): these "
            f"levels do not pin it to one value; to pin it, {how}"
        ]

    def _ask_streamed(self, param: str, levels: np.ndarray) -> list[dict]:
        """Return advice rows to stream these levels, as long as measured (the law's error)."""
        why = "streamed, its step times pin the cap"
        return [self._ask(param, v, self._measured(v), why) for v in levels]

    def _law_sets_integer(self) -> bool:
        """Whether the law's own error, not the residuals, sets the integer's set.

        A closed batching fit on the latency alone (:attr:`_Problem.phi_integer`).
        """
        return self._est.dof is not None and self._problem.phi_integer > self._est.phi

    def _identification(self) -> dict[str, str]:
        """Parameters the data do not pin down: name -> why, and what to measure next.

        The integer is not identified when its profile stays flat up to the search bound (no
        saturation), or, in a closed loop, when fewer than two measured levels lie above its
        interval: a queue then builds at one level at most, and the integer just absorbs that
        level's latency (for a batch fit with step times one such level is enough when its
        requests clearly waited for a slot: its inter-token latency is then the step time of a
        full batch, which pins the cap). A continuous parameter is not identified when it sits
        at the edge of its search range, the likelihood has no curvature in it, or its 95%
        interval spans a factor of more than :data:`_WIDEST`; one of :data:`_PHYSICAL_ENDS`
        when its profile interval spans its whole range.
        """
        m, pr = self._model, self._problem
        out: dict[str, str] = {}
        loads = pr.obs.levels["level"].to_numpy(dtype=np.float64)
        top = float(loads.max())
        what = "concurrency" if self.kind == "concurrency" else "rate"
        if m.integer:
            label = "slot cap" if m.family == "batch" else "server count c"
            a, b = self._integer_interval(0.05, raw=True)
            above = loads[loads > b]
            if self._lower_bound and self._law_sets_integer():
                # the set reaches the search bound through the law's own error, not for want
                # of saturation: higher levels only add 429s where a queue cap refuses them
                rows = self._ask_streamed(m.integer, loads[-2:])
                out[m.integer] = (
                    f"{label} not identified: from the latency alone the data only say "
                    f"{m.integer} >= {a:g}, within {_LAW_ERROR}; stream the responses "
                    f"(inter-token latency) at {what} {_and(r['level'] for r in rows)}: the step "
                    "time of a full batch pins the cap"
                )
            elif self._lower_bound:
                # levels measured above but too short to keep a steady state: those, longer
                short = sorted(v for v, r in pr.all.dropped.items() if v > top and r == NO_STEADY)
                if short:
                    why = "a steady state past its start-up"
                    rows = [self._ask(m.integer, v, self._length_again(v), why) for v in short[:2]]
                    sizes = _and((r["requests"] for r in rows), ",.0f")
                    todo = (
                        f"measure {what} {_and(r['level'] for r in rows)} again with about "
                        f"{sizes} requests ({why}; left out without one)"
                    )
                else:
                    why = "until throughput stops growing"
                    rows = [
                        self._ask(m.integer, v, self._length(v), why) for v in (2 * top, 4 * top)
                    ]
                    todo = f"measure at {what} {_and(r['level'] for r in rows)} {why}"
                out[m.integer] = (
                    f"{label} not identified: the data only say {m.integer} >= {a:g} (no "
                    f"saturation up to {top:g}); {todo}"
                )
            elif self.kind == "concurrency" and len(above) < 2 and not pr.queue_shows(above):
                shown = ", ".join(f"{x:g}" for x in above) or "none"
                # levels left out above (429s) bound where more levels can be measured
                ceiling = min((v for v in pr.all.dropped if v > top), default=2 * top)
                grid = np.unique(np.round(np.geomspace(b, ceiling, 5)[1:4]))
                more = [v for v in grid if v not in loads][:2] or list(grid[:2])
                why = "a sustained queue past the integer"
                rows = [self._ask(m.integer, v, self._length(v), why) for v in more]
                out[m.integer] = (
                    f"{label} not identified: no sustained queue shows, as only {len(above)} "
                    f"measured level ({shown}) lies above {m.integer} = {b:g} and the integer "
                    f"just absorbs it; the data only say {m.integer} >= {a:g}; measure at "
                    f"more levels between {b:g} and {ceiling:g} (e.g. "
                    f"{_and(r['level'] for r in rows)})"
                )
        if m.family == "batch" and m.integer is not None and m.integer not in out:
            steps = self._steps_disagree(a, b)
            if steps:
                out[m.integer] = steps
        nfree = len(m.free)
        th = self._est.theta[:nfree]
        se = np.sqrt(np.diag(self._est.cov))[:nfree]
        lo, hi = pr._bounds(self._est.k, len(self._est.theta))
        wald = self._wald(0.05)
        for i, name in enumerate(m.free):
            lower, upper = wald[name]
            if name in _PHYSICAL_ENDS:
                a, b = self._ranged(0.05)[name]
                if not np.allclose(np.log([a, b]), (lo[i], hi[i])):
                    continue
                why = f"the data allow every value of its range ({a:.3g} to {b:.3g})"
            elif self._on_end(name):
                why = f"at the edge of its search range ({np.exp(th[i]):.3g})"
            elif not np.isfinite(se[i]):
                why = "the likelihood is flat in it"
            elif not upper < _WIDEST * lower:
                bounded = lower > 0 and np.isfinite(upper)
                why = (
                    f"its 95% interval spans a factor of {upper / lower:.3g}"
                    if bounded
                    else "its 95% interval is unbounded"
                )
            else:
                continue
            out[name] = f"{name} not identified: {why}; {self._next_for(name, se[i])}"
        return out

    def _end_notes(self) -> list[str]:
        """Say which parameters sit on an end of their range, with their one-sided interval."""
        return [
            f"{name} = {self.params[name]:.3g} sits on an end of its range "
            f"({_PHYSICAL_ENDS[name]}): its 95% interval [{a:.3g}, {b:.3g}] is one-sided, "
            "from the profile likelihood"
            for name, (a, b) in self._ranged(0.05).items()
            if name not in self.unidentified and self._on_end(name)
        ]

    def _next_for(self, name: str, se_log: float) -> str:
        """Say what would pin a continuous parameter, adding its row to :meth:`next_levels`.

        ``mu``: the lightest level, measured until the parameter's 95% interval spans
        +-10% (its standard error on the log scale falls as one over the square root of the
        requests); the others: a remedy that is not one level.
        """
        how = _NEXT.get(name, _NEXT["mu"])
        if name != "mu":
            self._ask(name, np.nan, np.nan, how)
            return how
        light = float(self._problem.obs.levels["level"].iloc[0])
        grow = (se_log * stats.norm.ppf(0.975) / np.log(1.1)) ** 2
        n = _round_up(grow * self._measured(light)) if np.isfinite(grow) else np.nan
        row = self._ask(name, light, n, how)
        if np.isnan(n):
            return how
        return f"{how} (level {row['level']:g} for about {n:,.0f} requests)"

    def _steps_disagree(self, a: float, b: float) -> str:
        """Why a streamed batch fit's slot cap is not identified, or "" when its evidence agrees.

        The step times (ITL) miss the model (their residuals many times their errors: the cap
        then rests on the latency alone, which can put it confidently wrong, as the simulator
        behind HTTP showed at 39 for 32), or they still grow past the cap's interval [a, b].
        Either way the cap's lower end is the one both allow.
        """
        pr = self._problem
        if not pr.n_itl:
            return ""
        scale = float(np.exp(self._est.theta[-1]))
        floor = pr.step_floor(self._est.p)
        at = f"{self._est.k:g}, [{a:g}, {b:g}]"
        if scale > _STEP_MISFIT:
            why = (
                f"the decode step times (inter-token latency) miss the batch model by "
                f"{scale:.3g} times their errors (rms), so the latency alone sets it ({at}), "
                "and t0_s and t1_s too (their intervals hold only if the model does)"
            )
        elif floor > b:
            why = (
                f"the decode step times (inter-token latency) say slots >= {floor:g}, above "
                f"the latency's {at}"
            )
        else:
            return ""
        self._step_floor = floor
        low = min(a, floor)
        top = float(pr.obs.levels["level"].max())
        between = np.unique(np.round(np.geomspace(max(low, 1), top, 4)[1:3]))
        rows = [
            self._ask("slots", v, self._length(v), "where the step time stops growing")
            for v in between
        ]
        return (
            f"slot cap not identified: {why}; the data only say slots >= {low:g}; plot the "
            "mean ITL against the load to see where the step time stops growing, and measure "
            f"streamed levels between {low:g} and {top:g} around it (e.g. "
            f"{_and(r['level'] for r in rows)})"
        )

    def _bootstrap(self, alpha: float, n_boot: int, seed: int) -> pd.DataFrame:
        obs = self._problem.all
        if obs.times is None:
            raise ValueError("method: bootstrap needs per-request data, not a per-level table")
        rng = np.random.default_rng(seed)
        plausible = self.profile.index[self.profile >= self.profile.max() - _PLAUSIBLE].to_numpy()
        if len(plausible) > 9:  # keep refits cheap: the best and 8 spread over the rest
            best = int(self.profile.idxmax())
            spread = plausible[np.round(np.linspace(0, len(plausible) - 1, 8)).astype(int)]
            plausible = np.unique(np.append(spread, best))
        draws = []
        for _ in range(n_boot):
            pr = self._problem
            again = resample(obs, rng)
            sub = _Problem(pr.model, again, pr.method, pr.stat, pr.fixed)
            try:
                est = _estimate(sub, plausible.tolist() if len(plausible) else None)
            except ValueError:
                continue
            draws.append([est.p[n] for n in self.params.index])
        if len(draws) < 10:
            raise ValueError("n_boot: too few bootstrap fits succeeded; use method='asymptotic'")
        arr = np.asarray(draws, dtype=np.float64)
        lo, hi = np.quantile(arr, [alpha / 2, 1 - alpha / 2], axis=0)
        return pd.DataFrame({"lower": lo, "upper": hi}, index=self.params.index)

    # -- prediction -----------------------------------------------------------------------
    def predict(
        self,
        load: float | Sequence[float] | np.ndarray,
        kind: str | None = None,
        stats: Sequence[str] = ("mean", "p50", "p95", "p99"),
    ) -> pd.DataFrame:
        """Predict throughput, utilization and response-time statistics at given loads.

        Parameters
        ----------
        load : float or array_like
            Concurrency levels (closed form) or arrival rates in requests/s (open form).
        kind : {"concurrency", "rate"}, optional
            Which form to evaluate (default: the kind of the fitted sweep).
        stats : sequence of str, default ("mean", "p50", "p95", "p99")
            Statistics to compute (approximate quantiles for ``mgc`` and ``batch``, see the
            module docstring).

        Returns
        -------
        pandas.DataFrame
            ``load``, ``throughput_rps``, ``utilization`` and ``<metric>_<stat>_s`` columns;
            times are ``inf`` past saturation of an open system.
        """
        kind = kind or self.kind
        if kind not in ("concurrency", "rate"):
            raise ValueError(f"kind: expected 'concurrency' or 'rate', got {kind!r}")
        bad = [s for s in stats if s not in QUANTILES]
        if bad:
            raise ValueError(f"stats: unknown statistic(s) {bad}")
        x = np.atleast_1d(np.asarray(load, dtype=np.float64))
        if kind == "concurrency" and (np.any(x < 1) or np.any(x % 1 != 0)):
            raise ValueError("load: concurrency must be a positive integer")
        if kind == "rate" and np.any(x < 0):
            raise ValueError("load: rate must be >= 0")
        pred = self._model.predict(self._est.p, x, kind, tuple(stats))
        out = pd.DataFrame({"load": x, "throughput_rps": pred["throughput_rps"]})
        out["utilization"] = out["throughput_rps"] / self.capacity_rps
        if kind == "rate":
            out["utilization"] = x / self.capacity_rps
        for s in stats:
            out[f"{self.metric}_{s}_s"] = pred[f"{s}_s"]
        return out

    def curve(
        self,
        loads: Sequence[float] | np.ndarray | None = None,
        kind: str | None = None,
        n: int = 60,
        stats: Sequence[str] = ("mean", "p50", "p95"),
    ) -> pd.DataFrame:
        """Tabulate the fitted curve over a load grid, ready to plot.

        Parameters
        ----------
        loads : array_like, optional
            The grid (default: ``n`` points from light load to twice the largest concurrency,
            or to 98% of capacity for an open system, plus the measured levels).
        kind : {"concurrency", "rate"}, optional
            Which form (default: the fitted sweep's kind).
        n : int, default 60
            Grid size when ``loads`` is not given.
        stats : sequence of str, default ("mean", "p50", "p95")
            Statistics to tabulate.

        Returns
        -------
        pandas.DataFrame
            As :meth:`predict`, sorted by load, plus ``model``.
        """
        kind = kind or self.kind
        if loads is None:
            lv = self.levels.index.to_numpy(dtype=np.float64)
            if kind == "concurrency":
                top = 2 * lv.max() if self.kind == "concurrency" else 2 * self.capacity_rps
                grid: np.ndarray = np.round(np.geomspace(1, max(top, 2), n))
            else:
                grid = np.linspace(0.0, 0.98 * self.capacity_rps, n)[1:]
            if kind == self.kind:
                grid = np.concatenate([grid, lv[lv < self.capacity_rps] if kind == "rate" else lv])
            loads = np.unique(grid)
        out = self.predict(loads, kind, stats).sort_values("load", ignore_index=True)
        out["model"] = self.model
        return out

    # -- planning -------------------------------------------------------------------------
    def plan(
        self,
        *,
        p50: float | None = None,
        p95: float | None = None,
        p99: float | None = None,
        mean: float | None = None,
        rpm: float | str | None = None,
        tpm: float | str | None = None,
        itpm: float | str | None = None,
        otpm: float | str | None = None,
        tokens_per_request: float | None = None,
        max_utilization: float | None = None,
        budget_usd_per_hour: float | None = None,
        cost_per_request_usd: float | None = None,
        slo_attainment: float | None = None,
        slo: dict[str, float] | None = None,
    ) -> Plan:
        """Find the largest load that keeps a latency statistic under a target.

        The bounds hold for every parameter set on the conservative end of the 95% intervals
        (:meth:`_pessimistic`), so an estimate a little off does not push the load past the
        knee.

        Parameters
        ----------
        p50, p95, p99, mean : float, optional
            The target in seconds for one statistic of the fitted metric (give at most one).
        rpm : float or "auto", optional
            Requests-per-minute limit of the provider; ``"auto"``: the limit it declared in its
            rate-limit headers, as recorded in the data's attempts.
        tpm : float or "auto", optional
            Tokens-per-minute limit (needs ``tokens_per_request`` or token counts in the data).
            ``"auto"``: every token limit the provider declared, Anthropic's separate input
            and output limits included (``itpm``, ``otpm``).
        itpm, otpm : float or "auto", optional
            Input (prompt) and output tokens-per-minute limits, as Anthropic sets them apart;
            each request counts its mean prompt or output tokens in the data. Every prompt
            token counts, cache reads included (Anthropic leaves those out on most models, so
            this bound is then cautious). ``"auto"`` as for ``rpm``.
        tokens_per_request : float, optional
            Tokens one request counts against ``tpm`` (default: mean prompt + completion).
        max_utilization : float, optional
            Keep the rate under this share of capacity, e.g. 0.7 ("lambda under 70% of c mu").
        budget_usd_per_hour : float, optional
            Spend limit: the rate stays under ``budget_usd_per_hour / 3600 /
            cost_per_request_usd`` (binding: ``"budget"``).
        cost_per_request_usd : float, optional
            What one request costs, needed with the budget: e.g. the
            ``cost_per_1k_requests_usd / 1000`` of ``result.summary(prices=...)``.
        slo_attainment : float, optional
            Share of requests that must meet the SLO, e.g. 0.95: bounds the load by the highest
            measured level whose attainment interval stays above it (bound "slo attainment").
        slo : dict of str to float, optional
            The SLO for ``slo_attainment`` (default: the sweep's ``slo=``).

        Returns
        -------
        Plan
            The bounds, the utilization there, which bound binds, and whether the target can
            be met at all. :func:`llmlat.verify_plan` measures it (a confirmation sweep at the
            recommended load).
        """
        asked = {"p50": p50, "p95": p95, "p99": p99, "mean": mean}
        targets = {k: float(v) for k, v in asked.items() if v is not None}
        if len(targets) > 1:
            raise ValueError(f"target: give one of p50/p95/p99/mean, got {sorted(targets)}")
        money = {
            "budget_usd_per_hour": budget_usd_per_hour,
            "cost_per_request_usd": cost_per_request_usd,
        }
        per_minute = {"rpm": rpm, "tpm": tpm, "itpm": itpm, "otpm": otpm}
        limits_given = (*per_minute.values(), max_utilization, budget_usd_per_hour, slo_attainment)
        if not targets and all(v is None for v in limits_given):
            raise ValueError(
                "target: give p95=..., mean=..., rpm=..., tpm=..., itpm=..., otpm=..., "
                "max_utilization, budget_usd_per_hour or slo_attainment"
            )
        if budget_usd_per_hour is not None and cost_per_request_usd is None:
            raise ValueError(
                "cost_per_request_usd: needed with budget_usd_per_hour (e.g. "
                "summary(prices=...).cost_per_1k_requests_usd / 1000)"
            )
        per_minute_v, declared = per_minute_limits(per_minute, self.data)
        for name, v in {**targets, **money}.items():
            if v is not None and not v > 0:
                raise ValueError(f"{name}: must be positive")
        if max_utilization is not None and not 0 < max_utilization <= 1:
            raise ValueError("max_utilization: must be in (0, 1]")
        cap = self.capacity_rps
        worst = self._pessimistic()
        cap_low = min(self._model.capacity(p) for p in worst)
        limits = {
            bound_name(name): value / 60.0 / self._counted(name, tokens_per_request)
            for name, value in per_minute_v.items()
        }
        if budget_usd_per_hour is not None and cost_per_request_usd is not None:
            limits["budget"] = budget_usd_per_hour / 3600.0 / cost_per_request_usd
        limit = min(limits.values(), default=np.inf)
        ucap = cap_low * max_utilization if max_utilization is not None else np.inf
        target, notes = "", ["bounds on the conservative end of the 95% intervals"]
        if "cv_s_n" in self._est.p:
            notes[0] += " (the measured service CV's too)"
        if declared:
            notes.append(f"{_and(declared, 's')} as the provider declared (rate-limit headers)")
        slo_rate, slo_n, slo_ok = np.inf, None, True
        if slo_attainment is not None:
            slo_rate, slo_n, slo_ok, said = attainment_bound(
                self.data, self.kind, slo, slo_attainment
            )
            notes.append(said)
        stat, value = "", np.nan
        max_rate, max_n, nearest, feasible = cap_low, None, np.nan, True
        if targets:
            ((stat, value),) = targets.items()
            target = f"{self.metric} {stat} <= {value:g} s"
            cv = self._est.p.get("cv_s", 1.0)
            thinks = "think_cv" in self._est.p  # the closed law's mean is approximate too
            if self._model.family == "mmc" and (stat != "mean" or thinks) and abs(cv - 1) > 0.1:
                said = self._law_note(stat, cv)
                if said:
                    notes.append(said)
            nearest = max(
                self._stat_at(p, 1e-9 * self._model.capacity(p), "rate", stat) for p in worst
            )
            max_rate = min(self._max_rate(p, stat, value) for p in worst)
            ns = [
                self._largest_n(lambda n, p=p: self._stat_at(p, n, "concurrency", stat) <= value)
                for p in worst
            ]
            known = [n for n in ns if n is not None]
            max_n = min(known) if len(known) == len(ns) else None
            if not max_rate > 0:
                feasible = False
                max_rate, max_n = np.nan, None
                notes.insert(
                    0,
                    f"no load meets {target}: even a single request on an idle station takes "
                    f"{nearest:.3g} s at the {stat} (conservative end); the nearest feasible "
                    f"target is {stat} <= {nearest:.3g} s",
                )
        if feasible and not self.capacity_identified:
            max_rate, max_n, note = self._within_measured(max_rate, max_n)
            notes.append(note)
        limit_n = (
            _min_or_none(self._max_concurrency_for_rate(p, limit) for p in worst)
            if np.isfinite(limit)
            else None
        )
        if slo_attainment is not None:
            wanted = f"slo attainment >= {slo_attainment:.0%}"
            target = f"{target}; {wanted}" if target else wanted
        if not slo_ok and feasible:
            feasible, max_rate, max_n = False, np.nan, None
            notes.remove(said)
            notes.insert(0, said)  # why there is no plan, first
        # without a latency target the fitted capacity is the station's own bound
        own = "latency target" if targets else "capacity"
        bounds = {own: max_rate, **limits, "utilization cap": ucap}
        bounds["slo attainment"] = slo_rate
        if not feasible:
            binding, rate = "none", np.nan
        else:
            binding = min(bounds, key=lambda k: bounds[k])
            rate = bounds[binding]
            if not np.isfinite(rate):  # only limits that bind nothing
                binding, rate = "capacity", cap_low
        conc = [max_n, limit_n, slo_n]
        if slo_n is None and np.isfinite(slo_rate):  # an open sweep's bound, as a concurrency
            conc.append(_min_or_none(self._max_concurrency_for_rate(p, slo_rate) for p in worst))
        if np.isfinite(ucap):
            conc.append(_min_or_none(self._max_concurrency_for_rate(p, ucap) for p in worst))
        n_rec = _min_or_none(conc) if feasible else None
        if limit_n is None and np.isfinite(limit):
            notes.append("no concurrency reaches the rate limit: it does not bind a closed loop")
        if n_rec == 0:
            notes.append(self._one_client_too_fast(rate))
        x_at_n = self._throughput_at(self._est.p, max_n) if max_n is not None else np.nan
        return Plan(
            target=target,
            feasible=feasible,
            max_rate_rps=float(max_rate),
            utilization_at_max_rate=float(max_rate / cap),
            max_concurrency=max_n,
            utilization_at_max_concurrency=float(x_at_n / cap),
            limit_rate_rps=float(limit),
            limit_concurrency=limit_n,
            utilization_cap_rate_rps=float(ucap),
            rate_rps=float(rate),
            concurrency=n_rec,
            binding=binding,
            capacity_rps=float(cap),
            nearest_target_s=float(nearest),
            note="; ".join(notes),
            statistic=stat,
            target_s=value,
            capacity_identified=self.capacity_identified,
            budget_rate_rps=float(limits.get("budget", np.inf)),
        )

    def _one_client_too_fast(self, rate: float) -> str:
        """Say why no closed loop meets a plan whose rate one client alone exceeds, and the fix."""
        p = self._est.p
        x1 = self._throughput_at(p, 1)
        pause = 1.0 / rate - 1.0 / x1 + float(p.get("think_s", 0.0))
        return (
            f"one client alone sends {x1:.3g} requests/s (fitted), above the {rate:.3g} "
            f"allowed: no closed loop meets the plan as measured; give each client a think "
            f"time of at least {pause:.3g} s, or send open loop at {rate:.3g} requests/s"
        )

    def _counted(self, limit: str, tokens_per_request: float | None) -> float:
        """Return what one request counts against a per-minute limit: 1, or its mean tokens."""
        if limit == "rpm":
            return 1.0
        obs = self._problem.all
        if limit == "tpm":
            tok = tokens_per_request or np.nansum([obs.tokens, obs.prompt_tokens])
            if not tok > 0:
                raise ValueError(
                    "tokens_per_request: needed with tpm (the data has no token counts)"
                )
            return float(tok)
        tok, what = (obs.prompt_tokens, "prompt") if limit == "itpm" else (obs.tokens, "output")
        if not tok > 0:  # NaN too: a table without token counts
            raise ValueError(f"{limit}: needs the requests' {what} token counts in the data")
        return float(tok)

    def _within_measured(self, rate: float, n: int | None) -> tuple[float, int | None, str]:
        """Clip a plan's bounds to the measured loads: past them the unidentified integer rules."""
        lv = self._problem.obs.levels
        top = float(lv["level"].max())
        x_top = float(np.nanmax(lv["throughput_rps"])) if self.kind == "concurrency" else top
        if np.isfinite(x_top):
            rate = min(rate, x_top)
        if self.kind == "concurrency":
            n = int(top) if n is None else min(n, int(top))
        return (
            rate,
            n,
            (
                f"{self._model.integer} not identified: the plan stays within the measured loads "
                f"(up to {top:g}), where the fit is checked by data"
            ),
        )

    def _pessimistic(self, confidence: float = 0.95) -> list[dict]:
        """Parameter sets on the slow end of the one-sided intervals, one per plausible integer.

        For each integer inside its interval (with the continuous optimum there), each
        continuous parameter moves ``z`` standard errors in the direction that slows the
        station (mu down; t0, t1, gamma, join_steps up); the plan must hold for all of them.
        That corner lies ``z sqrt(n)`` from the estimate (Mahalanobis, n parameters moved)
        when they are uncorrelated, nearer when they rise together, and further when the
        data know them mostly by a trade-off: then the step shrinks to that distance. At one
        slot t0 and t1 show only as their sum (correlated -0.998 and -0.999998 in two
        sweeps); their corner lay 22 and 640 times as far and put the capacity at 3% and 0%
        of the fitted one. Shrunk, it slows the capacity by 0.1-1.2%, as far as the
        delta method's one-sided bound on the capacity itself (checked on four one-slot
        sweeps: three exact simulations, one over HTTP). A service CV measured from
        the data (``cv_s``, not given) is taken at both ends of its interval, each with every
        set above.
        """
        m, est = self._model, self._est
        nfree = len(m.free)
        se = np.sqrt(np.diag(est.cov))[:nfree]
        se = np.where(np.isfinite(se), se, 0.0)
        z = self._quantile(confidence)
        slower = np.array([-1.0 if name == "mu" else 1.0 for name in m.free])
        slower[[i for i, n in enumerate(m.free) if n == "think_s"]] = 0.0
        lo, hi = self._problem._bounds(est.k, len(est.theta))
        centres = {est.k: est.theta[:nfree]}
        if m.integer:
            a, b = self._integer_interval(1 - confidence)
            centres.update({j: v[:nfree] for j, v in est.thetas.items() if a <= j <= b})
        # one with a physical range: the slow end of its profile interval
        ranged = {m.free.index(n): v for n, v in self._ranged(1 - confidence).items()}
        step = z * slower * se
        step[list(ranged)] = 0.0
        moved = np.flatnonzero(step)
        if len(moved) > 1:
            cov = est.cov[np.ix_(moved, moved)]
            far = float(
                step[moved] @ np.linalg.pinv(np.where(np.isfinite(cov), cov, 0.0)) @ step[moved]
            )
            if far > len(moved) * z**2 * (1 + 1e-9):
                step *= np.sqrt(len(moved) * z**2 / far)
        out = []
        for k, th in centres.items():
            shifted = np.clip(th + step, lo[:nfree], hi[:nfree])
            for i, (a, b) in ranged.items():
                shifted[i] = np.log(b if slower[i] > 0 else a)
            out.append(self._problem.params(np.append(shifted, est.theta[nfree:]), k))
        if "cv_s_n" not in est.p:
            return out
        # a service CV measured on n requests is uncertain too: a wider service law slows the
        # upper quantiles and the waits, a narrower one raises the median, so both ends count.
        # For a gamma law the sample CV's variance is cv^2 (1 + cv^2) / (2 n) (delta method).
        # Near-constant service puts a lone request's p95 at (1 + 1.645 cv) / mu: at cv 0.05
        # over 1,000 requests its error moves the p95 1.5 times as far as mu's (0.9 ms against
        # 0.6 at c = 64 behind a cap), and without it 13 of 100 such plans broke their target
        cv, n = est.p["cv_s"], est.p["cv_s_n"]
        half = z * cv * np.sqrt((1 + cv**2) / (2 * max(n, 2.0)))
        ends = (max(cv - half, 0.5 * cv), cv + half)
        return [{**p, "cv_s": end} for p in out for end in ends]

    def _law_note(self, stat: str, cv: float) -> str:
        """Say what the plan's quantile law is worth for a service CV away from 1.

        As measured against exact simulations (p95 and p99, 50-95% load open, 50-120% behind
        a queue of 2c; c = 1 to 64; CV 0.05-0.7 and 1.5-2, to 3 behind a cap): bench_mgc's
        5 x 10^6 requests open loop and its ``--capped`` 10^6 behind a cap,
        bench_closed_quantile's 150,000 closed loop. One server's laws are exact (M/G/1 and
        M/G/1/K with gamma service). Empty where the law is exact or within 1%.
        """
        p, law = self._est.p, f"the {stat} of a service with CV {cv:.2g}"
        check = "check the plan with llmlat.verify_plan"
        unchecked = " (measured up to CV 2)" if cv > 2.0 else ""
        if self.kind == "rate" and "k_sys" not in p:
            if p.get("c", 1) == 1:
                return ""
            if cv > 1.0:
                return (
                    f"{law} comes from an M/G/c approximation (Erlang C's probability of "
                    "waiting, an exponential wait with Allen-Cunneen's mean), within 1.5% of "
                    f"exact simulation at the p95 and 1.8% at the p99 up to 90% load{unchecked}"
                )
            return (
                f"{law} comes from an M/G/c law (the exact M/D/c and M/M/c waits interpolated "
                "in CV^2), within 1% of exact simulation at the p95 and 1.4% at the p99"
            )
        if self.kind == "rate":
            if p.get("c", 1) == 1:
                return ""
            if 0.1 < cv < 0.9:
                return (
                    f"behind the queue cap, {law} mixes the constant-service and exponential "
                    "laws in CV^2, which reads up to 1.1% low at the p95 and 1.4% at the p99 "
                    "(against exact simulation at CV 0.2-0.7): keep that margin, or " + check
                )
            if cv > 1.0:
                beyond = " (measured up to CV 3)" if cv > 3.0 else ""
                return (
                    f"behind the queue cap, {law} comes from one server as fast as all of them "
                    "from the c-th request on, which reads -1.1% to +1.4% at the p95 and -1.0% "
                    "to +0.8% at the p99 (against exact simulation at CV 1.5-3, 2 to 64 "
                    "servers, a queue of twice as many; -1.7% to +0.9% at the p95 with a "
                    f"quarter or four times as many){beyond}: keep that margin, or " + check
                )
            return ""
        if p.get("think_s", 0.0) > 0 or p.get("level_think_s") is not None:
            # bench_closed_quantile (40,000 requests a cell, 1,008 cells) by service CV; its
            # --plans: fitted seeded sweeps planned on the exact simulation's p95, where the
            # law's low readings fall between clients or inside the conservative end (2,160
            # plans: 1 over its target, by 0.3% at CV 1, where the law is exact: noise)
            band = "0.05" if cv < 0.25 else "0.5-0.75" if cv < 1.0 else "1.4-2"
            (m_lo, m_hi), (q_lo, q_hi) = _CLOSED_THINK_ERRORS[band]
            return (
                f"with think time (CV {p.get('think_cv', 1.0):.2f}), {law} comes from a "
                "closed M/G/c law that weighs clients in step (constant think times) against "
                "the exponential network by the think times' spread: against exact simulation at "
                f"service CV {band} (1-16 servers, think CV 0-2) its mean reads {m_lo} to "
                f"{m_hi} and its p95 {q_lo} to {q_hi}, high mostly near the knee c (1 + Z/S)"
                f"{unchecked}; no margin on top of the bounds' conservative end: on seeded "
                "sweeps (1-16 servers, service CV 0.05-2, think CV 0-1, Z = S, 10 times the "
                "default lengths) 1 plan in 2,160 advised clients past its p95 target, none "
                f"beyond the simulation's error; past that design, {check}"
            )
        return (
            f"{law} comes from a closed M/G/c approximation within 2.5% of exact simulation "
            f"(it reads up to 2% low at 4 servers and 5 clients): keep that margin, or {check}"
        )

    def _stat_at(self, p: dict, load: float, kind: str, stat: str) -> float:
        pred = self._model.predict(p, np.array([load]), kind, (stat,))
        return float(pred[f"{stat}_s"][0])

    def _max_rate(self, p: dict, stat: str, value: float, rtol: float = 1e-10) -> float:
        cap = self._model.capacity(p)
        idle = self._stat_at(p, 1e-9 * cap, "rate", stat)
        if idle > value:
            return 0.0
        hi = cap * (1 - 1e-9)
        if self._stat_at(p, hi, "rate", stat) <= value:
            return hi
        # 1/idle - 1/statistic rises from 0 like a CDF and stays finite where the statistic
        # has a pole at capacity (nearly linear in the rate there, as 1/(c mu - lam)): the
        # Illinois method takes about 10 of the law's evaluations where bisection took 60 (a
        # capped law past CV 1 costs ms each); one tolerance down meets the target
        root = queueing._invert_smooth_cdf(
            lambda r: np.array([1 / idle - 1 / self._stat_at(p, float(r[0]), "rate", stat)]),
            np.array([1 / idle - 1 / value]),
            hi,
            rtol,
        )
        return float(root[0]) - rtol * hi

    @staticmethod
    def _largest_n(ok) -> int | None:
        """Largest n >= 1 with ok(n) (0 if none); None when no bound shows by 2**22."""
        if not ok(1):
            return 0
        hi = 2
        while ok(hi):
            if hi >= 2**22:
                return None
            hi *= 2
        lo = hi // 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if ok(mid) else (lo, mid)
        return lo

    def _throughput_at(self, p: dict, n: int) -> float:
        if n < 1:
            return 0.0
        pred = self._model.predict(p, np.array([n]), "concurrency", ())
        return float(pred["throughput_rps"][0])

    def _max_concurrency_for_rate(self, p: dict, rate: float) -> int | None:
        return self._largest_n(lambda n: self._throughput_at(p, n) <= rate * (1 + 1e-12))

    # -- display --------------------------------------------------------------------------
    def plot(self, kind: str = "latency", **kwargs: object) -> object:
        """Draw the fitted model over the data it was fitted to (see :mod:`llmlat.plot`).

        Parameters
        ----------
        kind : {"latency", "utilization", "throughput", "overview"}, default "latency"
            Which figure of :mod:`llmlat.plot`.
        **kwargs
            Passed to that function.

        Returns
        -------
        matplotlib.figure.Figure
            The figure.
        """
        from llmlat import plot

        figures = ("latency", "utilization", "throughput", "overview")
        if kind not in figures:
            raise ValueError(f"kind: expected one of {', '.join(figures)}, got {kind!r}")
        if self.data is None:
            raise ValueError("data: this result was not made by fit(), nothing to draw")
        if kind == "latency":
            kwargs.setdefault("metric", f"{self.metric}_s")
        return getattr(plot, kind)(self.data, fit=self, **kwargs)

    def summary(self, alpha: float = 0.05) -> Summary:
        """Statsmodels-style summary of the fit.

        Parameters
        ----------
        alpha : float, default 0.05
            Level of the confidence intervals shown.

        Returns
        -------
        statsmodels.iolib.summary2.Summary
            Printable (``print(res.summary())``) and rendered as HTML in Jupyter.
        """
        form = "closed (N clients)" if self.kind == "concurrency" else "open (Poisson arrivals)"
        info = {
            "Model:": self.model,
            "Form:": form,
            "Method:": "maximum likelihood" if self.method == "ml" else "weighted least squares",
            "Metric / stat:": f"{self.metric} / {self.stat}",
            "Levels:": str(len(self.levels)),
            "No. observations:": str(self.nobs),
            "Log-likelihood:": f"{self.llf:.4g}",
            "AIC:": f"{self.aic:.4g}",
            "BIC:": f"{self.bic:.4g}",
            "Capacity (req/s):": self._capacity_text(),
        }
        if self.indistinguishable:
            info["Model choice:"] = f"indistinguishable from {', '.join(self.indistinguishable)}"
        for k, v in self.fixed.items():
            # one client's overhead moves with the fitted step time (_Problem._with_overhead)
            how = "profiled" if k == "overhead_s" and self._problem._light else "fixed"
            info[f"{k} ({how}):"] = f"{v:.4g}"
        table = self._param_table(alpha)
        smry = Summary()
        smry.add_title(f"llmlat queueing fit: {self.model}")
        smry.add_dict(info)
        # the names as a column, not an index: statsmodels widens a table to the widest by
        # its column separators, and counts one too few of them where an index is shown (the
        # parameter rows ran 16 characters past the summary's rules)
        smry.add_df(table.rename_axis("").reset_index(), index=False)
        smry.add_df(self._level_table(), index=False)
        for note in self.notes:
            smry.add_text(f"Note: {note}")
        return smry

    def _repr_html_(self) -> str:
        return self.summary().as_html()

    def _capacity_text(self) -> str:
        if self.capacity_identified:
            return f"{self.capacity_rps:.4g}"
        seen = np.nanmax(self.levels["throughput_rps"])
        return f"not identified (>= {seen:.4g} measured)" if np.isfinite(seen) else "not identified"

    def _level_table(self) -> pd.DataFrame:
        """Format the summary's level rows: loads and counts whole, the rest as :func:`_num`.

        As text (statsmodels' summary formats the numbers of every table by its first's
        format, 4 decimals: 5120 requests read 5120.0000).
        """
        cols = ["n", "throughput_rps", "throughput_pred_rps", f"{self.stat}_s"]
        cols += [f"{self.stat}_pred_s", "resid_rel", "utilization"]
        lv = self.levels[cols].reset_index()
        return pd.DataFrame(
            {
                name: [f"{v:.12g}" if name in ("level", "n") else _num(v) for v in lv[name]]
                for name in lv.columns
            }
        )

    def _param_table(self, alpha: float) -> pd.DataFrame:
        """Format the summary's parameter rows: "not identified" where the data say nothing."""
        ci = self.conf_int(alpha)
        rows = {}
        for name, value in self.params.items():
            lower, upper = ci.loc[name]
            # the integer's interval is its profile-likelihood set, not +- z se
            if name == self._model.integer:
                se = "profile"
            elif name in _PHYSICAL_ENDS:  # no curvature on an end of the range
                se = "one-sided" if self._on_end(name) else "profile"
            else:
                se = _num(self.bse[name])
            coef = "not identified" if name in self.unidentified else _num(value)
            rows[name] = [coef, "" if name in self.unidentified else se, _num(lower), _num(upper)]
        cols = ["coef", "std err", f"[{alpha / 2:g}", f"{1 - alpha / 2:g}]"]
        return pd.DataFrame.from_dict(rows, orient="index", columns=cols)

    def _params_text(self) -> str:
        """Return the parameters in one line, "not identified" where the data say nothing."""
        return ", ".join(
            f"{k}=not identified" if k in self.unidentified else f"{k}={v:.4g}"
            for k, v in self.params.items()
        )

    def __repr__(self) -> str:
        ps = self._params_text()
        return f"<FitResult {self.model} ({self.kind}, {self.method}): {ps}; aic={self.aic:.4g}>"


def _num(value: float) -> str:
    """Format a table cell: 4 significant digits, "unbounded" for inf, blank for NaN."""
    if not np.isfinite(value):
        return "unbounded" if value == np.inf else ""
    return f"{value:.4g}"
