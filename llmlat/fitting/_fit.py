"""``fit`` and ``compare``: pick model and method, check the levels, estimate, build results."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd

from llmlat import stats as _stats
from llmlat._aggregate import Observed, is_level_table, latency_levels, observe
from llmlat._models import MODELS, Model
from llmlat.fitting._estimate import (
    _PLAUSIBLE,
    _lack_of_fit_p,
    _overhead,
    _Problem,
    _recalled,
    climbed_aic,
)
from llmlat.fitting._results import FitResult

#: Default of ``max_refused``: levels with a larger share of 429s or retries are not fitted.
MAX_REFUSED = 0.05

_MODEL_NAMES = ("mm1", "mmc", "mgc", "closed", "batch")


def _fixed(model: Model, obs: Observed, think_s, tokens, gamma, cv_s) -> tuple[dict, list[str]]:
    notes = []
    z = think_s if think_s is not None else obs.think_s
    if obs.kind == "concurrency" and not np.isfinite(z):
        z = 0.0
        notes.append("think time unknown: assumed 0 s (pass think_s=...)")
    elif (
        obs.kind == "concurrency"
        and think_s is None
        and z < 0.01 * float(np.nanmin(obs.levels["mean_s"]))
    ):
        z = 0.0  # a client's bookkeeping between requests is not think time
    fixed: dict = {"think_s": float(z) if obs.kind == "concurrency" else 0.0}
    if obs.kind == "concurrency" and think_s is None:
        # each level with the client time measured at that level (a client that falls behind
        # at high concurrency keeps fewer requests in flight than N)
        per = obs.levels["think_s"].to_numpy(dtype=np.float64)
        small = per < 0.01 * obs.levels["mean_s"].to_numpy(dtype=np.float64)
        per = np.where(np.isfinite(per), np.where(small, 0.0, per), fixed["think_s"])
        if np.any(per > 0):
            fixed["level_think_s"] = per
    if "think_s" in model.free:
        fixed["think_s_start"] = fixed.pop("think_s")
        fixed.pop("level_think_s", None)
    if model.family == "batch":
        tok = tokens if tokens is not None else obs.tokens
        if not np.isfinite(tok):
            tok = 1.0
            notes.append("output tokens per request unknown: t0_s, t1_s are per-request times")
        fixed["tokens"] = float(tok)
        fixed["tokens_q"] = obs.tokens_q
        if obs.kind == "rate" and np.isfinite(obs.tokens_cv):  # the wait for a slot
            fixed["tokens_cv"] = obs.tokens_cv
        if obs.kind == "concurrency":
            fixed["in_step"], loose = _in_step(obs)
            if np.any(loose > 0):
                fixed["phases_loose"] = loose
            if fixed["in_step"] >= 0.5:
                notes.append(
                    f"output lengths equal ({obs.tokens_same:.0%} of request pairs) and the "
                    "clients started at once: a closed level's clients decode in step, each "
                    "request in the whole batch"
                )
        if not obs.tokens_q:
            notes.append("output-length spread unknown: quantiles assume equal lengths")
        if "gamma" not in model.free:
            fixed["gamma"] = 1.0 if gamma is None else float(gamma)
        if _streamed(obs):  # start from the step times
            lv = latency_levels(obs).levels
            cols = ("level", "itl_s", "se_itl_s")
            fixed["itl_levels"] = tuple(lv[c].to_numpy(dtype=np.float64) for c in cols)
            overhead = _overhead(obs) if obs.metric == "latency" else np.nan
            if np.isfinite(overhead):
                fixed["overhead_s"] = overhead
    if model.family == "mmc" and obs.system_k is not None:
        fixed["k_sys"] = obs.system_k
    if model.family == "mmc":
        given = cv_s is not None
        if not given:
            cv_s, n_cv = _light_cv(obs)
            if not np.isfinite(cv_s) and model.name == "mgc":
                raise ValueError("cv_s: the data has no spread at the lightest level; pass cv_s")
        if np.isfinite(cv_s) and (model.name == "mgc" or given or _not_exponential(cv_s, n_cv)):
            fixed["cv_s"] = float(cv_s)
            if not given:  # measured: the plan takes its uncertainty (FitResult._pessimistic)
                fixed["cv_s_n"] = float(n_cv)
                notes.append(
                    f"service-time CV {cv_s:.3g} taken from the lightest level (requests sent "
                    "into an idle server where there are enough); quantiles "
                    "use that service law (M/G/c), not the exponential one"
                )
        thinks = fixed.get("think_s", 0.0) > 0 or "level_think_s" in fixed
        if "cv_s" in fixed and thinks:
            fixed["think_cv"], note = _think_cv(obs)
            notes.append(note)
    return fixed, notes


def _in_step(obs: Observed) -> tuple[float, np.ndarray]:
    """Return the share of clients decoding in step, and each level's share in loose phases.

    The first is the share of the other clients a closed batching request decodes in step
    with; the second, per level, the share whose phases no law describes.

    Where a closed level's N clients first sent at once (``together``; unknown without
    client ids, e.g. a per-level table: taken as at once), two of them stay in step (they
    end at the same step, so each is away only while the other is: never missing from the
    other's batch) while each of their requests has had the other's length: after k
    requests each, with probability q^k, q the share of request pairs of equal length
    (``tokens_same``). Fixed lengths (q = 1) keep the whole level in step; spread ones (q ~
    0) leave the clients in independent phases. Averaged over a level's n / N requests per
    client, then over the levels by their requests and the N - 1 others each request meets.

    Started spread (the sweep engine's ``Sweeper._stagger``), clients of equal lengths keep
    the phases their start gave them, as long: neither in step nor independent (they cluster
    part way, as the steps lengthen while the batch fills), so the batch a request sees lies
    off both laws (by up to 6% of it at 128 clients). That share of each level (q's, as
    above) is returned per level for the step times' error (``_Problem._phase_error``).
    """
    q = obs.tokens_same
    lv = obs.levels
    n = lv["n"].to_numpy(dtype=np.float64)
    clients = lv["level"].to_numpy(dtype=np.float64)
    weight = n * (clients - 1)
    if not np.isfinite(q) or q <= 0 or weight.sum() <= 0:
        return 0.0, np.zeros(len(lv))
    k = np.fmax(n / clients, 1.0)
    per = np.ones_like(k) if q >= 1 else q * (1 - q**k) / (k * (1 - q))
    together = np.ones_like(k)
    if "together" in lv:
        at_once = lv["together"].to_numpy(dtype=np.float64)
        together = np.where(np.isfinite(at_once), at_once, 1.0)
    return float(np.average(per * together, weights=weight)), per * (1.0 - together)


def _think_cv(obs: Observed) -> tuple[float, str]:
    """Return the think time's CV for the closed M/G/c law, and the note that says so.

    Pooled over the closed levels that measured one (weighted by their requests); unknown
    (no clients in the rows) is taken as 1, the exponential network's law.
    """
    lv = obs.levels
    cv = lv["think_cv"].to_numpy(dtype=np.float64) if "think_cv" in lv else np.empty(0)
    n = lv["n"].to_numpy(dtype=np.float64)[: len(cv)]
    good = np.isfinite(cv) & (n > 0)
    if not good.any():
        return 1.0, (
            "think-time CV unknown (no client per request): the closed law takes exponential "
            "think times, which reads high for steadier ones"
        )
    value = float(np.average(cv[good], weights=n[good]))
    return value, (
        f"think-time CV {value:.2f} measured from the clients' gaps between requests: the "
        "closed law takes the clients in step (as with constant think times) while the think "
        "times' spread is small against a service time, the exponential network as it grows"
    )


def _open_vif(obs: Observed, ps: list[dict]) -> Observed | None:
    """``obs`` with each open level's ``vif`` at least the station's own, else None.

    ``ps``: the parameters at every integer the data find plausible (:func:`_plausible`);
    the floor is the largest of theirs.

    The mean wait of an open queue near saturation is correlated over far more requests than
    a level's batch means span (a level of a few thousand requests at 90% load: batch means
    see about a tenth of the variance). In heavy traffic the mean number in an M/M/1 queue has
    asymptotic variance ``2 rho (1 + rho) / (1 - rho)^4`` times its time unit squared (Whitt,
    *Planning queueing simulations*, 1989), that is a variance inflation of about
    ``2 rho (1 + rho) / (1 - rho)^2`` over independent draws; only the waiting part of a
    response time carries it, so it is scaled by the probability of waiting (Erlang C).
    Behind a queue cap a level past capacity hovers near a full queue for as long: its
    latency counts for little; its refusals come in runs longer than its batch means see,
    so their ``vif_refused`` is at least the M/M/c/K chain's own
    (:func:`llmlat.queueing._mmck_refusal_vif`).
    """
    if obs.kind != "rate" or obs.times is None or "vif" not in obs.levels:
        return None
    from llmlat import queueing

    lam = obs.levels["level"].to_numpy(dtype=np.float64)
    rho = [np.clip(lam / (p["c"] * p["mu"]), 0.0, 0.995) for p in ps]
    wait = [queueing.erlang_c(p["c"], r * p["c"]) for p, r in zip(ps, rho, strict=True)]
    inflation = [
        1.0 + w * 2.0 * r * (1.0 + r) / (1.0 - r) ** 2 for w, r in zip(wait, rho, strict=True)
    ]
    model = np.max(inflation, axis=0)
    vif = obs.levels["vif"].to_numpy(dtype=np.float64)
    new = np.fmax(np.where(np.isfinite(vif), vif, 1.0), model)
    levels = obs.levels.copy()
    refusals = "k_sys" in ps[0] and "vif_refused" in levels
    if refusals:  # the refused count's runs, exactly (batch means see a part of them)
        had = levels["vif_refused"].to_numpy(dtype=np.float64)
        had = np.where(np.isfinite(had), had, 1.0)
        floor = np.max(
            [queueing._mmck_refusal_vif(lam, p["mu"], p["c"], p["k_sys"]) for p in ps], axis=0
        )
        levels["vif_refused"] = np.fmax(had, floor)
        refusals = bool(np.any(floor > 1.2 * had))
    if not refusals and np.all(new <= 1.2 * np.where(np.isfinite(vif), vif, 1.0)):
        return None
    return _inflated(obs, levels, vif, new)


def _closed_vif(obs: Observed, ps: list[dict]) -> Observed | None:
    """``obs`` with each closed level's ``vif`` at least the station's own, else None.

    N clients without think time on c exponential servers, N > c: all servers are always
    busy and every client always in the system, so by Little's law a level's mean latency is
    N over its throughput, and the throughput of n completions is a Poisson count's, rate
    c mu. The mean's variance is ``N^2 / (n (c mu)^2)``, against ``(N - c + c^2) / (n (c mu)^2)``
    for independent draws of the same response times (N - c exponential departures and a
    service): a variance inflation of ``N^2 / (N - c + c^2)`` (8.7 at N = 3c for c = 64,
    where batch means of one round see about half of it). 1 at N <= c (no waits); a think
    time leaves the batch means alone (no such closed form).

    A measured service CV ``cv`` scales both: c busy servers complete a renewal process, a
    count of variance ``n cv^2``, and a response time varies ``cv^2 (N - c + c^2) / (c mu)^2``,
    so the inflation is the same. Near-constant service (cv 0.05) measured 3.2-3.4 at N = 2c
    (this floor 3.8-3.9) and 5.0-5.9 at N = 3c (8.0-8.7) for c = 16 and 64, where batch means
    saw 1.9-2.6 and 3.4-4.9: mu's interval held the truth in 88 of 100 seeds at c = 64.
    """
    if obs.kind != "concurrency" or obs.times is None or "vif" not in obs.levels:
        return None
    p = ps[0]
    if p.get("think_s", 0.0) > 0 or p.get("level_think_s") is not None:
        return None
    n = obs.levels["level"].to_numpy(dtype=np.float64)
    c = float(min(q["c"] for q in ps))  # fewer servers: more of them wait, longer
    model = np.where(n > c, n**2 / (n - c + c**2), 1.0)
    vif = obs.levels["vif"].to_numpy(dtype=np.float64)
    vif = np.where(np.isfinite(vif), vif, 1.0)
    if np.all(model <= 1.2 * vif):
        return None
    return _inflated(obs, obs.levels.copy(), vif, np.fmax(vif, model))


def _inflated(obs: Observed, levels: pd.DataFrame, vif: np.ndarray, new: np.ndarray) -> Observed:
    """Return ``obs`` with ``levels``, their standard errors grown from ``vif`` to ``new``.

    ``new`` is the variance-inflation floor of :func:`_open_vif` or :func:`_closed_vif`.
    """
    grow = np.sqrt(new / np.where(np.isfinite(vif) & (vif > 0), vif, 1.0))
    for col in [c for c in levels if c.startswith("se_")]:
        levels[col] = levels[col] * grow
    levels["vif"] = new
    return replace(obs, levels=levels)


def _plausible(problem: _Problem, est) -> list[dict]:
    """Return the fitted parameters and those at every integer within :data:`_PLAUSIBLE`.

    Used behind a queue cap.

    A queue's correlation grows steeply near saturation, so a floor taken at the best c alone
    is too low when the data put c one too high (a level at 90% load read as 85%, its mean
    counted as six times the draws it is worth: c = 17 for 16 behind a cap).
    """
    best = max(est.profile.values(), default=0.0)
    return [est.p] + [
        problem.params(theta, k)
        for k, theta in est.thetas.items()
        if k != est.k and est.profile.get(k, -np.inf) >= best - _PLAUSIBLE
    ]


#: ``auto``: a model of another family whose lack-of-fit p-value is at least this is not
#: rejected by the data, and the choice is reported as indistinguishable from it.
_REJECT = 0.05

#: A fit whose level means miss by more than this chi-square quantile says no model fits.
_MISFIT_LEVEL = 0.999

#: The closed M/G/c law's own error of the mean with think time (its RMS, 3.9%, over
#: bench_closed_quantile's 1,008 cells of service CV 0.05, 0.5 and 2, think CV 0-2, c = 1-16;
#: 2.0% at CV 0.75 and 1.4), added to a level's error when the model check judges it.
_CLOSED_THINK_ERROR = 0.04


def _misfit_z(problem: _Problem, p: dict) -> tuple[np.ndarray, list[str], int]:
    """Return the model check's standardised residuals, their labels and degrees of freedom.

    Each level's mean against the prediction in units of its own error (batch means, so
    correlation is counted; a closed batching level's at the run's mean output length,
    :attr:`_Problem.se_check`) and, where streamed, each level's step time (ITL) in units of
    the error the fit gives it.
    """
    lv = problem.obs.levels
    think = p.get("level_think_s")
    loads = lv["level"].to_numpy(dtype=np.float64)
    pred = problem.model.predict(p, loads, problem.obs.kind, ("mean",), think)
    y, se = lv["mean_s"].to_numpy(dtype=np.float64), lv["se_mean_s"].to_numpy(dtype=np.float64)
    if problem.model.family == "batch" and problem.obs.kind == "concurrency":
        y = problem.y  # at the run's mean output length
        se = problem.se[: len(y)] if problem.se_check is None else problem.se_check
    if problem.obs.kind == "concurrency" and "think_cv" in p:
        # the closed M/G/c law with think time is itself within a few % (queueing.
        # _closed_mgc_mean): a level measured tighter than that is judged on the law's error
        se = np.hypot(se, _CLOSED_THINK_ERROR * pred["mean_s"])
    z = (y - pred["mean_s"]) / se
    labels = [f"{v:g}" for v in loads]
    if problem.n_itl:
        z = np.r_[z, (problem.itl_y - pred["itl_s"]) / problem.itl_se]
        labels += [f"{v:g} (step time)" for v in loads]
    good = np.isfinite(z)
    dof = int(good.sum()) - len(problem.model.free) - (problem.model.integer is not None)
    return z[good], [t for t, g in zip(labels, good, strict=True) if g], dof


def _misfit(problem: _Problem, p: dict) -> list[str]:
    """Return a warning note when the level means lie beyond their intervals around the fit.

    The standardised residuals of :func:`_misfit_z`: their sum of squares against the
    chi-square law with the levels less the parameters as degrees of freedom. Refitting
    cannot help: the station is not of this form (or the levels are not steady).
    """
    if "se_mean_s" not in problem.obs.levels:
        return []
    z, labels, dof = _misfit_z(problem, p)
    if dof < 1:
        return []
    from scipy import stats as sps

    stat = float(np.sum(z**2))
    if stat <= sps.chi2.ppf(_MISFIT_LEVEL, dof):
        return []
    worst = ", ".join(
        f"{t} ({d:+.1f} se)"
        for t, d in sorted(zip(labels, z, strict=True), key=lambda u: -abs(u[1]))[:3]
    )
    if "phases_loose" in problem.fixed and not problem.n_itl:
        # the one misfit of its own truth the calibration knows (8 slots: 6 of 6 sweeps)
        why = (
            "; equal output lengths from clients started one by one keep phases that "
            "neither batching law describes (the batch a request sees lies between the "
            "clients-in-step and the independent one), which the latency alone cannot "
            "size: stream the responses, whose inter-token latency times each level's step"
        )
    else:
        why = "; compare other models or check that every level reached a steady state"
    return [
        f"warning: {problem.model.name!r} does not fit these data: the level means"
        f"{' and step times' if problem.n_itl else ''} lie beyond their intervals around the "
        f"fitted curve (chi-square {stat:.3g} on {dof} df; worst "
        f"levels {worst}). Treat its parameters and plans with caution{why}"
    ]


def _light_cv(obs: Observed) -> tuple[float, float]:
    """Service-time CV at the lightest level and its sample size.

    From the requests sent into an idle server when there are enough of them (their time is
    a service time alone), else from the whole level (waits included: an upper bound). Also
    from the whole level when those few cannot tell the law from the exponential one and the
    level can: on 16 servers at 30% load a request finds nothing in flight about once in 100,
    and 20 such draws of a CV 2 service read 1.29 and 1.71 (2 of 20 seeds), fitted as
    exponential, c pinned at 19 and plans past capacity, where the level's 1,000 read 1.9-2.2.
    """
    lv = obs.levels.iloc[0]
    level = float(lv["std_s"] / lv["mean_s"]), float(lv["n"])
    if "cv_alone" in obs.levels and np.isfinite(lv["cv_alone"]):
        alone = float(lv["cv_alone"]), float(lv["n_alone"])
        if _not_exponential(*alone) or not _not_exponential(*level):
            return alone
    return level


def _not_exponential(cv: float, n: float) -> bool:
    """Whether a measured service-time CV is clearly not the exponential law's 1.

    Outside the range the CV of ``n`` exponential draws keeps in 99.8% of samples
    (:func:`_exponential_cv_range`), and never within 0.15 of 1 (where the exact M/M/c
    quantiles are kept). A symmetric 1 / sqrt(n) error was too loose on few draws, whose CV
    is skewed and tighter: 0.35 over 21 draws read as exponential, and the M/M/c fit of a
    batching replica then put a lone request's p95 at 2.4 times the measured one.
    """
    low, high = _exponential_cv_range(int(min(max(n, 2.0), _CV_DRAWS_MAX)))
    if n > _CV_DRAWS_MAX:  # its spread shrinks as 1 / sqrt(n)
        shrink = np.sqrt(_CV_DRAWS_MAX / n)
        low, high = 1.0 - (1.0 - low) * shrink, 1.0 + (high - 1.0) * shrink
    return bool(abs(cv - 1.0) > 0.15 and not low <= cv <= high)


#: Sample sizes up to this get the simulated range of an exponential sample's CV.
_CV_DRAWS_MAX = 200


@functools.cache
def _exponential_cv_range(n: int) -> tuple[float, float]:
    """Return the 0.1% and 99.9% quantiles of the CV of ``n`` exponential draws (seeded).

    The CV does not depend on the rate, so one table per ``n`` serves every fit.
    """
    draws = np.random.default_rng(n).exponential(size=(20_000, n))
    cv = draws.std(axis=1, ddof=1) / draws.mean(axis=1)
    low, high = np.quantile(cv, [0.001, 0.999])
    return float(low), float(high)


def _pick_model(name: str, obs: Observed, gamma) -> Model:
    if name not in _MODEL_NAMES:
        raise ValueError(
            f"model: expected one of {', '.join(_MODEL_NAMES)} or 'auto', got {name!r}"
        )
    if name == "batch":  # the wait to join a batch shows in the step times, if streamed
        return MODELS["batch_linear" if len(obs.levels) >= 6 or _streamed(obs) else "batch_few"]
    model = MODELS[name]
    if obs.kind not in model.kinds:
        hint = {"mgc": "use 'mmc' or 'closed' for a concurrency sweep", "closed": "use 'mmc'"}
        raise ValueError(
            f"model: {name!r} does not apply to a {obs.kind} sweep; {hint.get(name, '')}".rstrip()
        )
    return model


def _dropped_text(obs: Observed) -> str:
    """Name the levels left out and why, and the levels worth measuring instead."""
    if not obs.dropped:
        return ""
    kept = obs.levels["level"].to_numpy(dtype=np.float64)
    why = ", ".join(f"{v:g} ({r})" for v, r in sorted(obs.dropped.items()))
    above = [v for v in obs.dropped if v > kept.max()]
    top = min(above) if above else 4 * kept.max()
    grid = np.unique(np.round(np.geomspace(kept.max(), top, 5)[1:-1], 2 if top < 10 else 0))
    add = [v for v in grid if v not in kept and v not in obs.dropped]
    hint = f"; add levels between {kept.max():g} and {top:g}, e.g. " if add else ""
    return f" (left out: {why}{hint}{', '.join(f'{v:g}' for v in add)})"


def _streamed(obs: Observed) -> bool:
    """Whether every level has its decode step time (mean ITL), which the batch fit uses."""
    lv = latency_levels(obs).levels
    return "itl_s" in lv and len(lv) >= 3 and bool(np.isfinite(lv["itl_s"]).all())


def _check_levels(model: Model, obs: Observed, method: str) -> None:
    n = len(obs.levels)
    if n < 2:
        raise ValueError(
            f"level: only one load level ({obs.levels['level'].iloc[0]:g}) can be fitted"
            f"{_dropped_text(obs)}; a queueing model needs several. Measure at least 3 "
            "levels, from light load up to saturation"
        )
    if method == "wls":
        need = _wls_need(model, obs)
        if n <= need:
            raise ValueError(
                f"level: {n} levels cannot identify {need} parameters of {model.name!r} by "
                f"least squares{_dropped_text(obs)}; measure at least {need + 1} levels"
            )


def _wls_need(model: Model, obs: Observed) -> int:
    """Levels least squares needs beyond its parameters' count: one more than this."""
    if model.family == "batch" and _streamed(obs):  # a step time and a scale per level
        return max((len(model.free) + (model.integer is not None) + 2) // 2, 2)
    return len(model.free) + 1 + (model.integer is not None)


def _method(model: Model, obs: Observed, method: str, stat: str) -> str:
    if method not in ("auto", "ml", "wls"):
        raise ValueError(f"method: expected 'auto', 'ml' or 'wls', got {method!r}")
    can_ml = model.distribution and obs.times is not None
    if method == "ml" and not can_ml:
        why = "per-level table" if obs.times is None else f"model {model.name!r}"
        raise ValueError(f"method: maximum likelihood is not available for a {why}; use 'wls'")
    if method == "auto":
        return "ml" if can_ml else "wls"
    return method


def fit(
    data: object,
    model: str = "auto",
    metric: str = "latency",
    stat: str = "mean",
    *,
    method: str = "auto",
    level_kind: str | None = None,
    think_s: float | None = None,
    tokens: float | None = None,
    gamma: float | None = None,
    cv_s: float | None = None,
    max_refused: float | None = MAX_REFUSED,
) -> FitResult:
    """Fit a queueing model to measured latency at several loads.

    Parameters
    ----------
    data : SweepResult or pandas.DataFrame
        A sweep, a requests table with the record schema, or a per-level table (``level``,
        ``level_kind``, ``<metric>_mean_s``/``_p50_s``/``_p95_s``, optionally ``n``,
        ``<metric>_std_s``, ``throughput_rps``, ``completion_tokens_mean``, ``think_s``).
    model : {"auto", "mm1", "mmc", "mgc", "closed", "batch"}, default "auto"
        ``auto`` fits every applicable model by least squares, keeps the lowest AIC and refits
        it with the default method. ``closed`` is M/M/c with the think time estimated too.
        ``batch`` on streamed requests (``itl_mean_s``, or ``itl_mean_s``/``itl_std_s`` in a
        per-level table) also fits each level's mean inter-token latency, the decode step time
        of its batch (min(N, slots) in a closed loop), with its own error scale: that pins t0,
        t1 and, at a level whose requests waited for a slot, the slot cap. Below the cap a
        closed level's batch is N less the clients between requests, unless the output
        lengths are equal (``max_tokens`` with ``ignore_eos``): its clients then end together
        and are away together, so each request decodes in the whole batch. Each step also
        prefills the requests joining it, b / tokens of them per step in a steady batch of b,
        so ``t1_s`` holds their prefill: t1 + prefill / tokens (the client cannot tell the
        two apart when the prompts are alike). Clients of equal lengths started one by one
        (the sweep engine) keep phases neither law describes: their step times carry that
        law's error. A streamed closed sweep with one client also gives ``overhead_s``: a
        request's time outside its decode steps at that level (network and client round
        trip, its own prefill), carried in every level's latency; it is what one client's
        mean latency leaves beside the fitted step time.
        The rows of a level's drain (the last ones sent, which run after the first completion
        past its last send, :func:`llmlat.stats.drain_mask`) are left out of the batch fit's
        latency and step times: the batch only shrinks then. So are the rows of an open
        level's start-up, sent while its batch grew from an idle server.
    metric : {"latency", "ttft"}, default "latency"
        The time to model (``latency_s`` or ``ttft_s``).
    stat : {"mean", "p50", "p95"}, default "mean"
        Per-level statistic fitted by least squares and reported in the residuals (maximum
        likelihood uses every request either way).
    method : {"auto", "ml", "wls"}, default "auto"
        ``auto``: maximum likelihood when the model gives a distribution and the data has
        per-request rows, otherwise weighted least squares.
    level_kind : {"concurrency", "rate"}, optional
        Supplies or overrides the data's ``level_kind``.
    think_s : float, optional
        Think time between a client's requests in a closed loop (default: measured from the
        data's ``worker`` timings or metadata, else 0).
    tokens : float, optional
        Output tokens per request for ``batch`` (default: mean ``completion_tokens``, else 1).
    gamma : float, optional
        Fix the batching step-time exponent (1 = linear). By default it is estimated when there
        are at least 6 levels.
    cv_s : float, optional
        Service-time coefficient of variation for ``mgc`` (default: from the lightest level).
    max_refused : float or None, default 0.05
        Levels where more than this share of the measured requests was refused with 429 or
        needed a retry are left out, with a note: the models have no admission limit, and a
        retried request's latency holds its backoff. Only a requests table says this;
        None fits every level.

    Returns
    -------
    FitResult
        Parameters, uncertainty, information criteria, residuals, predictions and planning.

    Raises
    ------
    NeedsData
        A :class:`ValueError` raised when the advice is levels to measure (no capacity
        measured, no saturation reached, every level overloaded): its message names them
        with request counts, and its ``next_levels()`` tabulates them as
        :meth:`FitResult.next_levels` does.
    ValueError
        When the data cannot identify the model otherwise (one level, every request
        failed), naming what to measure next, or for a bad argument.
    """
    if stat not in ("mean", "p50", "p95", "p99"):
        raise ValueError(f"stat: expected 'mean', 'p50', 'p95' or 'p99', got {stat!r}")
    views = _Views(data, metric, level_kind, _max_refused(max_refused))
    opts = {"think_s": think_s, "tokens": tokens, "gamma": gamma, "cv_s": cv_s}
    if model == "auto":
        res = _fit_auto(views, stat, method, opts)
    else:
        res = _fit_obs(views.of(model), model, stat, method, opts)
    res.data = data
    return res


class _Views:
    """The observations each model is fitted on, built once for ``fit``, ``auto`` and ``compare``.

    The M/M/c family takes every level as :func:`~llmlat._aggregate.observe` gives it; the
    batch family takes each level without its drain (:func:`_batch_observe`), whichever of
    the three asks, so ``compare``'s row, ``auto``'s ranking and ``fit(model="batch")`` are
    one fit.
    """

    def __init__(self, data: object, metric: str, level_kind: str | None, refused: float | None):
        self.full = observe(data, metric, level_kind, refused)
        self._args = (data, metric, level_kind, refused)
        self._batch: Observed | None = None

    def of(self, model: str) -> Observed:
        """Return the observations ``model`` is fitted on."""
        if model != "batch":
            return self.full
        if self._batch is None:
            self._batch = _batch_observe(self.full, *self._args)
        return self._batch


def _batch_observe(
    obs: Observed, data: object, metric: str, level_kind: str | None, refused: float | None
) -> Observed:
    """Return the batch fit's observations: each level without its drain (and start-up).

    An open level also loses its start-up (:func:`llmlat.stats.fill_mask`).

    Past a level's last send no request replaces one that ends, so the batch shrinks and the
    last requests decode faster and wait less than in the steady state
    (:func:`llmlat.stats.drain_mask`): their latency and inter-token latency are left out
    (their completions still count in the throughput).
    """
    frame = getattr(data, "requests", data)
    if not isinstance(frame, pd.DataFrame) or is_level_table(frame, metric):
        return obs
    meta = getattr(data, "meta", None)  # the configured think time, as for the sweep
    start, end = _stats.row_times(frame)
    keys = [k for k in ("run_id", "level") if k in frame]
    drained = np.zeros(len(frame), bool)
    filling = np.zeros(len(frame), bool)
    groups = frame.groupby(keys, sort=False, dropna=False).indices.values()
    for idx in groups:
        drained[idx] = _stats.drain_mask(start[idx], end[idx])
    if obs.kind == "rate" and "itl_mean_s" in frame:
        itl = pd.to_numeric(frame["itl_mean_s"], errors="coerce").to_numpy(
            np.float64, na_value=np.nan
        )
        kept = (_stats.phases(frame) == "measure") & ~drained & np.isfinite(itl)
        for idx in groups:
            filling[idx] = _stats.fill_mask(start[idx], end[idx], itl[idx], kept[idx])
    if drained.any() or filling.any():
        frame = frame.copy()
        for col in {f"{metric}_s", "itl_mean_s"} & set(frame.columns):
            frame[col] = frame[col].astype("float64").mask(drained | filling)
        full = obs
        obs = observe(SimpleNamespace(requests=frame, meta=meta), metric, level_kind, refused)
        # the output length of the run is every request's (each level's own mean stays that
        # of its kept requests, as its latency)
        obs = replace(
            obs,
            tokens=full.tokens,
            tokens_q=full.tokens_q,
            tokens_cv=full.tokens_cv,
            tokens_same=full.tokens_same,
        )
        if drained.any():
            short = sorted(set(obs.dropped) - set(full.dropped))
            obs.notes.append(
                f"{int(drained.sum())} requests of the levels' drains (sent from the first one "
                "that ended after the first completion past its level's last send, when the "
                "batch only shrinks) left out of the latency and step-time statistics"
                + (
                    f"; levels {', '.join(f'{v:g}' for v in short)} kept none outside their "
                    "start-up and drain: measure them longer"
                    if short
                    else ""
                )
            )
        if filling.any():
            obs.notes.append(
                f"{int(filling.sum())} requests of the open levels' start-up (sent while the "
                "batch grew from empty, by MSER-5 on their step times) left out of the latency "
                "and step-time statistics"
            )
    return obs


def _max_refused(value: object) -> float | None:
    """Check ``max_refused``: a share in [0, 1], or None."""
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
        raise ValueError(f"max_refused: expected a share between 0 and 1, or None, got {value!r}")
    return float(value)


def _fit_auto(views: _Views, stat: str, method: str, opts: dict) -> FitResult:
    """Rank every applicable model by least-squares AIC, refit the best with ``method``.

    Level means alone hardly tell c exponential servers from a batching server (both are flat,
    then linear in N). The requests do: at the lightest level a batch's latency is its output
    length times a step time, far less variable than an exponential service. So when the
    lightest level's CV is that of an exponential law, only the M/M/c family is ranked. Where
    that CV is not exponential, ``mmc`` takes it (M/G/c), as ``mgc`` does: the one law is
    ranked once.
    """
    obs = views.full
    # "closed" estimates a think time the data did not measure; here they did
    skip = {"closed"} if np.isfinite(obs.think_s) else set()
    why = []
    if obs.system_k is not None:
        why.append("the 429s come from a queue cap, which the batching model does not describe")
    if obs.times is not None and opts["cv_s"] is None:
        cv, n_cv = _light_cv(obs)
        if np.isfinite(cv) and not _not_exponential(cv, n_cv):
            why.append(
                f"service-time CV {cv:.2g} at the lightest level, as for exponential service "
                "(batching gives near-constant service per output length)"
            )
    if why:
        skip.add("batch")
    names = [m for m in _MODEL_NAMES if m not in skip and obs.kind in MODELS[m].kinds]
    same_law = "mgc" in names and "cv_s" in _fixed(MODELS["mmc"], views.of("mmc"), **opts)[0]
    if same_law:  # the same law twice: one fit (and no "indistinguishable" advice)
        names.remove("mgc")
    table, fits = _compare(views, names, stat, opts)
    ok = table[table["aic"].notna()]
    if ok.empty:
        if obs.times is None or method == "wls":
            raise ValueError(f"model: no model could be fitted: {table['error'].iloc[0]}")
        # too few levels to rank models by least squares; the likelihood of every request
        # may still identify c servers of rate mu
        try:
            res = _fit_obs(obs, "mmc", stat, method, opts)
        except ValueError as exc:
            raise ValueError(f"model: no model could be fitted: {exc}") from None
        res.notes.append(
            f"too few levels to compare models ({table['error'].iloc[0]}); fitted mmc by "
            "maximum likelihood on every request"
        )
        return res
    best = str(ok.index[0])
    ranked, seen = fits[best], views.of(best)  # ranked by least squares: refit for another method
    meth, why_meth = _resolved_method(ranked._model, seen, method, stat, ranked._problem.fixed)
    if meth == "wls":  # the same fit: only the reason for its method is new
        res = ranked
        res.notes[len(seen.notes) : len(seen.notes)] = why_meth
    else:
        res = _fit_obs(seen, best, stat, method, opts)
    close = [str(m) for m in ok.index[1:] if ok.loc[m, "delta_aic"] < 2]
    # another family that misses no level mean by more than its errors is as good an account
    # of the data as the best one, whatever the AIC says (on near-constant service, c servers
    # and a batch of c slots draw the same curve of means)
    family = fits[best]._model.family
    fits_too = [
        str(m)
        for m in ok.index[1:]
        if fits[m]._model.family != family
        and m not in close
        and not _lack_of_fit_p(fits[m]._problem, fits[m]._est) < _REJECT
    ]
    res.indistinguishable = close + fits_too
    if fits_too:
        res.notes.append(
            f"model chosen by AIC among {', '.join(ok.index)}, but {', '.join(fits_too)} also "
            f"fits every level mean within its errors (lack-of-fit p >= {_REJECT:g}): "
            "indistinguishable on these data; stream the responses (the inter-token time "
            "grows with the batch under batching, not with c servers) or measure more levels "
            "below the knee to tell them apart"
        )
    # mmc on an exponential-looking service against mgc with its measured CV: the same
    # curve but for that CV, which no level around the knee tells apart
    law = [m for m in close if {m, best} == {"mmc", "mgc"}]
    if law:
        cv = fits["mgc"]._problem.fixed["cv_s"]
        res.notes.append(
            f"model chosen by AIC among {', '.join(ok.index)}, but {law[0]} fits these data "
            f"about as well (AIC within 2): mmc and mgc differ only in the service law, and "
            f"the CV mgc takes from the lightest level ({cv:.2g}) is an exponential "
            "service's, which mmc assumes: either serves"
        )
    if other := [m for m in close if m not in law]:
        res.notes.append(
            f"model chosen by AIC among {', '.join(ok.index)}, but {', '.join(other)} fit "
            "these data about as well (AIC within 2): indistinguishable here; measure more "
            "levels around the knee to tell them apart"
        )
    if not res.indistinguishable:
        res.notes.append(f"model chosen by AIC among {', '.join(ok.index)}")
    if why:
        res.notes.append(f"batching not considered: {'; '.join(why)}")
    if same_law:
        res.notes.append(
            "mgc not ranked apart: with the service CV measured, mmc is the same M/G/c law"
        )
    return res


def _resolved_method(
    model: Model, obs: Observed, method: str, stat: str, fixed: dict
) -> tuple[str, list[str]]:
    """Return the method a fit uses (``auto`` resolved), with notes on why if not the one asked."""
    meth = _method(model, obs, method, stat)
    if not (method == "auto" and meth == "ml" and "cv_s" in fixed and model.name != "mgc"):
        return meth, []
    # the likelihood is that of exponential service: misspecified here; fit the means,
    # unless too few levels leave least squares no scale to estimate
    need = _wls_need(model, obs)
    if len(obs.levels) > need:
        return "wls", ["service not exponential: fitted by least squares on the level means"]
    return meth, [
        f"service not exponential, but {len(obs.levels)} levels are too few for least "
        "squares on their means: fitted by the exponential likelihood, whose intervals "
        f"are wider than this service needs; measure at least {need + 1} levels"
    ]


def _fit_obs(obs: Observed, name: str, stat: str, method: str, opts: dict) -> FitResult:
    model = _pick_model(name, obs, opts["gamma"])
    fixed, fixed_notes = _fixed(model, obs, **opts)
    meth, notes = _resolved_method(model, obs, method, stat, fixed)
    notes += fixed_notes
    _check_levels(model, obs, meth)
    problem = _Problem(model, obs, meth, stat, fixed)
    est = _recalled(problem)
    # behind a queue cap at every plausible c (a cap's latency and refusals pin c loosely);
    # elsewhere at the fitted one (an open queue's floor at a c one too low reads a level at
    # 90% load as saturated and leaves c unbounded)
    ps = _plausible(problem, est) if "k_sys" in est.p else [est.p]
    floor = (_open_vif(obs, ps) or _closed_vif(obs, ps)) if model.family == "mmc" else None
    if floor is not None:
        # a queue's consecutive waits are correlated for longer than a level's batches can
        # see: refit with the model's own variance inflation as the floor
        problem = _Problem(model, floor, meth, stat, fixed)
        est = _recalled(problem, near=est)
    res = FitResult(problem, est, list(obs.notes) + notes + _misfit(problem, est.p))
    if model.family != "batch" or len(obs.levels) < 7:
        return res
    if opts["gamma"] is not None:
        return res
    # the linear step time is the default form; a free exponent must earn its parameter
    curved = MODELS["batch"]
    fixed, notes = _fixed(curved, obs, **opts)
    problem = _Problem(curved, obs, meth, stat, fixed)
    # streamed, the step times pin the cap: climbed from the linear form's first, and fitted
    # whole only if it could earn its place (the same AIC in 30 of 30 streamed truths of
    # step time t0 + t1 b^0.7-2; on the latency alone the climb stalled in 4 of 30)
    climbed = climbed_aic(problem, int(res.params[curved.integer])) if problem.n_itl else None
    if climbed is not None and climbed >= res.aic - 2:
        return res
    alt = FitResult(problem, _recalled(problem), list(obs.notes) + notes)
    if alt.aic < res.aic - 2:
        alt.notes.append(
            f"step time grows as batch^{alt.params['gamma']:.3g}: the free exponent lowers AIC "
            f"by {res.aic - alt.aic:.3g} against the linear form"
        )
        return alt
    return res


def _compare(views: _Views, models, stat: str, opts: dict) -> tuple[pd.DataFrame, dict]:
    names = list(models) if models is not None else list(_MODEL_NAMES)
    rows, fits = [], {}
    for name in names:
        row: dict = {"model": name}
        try:
            r = _fit_obs(views.of(name), name, stat, "wls", opts)
        except ValueError as exc:
            if models is None and "does not apply" in str(exc):
                continue
            row["error"] = str(exc)
        else:
            fits[name] = r
            row.update(
                method=r.method,
                k=r.df_model,
                nobs=r.nobs,
                llf=r.llf,
                aic=r.aic,
                bic=r.bic,
                capacity_rps=r.capacity_rps,
                max_abs_resid_rel=float(np.nanmax(np.abs(r.levels["resid_rel"]))),
                params=r._params_text(),
            )
        rows.append(row)
    cols = ["model", "method", "k", "nobs", "llf", "aic", "bic", "capacity_rps"]
    cols += ["max_abs_resid_rel", "params", "error"]
    table = pd.DataFrame(rows).reindex(columns=cols).set_index("model")
    table = table.sort_values("aic", na_position="last")
    table.insert(table.columns.get_loc("aic") + 1, "delta_aic", table["aic"] - table["aic"].min())
    w = np.exp(-0.5 * table["delta_aic"].to_numpy(dtype=np.float64))
    table["weight"] = w / np.nansum(w)
    return table, fits


def compare(
    data: object,
    models: Sequence[str] | None = None,
    metric: str = "latency",
    stat: str = "mean",
    **options: float | str | None,
) -> pd.DataFrame:
    """Fit several models to the same per-level statistic and rank them by AIC.

    Every model is fitted by weighted least squares on the same per-level statistic, so their
    likelihoods (and AICs) are comparable; a model that fails says why in ``error``. Each
    is fitted on the rows :func:`fit` gives it (``batch``: each closed level without its
    drain), so a row's parameters are those of ``fit(data, model=...)``.

    Parameters
    ----------
    data : SweepResult or pandas.DataFrame
        As for :func:`fit`.
    models : sequence of str, optional
        Models to compare (default: every model that applies to the sweep kind).
    metric : {"latency", "ttft"}, default "latency"
        The time to model.
    stat : {"mean", "p50", "p95"}, default "mean"
        Per-level statistic to fit.
    **options
        ``level_kind``, ``think_s``, ``tokens``, ``gamma``, ``cv_s``, ``max_refused`` as for
        :func:`fit`.

    Returns
    -------
    pandas.DataFrame
        One row per model (index ``model``), best first: ``method``, ``k`` (parameters),
        ``nobs``, ``llf``, ``aic``, ``delta_aic``, ``bic``, ``capacity_rps``,
        ``max_abs_resid_rel``, ``params``, ``error`` and the Akaike ``weight``.
    """
    bad = set(options) - {"level_kind", "think_s", "tokens", "gamma", "cv_s", "max_refused"}
    if bad:
        raise ValueError(f"options: unknown option(s) {', '.join(sorted(bad))}")
    refused = _max_refused(options.pop("max_refused", MAX_REFUSED))
    kind = options.pop("level_kind", None)
    views = _Views(data, metric, None if kind is None else str(kind), refused)
    opts = {k: options.get(k) for k in ("think_s", "tokens", "gamma", "cv_s")}
    return _compare(views, models, stat, opts)[0]
