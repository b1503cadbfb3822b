"""Cost per token: prices from the tokens the server reported, per-level cost in the summary,
and a budget in the plan."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import llmlat
from llmlat import Prices, request_costs
from llmlat._summary import summarize
from llmlat._synth import mmc_closed_requests

SONNET = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}


def rows() -> pd.DataFrame:
    na = pd.NA
    return pd.DataFrame(
        {
            "level": [1.0] * 5,
            "ok": [True, True, True, False, True],
            "error_kind": pd.array([na, na, na, "rate_limited", na], dtype="string"),
            "prompt_tokens": pd.array([1000, 1000, 1000, na, 1000], dtype="Int64"),
            "completion_tokens": pd.array([100, 100, 100, na, 100], dtype="Int64"),
            "cached_tokens": pd.array([0, 900, na, na, 0], dtype="Int64"),
            "cache_creation_tokens": pd.array([900, 0, na, na, 0], dtype="Int64"),
        }
    )


def test_request_costs_price_what_the_server_reported():
    out = request_costs(rows(), SONNET)
    cost = out["cost_usd"].to_numpy()
    write = (100 * 3.0 + 900 * 3.75 + 100 * 15.0) / 1e6
    read = (100 * 3.0 + 900 * 0.3 + 100 * 15.0) / 1e6
    plain = (1000 * 3.0 + 100 * 15.0) / 1e6
    assert cost[[0, 1, 2, 4]] == pytest.approx([write, read, plain, plain])
    assert math.isnan(cost[3])
    assert out["cost_note"].iloc[3] == "no usage reported (failed: rate_limited)"
    assert out["cost_note"].isna().tolist() == [True, True, True, False, True]
    # a read with no cache_read price is not guessed
    cheap = request_costs(rows(), {"input": 3.0, "output": 15.0})
    assert math.isnan(cheap["cost_usd"].iloc[1])
    assert cheap["cost_note"].iloc[1] == "cache reads but no cache_read price"


@pytest.mark.parametrize(
    ("prices", "message"),
    [
        ({"input": 3.0}, r"^prices\.output: required"),
        ({"input": 3.0, "output": -1}, r"^prices\.output: -1 is not allowed"),
        ({"input": 3.0, "output": 1, "cache": 1}, r"^prices: unknown price 'cache'"),
        ([3.0, 15.0], r"^prices: expected Prices or a mapping"),
        ({"input": float("nan"), "output": 1}, r"^prices\.input: nan is not allowed"),
    ],
)
def test_bad_prices_get_one_line_errors(prices, message):
    with pytest.raises(ValueError, match=message):
        Prices.coerce(prices)


def test_prices_is_a_sweep_option_the_summary_defaults_to():
    # the one options model: a Prices, a mapping or the command line's text, kept as a dict
    config = llmlat.SweepConfig.from_options
    cfg = config(None, concurrency=1, prices={"input": "3", "output": 15, "cache_read": 0.3})
    assert cfg.prices == {"input": 3.0, "output": 15.0, "cache_read": 0.3}
    assert config(None, concurrency=1, prices=Prices(**SONNET)).to_meta()["prices"] == SONNET
    with pytest.raises(ValueError, match=r"^prices: output: -1 is not allowed"):
        config(None, concurrency=1, prices={"input": 3, "output": -1})
    req = rows().assign(
        t_scheduled=[0.0, 1.0, 2.0, 3.0, 4.0], latency_s=1.0, run_id="r", request_id=range(5)
    )
    req = req.assign(level_kind="concurrency")
    priced = llmlat.SweepResult(req, meta={"load": {"prices": SONNET}})  # as a sweep saves it
    assert priced.prices == SONNET
    expected = summarize(req, prices=SONNET)["cost_per_1k_requests_usd"]
    pd.testing.assert_series_equal(priced.summary()["cost_per_1k_requests_usd"], expected)
    cheaper = priced.summary(prices={k: v / 10 for k, v in SONNET.items()})  # given: it wins
    assert cheaper["cost_per_1k_requests_usd"].iloc[0] == pytest.approx(expected.iloc[0] / 10)
    assert "cost_usd" not in llmlat.SweepResult(req).summary().columns  # only when priced


def test_level_cost_in_the_summary():
    req = rows().assign(t_scheduled=[0.0, 1.0, 2.0, 3.0, 4.0], latency_s=1.0)
    table = summarize(req, prices=Prices(**SONNET))
    row = table.iloc[0]
    priced = request_costs(req, SONNET)
    mean_ok = priced.loc[priced["ok"], "cost_usd"].mean()
    assert row["cost_per_1k_requests_usd"] == pytest.approx(1000 * mean_ok)
    assert row["cost_per_hour_usd"] == pytest.approx(mean_ok * row["throughput_rps"] * 3600)
    assert row["cost_usd"] == pytest.approx(priced["cost_usd"].sum())
    assert row["cost_unpriced"] == 0
    assert "cost_usd" not in summarize(req).columns  # only when asked for
    # an ok row the server sent no usage for: no per-level figure, and the count says why
    blind = req.assign(prompt_tokens=pd.array([1000, pd.NA, 1000, pd.NA, 1000], dtype="Int64"))
    row = summarize(blind, prices=SONNET).iloc[0]
    assert np.isnan(row["cost_per_hour_usd"]) and row["cost_unpriced"] == 1


def test_plan_takes_a_budget_and_names_it_when_it_binds():
    res = llmlat.fit(mmc_closed_requests([1, 2, 4, 8], mu=2.0, c=4, n=300, seed=3), model="mmc")
    free = res.plan(max_utilization=0.7)
    cost = 0.01  # USD per request
    budget = 0.5 * free.rate_rps * 3600 * cost  # half the rate the cap allows
    tight = res.plan(max_utilization=0.7, budget_usd_per_hour=budget, cost_per_request_usd=cost)
    assert tight.binding == "budget" and "budget" in tight.describe()
    assert tight.rate_rps == pytest.approx(0.5 * free.rate_rps) == tight.budget_rate_rps
    assert np.isinf(free.budget_rate_rps)
    loose = res.plan(max_utilization=0.7, budget_usd_per_hour=1e6, cost_per_request_usd=cost)
    assert loose.binding == free.binding == "utilization cap"
    assert loose.rate_rps == pytest.approx(free.rate_rps)
    with pytest.raises(ValueError, match=r"^cost_per_request_usd: needed"):
        res.plan(max_utilization=0.7, budget_usd_per_hour=10.0)
    with pytest.raises(ValueError, match=r"^budget_usd_per_hour: must be positive"):
        res.plan(budget_usd_per_hour=-1.0, cost_per_request_usd=cost)
