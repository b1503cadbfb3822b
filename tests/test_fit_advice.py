"""What to measure next (``FitResult.next_levels``): data that the fit's notes are written from."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import llmlat
from llmlat._synth import mgc_sweep

MU = 2.0


def _fit(kind: str, levels: list[float], c: int, seed: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return llmlat.fit(mgc_sweep(kind, levels, MU, c, seed=seed), model="mmc")


def _said(res, rows) -> str:
    """The one note that names every row's level (the table's words)."""
    (note,) = [n for n in res.notes if all(f"{v:g}" in n for v in rows["level"])]
    return note


def test_a_c_its_levels_do_not_pin_asks_for_longer_levels():
    # five open levels of ~1,000 arrivals hold c = 16 to one of three values or so
    rates = [f * 16 * MU for f in (0.3, 0.6, 0.8, 0.9, 1.2)]
    res = _fit("rate", rates, 16, 5001)
    lo, hi = res.conf_int().loc["c"]
    assert lo < hi
    rows = res.next_levels()
    assert list(rows.columns) == ["param", "level", "requests", "measured", "why"]
    assert rows["param"].eq("c").all()
    # the overloaded level (capacity) and the lightest (service time), each several times longer
    assert sorted(rows["level"]) == [rates[0], rates[-1]]
    assert (rows["measured"] > 500).all()
    assert (rows["requests"] > 2 * rows["measured"]).all()
    note = _said(res, rows)
    assert f"one of {lo:g}..{hi:g} (95% set)" in note
    assert f"about {rows['requests'].iloc[0]:,.0f} requests" in note


def test_a_pinned_fit_asks_for_nothing():
    res = _fit("rate", [f * 4 * MU for f in (0.3, 0.6, 0.8, 0.9, 1.2)], 4, 1)
    lo, hi = res.conf_int().loc["c"]
    assert lo == hi == 4
    rows = res.next_levels()
    assert rows.empty and list(rows.columns) == ["param", "level", "requests", "measured", "why"]
    assert not any("95% set" in n for n in res.notes)


def test_a_closed_c_set_of_two_asks_for_each_level_around_the_knee():
    res = _fit("concurrency", [1, 2, 4, 8, 12, 16, 24, 32], 8, 3)
    lo, hi = res.conf_int().loc["c"]
    assert (lo, hi) == (8, 9)  # two values: not pinned, so advised
    rows = res.next_levels()
    assert rows["level"].between(lo / 2, 2 * hi).all() and len(rows) >= 3
    # a closed level of N sends N at once: its first round is the start-up, counted in
    assert (rows["measured"] == 10 * rows["level"]).where(rows["level"] >= 10, True).all()
    assert (rows["requests"] > rows["measured"]).all()
    note = _said(res, rows)
    assert ", ".join(f"{v:,.0f}" for v in rows["requests"].iloc[:-1]) in note


def test_an_unidentified_c_asks_for_new_levels_past_its_floor():
    # one level above c = 16: no sustained queue shows, c only has a floor
    res = _fit("concurrency", [2, 4, 8, 12, 20], 16, 1)
    assert not res.capacity_identified
    rows = res.next_levels()
    assert len(rows) == 2 and (rows["measured"] == 0).all()
    assert (rows["level"] > 16).all() and (rows["requests"] > rows["level"]).all()
    note = res.unidentified["c"]
    assert f"(e.g. {rows['level'].iloc[0]:g} and {rows['level'].iloc[1]:g})" in note


@pytest.mark.parametrize("n", [1, 99, 101, 7_301, 123_456])
def test_advice_counts_round_up(n):
    from llmlat.fitting._results import _round_up

    got = _round_up(n)
    assert got >= n and got < 1.1 * n + 1
    assert len(str(int(got)).rstrip("0")) <= 2
    assert np.isnan(_round_up(np.nan))


def test_a_closed_c_set_asks_for_a_level_at_its_upper_c_and_following_it_pins_c():
    # 64 servers, the calibration's closed design: c's set is {64, 65}. Levels of 32..128
    # clients hardly tell 65 servers from 64 at the same capacity (their means agree to first
    # order); 65 clients queue on 64 servers and never on 65. Measuring only the knee's levels
    # longer read c = 65 here (bench_calibration.py --follow, seed 32)
    levels = [1, 2, 4, 16, 32, 64, 96, 128, 192]
    data = mgc_sweep("concurrency", levels, MU, 64, seed=1032)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = llmlat.fit(data, model="mmc")
    assert tuple(res.conf_int().loc["c"]) == (64, 65)
    rows = res.next_levels()
    new = rows[rows["measured"] == 0]
    assert list(new["level"]) == [65] and (new["requests"] >= rows["requests"].min()).all()
    assert "queue if c < 65" in new["why"].iloc[0]
    # follow it (each advised level measured that long, replacing a measured one), refit
    keep = ~data["level"].isin(rows["level"])
    parts = [
        mgc_sweep("concurrency", [v], MU, 64, seed=10**6 + 32_000 + i, length=n / (10 * v))
        for i, (v, n) in enumerate(zip(rows["level"], rows["requests"], strict=True))
    ]
    more = pd.concat([data[keep], *parts], ignore_index=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = llmlat.fit(more.sort_values(["level", "t_sent"], kind="stable"), model="mmc")
    assert tuple(again.conf_int().loc["c"]) == (64, 64)


def test_open_advice_asks_enough_of_the_two_levels_that_pin_c():
    # c = X / mu: the level past capacity measures X by its throughput (a Poisson count of the
    # completions in its window), the lightest level 1 / mu by its mean latency. Measured the
    # advised n requests each, they alone must give c the spread the advice aims at (0.215: c
    # exact in 98%). The profile's curvature alone asked for 12,263 here, which left c a spread
    # of 0.28: the levels it does not lengthen kept their share of that curvature, and the
    # level past capacity counts only the completions while its servers are all busy
    # (``n_slope``). At open c = 64 following it gave c exact in 46 of 50 seeds, with the two
    # levels' own errors 50 of 50
    from scipy import stats

    rates = [f * 16 * MU for f in (0.3, 0.6, 0.8, 0.9, 1.2)]
    res = _fit("rate", rates, 16, 5001)
    (n,) = set(res.next_levels()["requests"])
    lv = res._problem.all.levels.set_index("level")
    top, light = lv.loc[rates[-1]], lv.loc[rates[0]]
    var = top["n_sent"] / top["n_slope"] + light["n"] * (light["se_mean_s"] / light["mean_s"]) ** 2
    spread = float(res.params["c"]) * np.sqrt(var / n)
    assert spread <= 0.5 / stats.norm.ppf(0.99) * 1.05
    assert n < 3 * 12_263  # not far past what it needs


def test_batching_levels_too_short_for_a_steady_state_are_asked_again_longer():
    from llmlat._synth import batch_closed_requests

    def sweep(lengths: dict[int, int]) -> pd.DataFrame:
        parts = [
            batch_closed_requests([n], 32, 0.02, 0.001, 40, n=m, seed=n, warmup=0)
            for n, m in lengths.items()
        ]
        return pd.concat(parts, ignore_index=True)

    short = {n: 100 for n in (1, 2, 4, 8, 16, 24, 32, 48, 64)}
    res = llmlat.fit(sweep(short), model="batch")
    # 100 sends at 48 and 64 clients: the start-up and the drain are all of them; answered
    # requests, so not "no successful request"
    assert res.left_out == {48.0: "no steady state", 64.0: "no steady state"}
    assert not res.capacity_identified
    rows = res.next_levels().query("param == 'slots'")
    assert sorted(rows["level"]) == [48, 64]
    assert (rows["requests"] > 2 * rows["level"]).all() and (rows["requests"] > 100).all()
    note = res.unidentified["slots"]
    assert "concurrency 48 and 64 again with about" in note
    assert any("levels 48, 64 kept none outside their start-up and drain" in n for n in res.notes)
    # measured as asked, they pin the cap
    asked = dict(zip(rows["level"].astype(int), rows["requests"].astype(int), strict=True))
    again = llmlat.fit(sweep({**short, **asked}), model="batch")
    assert not again.left_out
    assert tuple(again.conf_int().loc["slots"]) == (32, 32)
