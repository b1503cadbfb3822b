"""Estimation of one station model: the objective, the profile over the integer, the glue."""

from __future__ import annotations

import copy
import hashlib
import pickle
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, stats
from statsmodels.base.model import GenericLikelihoodModel

from llmlat._aggregate import Observed, finite_or, latency_levels, offered_rate, served_short
from llmlat._models import _REFUSALS_FROM_K, Model
from llmlat.stats import MIN_WINDOW_SHARE

_LOG2PI = np.log(2 * np.pi)
#: A batching level past the slot cap shows its queue when the wait grew by this share of its
#: latency over the lightest level's (InferenceX at N = 512: 1%; a queue of a tenth of the slots
#: waits about a tenth of the decode time).
_QUEUE_SHARE = 0.1


def _overhead(obs: Observed) -> float:
    """Return a streamed request's time outside its decode steps at one client (NaN: unknown).

    One client's request finds the server idle, which starts a step at once: its latency is
    its output tokens times the step time (its mean inter-token latency) plus what the batch
    model has no part for, the network and client round trip and its own prefill. That
    constant is in every request's latency at every load (a few ms: 2% of a 16-token answer
    at 5 ms a step, which t0 would otherwise absorb).
    """
    lv = obs.levels
    if obs.kind != "concurrency" or "itl_s" not in lv or lv["level"].iloc[0] != 1:
        return np.nan
    first = lv.iloc[0]
    return max(float(first["mean_s"] - first["tokens_mean"] * first["itl_s"]), 0.0)


class _Likelihood(GenericLikelihoodModel):
    """statsmodels wrapper around a per-observation log-likelihood closure."""

    def __init__(self, fn, nobs: int, names: list[str]):
        self._fn = fn
        super().__init__(np.zeros(nobs), extra_params_names=names)

    def loglikeobs(self, params):
        return self._fn(np.asarray(params))


@dataclass
class _Estimate:
    theta: np.ndarray  # log-scale continuous parameters (+ log scale for WLS)
    k: int | None
    llf: float
    profile: dict[int, float]
    p: dict
    cov: np.ndarray
    #: integer -> best continuous parameters there (log scale), where profiled
    thetas: dict[int, np.ndarray] = field(default_factory=dict)
    #: least squares: residual degrees of freedom (t quantiles) and the quasi-likelihood
    #: scale phi the covariance carries (at least :attr:`_Problem.phi_floor`); None and 1 for
    #: maximum likelihood
    dof: int | None = None
    phi: float = 1.0


#: The batching model's own error on a closed level's mean latency at the run's mean output
#: length (its steps, joins and waits for a slot are those of the mean batch): on its own exact
#: simulation within 0.05% in steady state (2 clients; 0.01% from 8 on), a level of the default
#: length past the slot cap 0.05-0.1% low (what its start-up leaves), where the sampling error
#: of that mean is 0.05-0.1% below the slot cap (and 0 at one client, whose latency is its
#: length times one step time); a real server's steps are less regular. The model check judges
#: with it, and a latency-only fit's slot cap carries it (:attr:`_Problem.phi_integer`).
_BATCH_MEAN_ERROR = 0.005


