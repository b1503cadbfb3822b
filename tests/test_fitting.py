"""Fitting queueing models: recovery on exact synthetic queues, public data, API, bad data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import llmlat
from llmlat import datasets, queueing
from llmlat._synth import (
    batch_closed_requests,
    mgc_sweep,
    mmc_closed_requests,
    mmc_open_requests,
)
from llmlat.fitting import FitResult, Plan, compare, fit


def _levels_table(req: pd.DataFrame) -> pd.DataFrame:
    """A per-level table as a user would build one from their own benchmark."""
    g = req.groupby("level")["latency_s"]
    span = req.groupby("level")["t_end"].max() - req.groupby("level")["t_sent"].min()
    return pd.DataFrame(
        {
            "level": g.mean().index,
            "level_kind": req["level_kind"].iloc[0],
            "n": g.size().to_numpy(),
            "latency_mean_s": g.mean().to_numpy(),
            "latency_std_s": g.std().to_numpy(),
            "latency_p50_s": g.median().to_numpy(),
            "throughput_rps": (g.size() / span).to_numpy(),
        }
    )


# -- recovery on exact M/M/c data ----------------------------------------------------------------

CLOSED_CASES = [
    # c, mu, levels, seed: levels straddle c so both the flat and the queueing regime are seen
    (1, 5.0, [1, 2, 4], 11),
    (4, 2.0, [1, 2, 4, 8, 16], 12),
    (16, 1.0, [4, 8, 16, 32, 64], 13),
]


@pytest.fixture(scope="module", params=CLOSED_CASES, ids=lambda c: f"c={c[0]}")
def closed_case(request):
    c, mu, levels, seed = request.param
    return c, mu, mmc_closed_requests(levels, mu=mu, c=c, n=1500, seed=seed)


def test_closed_loop_recovers_c_exactly_and_mu(closed_case):
    c, mu, req = closed_case
    res = fit(req, model="mmc")
    assert res.kind == "concurrency" and res.method == "ml"
    assert res.params["c"] == c
    assert res.params["mu"] == pytest.approx(mu, rel=0.05)
    lo, hi = res.conf_int().loc["mu"]
    assert lo < res.params["mu"] < hi
    assert res.capacity_rps == pytest.approx(res.params["c"] * res.params["mu"])
    # measured throughput over fitted capacity: saturated levels sit near 1
    top = res.utilization.iloc[-1]
    assert top == pytest.approx(1.0, abs=0.06)


def test_closed_loop_per_level_table_gives_the_same_c(closed_case):
    c, mu, req = closed_case
    table = _levels_table(req)
    if len(table) <= 3:
        with pytest.raises(ValueError, match="levels cannot identify"):
            fit(table, model="mmc")
        return
    res = fit(table, model="mmc")
    assert res.method == "wls"
    assert res.params["c"] == c
    assert res.params["mu"] == pytest.approx(mu, rel=0.05)


@pytest.mark.parametrize(("c", "mu", "seed"), [(1, 4.0, 21), (4, 2.0, 22), (16, 0.5, 23)])
def test_open_loop_recovers_c_exactly_and_mu(c, mu, seed):
    rates = [f * c * mu for f in (0.3, 0.6, 0.8, 0.9)]
    req = mmc_open_requests(rates, mu=mu, c=c, n=2500, seed=seed)
    res = fit(req, model="mmc")
    assert res.kind == "rate"
    assert res.params["c"] == c
    assert res.params["mu"] == pytest.approx(mu, rel=0.05)
    assert res.levels["utilization"].to_numpy() == pytest.approx([0.3, 0.6, 0.8, 0.9], rel=0.08)


def test_closed_loop_with_think_time():
    req = mmc_closed_requests([2, 4, 8, 16, 32], mu=1.0, c=4, n=1500, think_s=3.0, seed=5)
    res = fit(req, model="mmc")  # think time measured from the workers' gaps
    assert res.fixed["think_s"] == pytest.approx(3.0, rel=0.05)
    assert res.params["c"] == 4
    assert res.params["mu"] == pytest.approx(1.0, rel=0.05)
    free = fit(req, model="closed")  # think time estimated as a parameter instead
    assert free.params["c"] == 4
    assert free.params["think_s"] == pytest.approx(3.0, rel=0.15)
    # Little's law over the whole loop: N = X (W + Z), in the data and in the model
    lv = res.levels
    n = lv.index.to_numpy()
    w = req.groupby("level")["latency_s"].mean().to_numpy()
    assert lv["throughput_rps"].to_numpy() * (w + 3.0) == pytest.approx(n, rel=0.05)
    pred = res.predict(n)
    loop = pred["throughput_rps"] * (pred["latency_mean_s"] + res.fixed["think_s"])
    assert loop.to_numpy() == pytest.approx(n, rel=1e-9)


def test_two_runs_of_a_closed_sweep_keep_their_think_time():
    # each run's workers are numbered from 0 on its own clock: their gaps are taken run by
    # run (interleaved, two runs thinking 20 ms read 7.6 ms, and c = 17-18 for 16 in 10 of 10
    # seeds; 15-16 with the think time measured)
    runs = [
        mgc_sweep("concurrency", [8, 16, 17, 24, 48], 12.5, 16, seed=s, think_s=0.02).assign(
            run_id=f"run{s}"
        )
        for s in (0, 1)
    ]
    res = fit(pd.concat(runs, ignore_index=True), model="mmc")
    assert res.fixed["think_s"] == pytest.approx(0.02, rel=1e-9)
    assert res.params["c"] in (15, 16)


# -- continuous batching -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def batch_data():
    return batch_closed_requests(
        [2, 4, 8, 12, 16, 20, 24, 32, 48], slots=16, t0_s=0.01, t1_s=0.002, tokens=20, n=800, seed=1
    )


def test_batch_recovers_slot_cap_and_beats_mmc(batch_data):
    res = fit(batch_data, model="batch")
    assert res.params["slots"] == pytest.approx(16, rel=0.10)
    assert res.fixed["tokens"] == pytest.approx(20, rel=0.02)  # from completion_tokens
    assert res.params["t0_s"] == pytest.approx(0.01, rel=0.10)
    assert res.params["t1_s"] == pytest.approx(0.002, rel=0.10)
    table = compare(batch_data, models=["mmc", "batch", "mm1"])
    assert table.index[0] == "batch"
    assert table.loc["batch", "aic"] < table.loc["mmc", "aic"] - 10
    assert table["weight"].sum() == pytest.approx(1.0)
    assert fit(batch_data).model == "batch"  # auto picks it too


def test_batch_bootstrap_interval_is_seeded(batch_data):
    res = fit(batch_data, model="batch", gamma=1.0)
    a = res.conf_int(method="bootstrap", n_boot=20, seed=3)
    b = res.conf_int(method="bootstrap", n_boot=20, seed=3)
    pd.testing.assert_frame_equal(a, b)
    assert a.loc["slots", "lower"] <= res.params["slots"] <= a.loc["slots", "upper"]
    # every identified parameter's interval is ordered (join_steps on its end, one whole step)
    assert (a["lower"] <= a["upper"]).drop(index=list(res.unidentified)).all()


# -- public closed-loop data ---------------------------------------------------------------------


@pytest.mark.parametrize("name", datasets.list(kind="table"))
def test_public_closed_loop_data_reproduced_within_15_percent(name):
    table = datasets.load(name)
    assert "Apache-2.0" in table.attrs["source"]
    n = table["level"].to_numpy()
    # the data obey Little's law for a closed loop with no think time: N = X W
    assert (table["throughput_rps"] * table["latency_mean_s"]).to_numpy() == pytest.approx(
        n, rel=0.03
    )
    res = fit(table)
    assert res.model == "batch"
    pred = res.predict(n)
    assert pred["throughput_rps"].to_numpy() == pytest.approx(table["throughput_rps"], rel=0.15)
    assert pred["latency_mean_s"].to_numpy() == pytest.approx(table["latency_mean_s"], rel=0.15)
    # and the model obeys it exactly
    assert (pred["throughput_rps"] * pred["latency_mean_s"]).to_numpy() == pytest.approx(n)
    ranking = compare(table)
    assert ranking.index[0] == "batch"
    assert ranking.loc["mmc", "max_abs_resid_rel"] > 0.15  # a fixed-mu M/M/c cannot
    # no hard knee in these sweeps: where the slot cap is not pinned down, the fit says so
    unbounded = np.isinf(res.conf_int().loc["slots", "upper"])
    assert unbounded == any("slot cap not identified" in note for note in res.notes)


# -- the FitResult API ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mmc_fit():
    req = mmc_closed_requests([1, 2, 4, 8, 16], mu=2.0, c=4, n=1000, seed=7)
    return fit(req, model="mmc")


def test_fit_result_api(mmc_fit):
    res = mmc_fit
    assert isinstance(res, FitResult)
    assert list(res.params.index) == ["c", "mu"]
    assert np.isnan(res.bse["c"]) and res.bse["mu"] > 0
    assert res.aic == pytest.approx(-2 * res.llf + 2 * res.df_model)
    assert res.bic > res.aic
    assert res.resid.index.tolist() == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert set(res.levels.columns) >= {"mean_s", "mean_pred_s", "utilization", "resid_rel"}
    text = str(res.summary())
    assert "mmc" in text and "mu" in text and "maximum likelihood" in text
    assert "<table" in res._repr_html_()
    assert "FitResult mmc" in repr(res)


def test_predict_and_curve(mmc_fit):
    pred = mmc_fit.predict([1, 4, 8, 32])
    cols = ["latency_mean_s", "latency_p50_s", "latency_p95_s", "latency_p99_s"]
    assert list(pred.columns) == ["load", "throughput_rps", "utilization", *cols]
    assert (pred["latency_p50_s"] < pred["latency_p95_s"]).all()
    assert (pred["latency_p95_s"] < pred["latency_p99_s"]).all()
    assert pred["utilization"].iloc[-1] == pytest.approx(1.0)
    open_pred = mmc_fit.predict([1.0, 7.0, 9.0], kind="rate")
    assert np.isinf(open_pred["latency_mean_s"].iloc[-1])  # past capacity c mu ~ 8
    curve = mmc_fit.curve()
    assert curve["load"].is_monotonic_increasing
    assert {1.0, 16.0} <= set(curve["load"])
    # flat at 1 / mu up to c (equal up to rounding: N / (N mu)), then rising
    assert np.all(np.diff(curve["latency_mean_s"]) >= -1e-12)
    with pytest.raises(ValueError, match="load"):
        mmc_fit.predict([0.5])


def test_plan(mmc_fit):
    p = mmc_fit.plan(p95=3.0)
    assert isinstance(p, Plan) and p.feasible
    # the conservative end: at the point estimate the recommended load meets the target,
    # and one more client or 5% more rate past the conservative bound would not by much
    at = mmc_fit.predict([p.max_concurrency, p.max_concurrency + 3])["latency_p95_s"]
    assert at.iloc[0] <= 3.0 < at.iloc[1]
    rate = mmc_fit.predict([p.max_rate_rps, p.max_rate_rps * 1.1], kind="rate")
    assert rate["latency_p95_s"].iloc[0] <= 3.0 < rate["latency_p95_s"].iloc[1]
    assert p.utilization_at_max_rate == pytest.approx(p.max_rate_rps / mmc_fit.capacity_rps)
    assert p.binding == "latency target" and "conservative" in p.note
    limited = mmc_fit.plan(p95=3.0, rpm=120, max_utilization=0.7)
    assert limited.limit_rate_rps == pytest.approx(2.0)
    assert limited.rate_rps == pytest.approx(2.0) and limited.binding == "rpm limit"
    assert limited.concurrency <= limited.limit_concurrency
    cap = mmc_fit.plan(max_utilization=0.7)
    assert cap.rate_rps <= 0.7 * mmc_fit.capacity_rps
    assert cap.rate_rps == pytest.approx(0.7 * mmc_fit.capacity_rps, rel=0.1)
    with pytest.raises(ValueError, match="tokens_per_request"):
        mmc_fit.plan(p95=3.0, tpm=10_000)
    with pytest.raises(ValueError, match="target"):
        mmc_fit.plan(p95=3.0, mean=1.0)


def test_an_infeasible_target_says_so_and_names_the_nearest_feasible_one(mmc_fit):
    p = mmc_fit.plan(p95=0.01)
    assert not p.feasible and p.binding == "none"
    assert np.isnan(p.rate_rps) and p.concurrency is None and p.max_concurrency is None
    # the nearest feasible target: p95 of one request on an idle station, ~ ln(20) / mu
    assert p.nearest_target_s == pytest.approx(np.log(20) / 2.0, rel=0.15)
    assert "no load meets" in p.note and f"{p.nearest_target_s:.3g}" in p.note
    assert mmc_fit.plan(p95=1.05 * p.nearest_target_s).feasible


def test_a_rate_limit_no_concurrency_reaches_is_not_a_search_bound(mmc_fit):
    p = mmc_fit.plan(p95=3.0, rpm=60 * 1000)  # 1,000 req/s against a capacity near 8
    assert p.limit_concurrency is None and "does not bind" in p.note
    assert p.concurrency == p.max_concurrency and p.binding == "latency target"


def test_summary_and_conf_int_agree_and_cov_params_fittedvalues(mmc_fit):
    ci = mmc_fit.conf_int()
    text = mmc_fit.summary().as_text()
    for name in ci.index:
        assert f"{ci.loc[name, 'lower']:.4g}" in text and f"{ci.loc[name, 'upper']:.4g}" in text
    cov = mmc_fit.cov_params()
    assert list(cov.index) == list(mmc_fit.params.index)
    assert np.sqrt(cov.loc["mu", "mu"]) == pytest.approx(mmc_fit.bse["mu"])
    assert mmc_fit.fittedvalues.to_numpy() == pytest.approx(
        (mmc_fit.levels["mean_s"] - mmc_fit.resid).to_numpy()
    )


@pytest.mark.parametrize("which", ["mmc", "batch"])
def test_summary_tables_share_one_width_and_show_counts_whole(which, mmc_fit, batch_data):
    res = mmc_fit if which == "mmc" else fit(batch_data, model="batch")
    lines = res.summary().as_text().splitlines()
    rules = [i for i, line in enumerate(lines) if line and set(line) <= {"=", "-"}]
    widths = {len(lines[i]) for i in rules}
    assert len(widths) == 1  # statsmodels' padding ran the parameter rows past the rules
    width = widths.pop()
    assert all(len(line.rstrip()) <= width for line in lines[rules[0] : rules[-1]])
    # the level rows, last: loads and counts whole, not in the first table's 4 decimals
    rows = [line.split() for line in lines[rules[-2] + 1 : rules[-1]]]
    assert [r[0] for r in rows] == [f"{v:g}" for v in res.levels.index]
    assert [r[1] for r in rows] == [f"{v:g}" for v in res.levels["n"]]


def test_fit_on_ttft_and_quantile_stat(batch_data):
    ttft = batch_data.assign(ttft_s=batch_data["latency_s"] / 20)
    res = fit(ttft, model="mmc", metric="ttft", stat="p95", method="wls")
    assert res.metric == "ttft" and res.stat == "p95"
    assert "p95_pred_s" in res.levels


# -- bad data ------------------------------------------------------------------------------------


def test_one_level_only():
    req = mmc_closed_requests([4], mu=1.0, c=2, n=200, seed=1)
    with pytest.raises(ValueError, match="only one load level"):
        fit(req, model="mmc")


def test_every_request_failed():
    req = mmc_closed_requests([1, 2, 4], mu=1.0, c=2, n=100, seed=1)
    req["ok"] = False
    req["error_kind"] = "rate_limited"
    with pytest.raises(ValueError, match=r"every request failed.*rate_limited"):
        fit(req)


def test_no_saturation_says_what_to_measure():
    req = mmc_closed_requests([1, 2, 4, 8], mu=1.0, c=64, n=500, seed=2)
    with pytest.raises(ValueError, match=r"no saturation reached.*higher concurrency") as err:
        fit(req, model="mmc")
    # the refusal's advice, as a fit's next_levels(): levels and how many requests each
    advice = err.value.next_levels()
    assert list(advice["level"]) == [16, 32] and advice["param"].eq("c").all()
    assert list(advice["requests"]) == [1000, 2000]  # the top level's 500, per client
    assert "about 1,000 and 2,000 requests" in str(err.value)


def test_every_level_overloaded_says_what_to_measure():
    from llmlat._synth import mgc_sweep

    req = mgc_sweep("rate", [19.2, 24.0], 2.0, 8, seed=3)  # 120% and 150% of 16 req/s
    with pytest.raises(ValueError, match=r"every level is overloaded.*lower rates") as err:
        fit(req, model="mmc")
    (row,) = err.value.next_levels().itertuples()
    assert row.param == "mu" and 7 < row.level < 9  # half the capacity
    assert row.requests >= 900 and f"about {row.requests:,.0f} requests" in str(err.value)


def test_bad_arguments_name_the_field():
    req = mmc_closed_requests([1, 2, 4], mu=1.0, c=2, n=100, seed=1)
    with pytest.raises(ValueError, match="model:"):
        fit(req, model="mmk")
    with pytest.raises(ValueError, match="metric:"):
        fit(req, metric="tpot")
    with pytest.raises(ValueError, match="stat:"):
        fit(req, stat="p42")
    with pytest.raises(ValueError, match="level_kind"):
        fit(req.drop(columns="level_kind"))
    with pytest.raises(ValueError, match="model: 'mgc' does not apply"):
        fit(req, model="mgc")
    with pytest.raises(ValueError, match="data:"):
        fit(pd.DataFrame({"level": [1.0], "foo": [2.0]}))
    with pytest.raises(ValueError, match="method: maximum likelihood"):
        fit(_levels_table(req), model="mmc", method="ml")


def test_warmup_rows_and_failures_are_left_out():
    req = mmc_closed_requests([1, 2, 4, 8], mu=2.0, c=2, n=800, seed=4)
    noisy = req.copy()
    noisy.loc[noisy.index[:50], "phase"] = "warmup"
    noisy.loc[noisy.index[:50], "latency_s"] = 1e3  # would wreck the fit if used
    noisy.loc[noisy.index[60:70], "ok"] = False
    res = fit(noisy, model="mmc")
    assert res.params["c"] == 2
    assert res.levels.loc[1.0, "n"] == 800 - 60


def test_public_api_and_datasets():
    assert llmlat.fit is fit and llmlat.compare is compare
    assert "inferencex-closedloop/gpt-oss-120b" in datasets.list()
    with pytest.raises(ValueError, match="name: unknown dataset"):
        datasets.load("nope")


def test_fit_result_plot_draws_over_its_data(mmc_fit, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    fig = mmc_fit.plot("latency")
    path = tmp_path / "fit.png"
    fig.savefig(path)
    assert path.stat().st_size > 0
    with pytest.raises(ValueError, match="kind:"):
        mmc_fit.plot("pie")


# -- response-time quantiles of batch and mgc, throughput, large data ----------------------------


def test_batch_quantiles_match_the_data_and_plan_a_p95(batch_data):
    res = fit(batch_data, model="batch")
    measured = batch_data.groupby("level")["latency_s"].quantile([0.5, 0.95, 0.99]).unstack()
    pred = res.predict(measured.index.to_numpy()).set_index("load")
    for p, col in ((0.5, "latency_p50_s"), (0.95, "latency_p95_s"), (0.99, "latency_p99_s")):
        assert pred[col].to_numpy() == pytest.approx(measured[p].to_numpy(), rel=0.07), col
    plan = res.plan(p95=1.0)
    at = res.predict([plan.max_concurrency, plan.max_concurrency + 3])["latency_p95_s"]
    assert at.iloc[0] <= 1.0 < at.iloc[1]
    assert res.curve()["latency_p95_s"].notna().all()


def test_mgc_quantiles_and_p95_plan():
    c, mu = 4, 2.0
    req = mmc_open_requests([1.6, 2.4, 4.0, 4.8], mu, c, n=6000, seed=5, cv_s=0.5)
    res = fit(req, model="mgc")
    assert res.fixed["cv_s"] == pytest.approx(0.5, rel=0.1)
    measured = req.groupby("level")["latency_s"].quantile(0.95)
    pred = res.predict(measured.index.to_numpy())["latency_p95_s"]
    assert pred.to_numpy() == pytest.approx(measured.to_numpy(), rel=0.08)
    plan = res.plan(p95=1.5)
    at = res.predict([plan.max_rate_rps], kind="rate")["latency_p95_s"].iloc[0]
    assert 1.4 <= at <= 1.5  # the conservative end of a tight fit: just under the target
    # its concurrency bound is the closed system's, as an mmc fit's with the same CV: N below
    # c never waits (the open law read N = 8 as a rate of 8 on a capacity of 8: p95 74 s)
    same = fit(req, model="mmc", cv_s=res.fixed["cv_s"])
    assert plan.max_concurrency == same.plan(p95=1.5).max_concurrency
    p95 = res.predict([3, 8], kind="concurrency")["latency_p95_s"].to_numpy()
    assert p95 == pytest.approx(same.predict([3, 8], kind="concurrency")["latency_p95_s"])


def test_throughput_is_the_summary_steady_window_rate():
    # N = 16 clients on 4 servers of rate 2: saturated, X = 8/s; one definition everywhere
    req = mmc_closed_requests([2, 16], mu=2.0, c=4, n=4000, seed=9)
    res = fit(req, model="mmc")
    summary = llmlat._summary.summarize(req).set_index("level")["throughput_rps"]
    assert res.levels["throughput_rps"].to_numpy() == pytest.approx(summary.to_numpy())
    assert res.levels.loc[16.0, "throughput_rps"] == pytest.approx(8.0, rel=0.05)


@pytest.mark.parametrize(
    ("method", "cap"), [("wls", None), ("ml", None), ("wls", 8)], ids=["wls", "ml", "wls-capped"]
)
def test_a_refit_started_near_another_estimate_finds_the_same_optimum(method, cap):
    # the refit with a variance-inflation floor starts from the first fit's optima (and
    # maximum likelihood walks from its integer, least squares takes it first): the same
    # estimate and profile as a cold one. Behind a cap of 8 places the grid of c is all close
    import llmlat.fitting._estimate as estimate

    rates = [f * 4 * 2.0 for f in (0.3, 0.6, 0.8, 0.9, 1.2)]
    if cap is None:
        data = mmc_open_requests(rates[:4], 2.0, 4, n=400, seed=3)
    else:
        data = mgc_sweep("rate", rates, 2.0, 4, queue_cap=cap, seed=3)
    problem = fit(data, model="mmc", method=method)._problem
    other = fit(data.assign(latency_s=data["latency_s"] * 1.05), model="mmc", method=method)
    cold = estimate._estimate(problem)
    warm = estimate._estimate(problem, near=other._est)
    assert warm.k == cold.k
    assert warm.theta == pytest.approx(cold.theta, rel=1e-5, abs=1e-6)
    assert warm.profile[warm.k] == pytest.approx(cold.profile[cold.k], abs=1e-6)
    near_best = {k for k, v in cold.profile.items() if v >= cold.profile[cold.k] - 3}
    assert near_best <= set(warm.profile)
    for k in near_best:
        assert warm.profile[k] == pytest.approx(cold.profile[k], abs=1e-4)


def test_a_refit_of_the_same_data_is_recalled_and_its_own_copy(monkeypatch):
    # fit, compare and auto on one data set estimate the same models: after the first, a lookup
    from collections import OrderedDict

    import llmlat.fitting._estimate as estimate

    monkeypatch.setattr(estimate, "_MEMO", OrderedDict())
    computed = []
    compute = estimate._estimate

    def counted(problem, candidates=None, near=None, **kwargs):
        computed.append(problem.model.name)
        return compute(problem, candidates, near, **kwargs)

    monkeypatch.setattr(estimate, "_estimate", counted)
    req = mmc_closed_requests([1, 2, 4, 8], mu=2.0, c=2, n=200, seed=11)
    first = fit(req, model="mmc")
    made = len(computed)
    again = fit(req.copy(), model="mmc")  # equal rows, another frame
    assert len(computed) == made and made > 0
    pd.testing.assert_series_equal(again.params, first.params)
    pd.testing.assert_frame_equal(again.conf_int(), first.conf_int())
    again._est.p["mu"] = -1.0  # each result holds its own estimate
    assert fit(req, model="mmc").params["mu"] == first.params["mu"]
    # other rows, or another ask of the same rows, are estimated
    slower = fit(req.assign(latency_s=req["latency_s"] * 1.01), model="mmc")
    assert len(computed) > made and slower.params["mu"] < first.params["mu"]
    made = len(computed)
    fit(req, model="mmc", method="wls")
    assert len(computed) > made
    # a bootstrap's resampled fits come once each: they are not kept
    kept = list(estimate._MEMO)
    first.conf_int(method="bootstrap", n_boot=10, seed=1)
    assert list(estimate._MEMO) == kept


@pytest.mark.parametrize("kind", ["concurrency", "rate"])
def test_a_rough_likelihood_optimum_is_polished_to_the_bounded_searchs(kind):
    # maximum likelihood ranks integers on rough optima (1e-3); those near the interval's
    # edge are polished by a parabola's vertex (twice), in 6 evaluations where a bounded
    # search to 1e-6 took 13-15: the same optimum and log-likelihood
    from llmlat.fitting._estimate import _polished

    levels = [1, 2, 4, 8, 12, 16] if kind == "concurrency" else [2.0, 4.0, 6.0, 7.0]
    res = fit(
        mgc_sweep(kind, levels, 2.0, 4 if kind == "rate" else 8, seed=7), method="ml", model="mmc"
    )
    problem = res._problem
    for k in (res._est.k - 1, res._est.k + 1):
        rough = problem.optimise(k, None, xatol=1e-3)
        theta, llf = _polished(problem, k, *rough)
        ref_theta, ref_llf = problem.optimise(k, rough[0], width=0.01)
        assert llf == pytest.approx(ref_llf, abs=1e-9) and llf >= rough[1]
        assert theta == pytest.approx(ref_theta, abs=1e-6)


def test_auto_profiles_no_problem_twice(monkeypatch):
    # auto ranks mmc by least squares, then refits it by maximum likelihood, which starts
    # from that same least-squares profile: recalled, not profiled again; and the answer is
    # fit(model="mmc")'s
    from collections import OrderedDict

    import llmlat.fitting._estimate as estimate

    data = mmc_closed_requests([1, 2, 4, 8, 12, 16, 24], mu=2.0, c=8, n=200, seed=5)
    monkeypatch.setattr(estimate, "_MEMO", OrderedDict())
    keys = []
    profile = estimate._profile

    def counted(problem, *args, **kwargs):
        # a whole profile: no candidates, no refit's starts
        if all(a is None for a in (*args[2:], *kwargs.values())):
            keys.append(estimate._problem_key(problem))
        return profile(problem, *args, **kwargs)

    monkeypatch.setattr(estimate, "_profile", counted)
    auto = fit(data)
    assert auto.model == "mmc" and auto.method == "ml"
    assert keys and len(keys) == len(set(keys))
    monkeypatch.setattr(estimate, "_MEMO", OrderedDict())
    alone = fit(data, model="mmc")
    pd.testing.assert_series_equal(auto.params, alone.params)
    pd.testing.assert_frame_equal(auto.conf_int(), alone.conf_int())


def test_maximum_likelihood_on_binned_times_matches_every_time(monkeypatch):
    import llmlat.fitting._estimate as estimate

    req = mmc_closed_requests([1, 2, 4, 8], mu=2.0, c=2, n=3000, seed=10)
    exact = fit(req, model="closed")
    monkeypatch.setattr(estimate, "_BINS", 200)  # every level now binned (3000 > 2 x 200)
    binned = fit(req, model="closed")
    assert binned.params["c"] == exact.params["c"]
    se = exact.bse["mu"]
    assert abs(binned.params["mu"] - exact.params["mu"]) < 0.2 * se
    assert binned.llf == pytest.approx(exact.llf, rel=1e-4)  # reported on every request


def test_refusals_from_a_queue_cap_are_fitted_as_mmck_with_the_blocking():
    # an exact M/M/4 (mu = 2) with room for 6 waiting: past capacity it refuses with 429
    c, mu = 4, 2.0
    rates = [f * c * mu for f in (0.3, 0.6, 0.8, 1.5)]
    data = mgc_sweep("rate", rates, mu, c, queue_cap=6, seed=31)
    res = fit(data, model="mmc")
    assert res.params["c"] == c and res.params["mu"] == pytest.approx(mu, rel=0.05)
    assert any("queue cap" in note and "10 requests" in note for note in res.notes)
    # the refusing level is a steady M/M/c/K level: its latency is fitted, and its throughput
    # is lambda (1 - P_block), not a bound pushing capacity above the offered rate
    assert not res.levels["overloaded"].any()
    predicted = res.predict([1.5 * c * mu], kind="rate")["throughput_rps"].iloc[0]
    truth = queueing.mmck(1.5 * c * mu, mu, c, c + 6)["throughput_rps"].iloc[0]
    assert predicted == pytest.approx(truth, rel=0.05) and predicted < res.capacity_rps
    ci = res.conf_int()
    assert ci.loc["mu", "lower"] <= mu <= ci.loc["mu", "upper"]


def test_an_open_level_past_capacity_measures_it_by_its_throughput():
    c, mu = 4, 2.0
    rates = [f * c * mu for f in (0.3, 0.6, 0.8, 1.5)]
    data = mgc_sweep("rate", rates, mu, c, seed=31)
    res = fit(data, model="mmc")
    assert res.params["c"] == c and res.params["mu"] == pytest.approx(mu, rel=0.05)
    # the growing level is kept as evidence of capacity, never as a lower bound on it
    assert res.levels.loc[1.5 * c * mu, "overloaded"]
    assert not res.levels["overloaded"].iloc[:3].any()
    assert res.levels.loc[1.5 * c * mu, "throughput_rps"] == pytest.approx(c * mu, rel=0.1)
    assert compare(data, ["mmc"]).loc["mmc", "capacity_rps"] == pytest.approx(c * mu, rel=0.05)
    ci = res.conf_int()
    assert ci.loc["mu", "lower"] <= mu <= ci.loc["mu", "upper"]


def test_closed_levels_that_were_refused_are_named_with_what_to_add():
    data = mgc_sweep("concurrency", [1, 10, 100], 2.0, 4, seed=3)
    refused = data["level"] == 100
    data.loc[refused, ["ok", "status", "error_kind"]] = [False, 429, "rate_limited"]
    res = fit(data)  # two levels left: ranked by nothing, fitted by maximum likelihood
    assert res.model == "mmc" and 100.0 not in res.levels.index
    assert any("[100] left out" in note for note in res.notes)
    with pytest.raises(ValueError, match=r"left out: 100 \(refused.*add levels between 10 and"):
        fit(data, model="batch")


def test_max_refused_is_checked_and_says_when_nothing_is_left():
    req = mmc_open_requests([2.0, 4.0], mu=2.0, c=4, n=200, seed=32)
    data = req.assign(error_kind=None, attempts=2)
    with pytest.raises(ValueError, match=r"max_refused: every level .* retried"):
        fit(data, model="mmc")
    with pytest.raises(ValueError, match="max_refused: expected a share"):
        fit(data, model="mmc", max_refused=1.5)
    with pytest.raises(ValueError, match="max_refused: expected a share"):
        compare(data, max_refused="all")


def test_a_near_constant_server_gets_its_own_service_law_not_the_exponential():
    # one server, service CV 0.05 (a llama.cpp-like replica): the p95 at N = 1 is the service
    # time's own p95, ~1.08 / mu; the exponential law would say ln(20) / mu, 2.8 times more
    data = mgc_sweep("concurrency", [1, 2, 4, 8], 2.0, 1, cv_s=0.05, seed=4)
    res = fit(data)
    assert res.fixed["cv_s"] == pytest.approx(0.05, rel=0.5)
    measured = data.loc[data["level"] == 1, "latency_s"].quantile(0.95)
    assert res.predict([1])["latency_p95_s"].iloc[0] == pytest.approx(measured, rel=0.2)
    assert any("service-time CV" in note for note in res.notes)


def test_a_model_that_does_not_fit_says_so():
    batching = batch_closed_requests([1, 2, 4, 8, 16, 32], 8, 0.02, 0.002, 40, n=300, warmup=0)
    wrong = fit(batching, model="mmc")
    assert any(n.startswith("warning: 'mmc' does not fit") for n in wrong.notes)
    right = fit(batching, model="batch")
    exact = fit(mgc_sweep("concurrency", [1, 2, 4, 6, 8, 12], 2.0, 4, seed=3), model="mmc")
    for res in (right, exact):
        assert not any("does not fit" in n for n in res.notes)
