"""The batch fit on streamed data: step times (ITL) identify t0, t1 and the slot cap.

Also the overload rule for open levels just past capacity. Pure functions on seeded synthetic
sweeps (``llmlat._synth``), no HTTP: each test takes a few seconds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize._numdiff import approx_derivative

from llmlat import compare, datasets, fit
from llmlat._aggregate import observe, resample
from llmlat._loadshapes import default_length
from llmlat._models import MODELS
from llmlat._synth import batch_closed_requests, batch_open_requests, mgc_sweep
from llmlat.fitting._fit import _in_step
from llmlat.stats import fill_mask, phases

T0, T1 = 0.02, 0.002


def _sweep(levels, slots, n=150, seed=1, join_steps=1, drain=False, together=False):
    """Closed levels of ``n`` requests each (None: llmlat's default length of each level)."""
    parts = [
        batch_closed_requests(
            [v],
            slots,
            T0,
            T1,
            40,
            n=n or default_length("concurrency", v)[0],
            seed=seed * 1000 + v,
            warmup=0,
            join_steps=join_steps,
            drain=drain,
            together=together,
        )
        for v in levels
    ]
    return pd.concat(parts, ignore_index=True)


def test_synthetic_itl_is_the_step_time_of_the_batch():
    exact = _sweep([1, 4, 16], 8, n=60, join_steps=0)
    # past the start-up (the clients start one by one, as the sweep engine starts them)
    exact = exact[phases(exact) == "measure"]
    itl = exact.groupby("level")["itl_mean_s"]
    # every request decodes in a batch of min(N, slots): its ITL is that step time
    assert itl.min().to_numpy() == pytest.approx(T0 + T1 * np.array([1, 4, 8]), rel=1e-9)
    assert itl.max().to_numpy() == pytest.approx(T0 + T1 * np.array([1, 4, 8]), rel=1e-9)
    assert (exact["ttft_s"] >= T0 + T1 - 1e-12).all()
    assert np.allclose(exact["t_first_token"] - exact["t_sent"], exact["ttft_s"])
    # the simulator's timing: a client's next request misses the step starting as it is sent,
    # so below the cap the batch is N less those waiting to join; alone, no wait at all
    late = _sweep([1, 4, 16], 8, n=60, join_steps=1)
    late = late[phases(late) == "measure"].groupby("level")["itl_mean_s"].mean()
    assert late[1.0] == pytest.approx(T0 + T1, rel=1e-9)
    assert T0 + T1 * 3 < late[4.0] < T0 + T1 * 4
    assert late[16.0] == pytest.approx(T0 + T1 * 8, rel=1e-9)
    lv = observe(exact).levels
    assert lv["itl_s"].to_numpy() == pytest.approx(T0 + T1 * np.array([1, 4, 8]), rel=1e-9)


def test_one_level_past_the_cap_identifies_it_from_the_step_times():
    data = _sweep([1, 2, 4, 8, 16], 8)
    res = fit(data, model="batch")
    ci = res.conf_int()
    assert res.params["slots"] == 8 and res.capacity_identified
    assert (ci.loc["slots", "lower"], ci.loc["slots", "upper"]) == (8, 8)
    for name, truth in (("t0_s", T0), ("t1_s", T1)):
        assert res.params[name] == pytest.approx(truth, rel=0.01)
        assert ci.loc[name, "lower"] < ci.loc[name, "upper"]
    assert res._problem.n_itl == 5  # the step times were used
    assert not any("step times" in n for n in res.notes)
    # the floor the step times put on the cap holds (below the cap the batch is N less those
    # waiting to join, so level 8's batch, not 8 itself, is what they exceed)
    assert 4 <= res._problem.step_floor(res._est.p) <= 8
    # step times off the batch model by 1% either way, level by level (as the simulator's
    # client-side ITL misses the step time its latency implies): the cap rests on the latency
    # alone, so it is not presented as identified, and plans stay within the measured loads
    wobble = 1 + 0.01 * (-1.0) ** np.log2(data["level"].to_numpy())
    bent = fit(data.assign(itl_mean_s=data["itl_mean_s"] * wobble), model="batch")
    assert not bent.capacity_identified
    assert "miss the batch model" in bent.unidentified["slots"]
    lower, upper = bent.conf_int().loc["slots"]
    assert lower <= 8 and upper == np.inf
    assert "slots=not identified" in repr(bent)
    plan = bent.plan(p95=2.0)
    assert not plan.capacity_identified and "slots not identified" in plan.note
    assert plan.max_concurrency <= 16
    # the same sweep without streaming: latency alone, one level past the cap is not enough
    plain = fit(data.drop(columns=["itl_mean_s"]), model="batch")
    assert plain._problem.n_itl == 0 and not plain.capacity_identified


def test_slot_cap_not_identified_when_no_level_reaches_it():
    res = fit(_sweep([1, 2, 4, 8, 12], 32), model="batch")
    assert not res.capacity_identified
    assert "slots >= " in res.unidentified["slots"]
    ci = res.conf_int()
    assert ci.loc["slots", "upper"] == np.inf and ci.loc["slots", "lower"] <= 12
    assert res.params["t1_s"] == pytest.approx(T1, rel=0.02)  # the step times still speak


def test_itl_from_a_per_level_table():
    table = pd.DataFrame(
        {
            "level": [1, 2, 4],
            "level_kind": "concurrency",
            "n": 100,
            "latency_mean_s": [0.9, 1.0, 1.1],
            "itl_mean_s": [0.022, 0.024, 0.028],
            "itl_std_s": [0.001, 0.001, 0.002],
        }
    )
    lv = observe(table).levels
    assert lv["itl_s"].tolist() == [0.022, 0.024, 0.028]
    assert lv["se_itl_s"].to_numpy() == pytest.approx([1e-4, 1e-4, 2e-4])


def test_open_level_just_past_capacity_is_overloaded_though_served_as_offered():
    # c = 4 servers of rate 2 (capacity 8/s), short levels: at 9.2/s offered the queue grows
    # for 12 s only, and this seed serves more than its realised arrival rate (the pattern of
    # the public llm-d run at 1.34 and 1.5 req/s); the levels far past capacity measure it
    data = mgc_sweep("rate", [4.8, 9.2, 12.8, 20.0], 2.0, 4, seed=0, length=0.1)
    lv = observe(data, max_refused=0.05).levels.set_index("level")
    # issue10c: with the steady window starting at the last transient send this seed serves
    # 8.7/s of its realised 10.6/s (no seed of 0-39 serves more than offered any longer: that
    # reading came from a late, short window); the level must still be called overloaded
    assert lv.loc[9.2, "throughput_rps"] < lv.loc[9.2, "offered_rps"]
    assert lv["overloaded"].tolist() == [False, True, True, True]


def test_the_drain_of_each_level_is_left_out_of_the_batch_fit():
    # each level ends as a sweep's does: the clients stop after their requests, and the last
    # ones decode in ever smaller batches, faster; fitted as steady state they put t1 1.5% low,
    # its interval missing the truth in every seed (the demo's t1: -6%)
    data = _sweep([1, 2, 4, 8, 16], 8, n=100, drain=True)
    ends = data.groupby("level")["itl_mean_s"].agg(lambda v: v.iloc[-5:].mean())
    assert ends[16.0] < 0.95 * (T0 + T1 * 8)  # the drain is in the data
    res = fit(data, model="batch")
    ci = res.conf_int()
    for name, truth in (("slots", 8), ("t0_s", T0), ("t1_s", T1)):
        assert ci.loc[name, "lower"] <= truth <= ci.loc[name, "upper"], name
    assert any("drains" in n for n in res.notes)
    # the throughput still counts every completion in the steady window
    assert res.levels["throughput_rps"].tolist() == observe(data).levels["throughput_rps"].tolist()


def test_open_loop_step_times_are_those_of_the_batch_a_request_sees():
    # a request decodes in the batches it is part of: one more than the mean batch, and more
    # of its steps in the larger ones; the mean batch put t0 10% high and t1 11% low
    cap = 8 / (40 * (T0 + T1 * 8))
    rates = [f * cap for f in (0.1, 0.3, 0.5, 0.7, 0.85)]
    spans = [default_length("rate", r)[1] for r in rates]
    res = fit(batch_open_requests(rates, 8, T0, T1, 40, spans, seed=3), model="batch")
    ci = res.conf_int()
    assert res.params["slots"] == 8
    for name, truth in (("t0_s", T0), ("t1_s", T1)):
        assert res.params[name] == pytest.approx(truth, rel=0.03)
        assert ci.loc[name, "lower"] <= truth <= ci.loc[name, "upper"], name


def test_bootstrap_resamples_step_times_with_their_requests():
    obs = observe(_sweep([1, 4, 16], 8, n=60))
    again = resample(obs, np.random.default_rng(0))
    pairs = {
        pair
        for ts, its in zip(obs.times, obs.itl_times, strict=True)
        for pair in zip(ts, its, strict=True)
    }
    for ts, its, itl in zip(again.times, again.itl_times, again.levels["itl_s"], strict=True):
        assert set(zip(ts, its, strict=True)) <= pairs  # a request keeps its own step time
        assert itl == pytest.approx(np.mean(its))
    assert again.levels["itl_s"].iloc[1] != obs.levels["itl_s"].iloc[1]


def test_latency_only_intervals_carry_the_residual_scale_on_its_degrees_of_freedom():
    # the calibration's latency-only cell (slots 32, levels 1-64 at their default lengths,
    # each with its drain): 7 level means for t0, t1, the join wait and the cap. Each mean is
    # compared at the run's mean output length, which removes most of its error, so the scale
    # is the residuals'; it was taken as RSS / n with the normal quantile, and t1's interval
    # missed 0.002 in these seeds (28 of 40 intervals held the truth over 20 seeds). The
    # linear step time is held: whether a free exponent earns its parameter is AIC's call
    for seed in (1000, 1004):
        data = _sweep([1, 2, 4, 8, 16, 32, 64], 32, n=None, seed=seed, drain=True)
        res = fit(data.drop(columns=["itl_mean_s"]), model="batch", gamma=1.0)
        ci = res.conf_int()
        for name, truth in (("t0_s", T0), ("t1_s", T1)):
            lower, upper = ci.loc[name]
            assert lower <= truth <= upper, (seed, name)
            assert upper - lower < 0.2 * truth  # honest, not unbounded
        assert ci.loc["slots", "lower"] <= 32 <= ci.loc["slots", "upper"]
        assert res._problem.n_itl == 0 and res._est.dof == 3  # 7 levels, 4 parameters


def test_compare_auto_and_fit_fit_the_batch_model_on_the_same_rows():
    # the levels' drains are left out of the batch model wherever it is fitted: compare's row
    # and auto's pick are fit(model="batch") itself (compare ranked it on the drains: t1 -2%)
    data = _sweep([1, 2, 4, 8, 16], 8, n=100, drain=True)
    alone = fit(data, model="batch")
    table = compare(data)
    assert table.loc["batch", "params"] == alone._params_text()
    assert table.loc["batch", "aic"] == pytest.approx(alone.aic, rel=1e-9)
    auto = fit(data)
    assert auto.model == "batch" and auto._params_text() == alone._params_text()
    assert any("drains" in n for n in auto.notes) and any("drains" in n for n in alone.notes)
    # the M/M/c family still takes every row
    assert table.loc["mmc", "nobs"] == fit(data, model="mmc", method="wls").nobs


def test_the_profile_search_and_jacobian_shortcuts_change_nothing():
    # golden section over the slot cap: the best integer of a unimodal profile, in fewer
    # evaluations than the coarse-to-fine steps
    from llmlat.fitting._estimate import _golden, _unimodal

    for top in (3, 150, 390, 511):
        profile = lambda k, top=top: -abs(np.log(k / top))  # noqa: E731
        calls = {}

        def ev(k, profile=profile, calls=calls):
            calls[k] = (None, profile(k))
            return calls[k][1]

        for k in np.unique(np.round(np.geomspace(1, 512, 24)).astype(int)):
            ev(int(k))
        before = len(calls)
        _golden(ev, calls)
        assert max(calls, key=lambda k: calls[k][1]) == top
        assert len(calls) - before <= 12
    assert _unimodal([1, 2, 2, 5, 3, 3]) and not _unimodal([1, 3, 2, 4])
    # the Jacobian's points in one pass are the residuals row by row, bit for bit
    res = fit(_sweep([1, 2, 4, 8, 16], 8, n=60), model="batch")
    pr, k = res._problem, res._est.k
    theta = res._est.theta[: len(pr.model.free)]
    rows = theta + np.random.default_rng(0).normal(0, 0.1, (4, len(theta)))
    one_pass = pr._resid_rows(rows, k)
    assert np.array_equal(one_pass, np.stack([pr._resid(th, k) for th in rows]))
    # an open sweep's too, an overloaded level's throughput with them; and the Jacobian of
    # those points is scipy's own forward differences, number for number
    cap = 8 / (40 * (T0 + T1 * 8))
    rates = [f * cap for f in (0.3, 0.6, 0.9, 1.2)]
    res = fit(batch_open_requests(rates, 8, T0, T1, 40, 40.0, seed=1), model="batch")
    pr, k = res._problem, res._est.k
    assert len(pr.x_over)
    theta = res._est.theta[: len(pr.model.free)]
    rows = theta + np.random.default_rng(1).normal(0, 0.1, (4, len(theta)))
    one_pass = pr._resid_rows(rows, k)
    assert np.array_equal(one_pass, np.stack([pr._resid(th, k) for th in rows]))
    lower, upper = pr._bounds(k, len(theta))
    lower[-1] = theta[-1]  # a step at the bound turns back, as scipy's does
    want = approx_derivative(
        lambda th: pr._resid(th, k), theta, method="2-point", bounds=(lower, upper)
    )
    assert np.array_equal(pr._memo(k, lower, upper)["jac"](theta), want)


def _warned(res) -> bool:
    return any("does not fit" in note for note in res.notes)


def test_a_batch_fit_warns_when_the_step_time_law_is_another():
    # memory-bound, then compute-bound: max(t0, t1 b) (flat to b = 5, then linear). The latency
    # means alone draw a slot cap of 5 with a flat step; the step times do not (the old check
    # looked at the means alone, against their raw errors: no warning)
    def roof(b):
        return max(T0, 0.004 * b)

    args = ([1, 2, 4, 8, 16], 8, T0, 0.004, 20)
    kw = {"n": 150, "seed": 1, "warmup": 0, "drain": True}
    assert _warned(fit(batch_closed_requests(*args, **kw, step_s=roof), model="batch"))
    assert not _warned(fit(batch_closed_requests(*args, **kw), model="batch"))
    # latency only: a step time curving up (not a power law the fit tries at 6 levels) is told
    # from a straight one by each level's mean at the run's output length, whose error is the
    # ratio estimate's (0.1%, where the mean's own error holds the lengths' spread: 3%)
    levels = [1, 2, 4, 8, 16, 32]

    def curved(b):
        return T0 + 0.001 * b + 0.00003 * b * b

    plain = {"columns": ["itl_mean_s"]}
    wrong = batch_closed_requests(levels, 32, T0, T1, 20, **kw, step_s=curved).drop(**plain)
    right = batch_closed_requests(levels, 32, T0, T1, 20, **kw).drop(**plain)
    res = fit(wrong, model="batch")
    assert _warned(res)
    lv = res._problem
    assert np.all(lv.se_check < 0.25 * lv.se[: len(lv.y)])
    assert not _warned(fit(right, model="batch"))


def test_open_levels_start_up_is_left_out_of_the_batch_fit():
    # an open level starts with an idle server: its first requests decode in smaller batches
    # (slots 32 at 85% load: the first tenth of a level 11% faster than the steady step)
    cap = 32 / (40 * (T0 + T1 * 32))
    rates = [f * cap for f in (0.1, 0.3, 0.5, 0.7, 0.85)]
    spans = [default_length("rate", r)[1] for r in rates]
    data = batch_open_requests(rates, 32, T0, T1, 40, spans, seed=5)
    res = fit(data, model="batch")
    assert any("start-up" in n for n in res.notes)
    top = res._problem.obs.levels.iloc[-1]
    assert top["n"] < observe(data).levels.iloc[-1]["n"]
    level = data[data["level"] == rates[-1]]
    start, end = level["t_sent"].to_numpy(), level["t_end"].to_numpy()
    itl = level["itl_mean_s"].to_numpy()
    cut = fill_mask(start, end, itl, np.ones(len(level), bool))
    # the first requests sent, at least until the longest one could have ended
    assert start[cut].max() < start[~cut].min()
    assert start[cut].max() >= start.min() + np.max(end - start) - 1.0
    assert itl[cut].mean() < 0.97 * itl[~cut].mean()


def test_a_closed_levels_predictions_keep_littles_law_at_its_own_output_length():
    # short levels whose mean output lengths differ from the run's (37.8 to 42.4 tokens for
    # 39.6): the predicted latency is taken at each level's own length, so the predicted
    # throughput must be too. Before, level 2 predicted 2.06 req/s from a 1.04 s latency
    # (2 clients, no think time: 1.92), 7% off Little's law
    res = fit(_sweep([1, 2, 4, 8, 16], 8, n=30), model="batch")
    lv = res.levels
    little = lv["throughput_pred_rps"] * lv["mean_pred_s"] / lv.index.to_numpy()
    assert little.to_numpy() == pytest.approx(1.0, rel=1e-6)
    tokens = res._problem.all.levels["tokens_mean"]
    assert tokens.max() / tokens.min() > 1.1  # the levels' lengths do differ


def test_a_closed_levels_join_wait_is_a_step_of_the_others_batch():
    # a request sent to a busy server sits out one step before it joins: the step of the
    # others' batch, without itself. The law took it at the full batch min(N, slots), one
    # sequence too many: 0.23% too slow at 2 clients, 0.15% at 4 (long steady runs, where the
    # sampling error is 0.02%), which the latency-only fit absorbed in the cap (130 for 128).
    # The step time a request sees counts the batches in steps, not time: 0.03% off at 24-32
    # clients, where the step times' own error is under 0.01%
    law = MODELS["batch_linear"]
    for n in (2, 4, 8, 24, 32):
        data = batch_closed_requests([n], 32, T0, T1, 40, n=1000, seed=n, warmup=100)
        p = {"slots": 32, "t0_s": T0, "t1_s": T1, "gamma": 1.0, "join_steps": 1.0}
        p |= {"think_s": 0.0, "tokens": data["completion_tokens"].mean()}
        pred = law.predict(p, np.array([float(n)]), "concurrency", ("mean",))
        assert data["latency_s"].mean() == pytest.approx(pred["mean_s"][0], rel=1e-3), n
        assert data["itl_mean_s"].mean() == pytest.approx(pred["itl_s"][0], rel=1.5e-4), n


def test_latency_only_slot_set_carries_the_laws_own_error():
    # the calibration's latency-only cell (slots 32, levels 1-64 at their default lengths):
    # the residuals, 0.01-0.1% of a level's mean, set the scale alone and the set excluded
    # the truth (31 pinned in seed 1019; >= 33 in seed 1011)
    for seed in (1011, 1019):
        data = _sweep([1, 2, 4, 8, 16, 32, 64], 32, n=None, seed=seed, drain=True)
        res = fit(data.drop(columns=["itl_mean_s"]), model="batch")
        lower, upper = res.conf_int().loc["slots"]
        assert lower <= 32 <= upper, seed
        assert lower >= 16, seed  # honest, not everything


@pytest.mark.parametrize("together", [True, False])
def test_fixed_output_lengths_keep_a_closed_levels_clients_in_step(together):
    # max_tokens with ignore_eos (vLLM's and llmperf's benchmarks): a closed level's clients
    # started at once all end at the same step and are away together, so a request decodes in
    # the whole batch, not in N less those between requests. Before, the fit took the binomial
    # batch: on 8 slots, 8 tokens a request, it missed the step times, flagged its own truth
    # as a misfit and left the cap at [4, inf]; on 32 slots it missed t1 by 30 errors and put
    # the cap at 30. Started one by one (the sweep engine now), they keep their phases apart
    kw = {"warmup": 0, "spread": 0.0, "drain": True, "rtt_s": 0.004, "together": together}
    parts = [
        batch_closed_requests([v], 8, T0, T1, 8, default_length("concurrency", v)[0], 7 + v, **kw)
        for v in [1, 2, 4, 8, 16]
    ]
    data = pd.concat(parts, ignore_index=True)
    assert (data["completion_tokens"] == 8).all()
    res = fit(data, model="batch")
    assert res._est.p["in_step"] == (1.0 if together else 0.0)
    ci = res.conf_int()
    assert (ci.loc["slots", "lower"], ci.loc["slots", "upper"]) == (8, 8)
    for name, truth in (("t0_s", T0), ("t1_s", T1)):
        assert ci.loc[name, "lower"] <= truth <= ci.loc[name, "upper"]
    assert not any("does not fit" in n or "not identified" in n for n in res.notes)
    assert any("decode in step" in n for n in res.notes) is together
    # started at once, spread lengths leave the clients in independent phases: hardly any
    # pair stays in step; started one by one, none does
    spread = observe(_sweep([1, 4, 16], 8, n=60, together=True))
    assert 0 < _in_step(spread)[0] < 0.01
    assert _in_step(observe(_sweep([1, 4, 16], 8, n=60)))[0] == 0.0


def test_fixed_lengths_started_spread_give_the_step_times_the_phase_laws_error():
    # equal lengths started one by one keep phases that neither law describes: they take
    # turns at a few clients and cluster near the cap. On 24 slots, 32 tokens a request, the
    # fit flagged its own truth as a misfit and t0's and t1's intervals held them in 4 of 10
    # seeds; and one client's latency, its overhead measured on its own step time, counted
    # that step time's error twice (t0's interval held in 16 of 20 seeds on 32 slots)
    kw = {"warmup": 0, "spread": 0.0, "drain": True, "rtt_s": 0.004}
    parts = [
        batch_closed_requests([v], 24, T0, T1, 32, default_length("concurrency", v)[0], 5 + v, **kw)
        for v in [1, 2, 4, 8, 16, 32]
    ]
    data = pd.concat(parts, ignore_index=True)
    obs = observe(data)
    share, loose = _in_step(obs)
    assert share == 0.0 and (loose[1:] == 1.0).all()
    res = fit(data, model="batch")
    assert not any("does not fit" in n for n in res.notes)
    ci = res.conf_int()
    assert (ci.loc["slots", "lower"], ci.loc["slots", "upper"]) == (24, 24)
    for name, truth in (("t0_s", T0), ("t1_s", T1)):
        assert ci.loc[name, "lower"] <= truth <= ci.loc[name, "upper"], name
        assert ci.loc[name, "upper"] / ci.loc[name, "lower"] < 1.01, name  # honest, not everything
    # the overhead is what one client's latency leaves beside the fitted step time
    first = data[data["level"] == 1]
    p = res._est.p
    left = first["latency_s"].mean() - 32 * (p["t0_s"] + p["t1_s"])
    assert res.fixed["overhead_s"] == pytest.approx(left, rel=0.05)
    assert "overhead_s (profiled):" in res.summary().as_text()


def test_a_latency_only_misfit_of_loose_phases_names_them_and_asks_for_streaming():
    # the same phases with the latency alone: nothing sizes the law's error there (8 slots, 8
    # tokens: 9 slots read and the fit's own truth flagged in 6 of 6 exact sweeps); the warning
    # names the cause and what measures it, not "compare other models"
    kw = {"warmup": 0, "spread": 0.0, "drain": True, "rtt_s": 0.004}
    parts = [
        batch_closed_requests(
            [v], 8, T0, T1, 8, default_length("concurrency", v)[0], 1000 + v, **kw
        )
        for v in [1, 2, 4, 8, 16]
    ]
    streamed = pd.concat(parts, ignore_index=True)
    notes = fit(streamed.drop(columns=["itl_mean_s"]), model="batch").notes
    (warning,) = [n for n in notes if "does not fit" in n]
    assert "equal output lengths" in warning and "stream the responses" in warning
    assert "compare other models" not in warning
    # streamed, the step times size it: no warning
    assert not any("does not fit" in n for n in fit(streamed, model="batch").notes)


def test_a_cap_left_open_by_the_laws_error_asks_for_step_times_not_higher_levels():
    # the notebooks' latency-only article sweep (32 slots, a queue of 32, 429s past 64): the
    # latency law's own error leaves the cap's set open above, which said "no saturation up to
    # 64; measure at 128 and 256", levels the replica refuses; the step times pin it
    data = datasets.load("fit-article-batching/sweep")
    res = fit(data, model="batch")
    said = res.unidentified["slots"]
    assert "latency law's own error" in said and "stream the responses" in said
    assert "no saturation" not in said and "128" not in said
    lower, upper = res.conf_int().loc["slots"]
    assert lower <= 32 <= upper
    asked = res.next_levels()
    assert set(asked.loc[asked["param"] == "slots", "level"]) <= {16.0, 32.0, 64.0}


@pytest.mark.parametrize("join_steps", [1, 0])
def test_a_join_wait_on_an_end_of_its_range_gets_a_one_sided_interval(join_steps):
    # a request joins the batch one whole step after it arrives (the simulator behind HTTP) or
    # at once: the estimate sits on that end of the range, where the likelihood has no
    # curvature. It was reported "not identified" with advice to stream what was streamed; its
    # profile interval now reaches in from that end, and holds the truth (in 20 of 20 seeds of
    # 8 and of 32 slots each way: the closing note of issue 10)
    res = fit(_sweep([1, 2, 4, 8, 16], 8, n=None, seed=4, join_steps=join_steps), model="batch")
    assert res.params["slots"] == 8 and "join_steps" not in res.unidentified
    end = 1.0 if join_steps else 0.001
    assert res.params["join_steps"] == pytest.approx(end, rel=1e-3)
    lower, upper = res.conf_int().loc["join_steps"]
    assert lower * (1 - 1e-9) <= end <= upper * (1 + 1e-9)  # the range's end, up to exp(log)
    inner = lower if join_steps else upper  # the interval's end the data set
    assert 0.5 < inner < 1 if join_steps else 0.001 < inner < 0.5
    assert not any(r["param"] == "join_steps" for _, r in res.next_levels().iterrows())
    text = res.summary().as_text()
    assert "one-sided" in text and "join_steps not identified" not in text
    assert any(n.startswith(f"join_steps = {end:.3g} sits on an end") for n in res.notes)
    # the plan's slow end: one whole step, whatever the estimate
    slow = res._pessimistic()
    assert all(p["join_steps"] == pytest.approx(upper) for p in slow)


@pytest.mark.parametrize("power", [1.0, 0.7, 1.6])
def test_the_free_exponent_is_climbed_to_and_fitted_whole_only_where_it_pays(power):
    # fit(model="batch") asks whether the free step-time exponent lowers AIC by 2 of its
    # profile climbed from the linear form's cap (7 of 30 integers): the climbed AIC is the
    # whole profile's, and a step time of batch^0.7 takes the free form. At batch^1.6 the
    # linear form reads the cap 7 too high: the climb gives up past 3 and the whole profile
    # decides
    from llmlat.fitting._estimate import _CLIMB_REACH, _estimate, _Problem, climbed_aic
    from llmlat.fitting._fit import _fixed

    levels = [1, 2, 4, 8, 16, 24, 32, 48, 64]
    parts = [
        batch_closed_requests(
            [v],
            32,
            T0,
            T1,
            40,
            n=default_length("concurrency", v)[0],
            seed=v,
            warmup=0,
            step_s=lambda b: T0 + T1 * b**power,
        )
        for v in levels
    ]
    data = pd.concat(parts, ignore_index=True)
    res = fit(data, model="batch")
    linear = fit(data, model="batch", gamma=1.0)
    obs = res._problem.all
    fixed, _ = _fixed(MODELS["batch"], obs, think_s=None, tokens=None, gamma=None, cv_s=None)
    problem = _Problem(MODELS["batch"], obs, "wls", "mean", fixed)
    whole = _estimate(problem)
    aic = -2 * whole.llf + 2 * problem.df_model(whole.theta)
    climbed = climbed_aic(problem, int(linear.params["slots"]))
    if abs(whole.k - linear.params["slots"]) > _CLIMB_REACH:
        assert power == 1.6 and climbed is None
    else:
        assert climbed == pytest.approx(aic, abs=1e-4)
    curved = aic < linear.aic - 2
    assert curved == (power != 1.0)
    assert ("gamma" in res.params) == curved
    if curved:
        assert res.params["gamma"] == pytest.approx(power, rel=0.05)
        assert res.params["slots"] == 32
        assert any("step time grows as batch^" in n for n in res.notes)


def test_a_plan_on_one_slot_moves_t0_and_t1_only_as_far_as_their_sum_allows():
    # at one slot every step is t0 + t1: the data pin the sum, not the split (correlation
    # -0.999999). Each moved to its own slow end, the plan's slowest set put the capacity at
    # 0-3% of the fitted one (a rate of 0.3 requests/s where 10 were served); the corner is
    # now brought in to where uncorrelated parameters would put it
    res = fit(_sweep([1, 2, 4, 8], 1, n=None, seed=1), model="batch")
    cov = res._est.cov[:2, :2]
    assert cov[0, 1] / np.sqrt(cov[0, 0] * cov[1, 1]) < -0.999
    assert "t1_s" in res.unidentified
    cap = res.capacity_rps
    slow = [res._model.capacity(p) for p in res._pessimistic()]
    assert all(0.98 * cap < s < cap for s in slow)
    # the corner unshrunk: each parameter z standard errors up, the capacity collapses
    z = res._quantile(0.95)
    corner = res._est.p | {
        n: float(np.exp(res._est.theta[i] + z * np.sqrt(cov[i, i])))
        for i, n in enumerate(("t0_s", "t1_s"))
    }
    assert res._model.capacity(corner) < 0.5 * cap
    plan = res.plan(p95=3.0)
    assert 0.5 * cap < plan.rate_rps < cap