class _Problem:
    """One model, one data set, one estimation method: the objective for each integer."""

    def __init__(self, model: Model, obs: Observed, method: str, stat: str, fixed: dict):
        self.model, self.method, self.stat, self.fixed = model, method, stat, fixed
        #: (index, log value) of a free parameter held by :meth:`held`, else None
        self._held: tuple[int, float] | None = None
        #: least squares: the least quasi-likelihood scale (:func:`_lack_of_fit`); 1 keeps the
        #: level means' own errors
        self.phi_floor = 1.0
        #: least squares: the least scale of the integer's profile set, where the law's own
        #: error weighs on it more than on the continuous parameters (see below)
        self.phi_integer = 1.0
        #: least squares: each level mean's own error where it differs from the weights'
        #: (a closed batching level's at the run's mean output length), for the model check
        self.se_check: np.ndarray | None = None
        # overloaded open levels: their throughput is evidence of capacity, not their latency
        self.all, self.obs = obs, latency_levels(obs)
        flag = obs.levels["overloaded"].to_numpy(bool) if "overloaded" in obs.levels else None
        # behind a queue cap no level is overloaded (the cap keeps a steady state), yet one
        # past capacity measures it by its throughput as well (see _past_cap)
        self.past_cap = _past_cap(obs, fixed)
        if self.past_cap.any():
            flag = self.past_cap
        # the levels counted by their throughput (x_over, with its error and offered rate)
        if flag is None or not flag.any():
            self.x_over = self.se_over = self.lam_over = self.level_over = np.empty(0)
        else:
            service = float(self.obs.levels["mean_s"].iloc[0]) if len(self.obs.levels) else 0.0
            self.x_over, self.se_over = _served(obs.levels[flag], fixed.get("cv_s"), service)
            self.lam_over = offered_rate(obs.levels)[flag]
            self.level_over = obs.levels["level"].to_numpy(dtype=np.float64)[flag]
        if len(self.obs.levels) == 0:
            # a level at half the capacity, as long as the longest measured
            level = float(f"{0.5 * np.nanmax(self.x_over):.3g}")
            n = round_up(float(sent_requests(obs.levels, obs.kind).max()))
            why = "the service time, below capacity"
            raise NeedsData(
                "level: every level is overloaded (throughput short of the offered rate); "
                "the capacity is about "
                f"{np.nanmax(self.x_over):.3g} req/s, but the service time needs levels below "
                f"it: measure at lower rates (e.g. {level:g} req/s for about {n:,.0f} requests)",
                [advice_row("mu", level, n, 0.0, why)],
            )
        obs = self.obs
        lv = obs.levels
        #: one client's mean latency and output tokens, where the overhead is profiled (not
        #: where none was measured, a latency of output tokens times steps alone: its overhead
        #: would sit on its floor of 0, a kink the covariance cannot differentiate)
        self._light: tuple[float, float] | None = None
        if "overhead_s" in fixed:  # measured at one client (_fit._fixed, batching alone)
            first = lv.iloc[0]
            if first["level"] == 1 and fixed["overhead_s"] > 1e-6 * first["mean_s"]:
                self._light = (float(first["mean_s"]), float(first["tokens_mean"]))
        self.loads = lv["level"].to_numpy(dtype=np.float64)
        if method == "wls":
            y = lv[f"{stat}_s"].to_numpy(dtype=np.float64)
            se = lv[f"se_{stat}_s"].to_numpy(dtype=np.float64)
            good = np.isfinite(se) & (se > 0)
            rel = np.nanmedian(se[good] / y[good]) if good.any() else 0.05
            self.y = y
            self.se = np.where(good, np.maximum(se, 1e-9 * y), rel * y)
            if not np.isfinite(y).all():
                raise ValueError(f"stat: the per-level table has no {stat!r} for every level")
            if model.family == "batch" and obs.kind == "concurrency":
                # a level's latency scales with its own mean output length: compare every
                # level at the run's mean length (exact for a closed loop without think time)
                ratio = fixed["tokens"] / lv["tokens_mean"].to_numpy(dtype=np.float64)
                adjusted = np.isfinite(ratio)
                ratio = np.where(adjusted, ratio, 1.0)
                self.y, self.se = self.y * ratio, self.se * ratio
                if "se_at_length_s" in lv:  # the error of that comparison: the model check's
                    honest = lv["se_at_length_s"].to_numpy(dtype=np.float64) * ratio
                    honest = np.hypot(honest, _BATCH_MEAN_ERROR * self.y)
                    self.se_check = np.where(np.isfinite(honest), honest, self.se)
                if adjusted.any():
                    # that removes the output length's spread, most of a level's variance
                    # (30-100 times in standard error on a simulated sweep), which its error
                    # still holds: the errors weigh the levels, the residuals set the scale
                    self.phi_floor = float(np.finfo(np.float64).tiny)
                    # the cap's set, not below the comparison's own errors and the law's: the
                    # residuals (0.01-0.1% of a level's mean) ignore the law's error, which
                    # moves the cap by whole slots (a slot more adds 0.06% to the capacity at
                    # 128 slots): 128 read {129, 130} on exact data, 9 of 12 sweeps without it
                    honest = _BATCH_MEAN_ERROR * self.y if self.se_check is None else self.se_check
                    self.phi_integer = float(np.mean((honest / self.se) ** 2))
            self.se = np.concatenate([self.se, self.se_over])
        self.nobs = len(lv) if method == "wls" else sum(len(t) for t in obs.request_times)
        self._init_itl(lv)
        self.nobs += len(self.x_over)
        if method == "ml":
            self.binned, self.weights = _bin_times(obs)
        # behind a queue cap every level's refusals are binomial draws of the blocking share;
        # that share depends on the service law (M/D/1/3 blocks far less than M/M/1/3), so a
        # measured non-exponential service counts them only behind a large system (see
        # _refusals_count), where refusals come past capacity, 1 - c mu / lambda for any law
        self.blocked = "k_sys" in fixed and "n_refused" in lv
        if self.blocked:
            self.n_off = lv["n_offered"].to_numpy(dtype=np.float64)
            self.n_ref = lv["n_refused"].to_numpy(dtype=np.float64)
            vif = lv["vif_refused"].to_numpy(dtype=np.float64) if "vif_refused" in lv else None
            self.info_ref = _information(obs) if vif is None else 1.0 / np.fmax(vif, 1.0)
            self.nobs += len(lv)
            if method == "wls":  # deviance residuals are standardised already
                self.se = np.concatenate([self.se, np.ones(len(lv))])
        if self.n_itl:  # the step times last, each block with its own scale
            self.se = np.concatenate([self.se, self.itl_se])
            self.blocks = np.r_[np.zeros(len(self.se) - self.n_itl, int), np.ones(self.n_itl, int)]
            self._weight = np.ones(len(self.se))

    def _init_itl(self, lv) -> None:
        """Streamed batching levels: the decode step time (mean ITL) of each level.

        The inter-token latency at a level is the step time of its mean batch, min(N, slots)
        in a closed loop without think time: near-deterministic, so it pins t0, t1 and, at the
        levels past the slot cap, the cap itself. Its residuals form their own block with their
        own scale (the latency's approximation error is not the step times'), and each level's
        error gets a floor of the block's median relative error: a level whose requests all saw
        the same batch (N = 1) has a zero spread, yet the model of the mean batch is approximate.
        """
        self.n_itl = 0
        self.itl_y = self.itl_se = np.empty(0)
        self._weight = np.ones(1)
        if self.model.family != "batch" or self.method != "wls" or "itl_s" not in lv:
            return
        y = lv["itl_s"].to_numpy(dtype=np.float64)
        se = lv["se_itl_s"].to_numpy(dtype=np.float64)
        if len(y) < 3 or not np.all(np.isfinite(y) & (y > 0)):
            return
        rel = se / y
        spread = rel > 1e-9  # not a zero spread in floating point
        floor = float(np.nanmedian(rel[spread])) if spread.any() else 1e-3
        self.itl_y = y
        self.itl_se = y * np.sqrt(np.where(np.isfinite(rel), rel, floor) ** 2 + floor**2)
        self.n_itl = len(y)
        if "phases_loose" in self.fixed:
            # the law's error in the step time, and its tokens times in the latency
            err = self._phase_error(self.fixed["phases_loose"])
            self.itl_se = np.hypot(self.itl_se, err)
            err = err * self.fixed["tokens"]
            self.se[: len(err)] = np.hypot(self.se[: len(err)], err)
            if self.se_check is not None:
                self.se_check = np.hypot(self.se_check, err)

    def _waits(self) -> tuple[np.ndarray, np.ndarray]:
        """Return each streamed level's mean wait outside its decode steps, and its latency.

        The wait is the latency less output tokens times the step time: prefill, join,
        round trip and any queue for slots.
        """
        lv = self.obs.levels
        tokens = lv["tokens_mean"].to_numpy(dtype=np.float64)
        tokens = np.where(np.isfinite(tokens), tokens, self.fixed["tokens"])
        latency = lv["mean_s"].to_numpy(dtype=np.float64)
        return latency - tokens * self.itl_y, latency

    def _phase_error(self, loose: np.ndarray) -> np.ndarray:
        """Return the step-time error of levels whose clients' phases no law describes (s).

        Clients of equal output lengths started spread (``_fit._in_step``, ``loose`` of each
        level) see a batch off the independent-phase law's: below it at a few clients (they
        take turns), above it towards the cap (they cluster, the more as a loaded cycle
        outlasts the unloaded one they started over). By how much depends on the start, not
        on the parameters: on exact simulations of 8-128 slots, from the full width of the
        batch the others' absences take, (N - 1) s, each away a share s of the time, below
        the law, to half of it above (the in-step law lies one width above). Not knowing
        where, the law's error is that of a uniform law over one width either side,
        (N - 1) s / sqrt(3) requests. s is the wait outside the decode steps over the cycle,
        and one client's share of the step time is the slope of the step times over the
        levels without a queue for slots (where waiting requests fill the gaps the batch is
        the cap whatever the phases: no error there).
        """
        lv = self.obs.levels
        clients = lv["level"].to_numpy(dtype=np.float64)
        think = lv["think_s"].to_numpy(dtype=np.float64) if "think_s" in lv else 0.0
        think = np.where(np.isfinite(think), think, 0.0)
        wait, latency = self._waits()
        # a busy server takes a request in at its next step: up to one step of the wait
        free = wait - wait[0] <= _QUEUE_SHARE * latency + self.itl_y
        if free.sum() < 2:
            return np.zeros(len(clients))
        per_client = np.polyfit(clients[free], self.itl_y[free], 1)[0]
        away = (wait + think) / (latency + think)
        width = (clients - 1.0) * np.clip(away, 0.0, 1.0) * max(per_client, 0.0)
        return np.where(free, loose * width / np.sqrt(3.0), 0.0)

    def queue_shows(self, loads: np.ndarray) -> bool:
        """Whether requests waited for a slot at any of these (streamed batching) levels.

        A request's time is its wait plus its decode, output tokens times the step time (ITL);
        below the cap the wait is the prefill and the join, as at the lightest level. A level
        whose wait grew by more than :data:`_QUEUE_SHARE` of its latency held requests in a
        queue for slots: its step time is that of a full batch, which pins the cap.
        """
        if not self.n_itl or not len(loads):
            return False
        wait, latency = self._waits()
        grown = (wait - wait[0]) > _QUEUE_SHARE * latency
        return bool(np.any(grown & np.isin(self.loads, loads)))

    def step_floor(self, p: dict) -> int:
        """Smallest slot cap the step times (ITL) allow, whatever the latency says.

        The step time grows with the batch a request sees: a level whose next one decodes
        clearly slower (by 3 errors and 1%) had a batch short of the cap, so the cap exceeds
        that batch, read off its step time with the fitted ``t0 + t1 * batch^gamma`` (below
        the cap the batch is N less those waiting to join, so N itself would overstate it).
        1 when no level shows that (or no step times were measured).
        """
        if not self.n_itl:
            return 1
        order = np.argsort(self.loads)
        y, se, n = self.itl_y[order], self.itl_se[order], self.loads[order]
        rise = np.diff(y)
        clear = np.flatnonzero((rise > 3 * np.hypot(se[:-1], se[1:])) & (rise > 0.01 * y[:-1]))
        if not len(clear):
            return 1
        i = clear[-1]
        batch = max((y[i] - p["t0_s"]) / p["t1_s"], 0.0) ** (1.0 / p.get("gamma", 1.0))
        return int(min(np.floor(batch), n[i])) + 1

    @staticmethod
    def _refusals_count(p: dict) -> bool:
        """Whether the blocking of the M/M/c/K chain describes these refusals.

        Exponential service: always. A measured service CV: behind a system of at least
        :data:`llmlat._models._REFUSALS_FROM_K` places, where a queue refuses only near or past its
        capacity (the share there is conserved, ``1 - c mu / lambda``, whatever the law).
        """
        return "cv_s" not in p or p["k_sys"] >= _REFUSALS_FROM_K

    def _block_llobs(self, p: dict) -> np.ndarray:
        """Per level: the binomial log-likelihood of its refusals (quasi: weighted by 1/vif).

        The refusals' own ``vif`` (runs while the queue stays full), else the latencies'.
        """
        if not self.blocked:
            return np.empty(0)
        if not self._refusals_count(p):
            return np.zeros(len(self.loads))
        pb = np.clip(self.model.blocking(p, self.loads), 1e-300, 1.0 - 1e-16)
        ll = self.n_ref * np.log(pb) + (self.n_off - self.n_ref) * np.log1p(-pb)
        return self.info_ref * ll * ~self.past_cap

    def _block_resid(self, p: dict) -> np.ndarray:
        """Per level: the refused share's deviance residual (least squares)."""
        if not self.blocked:
            return np.empty(0)
        if not self._refusals_count(p):
            return np.zeros(len(self.loads))
        pb = np.clip(self.model.blocking(p, self.loads), 1e-300, 1.0 - 1e-16)
        share = self.n_ref / self.n_off
        with np.errstate(divide="ignore", invalid="ignore"):
            dev = 2 * (
                np.where(share > 0, self.n_ref * np.log(share / pb), 0.0)
                + np.where(
                    share < 1,
                    (self.n_off - self.n_ref) * np.log((1 - share) / (1 - pb)),
                    0.0,
                )
            )
        return np.sign(share - pb) * np.sqrt(np.fmax(dev, 0.0) * self.info_ref) * ~self.past_cap

    def _over_resid(self, p: dict) -> np.ndarray:
        """Standardised residuals of the overloaded levels' throughput: min(lambda, capacity)."""
        if not len(self.x_over):
            return self.x_over
        return (self.x_over - np.minimum(self.lam_over, self.model.capacities(p))) / self.se_over

    def _over_llobs(self, p: dict) -> np.ndarray:
        r = self._over_resid(p)
        return -0.5 * _LOG2PI - np.log(self.se_over) - 0.5 * r**2

    def profile_drop(self, best_llf: float) -> float:
        """How far below its best the profile over the integer is traced (log-likelihood).

        3 for the likelihood-ratio set; for least squares without step times, the drop at
        which the F set of :func:`_lack_of_fit` ends at 99% (a fit far tighter than the
        means' errors keeps phi = 1, or :attr:`phi_integer`, and its set reaches further
        than 3).
        """
        if self.method != "wls" or self.n_itl:
            return 3.0
        n = len(self.se)
        dof = n - len(self.model.free) - (self.model.integer is not None)
        if dof < 1:
            return 3.0
        log_s2 = -2 * (best_llf + float(np.sum(np.log(self.se)))) / n - _LOG2PI - 1
        rss = n * float(np.exp(log_s2))
        phi = max(self.phi_floor, self.phi_integer, rss / dof)
        f = float(stats.f.ppf(0.99, 1, dof))
        return float(np.clip(0.5 * n * np.log1p(f * phi / max(rss, 1e-12)), 3.0, 40.0))

    def params(self, theta: np.ndarray, k: int | None) -> dict:
        return self._with_overhead(self.model.params(theta[: len(self.model.free)], k, self.fixed))

    def _with_overhead(self, p: dict) -> dict:
        """Set ``overhead_s`` to what one client's mean latency leaves beside its steps.

        At these step times (columns of them too): a streamed request's time outside its
        decode steps. Profiled, not measured once on the step times observed there: that
        level's latency then predicts itself (no residual), where it repeated its own step
        time's residual, tokens times, as a second observation with an error of its own
        (t0's interval held the truth in 16 of 20 seeds of fixed 8-token outputs on 32 slots).
        """
        if self._light is not None:
            mean, tokens = self._light
            p["overhead_s"] = np.fmax(mean - tokens * (p["t0_s"] + p["t1_s"]), 0.0)
        return p

    def _resid(self, theta: np.ndarray, k: int | None) -> np.ndarray:
        p = self.params(theta, k)
        think = p.get("level_think_s")
        pred = self.model.predict(p, self.loads, self.obs.kind, (self.stat,), think)
        r = (self.y - pred[f"{self.stat}_s"]) / self.se[: len(self.y)]
        r = np.concatenate([r, self._over_resid(p), self._block_resid(p)])
        if self.n_itl:
            r = np.concatenate([r, (self.itl_y - pred["itl_s"]) / self.itl_se])
        # finite but astronomically large predictions (a step-time exponent far out) would make
        # the numerical Jacobian overflow: a residual this large already says "far off"
        return np.clip(np.where(np.isfinite(r), r, 1e6), -1e6, 1e6)

    def _resid_rows(self, thetas: np.ndarray, k: int | None) -> np.ndarray:
        """:meth:`_resid` at each row of ``thetas`` (the points of a numerical Jacobian).

        A batching sweep's predictions take every row in one pass (the station's distribution
        for all parameter sets at once: half the time of a Jacobian, which is most of a batch
        fit's), each row as :meth:`_resid` computes it alone; elsewhere row by row.
        """
        p = self.params(thetas[0], k)
        one_pass = (
            self.model.family == "batch"
            and not self.blocked
            and (self.obs.kind == "rate" or p.get("level_think_s") is None)
        )
        if not one_pass:
            return np.stack([self._resid(th, k) for th in thetas])
        p.update(zip(self.model.free, np.exp(thetas.T[:, :, None]), strict=True))
        p = self._with_overhead(p)
        pred = self.model.predict(p, self.loads, self.obs.kind, (self.stat,))
        parts = [(self.y - pred[f"{self.stat}_s"]) / self.se[: len(self.y)]]
        if len(self.x_over):
            parts.append(self._over_resid(p))
        if self.n_itl:
            parts.append((self.itl_y - pred["itl_s"]) / self.itl_se)
        r = np.concatenate(parts, axis=1)
        return np.clip(np.where(np.isfinite(r), r, 1e6), -1e6, 1e6)

    def llf(self, theta: np.ndarray, k: int | None) -> float:
        """Log-likelihood, with the WLS scale concentrated out."""
        with np.errstate(all="ignore"):
            if self.method == "ml":
                p = self.params(theta, k)
                v = float(self.weights @ self.model.loglikeobs(p, self.binned))
                v += float(np.sum(self._over_llobs(p))) + float(np.sum(self._block_llobs(p)))
            else:
                r = self._resid(theta, k)
                v = -float(np.sum(np.log(self.se)))
                for part, s2 in zip(self._split(r), self.block_scales(r), strict=True):
                    v += float(-0.5 * len(part) * (_LOG2PI + np.log(s2)) - 0.5 * part @ part / s2)
        return v if np.isfinite(v) else -1e300

    def block_scales(self, r: np.ndarray) -> list[float]:
        """Each block's variance of the standardised residuals (the Gaussian scale squared).

        With step times, never below 1: a block of five level means that the parameters can
        follow more closely than their own sampling errors would otherwise get a scale near
        0 and all the weight, pulling t0 and t1 off what the step times say (t1 +1.4% on a
        live sweep whose step times alone hold it).
        """
        floor = 1.0 if self.n_itl else 1e-16
        return [max(float(np.mean(part**2)), floor) for part in self._split(r)]

    def _split(self, r: np.ndarray) -> list[np.ndarray]:
        """Residuals by block: one scale each (the step times have their own)."""
        return [r[self.blocks == b] for b in (0, 1)] if self.n_itl else [r]

    @property
    def n_scales(self) -> int:
        """Least-squares scales estimated (log scale, last in the statsmodels parameters)."""
        return 2 if self.n_itl else 1

    def df_model(self, theta: np.ndarray) -> int:
        """Count the parameters the AIC charges a full estimate ``theta`` (statsmodels').

        The integer and a profiled overhead too, and not the step times' scale
        (:meth:`llf_reported` leaves them out).
        """
        profiled = (self.model.integer is not None) + (self._light is not None)
        return len(theta) - (self.n_scales - 1) + profiled

    def llf_reported(self, theta: np.ndarray, k: int | None) -> float:
        """Log-likelihood of the latency data alone, comparable with other models' (AIC)."""
        full = self.llf_exact(theta, k)
        if not self.n_itl:
            return full
        n = len(self.model.free)
        r = self._resid(theta[:n], k)[self.blocks == 1]
        s = np.exp(theta[-1]) * self.itl_se
        return full - float(np.sum(-0.5 * _LOG2PI - np.log(s) - 0.5 * (r * self.itl_se / s) ** 2))

    def llobs_full(self, k: int | None):
        """Per-observation log-likelihood of all parameters (WLS: log scale last)."""
        if self.method == "ml":

            def ml(th):
                p = self.params(th, k)
                lat = self.weights * self.model.loglikeobs(p, self.binned)
                return np.concatenate([lat, self._over_llobs(p), self._block_llobs(p)])

            return ml

        def fn(th):
            m = self.n_scales
            scale = np.exp(th[-m:])[self.blocks] if self.n_itl else np.exp(th[-1])
            s = scale * self.se
            r = self._resid(th[:-m], k) * self.se
            return -0.5 * _LOG2PI - np.log(s) - 0.5 * (r / s) ** 2

        return fn

    def llf_exact(self, theta: np.ndarray, k: int | None) -> float:
        """Log-likelihood of every request (maximum likelihood works on binned times)."""
        if self.method != "ml":
            return float(np.sum(self.llobs_full(k)(theta)))
        info = np.repeat(_information(self.obs), [len(t) for t in self.obs.request_times])
        p = self.params(theta, k)
        lat = float(info @ self.model.loglikeobs(p, self.obs))
        return lat + float(np.sum(self._over_llobs(p))) + float(np.sum(self._block_llobs(p)))

    def lower_bound(self, k: int | None) -> float:
        """Smallest log mu for which an open M/M/c is stable at every level."""
        if self.obs.kind != "rate" or self.model.family != "mmc" or "k_sys" in self.fixed:
            return -np.inf
        c = 1 if self.model.name == "mm1" else k
        return float(np.log(self.loads.max() / c)) + 1e-9

    def optimise(
        self,
        k: int | None,
        start: np.ndarray | None = None,
        width: float = 4.0,
        xatol: float = 1e-6,
    ):
        """Best continuous parameters at integer ``k``: from a warm start and the default one.

        For a profile: least squares are rough (:meth:`_optimise_from`), and the answer's
        integer is polished (:func:`_settled`).
        """
        default = self.model.start(k, self.obs, self.fixed)
        if start is not None and start[0] <= self.lower_bound(k):
            # a neighbour's optimum past this integer's stability edge: started on the edge,
            # the bounded optimiser creeps away from it (20-30 evaluations)
            start = None
        if start is None:
            return self._optimise_from(k, default, 4.0, xatol, rough=True)[:2]
        if (self.method == "ml" or self.n_itl) and len(start) > 1:
            # a likelihood evaluation is dear on large data, and with step times the default
            # start is their line at this integer: optimise from the better start
            better = start if self.llf(start, k) >= self.llf(default, k) else default
            return self._optimise_from(k, better.copy(), width, xatol, rough=True)[:2]
        theta, llf, edge = self._optimise_from(k, start.copy(), width, xatol, rough=True)
        if len(start) == 1 and not edge:
            return theta, llf  # one dimension, optimum inside the bracket: nothing to gain
        other = self._optimise_from(k, default, 4.0, xatol, rough=True)
        return (theta, llf) if llf >= other[1] else other[:2]

    def held(self, k: int | None, start: np.ndarray, i: int, value: float):
        """Optimise at integer ``k`` with free parameter ``i`` held at ``value`` (log scale).

        A point of that parameter's profile: ``(theta, llf)``. The block weights are the
        fit's again afterwards.
        """
        weight = self._weight
        self._held = (i, value)
        try:
            return self._optimise_from(k, start.copy(), 4.0, 1e-6)[:2]
        finally:
            self._held, self._weight = None, weight

    def _bounds(self, k: int | None, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Box on the log-scale parameters: stability of an open queue, a sane think time."""
        lower, upper = np.full(n, -np.inf), np.full(n, np.inf)
        lower[0] = self.lower_bound(k)
        if "join_steps" in self.model.free:  # waiting for the next step: at most one step
            i = self.model.free.index("join_steps")
            lower[i], upper[i] = np.log(1e-3), 0.0
        if "gamma" in self.model.free:  # step time ~ batch^gamma: sub- to super-linear, no more
            i = self.model.free.index("gamma")
            lower[i], upper[i] = np.log(0.25), np.log(4.0)
        if "t1_s" in self.model.free:  # log t1 runs off to -inf when the step time is flat
            i = self.model.free.index("t1_s")
            base = float(np.nanmin(self.obs.levels["mean_s"])) / self.fixed["tokens"]
            lower[i] = np.log(1e-4 * base)
        if "think_s" in self.model.free:  # log Z runs off to -inf when the data have no think
            i = self.model.free.index("think_s")
            means = self.obs.levels["mean_s"]
            lower[i] = np.log(1e-4 * float(np.nanmin(means)))
            upper[i] = np.log(1e3 * float(np.nanmax(means)))
        if self._held is not None:  # a box a hair wide: least_squares wants lower < upper
            i, value = self._held
            lower[i], upper[i] = value - 1e-5, value + 1e-5
        return lower, upper

    def _memo(self, k: int | None, lower: np.ndarray, upper: np.ndarray) -> dict:
        """Residuals and Jacobian of a batching fit at ``k`` for ``least_squares``, by point.

        The Jacobian is scipy's "2-point" forward differences, its points in one pass
        (:meth:`_resid_rows`): the same steps and the same numbers as scipy's own, in about the
        time of one evaluation. With step times the reweighting rounds (:meth:`_optimise_from`) each
        start where the last ended, whose residuals and Jacobian are known (the weights scale
        whole blocks): both are kept per point.
        """
        seen: dict[bytes, np.ndarray] = {}
        jacs: dict[bytes, np.ndarray] = {}

        def resid(th: np.ndarray) -> np.ndarray:
            key = th.tobytes()
            if key not in seen:
                seen[key] = self._resid(th, k)
            return seen[key]

        def jac(th: np.ndarray) -> np.ndarray:
            key = th.tobytes()
            if key not in jacs:
                # scipy's "2-point" step: relative, away from zero, turned back at a bound
                h = _STEP * np.where(th >= 0, 1.0, -1.0) * np.maximum(1.0, np.abs(th))
                h = np.where((th + h > upper) | (th + h < lower), -h, h)
                dx = (th + h) - th
                rows = self._resid_rows(th + np.diag(dx), k)
                jacs[key] = ((rows - resid(th)) / dx[:, None]).T
            return jacs[key]

        return {"fun": resid, "jac": jac}

    def _optimise_from(
        self,
        k: int | None,
        theta0: np.ndarray,
        width: float,
        xatol: float,
        settle: float = 0.05,
        rough: bool = False,
    ):
        """Optimise at ``k`` from ``theta0``.

        With step times the blocks are reweighted until their weights move by less than
        ``settle`` (relative; 5% on the profile, fully at the answer). ``rough``: least
        squares to 1e-7 of the log parameters, enough to rank the integers of a profile
        (its log-likelihood within 1e-9; a quarter fewer evaluations than the answer's 1e-10).
        """
        lo = self.lower_bound(k)
        lower, upper = self._bounds(k, len(theta0))
        theta0 = np.clip(theta0, lower + 1e-6, upper - 1e-6)
        edge = False
        if self.method == "wls":  # the concentrated Gaussian likelihood only needs sum r^2
            # with a block of step times, each block weighted by its own scale: the fixed
            # point of reweighting is the optimum of the concentrated likelihood
            weight = self._weight  # the last optimum's: next to this one's on a profile
            theta = theta0
            if self.model.family == "batch":
                opts = self._memo(k, lower, upper)
            else:
                opts = {"fun": lambda th: self._resid(th, k)}
            # with step times 1e-9: the public tables' fits agree to 6 significant digits
            # with 1e-10 and 1e-12, at a third fewer evaluations
            opts.update(
                {"xtol": 1e-9, "ftol": 1e-9}
                if self.n_itl
                else {"xtol": 1e-7, "ftol": 1e-9}
                if rough
                else {"xtol": 1e-10, "ftol": 1e-12}
            )
            resid, jac = opts.pop("fun"), opts.pop("jac", None)
            for _ in range((4 if settle >= 0.05 else 100) if self.n_itl else 1):
                scaled = "2-point" if jac is None else lambda th, w=weight: jac(th) * w[:, None]
                with np.errstate(all="ignore"):
                    res = optimize.least_squares(
                        lambda th, w=weight: resid(th) * w,
                        theta,
                        jac=scaled,
                        bounds=(lower, upper),
                        method="trf",
                        max_nfev=2000,
                        **opts,
                    )
                theta = res.x
                if not self.n_itl:
                    break
                rms = np.sqrt(self.block_scales(resid(theta)))
                new = 1.0 / rms[self.blocks]
                settled = np.allclose(new, weight, rtol=settle)
                self._weight = weight = new
                if settled:
                    break
        elif len(theta0) == 1:
            a = max(theta0[0] - width, lo)
            b = max(theta0[0] + width, a + 1.0)
            res = optimize.minimize_scalar(
                lambda x: -self.llf(np.array([x]), k),
                bounds=(a, b),
                method="bounded",
                options={"xatol": xatol},
            )
            theta = np.array([res.x])
            edge = min(res.x - a, b - res.x) < 1e-4
        else:
            # smooth likelihood: quasi-Newton with a numerical gradient, then Nelder-Mead only
            # if that stopped on a non-finite step
            box = list(zip(lower, upper, strict=True))
            res = optimize.minimize(
                lambda th: -self.llf(th, k), theta0, method="L-BFGS-B", bounds=box
            )
            if not res.success:
                res = optimize.minimize(
                    lambda th: -self.llf(th, k),
                    res.x,
                    method="Nelder-Mead",
                    bounds=box,
                    options={"xatol": 1e-7, "fatol": 1e-9, "maxiter": 4000, "adaptive": True},
                )
            theta = res.x
        return theta, self.llf(theta, k), edge


#: Forward-difference step of the least-squares Jacobian, relative (scipy's "2-point").
_STEP = float(np.sqrt(np.finfo(np.float64).eps))

#: Maximum likelihood on a level with more requests than twice this works on this many bins of
#: equal counts, each at the mean of its times: the log density is smooth on a bin's width, so
#: the estimate moves by a small fraction of its standard error, and the cost no longer grows
#: with the number of rows (a million rows: seconds, not a minute).
_BINS = 2000


#: Variance of the completions a window of c busy near-constant servers counts, per server,
#: beyond the renewal count's (times 1 - cv^4): the window's ends cut each server's cycle at
#: its own phase. Measured on the exact simulation at 120% load (cv 0.05, 30-60 seeds): 0.18
#: at c = 16 behind a cap, 0.31 at c = 64 without one and 0.44 behind one (the window opens
#: at the first refusal, when no server has just finished).
_EDGE = 0.25


def _throughput_se(x: np.ndarray, n: np.ndarray, cv: float, busy: np.ndarray) -> np.ndarray:
    """Return the standard error of an overloaded level's throughput ``x`` (``n`` completions).

    c busy servers complete a renewal process: the count's variance is ``n cv^2`` (Poisson
    only for exponential service). Each server adds its phase at the window's two ends, about
    ``(1 - cv^4) / 4`` (:data:`_EDGE`, measured; 0 for exponential service, whose count is
    Poisson over any window), which for
    near-constant service at c = 64 outweighs the renewal term tenfold; ``busy`` estimates c
    (throughput times the lightest level's mean time), so the error does not move with the
    profiled c; plus one completion at the edge.
    """
    edge = 1.0 + _EDGE * (1.0 - min(cv, 1.0) ** 4) * busy
    return x * np.sqrt(cv**2 / n + edge / n**2)


def _served(lv: pd.DataFrame, cv: float | None, service: float) -> tuple[np.ndarray, np.ndarray]:
    """Overloaded levels' throughput and its standard error, from their per-level rows.

    With a measured service CV (near-constant service), the slope of the completions over
    time (``slope_rps``, :func:`llmlat.stats.completion_slope`) where the data give it: the
    servers stay busy past capacity, so the slope is their rate without the window's edge
    term (:data:`_EDGE`). Its variance is the renewal count's times 1.2, plus what is left
    of the servers' phases, ``(1 - cv^4) c^3 / (5 n^2)`` completions squared (c periodic
    sawtooths of variance 1/12 over n / c cycles; ``busy`` estimates c as in
    :func:`_throughput_se`). On the exact simulation at 120% load (cv 0.05, c 16 and 64, with
    and without a cap; cv 0.3, 0.5; 80 seeds each) the standardised errors have an sd of
    0.89-1.11; the window's error at c = 64 is 3.3 times the slope's (0.73% against 0.22%).
    The slope is taken where its error is the smaller (the window's edge outweighs the 1.2:
    cv 0.05; not cv 0.5 at c = 16), else the window's count (:func:`_throughput_se`), as for
    exponential service (a Poisson count over any window) and per-level tables.
    """
    x = lv["throughput_rps"].to_numpy(dtype=np.float64)
    n = np.fmax(_counted(lv), 1.0)
    se_x = _throughput_se(x, n, 1.0 if cv is None else cv, x * service)
    if cv is None or "slope_rps" not in lv:
        return x, se_x
    slope = lv["slope_rps"].to_numpy(dtype=np.float64)
    m = lv["n_slope"].to_numpy(dtype=np.float64)
    found = np.isfinite(slope) & (m >= 3)
    busy = np.where(found, slope, x) * service
    m = np.where(found, m, 1.0)
    phase = (1.0 - min(cv, 1.0) ** 4) * busy**3 / (5 * m**4)
    se = np.abs(slope) * np.sqrt(1.2 * cv**2 / m + phase)
    use = found & (se / np.where(found, slope, 1.0) < se_x / x)
    return np.where(use, slope, x), np.where(use, se, se_x)


#: A queue past capacity keeps its servers busy when its buffer's diffusion reaches empty
#: from full less than exp(-_FULL) of the time (see :func:`_past_cap`).
_FULL = 7.0


def _past_cap(obs: Observed, fixed: dict) -> np.ndarray:
    """Levels behind a queue cap past capacity whose servers never idle.

    Those served clearly less than offered (the rule of an uncapped level's overload,
    :func:`llmlat._aggregate.served_short`, so it does not depend on c), behind a system of at
    least :data:`llmlat._models._REFUSALS_FROM_K` places (:meth:`_Problem._refusals_count`).
    Their refused share, predicted at the nominal rate, carries the arrivals' Poisson noise:
    at 120% load on 64 near-constant servers a 2% surplus of arrivals moves it as much as one
    server (c exact in 6 of 20 seeds). Their throughput does not: the queue past capacity
    keeps the c servers busy (near-constant service behind 8 places or more hardly ever
    empties it), which complete a renewal process whatever the arrivals did. Such a level
    counts by its throughput, as an overloaded one, instead of its refusals, which hold the
    same served count. With exponential service (no CV measured: 1) the departures are as
    noisy as the arrivals (the refused count's variance is about half each), so the
    throughput adds little (c exact 10 -> 11 of 20 at c = 16); but at c = 64 behind 128
    places the servers never idle, and the fit's advice on c can then ask what the
    throughput's own error needs (:meth:`FitResult._pair_requests`), as an open level's,
    instead of scaling the profile's curvature, which asked for 270,000-480,000 requests a
    level where 190,000-240,000 pin c (following it: c exact 20 of 20 seeds either way).
    There (about 23 by the rule below) c's 95% set still held the truth in 20 of 20 seeds;
    at c = 16 behind 32 places (4-9) it narrowed past the truth in 2 of 20, so exponential
    service counts by its throughput only at twice the near-constant depth.
    """
    lv = obs.levels
    if fixed.get("k_sys", 0) < _REFUSALS_FROM_K or "n_refused" not in lv:
        return np.zeros(len(lv), bool)
    past = served_short(lv) & (lv["n_refused"].to_numpy(dtype=np.float64) > 0)
    # the servers never idle: the queue's diffusion past capacity, drift lambda - x and
    # variance rate lambda + x cv^2, leaves a full buffer of K - c places empty a share about
    # exp(-2 (lambda - x) (K - c) / (lambda + x cv^2)) of the time (c = 4 behind 8 places at
    # 120% load: 7%, and the throughput ran 0.55% short of c mu, as many errors)
    x = lv["throughput_rps"].to_numpy(dtype=np.float64)
    lam = offered_rate(lv)
    busy = x * float(lv.loc[~past, "mean_s"].iloc[0]) if (~past).any() else np.inf
    cv = fixed.get("cv_s")
    spread = lam + x * (1.0 if cv is None else cv) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        depth = 2 * (lam - x) * (fixed["k_sys"] - busy) / spread
    # exponential service: only where the buffer is far deeper (see above)
    return past & (depth > (_FULL if cv is not None else 2 * _FULL))


def _information(obs: Observed) -> np.ndarray:
    """Per level: the information of one request relative to an independent draw, 1 / vif.

    Consecutive requests share queue states, so n correlated requests carry the information
    of about n / vif independent ones (vif from batch means, :mod:`llmlat.stats`); weighting
    each request's log-likelihood by 1 / vif makes the curvature, the profile over the integer
    and every interval honest about it (a quasi-likelihood).
    """
    vif = obs.levels["vif"].to_numpy(dtype=np.float64) if "vif" in obs.levels else None
    if vif is None:
        return np.ones(len(obs.levels))
    return 1.0 / np.where(np.isfinite(vif), np.clip(vif, 1.0, None), 1.0)


def _bin_times(obs: Observed) -> tuple[Observed, np.ndarray]:
    times, weights = [], []
    for t, info in zip(obs.request_times, _information(obs), strict=True):
        if len(t) <= 2 * _BINS:
            times.append(t)
            weights.append(np.full(len(t), info))
            continue
        s = np.sort(t)
        edges = np.linspace(0, len(s), _BINS + 1).astype(np.int64)[:-1]
        counts = np.diff(np.append(edges, len(s)))
        times.append(np.add.reduceat(s, edges) / counts)
        weights.append(info * counts.astype(np.float64))
    return replace(obs, times=times), np.concatenate(weights)


def _profile(
    problem: _Problem,
    lo: int,
    hi: int,
    candidates=None,
    starts: dict | None = None,
    first: int | None = None,
) -> dict[int, tuple]:
    """Maximise over the continuous parameters at each integer; coarse-to-fine search.

    Integers that cannot reach the cut nor the plausible set are left out (:func:`_far`): found
    from the top of the grid down (:func:`_descend`), and behind a queue cap in the refining
    steps outward from the best too, each side up to a point under the one inside it and under
    :func:`_far`'s level. The fewest servers or slots are the dearest: behind a cap a
    near-constant service's dense M/D/c/K solves (2-3 s a fit at c = 64 over all of them);
    on an open sweep past their capacity the optimiser crawls along the stability edge (30
    evaluations each, most of an uncapped fit; a batching fit's slots 2,000 steps, most of
    ``model="auto"`` on 16 near-constant servers). With step times each fit starts from the
    last one's block weights: the grid is taken bottom up. The
    profile rises to its best and falls after it (the bisection for its edges takes it so too),
    so none past such a point could be in either set, nor the best or its neighbour: the same
    best, set and plausible integers as from every point. Away from a cap the refining points
    of one step are 3 or more apart (none another's start); behind one the last steps'
    neighbouring integers go outward from the best too, each started from the one inside it
    (all of them took 14 of 34 optimisations at c = 64). The cache's order, which decides
    ties between two neighbours, is kept as a bottom-up search leaves it. ``starts``:
    integer -> a start known to lie near its optimum (a refit's last optimum there), taken
    before any neighbour's. ``first``: an integer taken before the grid (a refit's last best):
    its level sets :func:`_far`'s from the outset, so the descent stops at the first integer
    under it (a refit at c = 64 took 17 integers, now 9).
    """
    cache: dict[int, tuple] = {}
    ev = _warm(problem, cache, starts or {})
    if candidates is not None:
        for k in candidates:
            ev(int(k))
        return cache
    grid = np.unique(np.round(np.geomspace(lo, hi, 24)).astype(int)) if hi > lo else np.array([lo])
    capped = "k_sys" in problem.fixed
    batch = problem.model.family == "batch"
    if first is not None:
        ev(first)
    # integers up to ``below`` and from ``beyond`` on lie under _far's level: left out
    # with step times each fit starts from the last one's block weights: kept bottom up
    below = _descend(problem, ev, cache, grid) if not problem.n_itl else lo - 1
    beyond = hi + 1
    for k in grid:
        if k > below:
            ev(int(k))
    _reorder(cache, sorted(cache))
    if batch and _unimodal([cache[int(k)][1] for k in grid if k > below]):
        _golden(ev, cache)
    while True:
        keys = sorted(cache)
        best = max(keys, key=lambda k: cache[k][1])
        i = keys.index(best)
        a = keys[i - 1] if i > 0 else best
        b = keys[i + 1] if i + 1 < len(keys) else best
        todo = [k for k in range(a, b + 1) if k not in cache]
        if not todo:
            break
        step = max(1, len(todo) // 8)
        points = todo[::step]
        if not capped:
            for k in points:
                ev(k)
            continue
        # nearest first, the two sides in turn: the best rises soonest, and _far with it
        last: dict[int, float | None] = {-1: cache[best][1], 1: cache[best][1]}
        for k in sorted(points, key=lambda j: (abs(j - best), j)):
            side = 1 if k > best else -1
            inner = last[side]
            if inner is None:
                continue  # past where this side stopped
            if ev(k) < min(inner, _far(problem, cache)):
                last[side] = None
                below, beyond = (
                    (below, min(beyond, k + 1)) if side > 0 else (max(below, k - 1), beyond)
                )
            else:
                last[side] = cache[k][1]
        _reorder(cache, [k for k in points if k in cache])  # as evaluated bottom up
    # the edges of {k: llf(k) >= best - 3}, by bisection (the profile is unimodal), for the
    # interval on the integer
    best = max(cache, key=lambda k: cache[k][1])
    cut = cache[best][1] - problem.profile_drop(cache[best][1])

    def kept(k: int) -> bool:
        return (k in cache or below < k < beyond) and ev(k) >= cut

    for edge in (lo, hi):
        inside, outside = best, edge
        if kept(edge):
            continue
        while abs(outside - inside) > 1:
            mid = (inside + outside) // 2
            inside, outside = (mid, outside) if kept(mid) else (inside, mid)
        ev(inside + (1 if edge > best else -1))
    return cache


def _warm(problem: _Problem, cache: dict, starts: dict) -> Callable[[int], float]:
    """Return ``ev(k)``, the profile log-likelihood at integer ``k``, optimised once.

    Into ``cache``, from ``starts[k]``, else from the nearest evaluated integer's optimum
    within 2, else from the default start.
    """

    def ev(k: int) -> float:
        if k not in cache:
            near = min(cache, key=lambda j: abs(j - k)) if cache else None
            start = cache[near][0] if near is not None and abs(near - k) <= 2 else None
            cache[k] = problem.optimise(k, starts.get(k, start))
        return cache[k][1]

    return ev


def _reorder(cache: dict, keys: list[int]) -> None:
    """Move ``keys`` of ``cache`` to its end, in that order."""
    for k in keys:
        cache[k] = cache.pop(k)


#: Integers whose profile log-likelihood is within this of the best are plausible enough to
#: set a correlation floor (the bootstrap's set, :meth:`FitResult.conf_int`).
_PLAUSIBLE = 10.0

#: :func:`_far`'s margin past the cut and the plausible set, for the local optima seen far
#: from the best (0.2-1 apart in log-likelihood by where the search starts).
_FAR_BELOW = 5.0


def _far(problem: _Problem, cache: dict) -> float:
    """Return a profile log-likelihood under the cut and the plausible set of ``cache``'s best.

    The plausible set reaches :data:`_PLAUSIBLE` under the best; :data:`_FAR_BELOW` to
    spare. Both only rise with the best (:meth:`_Problem.profile_drop`), so what lies
    under this level now stays under them.
    """
    top = max(v[1] for v in cache.values())
    return top - max(problem.profile_drop(top), _PLAUSIBLE) - _FAR_BELOW


def _descend(problem: _Problem, ev, cache: dict, grid: np.ndarray) -> int:
    """Evaluate ``grid`` from the top down while the profile can reach :func:`_far`'s level.

    Returns the largest integer left under it (``grid[0] - 1``: none).

    The profile's dearest integers are the fewest: behind a cap, a sweep's levels all
    overloaded, each a chain of K + c states; on an open sweep, the stability edge; a batching
    fit's few slots past capacity. The grid's points more than 2 apart have no warm start
    either way; the close ones below them are descended too, each from the one above it
    (behind a cap at c = 16, integers 1-12 taken bottom up were half a fit's evaluations, all
    far under the cut). A short range, all of it close, is taken bottom up.
    """
    close = np.flatnonzero(np.diff(grid) <= 2)
    sparse = min(int(close[-1]) + 2, len(grid)) if len(close) else 0  # first of the sparse
    for k in grid[sparse:][::-1]:
        ev(int(k))
        best = max(cache, key=lambda j: cache[j][1])
        if k < best and cache[k][1] < _far(problem, cache):
            return int(k) - 1
    if sparse < len(grid):
        # the profile still rising at the last sparse point: the integers between it and the
        # close ones first, from the top (where the best often lies, which sets _far's level:
        # an open sweep's c = 16 lies between 14 and 17, and without it c = 3-12 were fitted)
        if sparse > 0 and max(cache, key=lambda j: cache[j][1]) == grid[sparse]:
            for k in range(int(grid[sparse]) - 1, int(grid[sparse - 1]), -1):
                ev(k)
        for k in grid[:sparse][::-1]:
            if ev(int(k)) < _far(problem, cache):
                return int(k) - 1
    for k in grid[:sparse]:
        ev(int(k))
    return int(grid[0]) - 1


def _unimodal(values: list[float]) -> bool:
    """Whether a sequence rises (or stays) to its largest value and falls (or stays) after it."""
    d = np.diff(values)
    top = int(np.argmax(values))
    return bool(np.all(d[:top] >= 0) and np.all(d[top:] <= 0))


#: The golden section's share of a bracket.
_GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0


def _golden(ev, cache: dict) -> None:
    """Narrow the best integer's bracket in ``cache`` by golden-section search.

    On a unimodal profile between the best point's neighbours it ends where the coarse-to-fine
    steps of :func:`_profile` end (the best integer with both neighbours evaluated) in about
    half the evaluations: a batch profile over hundreds of slots took some 20 of them per
    bracket, each a least-squares fit.
    """
    keys = sorted(cache)
    x = max(keys, key=lambda k: cache[k][1])
    i = keys.index(x)
    a, b = keys[max(i - 1, 0)], keys[min(i + 1, len(keys) - 1)]
    while b - a > 2:
        # probe the larger side at the golden share from x
        y = (
            x + max(1, round((b - x) * (1 - _GOLDEN)))
            if b - x >= x - a
            else x - max(1, round((x - a) * (1 - _GOLDEN)))
        )
        if ev(y) > ev(x):
            a, b = (x, b) if y > x else (a, x)
            x = y
        else:
            a, b = (a, y) if y > x else (y, b)


def _walk(problem: _Problem, k0: int, lo: int, hi: int, starts: dict) -> dict[int, tuple]:
    """Hill-climb the integer from ``k0`` (used for maximum likelihood, where a fit is dear).

    Each integer's rough optimum starts from ``starts`` (integer -> a start near it), else
    from a neighbour's optimum (a step in the integer moves it little: 9 evaluations where
    the default start took 15); those that could decide the interval on the integer are
    polished (:func:`_polished`).
    """
    cache: dict[int, tuple] = {}

    def ev(k: int) -> float:
        if k not in cache:  # a rough optimum first: enough to rank the integers
            start = starts.get(k, next((cache[j][0] for j in (k - 1, k + 1) if j in cache), None))
            cache[k] = problem.optimise(
                k, start, width=0.3 if start is not None else 4.0, xatol=1e-3
            )
        return cache[k][1]

    best = _climb(ev, cache, k0, lo, hi)
    cut = cache[best][1] - 3.0
    for direction in (-1, 1):
        k = best
        while lo <= k + direction <= hi and cache[k][1] >= cut:
            k += direction
            ev(k)
    edge = cache[best][1] - stats.chi2.ppf(0.95, 1) / 2
    for k, (theta, llf) in list(cache.items()):
        # polish where the rough value could change the interval on the integer; the best
        # one is polished by statsmodels
        if k != best and abs(llf - edge) < 5:
            cache[k] = _polished(problem, k, theta, llf)
    return cache


#: :func:`_polished`'s steps: the rough optimum's tolerance (:func:`_walk`'s ``xatol``), then
#: a tenth of it around the first vertex
_POLISH_STEPS = (1e-3, 1e-4)


def _polished(problem: _Problem, k: int, theta: np.ndarray, llf: float) -> tuple:
    """Return the optimum at ``k`` near the rough one ``(theta, llf)`` of one parameter.

    The vertex of the parabola through the point and one step either side, twice (steps of
    1e-3, the rough tolerance, then 1e-4): the log-likelihood is smooth, so the second
    vertex is within ~1e-7 of the optimum (the bounded search to 1e-6 it replaces took 13-15
    evaluations, this 6). Where three points do not bracket a maximum, or the stability
    edge is within a step: that search.
    """
    if len(theta) == 1:
        best = (theta, llf)
        for h in _POLISH_STEPS:
            x, f0 = float(best[0][0]), best[1]
            if x - h <= problem.lower_bound(k):
                break
            down, up = (problem.llf(np.array([x + d]), k) for d in (-h, h))
            bend = down + up - 2.0 * f0
            if not (bend < 0.0 and max(down, up) <= f0):
                break
            v = np.array([x + h * (down - up) / (2.0 * bend)])
            best = max([(v, problem.llf(v, k)), best], key=lambda t: t[1])
        else:
            return best
    return problem.optimise(k, theta, width=0.01)


def _climb(ev, cache: dict, k0: int, lo: int, hi: int, reach: int | None = None) -> int:
    """Climb the profile from ``k0`` to a local maximum; return its integer.

    ``k0`` and its neighbours first (``k0`` first: started from its optimum, they reach
    their own where a default start can stall below it), then the better neighbour's until
    neither is better. ``reach``: stop once the best lies further than that from ``k0``
    (and return it).
    """
    for k in (k0, k0 - 1, k0 + 1):
        if lo <= k <= hi:
            ev(k)
    while True:
        best = max(cache, key=lambda k: cache[k][1])
        if reach is not None and abs(best - k0) > reach:
            return best
        nxt = [k for k in (best - 1, best + 1) if lo <= k <= hi and k not in cache]
        if not nxt:
            return best
        for k in nxt:
            ev(k)


#: How far :func:`climbed_aic` climbs from the simpler form's integer before it gives up
_CLIMB_REACH = 3


def climbed_aic(problem: _Problem, k0: int) -> float | None:
    """Return the AIC of ``problem`` at the best integer a hill climb from ``k0`` reaches.

    :func:`_estimate`'s AIC where the climb reaches the profile's best, for a fraction of its
    evaluations: whether a richer form could earn its parameter is asked of this before it is
    fitted whole (a streamed batching sweep's free step-time exponent, from the linear form's
    slot cap: 7-10 integers of 30). A climb that stalls at a lower local maximum tells
    against the richer form: its objective there is below the best's. None where the best
    lies more than :data:`_CLIMB_REACH` from ``k0``: the two forms disagree on the integer,
    and a climb one integer at a time is the dearer way to the answer (the InferenceX
    minimax table's exponent moves its slot cap from 481 to 407: 77 integers).
    """
    lo, hi = problem.model.int_range(problem.obs)
    cache: dict[int, tuple] = {}
    k0 = min(max(k0, lo), hi)
    k = _climb(_warm(problem, cache, {}), cache, k0, lo, hi, _CLIMB_REACH)
    if abs(k - k0) > _CLIMB_REACH:
        return None
    theta, llf = _settled(problem, k, *cache[k])
    theta_full = _statsmodels_fit(problem, theta, k, llf)[0]
    return -2.0 * problem.llf_reported(theta_full, k) + 2.0 * problem.df_model(theta_full)


def _settled(problem: _Problem, k, theta: np.ndarray, llf: float) -> tuple[np.ndarray, float]:
    """Return the answer's optimum at integer ``k`` from its profile optimum ``(theta, llf)``.

    The profile's least squares are rough (:meth:`_Problem.optimise`): the answer's are
    polished from there. With step times the search settles the block weights to 5%, so its
    optimum depends on where it came from (t1 0.3% apart on the InferenceX table): the
    answer settles them fully.
    """
    if problem.method != "wls":
        return theta, llf
    theta, llf = problem._optimise_from(k, theta, 4.0, 1e-6, settle=1e-6)[:2]
    return theta, llf


#: The last estimates and profiles, by everything their problem holds: ``fit``, ``compare``
#: and ``model="auto"`` on one data set each estimate the same models (a batch fit takes
#: seconds), and a notebook or a report asks all three; a maximum-likelihood fit starts from
#: the least-squares profile that ``auto`` ranked the models by. An estimate is a function of
#: its problem (the optimiser takes the same path each time), so one made before is the answer.
_MEMO: OrderedDict[bytes, tuple[Any, np.ndarray]] = OrderedDict()
_MEMO_SIZE = 32
_MEMO_LOCK = threading.Lock()
#: what an estimate changes on its problem: the block weights its optimum settled
_MUTABLE = ("_weight", "_held")


def _problem_key(problem: _Problem) -> bytes | None:
    """Digest of the problem's inputs and derived state (None: not hashable, no memo)."""
    state = {k: v for k, v in vars(problem).items() if k not in _MUTABLE}
    try:
        blob = pickle.dumps(sorted(state.items()), protocol=5)
    except (pickle.PicklingError, TypeError, AttributeError):  # costs the memo only
        return None
    return hashlib.blake2b(blob, digest_size=20).digest()


def _remembered(problem: _Problem, what: bytes, compute: Callable[[], Any]) -> Any:
    """Return ``compute()``, the ``what`` of ``problem``, or a copy of an equal problem's.

    Recalled from :data:`_MEMO`, with the block weights it left set again.
    """
    key = _problem_key(problem)
    hit = None
    if key is not None:
        key = what + key
        with _MEMO_LOCK:
            hit = _MEMO.get(key)
            if hit is not None:
                _MEMO.move_to_end(key)
    if hit is not None:
        value, weight = hit
        problem._weight = weight.copy()
        return copy.deepcopy(value)
    value = compute()
    if key is not None:
        with _MEMO_LOCK:
            _MEMO[key] = (copy.deepcopy(value), np.array(problem._weight, copy=True))
            while len(_MEMO) > _MEMO_SIZE:
                _MEMO.popitem(last=False)
    return value


def _recalled(problem: _Problem, near: _Estimate | None = None) -> _Estimate:
    """:func:`_estimate` of ``problem``, recalled when an equal problem was estimated lately.

    For the fits a user asks for; a bootstrap's resampled problems come once each and would
    only push those out. ``near``: as :func:`_estimate`'s.
    """
    return _remembered(problem, b"estimate", lambda: _estimate(problem, near=near, remember=True))


def _estimate(
    problem: _Problem,
    candidates=None,
    near: _Estimate | None = None,
    remember: bool = False,
) -> _Estimate:
    """Best integer and continuous parameters of ``problem``, its profile and covariance.

    ``candidates``: the integers to profile (all worth it if None). ``near``: an estimate of
    the same data with other weights (a refit with a floor on the variance inflation): the
    search starts at each integer from its optimum there, and maximum likelihood walks from
    its best integer (a third of the evaluations). ``remember``: keep a whole profile for
    an equal problem's next estimate (:data:`_MEMO`; a user's fits, not a bootstrap's).
    """

    def profiled(prob: _Problem) -> dict[int, tuple]:
        if not remember:
            return _profile(prob, lo, hi)
        return _remembered(prob, b"profile", lambda: _profile(prob, lo, hi))

    model = problem.model
    if model.integer is None:
        theta, llf = problem.optimise(None)
        prof: dict[int, float] = {}
        k = None
    else:
        lo, hi = model.int_range(problem.obs)
        if problem.method == "ml" and candidates is None:
            if near is None or near.k is None:
                # cheap per-level profile first, then a short walk on the full likelihood
                coarse_prob = _Problem(model, problem.all, "wls", "mean", problem.fixed)
                coarse = profiled(coarse_prob)
                k0 = max(coarse, key=lambda j: coarse[j][1])
                starts = {j: v[0] for j, v in coarse.items()}
            else:
                k0, starts = near.k, near.thetas
            # saturation is judged on the full likelihood (the walk reaches hi when it must)
            cache = _walk(problem, k0, lo, hi, starts)
        else:
            cache = (
                profiled(problem)
                if candidates is None and near is None
                else _profile(problem, lo, hi, candidates, *((near.thetas, near.k) if near else ()))
            )
        k = max(cache, key=lambda j: cache[j][1])
        if candidates is None:
            _check_saturation(model, problem.all, cache, hi)
        theta, llf = cache[k] = _settled(problem, k, *cache[k])
        prof = {j: v[1] for j, v in sorted(cache.items())}
    theta_full, cov, llf = _statsmodels_fit(problem, theta, k, llf)
    if k is not None:
        prof[k] = max(prof[k], llf)
    thetas = {j: v[0] for j, v in cache.items()} if k is not None else {}
    llf = problem.llf_reported(theta_full, k)  # AIC compares models on the latency alone
    est = _Estimate(theta_full, k, llf, prof, problem.params(theta_full, k), cov, thetas)
    # the batch family with step times has its own error model (issue 10d), a scale per block
    quasi = problem.method == "wls" and not problem.n_itl
    return _lack_of_fit(problem, est) if quasi else est


def _pearson(problem: _Problem, est: _Estimate) -> tuple[float, int]:
    """Least squares: the sum of squared standardised residuals and its degrees of freedom.

    Residuals in units of their own errors (every block, whatever its fitted scale); p counts
    the integer too.
    """
    m = problem.model
    r = problem._resid(est.theta[: len(m.free)], est.k)
    return float(r @ r), len(r) - len(m.free) - (m.integer is not None)


def _lack_of_fit_p(problem: _Problem, est: _Estimate) -> float:
    """Least squares: the chi-square p-value of the residuals against the means' own errors.

    Small: the model misses the level means by more than their sampling errors. NaN when no
    degree of freedom is left to test it.
    """
    rss, dof = _pearson(problem, est)
    return float(stats.chi2.sf(rss, dof)) if dof >= 1 else np.nan


def _lack_of_fit(problem: _Problem, est: _Estimate) -> _Estimate:
    """Least squares: carry the model's own error in the covariance (a quasi-likelihood).

    The level means have tiny sampling errors where service is near-constant, and the
    approximate station (closed M/G/c, Allen-Cunneen) misses them by more than that; the
    Gaussian likelihood's scale, ``RSS / n``, would still read as if the model were exact
    with n - p of its n residuals free. The Pearson scale ``phi = RSS / (n - p)`` (p counts the
    integer too), never below 1 (the means' own errors stay), scales the covariance, and the
    intervals take t quantiles on n - p degrees of freedom (McCullagh & Nelder, 1989, 9.2).

    A closed batching sweep's level means are compared at the run's mean output length, which
    their errors do not know (:attr:`_Problem.phi_floor`): there phi is the residuals' alone,
    and the slot cap's set takes at least :attr:`_Problem.phi_integer` (the law's own error).
    A few levels and four parameters leave 2 or 3 degrees of freedom, so the scale the
    Gaussian likelihood carries (``RSS / n``, with the normal quantile) made the latency-only
    intervals about 2.5 times too narrow (t0, t1 covered 28 of 40 on 20 simulated sweeps).
    """
    rss, dof = _pearson(problem, est)
    if dof < 1:
        return est
    s2 = float(np.exp(2 * est.theta[-1]))  # the Gaussian scale the covariance carries
    phi = max(problem.phi_floor, rss / dof)
    cov = est.cov.copy()
    cov[:-1, :-1] *= phi / s2
    return replace(est, cov=cov, dof=dof, phi=phi)


#: the columns of what to measure next (:meth:`FitResult.next_levels`) and their types
ADVICE_COLUMNS = {
    "param": "string",
    "level": "float64",
    "requests": "float64",
    "measured": "float64",
    "why": "string",
}


def advice_table(rows: list[dict]) -> pd.DataFrame:
    """Return rows of advice (dicts with :data:`ADVICE_COLUMNS`) as a typed table."""
    return pd.DataFrame(rows, columns=list(ADVICE_COLUMNS)).astype(ADVICE_COLUMNS)


def round_up(n: float) -> float:
    """Round a count of requests up to two significant digits (advice, not a measurement)."""
    if not n > 0 or not np.isfinite(n):
        return float(n)
    step = 10.0 ** max(0, int(np.floor(np.log10(n))) - 1)
    return float(np.ceil(n / step) * step)


class NeedsData(ValueError):
    """A fit refused for want of data; ``next_levels()`` tabulates what to measure, as a fit's.

    Raised by :func:`llmlat.fit` when no capacity was measured, no saturation was reached or
    every level is overloaded. It is a :class:`ValueError`, so ``except ValueError`` still
    catches it; the message says the same as the table in words, with the request counts.

    Parameters
    ----------
    message : str
        Why the fit was refused and what to measure.
    advice : list of dict
        The rows of :meth:`next_levels` (``param``, ``level``, ``requests``, ``measured``,
        ``why``).

    Examples
    --------
    >>> try:
    ...     fit = llmlat.fit(res)
    ... except llmlat.NeedsData as exc:
    ...     print(exc.next_levels())  # levels to add, and how many requests each
    """

    def __init__(self, message: str, advice: list[dict]) -> None:
        super().__init__(message)
        self.advice = advice

    def next_levels(self) -> pd.DataFrame:
        """Return what to measure next, as :meth:`FitResult.next_levels` does."""
        return advice_table(self.advice)


def _check_saturation(model: Model, obs: Observed, cache: dict, hi: int) -> None:
    if model.family != "mmc" or hi not in cache:
        return
    best = max(cache, key=lambda j: cache[j][1])
    if cache[hi][1] >= cache[best][1] - 1.92:
        lv = obs.levels
        top, sent = float(lv["level"].max()), sent_requests(lv, obs.kind)
        what = "concurrency" if obs.kind == "concurrency" else "request rate"
        cut = _cut_short(obs)
        if cut:
            row = lv[_short(lv)].iloc[-1]
            # its start-up lasts as long whatever the length: twice its sends hold a steady
            # part about as long as the start-up
            n = round_up(2 * float(row["n_sent"]))
            level = float(row["level"])
            why = "a steady part at least as long as its start-up"
            advice = [advice_row("c", level, n, float(row["n_sent"]), why)]
            raise NeedsData(
                f"level: no capacity measured: {cut}; the other levels do not bound the "
                f"number of servers c. Measure that level longer, about {n:,.0f} requests, "
                f"so that it holds {why}",
                advice,
            )
        # as the fit's advice when c is not identified (no saturation): the top level's
        # length (a closed level's per client)
        n_top = float(sent[np.isclose(lv["level"], top)].iloc[0])
        why = "until throughput stops growing"
        closed = obs.kind == "concurrency"
        advice = [
            advice_row("c", v, round_up(n_top * v / top if closed else n_top), 0.0, why)
            for v in (2 * top, 4 * top)
        ]
        raise NeedsData(
            f"level: no saturation reached between {lv['level'].min():g} and {top:g} "
            f"({obs.kind}); the number of servers c is not bounded by the data. Measure at a "
            f"higher {what} (e.g. {2 * top:g} and {4 * top:g}, about "
            f"{advice[0]['requests']:,.0f} and {advice[1]['requests']:,.0f} requests) until "
            "throughput stops growing",
            advice,
        )


def advice_row(param: str, level: float, requests: float, measured: float, why: str) -> dict:
    """One row of advice (:data:`ADVICE_COLUMNS`)."""
    return {"param": param, "level": level, "requests": requests, "measured": measured, "why": why}


def sent_requests(lv: pd.DataFrame, kind: str) -> pd.Series:
    """Return the requests sent at each level of a per-level table.

    ``n_sent`` where recorded (every one, the start-up's too), else the steady ones (``n``)
    and a closed level's first round of N.
    """
    if "n_sent" in lv:
        return lv["n_sent"]
    return lv["n"] + lv["level"] if kind == "concurrency" else lv["n"]


def _counted(lv: pd.DataFrame) -> np.ndarray:
    """Return the completions each level's throughput rests on.

    Its steady window's (``n_slope``, :func:`llmlat.stats.completion_slope`), else its
    steady rows (``n``).
    """
    return finite_or(lv, "n_slope", lv["n"].to_numpy(dtype=np.float64))


def _short(lv: pd.DataFrame) -> np.ndarray:
    """Return the overloaded levels whose window counts too few of their requests.

    Fewer than :data:`MIN_WINDOW_SHARE` of them.
    """
    if "overloaded" not in lv or "n_sent" not in lv:
        return np.zeros(len(lv), bool)
    return lv["overloaded"].to_numpy(bool) & (
        _counted(lv) < MIN_WINDOW_SHARE * lv["n_sent"].to_numpy(dtype=np.float64)
    )


def _statsmodels_fit(problem: _Problem, theta: np.ndarray, k, llf: float):
    """Polish a likelihood fit with statsmodels; the covariance from the Hessian."""
    names = [f"log_{n}" for n in problem.model.free]
    start = theta
    nobs = problem.nobs
    if problem.method == "wls":
        scales = 0.5 * np.log(problem.block_scales(problem._resid(theta, k)))
        start = np.append(theta, scales)
        names += ["log_scale", "log_scale_itl"][: len(scales)]
        nobs += problem.n_itl
    if problem.method == "ml":
        nobs = len(problem.weights) + len(problem.x_over) + problem.blocked * len(problem.loads)
    mod = _Likelihood(problem.llobs_full(k), nobs, names)
    n = len(problem.model.free)
    lower, upper = problem._bounds(k, n)
    # least squares: the optimum with its concentrated scales is the likelihood's (a
    # quasi-Newton polish from there took a quarter of a capped fit and moved nothing); with
    # step times the block scales are held where :meth:`_Problem.block_scales` puts them
    # (never below 1)
    free = np.arange(len(start)) < (n if problem.n_itl else len(start))
    if problem.method == "wls":
        full, cov = start, _inverse_curvature(mod, start, free)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = mod.fit(start_params=start, method="bfgs", maxiter=100, disp=0)
            try:
                cov = np.asarray(res.cov_params()) if np.isfinite(res.llf) else None
            except ValueError:  # singular Hessian: a parameter the data do not pin down
                cov = None
        full = np.asarray(res.params)
        # the polish is unconstrained: a step out of the box (e.g. an open queue's mu past its
        # stability edge, or a think time past its range) is refused, and the curvature at the
        # bounded optimum taken instead
        outside = np.any((full[:n] < lower - 1e-9) | (full[:n] > upper + 1e-9))
        if not np.isfinite(res.llf) or res.llf < llf - 1e-6 or outside:
            full, cov = start, _inverse_curvature(mod, start)
    at_bound = np.r_[
        (full[:n] - lower < 1e-6) | (upper - full[:n] < 1e-6), np.zeros(len(full) - n, bool)
    ]
    if (cov is None or not np.all(np.isfinite(np.diag(cov))[free])) and at_bound.any():
        # a parameter on its bound (e.g. join_steps at one whole step) has no curvature
        # there: the others' covariance is taken with it held
        cov = _inverse_curvature(mod, full, free & ~at_bound)
    if cov is None or not np.all(np.isfinite(np.diag(cov))[free & ~at_bound]):
        cov = np.full((len(full), len(full)), np.nan)
    return full, cov, problem.llf_exact(full, k)


def _inverse_curvature(
    mod: _Likelihood, theta: np.ndarray, keep: np.ndarray | None = None
) -> np.ndarray | None:
    """Covariance from the numerical Hessian at ``theta``, or None when it is not definite.

    With ``keep``, only those parameters (the others held fixed; their rows are NaN).
    """
    keep = np.ones(len(theta), bool) if keep is None else keep
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            sub = np.linalg.inv(-np.asarray(mod.hessian(theta))[np.ix_(keep, keep)])
        except np.linalg.LinAlgError:
            return None
    if not np.all(np.diag(sub) > 0):
        return None
    cov = np.full((len(theta), len(theta)), np.nan)
    cov[np.ix_(keep, keep)] = sub
    return cov


def _cut_short(obs: Observed) -> str:
    """Describe an overloaded level whose start-up transient left (almost) no steady part.

    Its throughput is then taken over its whole span, fill and drain included, with the
    weight of its few steady requests: past capacity, yet no bound on it (a queue of 128
    places filling at 120% load on 64 servers: 1 steady request of 1,523). '' if none.
    """
    lv = obs.levels
    short = _short(lv)
    if not short.any():
        return ""
    row = lv[short].iloc[-1]
    return (
        f"level {row['level']:g} was past capacity (served {row['throughput_rps']:.3g} of "
        f"{offered_rate(lv[short])[-1]:.3g} req/s offered), but only "
        f"{_counted(lv[short])[-1]:.0f} of its {row['n_sent']:,.0f} requests completed in a "
        "steady window after its start-up (its queue was still filling), too few for its "
        "throughput to bound the capacity"
    )
