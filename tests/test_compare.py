"""Comparing sweeps (llmlat.compare_runs, SweepResult.compare, plot.comparison).

The comparison is a pure function of the tables, so these tests build sweeps with known truth
(open-loop levels: Poisson sends, gamma latencies, a chosen 429 share) rather than measure them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import llmlat
from llmlat.comparison import COMPARE_COLUMNS, compare_runs
from llmlat.results import SweepResult


def fake_sweep(
    rng: np.random.Generator,
    levels: dict[float, float],
    *,
    n: int = 400,
    refused: float = 0.0,
    run_id: str = "a",
) -> SweepResult:
    """An open-loop sweep: per level (rate -> mean latency), ``n`` requests, gamma(4) latencies."""
    frames = []
    for rate, mean in levels.items():
        sched = np.cumsum(rng.exponential(1 / rate, n))
        latency = rng.gamma(4.0, mean / 4.0, n)
        hit = rng.random(n) < refused
        frames.append(
            pd.DataFrame(
                {
                    "run_id": run_id,
                    "level": rate,
                    "level_kind": "rate",
                    "t_scheduled": sched,
                    "t_sent": sched,
                    "t_end": sched + latency,
                    "latency_s": latency,
                    "ok": ~hit,
                    "status": np.where(hit, 429, 200),
                    "error_kind": pd.array(np.where(hit, "rate_limited", None), dtype="string"),
                    "attempts": 1,
                }
            )
        )
    req = pd.concat(frames, ignore_index=True)
    req["request_id"] = np.arange(len(req))
    return SweepResult(req, meta={"run_id": run_id})


def test_a_real_change_is_significant_and_levels_in_one_run_say_so():
    rng = np.random.default_rng(1)
    a = fake_sweep(rng, {2.0: 1.0, 4.0: 1.0}, run_id="before")
    b = fake_sweep(rng, {2.0: 1.5, 8.0: 1.0}, refused=0.2, run_id="after")
    table = a.compare(b)
    assert list(table.columns) == list(COMPARE_COLUMNS)
    assert llmlat.compare is llmlat.fitting.compare  # no module of that name shadows the fits
    assert set(table["run"]) == {"after"} and set(table["baseline"]) == {"before"}
    both = table[table["present"] == "both"].set_index("metric")
    assert set(both["level"]) == {2.0}
    p50 = both.loc["latency_p50_s"]
    assert p50["diff_low"] > 0 and p50["significant"]  # the median rose by half
    assert p50["diff_low"] < 0.5 * p50["baseline_value"] < p50["diff_high"]  # and covers truth
    refusals = both.loc["rate_limited_rate"]
    assert refusals["significant"] and refusals["diff_low"] < 0.2 < refusals["diff_high"]
    # levels measured once are rows that say so, without a difference
    once = table[table["present"] != "both"]
    assert dict(zip(once["level"], once["present"], strict=False)) == {
        4.0: "baseline only",
        8.0: "run only",
    }
    assert once["diff"].isna().all() and once["significant"].isna().all()
    assert (once.loc[once["present"] == "run only", "value"].notna()).all()


def test_the_difference_interval_is_conservative_on_same_distribution_runs():
    # two sweeps of one truth: the 95% difference interval should exclude 0 at most ~5% of
    # the time (it is Bonferroni-combined, so usually far less)
    rng = np.random.default_rng(7)
    false = total = 0
    for _ in range(20):
        a = fake_sweep(rng, {2.0: 1.0}, n=150, refused=0.05, run_id="a")
        b = fake_sweep(rng, {2.0: 1.0}, n=150, refused=0.05, run_id="b")
        sig = compare_runs([a, b])["significant"].dropna()
        false += int(sig.sum())
        total += len(sig)
    assert total >= 60
    assert false / total <= 0.05


def test_compare_runs_names_several_runs_and_checks_its_input():
    rng = np.random.default_rng(3)
    runs = {name: fake_sweep(rng, {2.0: 1.0}, run_id="same") for name in ("x", "y", "z")}
    table = llmlat.compare_runs(runs)
    assert list(dict.fromkeys(table["run"])) == ["y", "z"]
    assert set(table["baseline"]) == {"x"}
    # without names, repeated run ids become run<i>
    assert set(compare_runs(list(runs.values()))["run"]) == {"run1", "run2"}
    # an empty run measured nothing: every level is the baseline's only
    assert set(compare_runs([runs["x"], SweepResult()])["present"]) == {"baseline only"}
    twice = SweepResult.concat([runs["x"], fake_sweep(rng, {2.0: 1.0}, run_id="other")])
    with pytest.raises(ValueError, match="level 2 was measured by several runs"):
        compare_runs([twice, runs["y"]])
    with pytest.raises(ValueError, match="runs: expected at least two"):
        compare_runs([runs["x"]])
    with pytest.raises(ValueError, match="runs: y is a DataFrame"):
        compare_runs({"x": runs["x"], "y": runs["x"].requests})
    with pytest.raises(ValueError, match="confidence"):
        compare_runs(list(runs.values()), confidence=1.5)


def test_comparison_figure_has_a_panel_per_metric():
    rng = np.random.default_rng(5)
    a = fake_sweep(rng, {2.0: 1.0, 4.0: 1.0})
    b = fake_sweep(rng, {2.0: 1.2, 8.0: 1.0}, run_id="b")
    table = a.compare(b)
    fig = llmlat.plot.comparison(table)
    drawn = [ax for ax in fig.axes if ax.has_data()]
    assert len(drawn) == 4
    assert "p95 latency" in drawn[1].get_title()
    fig = llmlat.plot.comparison(table, metrics=["throughput_rps"])
    assert len(fig.axes) == 1
    with pytest.raises(ValueError, match="metrics: unknown"):
        llmlat.plot.comparison(table, metrics=["nope"])
    with pytest.raises(ValueError, match="table: expected"):
        llmlat.plot.comparison(a.requests)


def test_compare_fits_puts_parameters_side_by_side_and_says_why_a_run_has_none():
    rng = np.random.default_rng(2)
    mm1 = lambda mu: {lam: 1 / (mu - lam) for lam in (2.0, 4.0, 6.0, 8.0)}  # noqa: E731
    runs = {
        "slow": fake_sweep(rng, mm1(10.0), n=300),
        "fast": fake_sweep(rng, mm1(14.0), n=300),
        "one level": fake_sweep(rng, {2.0: 0.5}, n=100),
    }
    table = llmlat.compare_fits(runs, model="mm1").set_index("run")
    slow, fast = table.loc["slow"], table.loc["fast"]
    assert slow["param"] == "mu" and slow["low"] < slow["estimate"] < slow["high"]
    assert fast["low"] > slow["high"]  # the faster server's capacity, clearly apart
    alone = table.loc["one level"]
    assert pd.isna(alone["param"]) and "one load level" in alone["note"]
