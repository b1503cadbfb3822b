"""The calibration benchmark's judgement: a share of seeds against a target, with its uncertainty.

benchmarks/bench_calibration.py is a script, not part of the package: loaded from its path.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import llmlat

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_calibration.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_calibration", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


COVER = (0.90, 0.98)
AT_LEAST_90 = (0.90, 1.0)


def test_share_interval_is_clopper_pearson(bench):
    lo, hi = bench.share_ci(20, 20)
    assert hi == 1.0
    assert lo == pytest.approx(0.025 ** (1 / 20), rel=1e-9)  # P(20 of 20 | p = lo) = 2.5%
    lo, hi = bench.share_ci(0, 20)
    assert lo == 0.0
    assert hi == pytest.approx(1 - 0.025 ** (1 / 20), rel=1e-9)


@pytest.mark.parametrize(
    ("k", "n", "target", "expected"),
    [
        (20, 20, COVER, "wide"),  # a true 95% interval covers 20 of 20 times with p = 0.36
        (19, 20, COVER, "ok"),
        (17, 20, COVER, "more"),  # 0.85, but [0.62, 0.97] still reaches 0.90
        (12, 20, COVER, "miss"),  # [0.36, 0.81] is below 0.90
        (100, 100, COVER, "wide"),  # [0.964, 1] still reaches 0.98
        (200, 200, COVER, "miss"),  # [0.982, 1]: too wide, shown
        (17, 20, AT_LEAST_90, "more"),
        (18, 20, AT_LEAST_90, "ok"),
        (1, 20, (0.0, 0.05), "ok"),
        (5, 20, (0.0, 0.05), "miss"),
        (1, 18, (0.0, 0.05), "more"),  # above a ceiling is never "too wide"
    ],
)
def test_judge(bench, k, n, target, expected):
    assert bench.judge(k, n, target) == expected


def test_seeds_to_decide_all_covering(bench):
    # every seed covering is told from 0.98 once 0.025 ** (1 / n) > 0.98, at n = 183
    need = bench.seeds_to_decide(20, 20, COVER)
    assert 183 <= need <= 200
    assert bench.judge(need, need, COVER) == "miss"


def test_verdict_names_misses_and_undecided(bench):
    counts = {"c_exact": (6, 20), "cover": (20, 20), "auto": (20, 20), "c_oracle": (0, 20)}
    text, undecided = bench.verdict(counts)
    assert text.startswith("MISS: c_exact; wider than 0.98?: cover (~")
    assert "c_oracle" not in text  # an experiment, not a target
    assert not undecided  # too wide is cautious: no rerun for it
    text, undecided = bench.verdict({"c_cover": (16, 20), "break": (2, 20)})
    assert text.startswith("more seeds: c_cover (~")
    assert "break (~" in text
    assert undecided
    text, undecided = bench.verdict({"c_exact": (19, 20), "err_mu": (15, 20)})
    assert (text, undecided) == ("consistent with every target", False)


def test_one_seed_with_oracle_and_scale(bench):
    cells = {c.name: c for c in bench._cells()}
    cell = replace(cells["mmc-open-c4-cv1"], scale=0.5)
    full = cells["mmc-open-c4-cv1"].simulate(1000)
    assert len(cell.simulate(1000)) < 0.6 * len(full)  # scale shortens every level
    row = bench.run_seed(cell, 0, oracle=True, fit_only=True)
    assert row["failed"] == 0.0
    assert row["c_oracle"] in (0.0, 1.0)
    assert row["c_thru"] in (0.0, 1.0)
    assert row["c_req"] in (0.0, 1.0)
    assert "auto" not in row  # fit_only: no auto fit, no plan
    summary = bench.summarise(cell, [row], 0.0)
    assert summary["counts"]["c_exact"] == (int(row["c_exact"]), 1)


@pytest.mark.parametrize("name", ["mmc-open-c4-cv1", "mmc-closed-c4-cv1", "mmc-opencap-c4-cv1"])
def test_request_level_c(bench, name):
    # the path of requests in flight says c = 4 on a short seeded sweep; a closed client's next
    # send at its previous end must not count as a fifth request in the system
    cell = {c.name: c for c in bench._cells()}[name]
    data = cell.simulate(1000)
    assert bench.c_request_level(data, np.arange(1, 9)) == 4
    assert bench.c_request_level(data, np.arange(1, 9), mu=bench.MU) == 4


def test_cells_off_the_grid_are_named_as_the_grids(bench):
    # every M/G/c cell of the grid is what its name spells; off the grid a name spells a
    # cell of any c and CV (open, behind a cap of 2c, closed), the grid left as it was
    grid = {c.name: c for c in bench._cells()}
    assert len(grid) == 32  # 24 M/G/c cells, 4 batching, 4 batching at fixed lengths
    for name, cell in grid.items():
        assert bench.mmc_cell(name) == cell or cell.family == "batch"
    assert not set(bench.OFF_GRID) & set(grid) and len(bench.OFF_GRID) == 12
    cell = bench.mmc_cell("mmc-opencap-c16-cv2")
    assert (cell.kind, cell.c, cell.cv, cell.queue_cap) == ("rate", 16, 2.0, 32)
    cell = bench.mmc_cell("mmc-closed-c4-cv0.5")
    assert (cell.kind, cell.c, cell.cv, cell.queue_cap) == ("concurrency", 4, 0.5, None)
    for bad in ("mmc-open-c4", "mmc-shut-c4-cv2", "mmc-open-cx-cv2", "mmc-open-c4-cv2.0", "x"):
        assert bench.mmc_cell(bad) is None


def test_requests_for_c(bench):
    # sd(c) = c cv sqrt(2 / n) at the 90% rounding bound: n grows as (c cv)^2
    n64 = bench.requests_for_c(64, 1.0)
    assert 80_000 < n64 < 100_000
    assert bench.requests_for_c(16, 1.0) == pytest.approx(n64 / 16, rel=0.01)
    assert bench.requests_for_c(64, 0.05) == pytest.approx(n64 * 0.05**2, rel=0.01)


def test_follow_measures_the_advised_levels_again_and_refits(bench):
    # an open c = 16 sweep at half length: c's 95% set holds several values, so the fit
    # advises the level past capacity and the lightest one longer; --follow measures them so
    cell = replace({c.name: c for c in bench._cells()}["mmc-open-c16-cv1"], scale=0.5)
    data = cell.simulate(1000)
    res = llmlat.fit(data, model="mmc")
    advice = res.next_levels()
    assert len(advice) == 2
    more = bench.follow(cell, data, advice, 0)
    sizes = more.groupby("level").size()
    for level, n in zip(advice["level"], advice["requests"], strict=True):
        assert sizes[level] == pytest.approx(n, rel=0.1)  # replaced, n arrivals long
    others = ~data["level"].isin(advice["level"])
    assert (sizes.drop(advice["level"]) == data[others].groupby("level").size()).all()
    row = bench.run_seed(cell, 0, fit_only=True, follows=True)
    assert row["followed"] == 1.0
    assert row["requests_after"] == len(more) - len(data)
    assert row["c_exact_after"] in (0.0, 1.0) and row["c_cover_after"] in (0.0, 1.0)
    assert row["c_told"] == 1.0 and row["c_silent"] == row["c_silent_after"] == 0.0


def test_told_is_right_or_a_set_of_several_values_with_the_truth_that_the_fit_says(bench):
    assert bench.told(True, 64, 64, 64, says=False)
    assert bench.told(False, 63, 65, 64, says=True)
    assert not bench.told(False, 63, 63, 64, says=True)  # pinned but wrong, whatever it says
    assert not bench.told(False, 63, 65, 64, says=False)  # several values, nothing said
    assert not bench.told(False, 65, 67, 64, says=True)  # several values, not the truth


def test_a_pinned_wrong_c_is_wrong_in_every_column(bench):
    # a fit pinned at c = 4 (its 95% set one value), judged against a truth of 5: not exact,
    # not "says it cannot tell" (the fit asks for nothing), and following advice it never
    # gave keeps it wrong
    cell = {c.name: c for c in bench._cells()}["mmc-open-c4-cv1"]
    data = cell.simulate(1)
    res = llmlat.fit(data, model="mmc")
    assert tuple(res.conf_int().loc["c"]) == (4, 4) and res.next_levels().empty
    assert bench.c_told(res, 4) == {"c_told": 1.0, "c_silent": 0.0}
    assert bench.c_told(res, 5) == {"c_told": 0.0, "c_silent": 0.0}
    after = bench._followed(replace(cell, c=5), data, res, 0)
    assert after["followed"] == 0.0 and after["c_exact_after"] == 0.0
    counts = bench._counts([{"c_exact": 0.0, "c_told": 0.0} | after] * 20)  # every seed so
    assert bench.c_verdict(counts).endswith("=> WRONG: c wrong without saying so")


def test_a_set_of_several_values_counts_as_told_only_when_the_fit_says_so(bench):
    # open c = 16 at half length: c's 95% set holds several values and a note with
    # next_levels' advice says so; without the note the same set is silent (a defect)
    cell = replace({c.name: c for c in bench._cells()}["mmc-open-c16-cv1"], scale=0.5)
    res = llmlat.fit(cell.simulate(1000), model="mmc")
    lo, hi = res.conf_int().loc["c"]
    assert lo < hi and bench.says_cannot_tell(res)
    assert bench.c_told(res, lo) == {"c_told": 1.0, "c_silent": 0.0}
    assert bench.c_told(res, hi + 1)["c_told"] == 0.0  # outside the set: wrong
    res.notes = [n for n in res.notes if "95% set" not in n]
    assert not bench.says_cannot_tell(res)
    assert bench.c_told(res, lo) == {"c_told": float(res.params["c"] == lo), "c_silent": 1.0}


def test_a_batch_fits_slot_set_of_several_values_is_said(bench):
    # 128 slots, the calibration's closed design: the slot cap's 95% set is {128, 129} (3 of
    # 4 seeds), which the fit did not say: now a note and advice, the levels around the knee
    # and a level of 129 clients (they wait for a slot only if slots < 129)
    cell = {c.name: c for c in bench._cells()}["batch-closed-s128"]
    data = cell.simulate(1000)
    res = llmlat.fit(data, model="batch")
    assert tuple(res.conf_int().loc["slots"]) == (128, 129)
    assert bench.c_told(res, 128) == {"c_told": 1.0, "c_silent": 0.0}
    rows = res.next_levels()
    # the join wait lands on its bound, the truth of one whole step: a row of its own
    rows = rows[rows["param"].eq("slots")]
    assert len(rows) and 129 in set(rows["level"])
    assert (rows["requests"] >= rows["measured"]).all()
    assert any(n.startswith("slots = 128 is one of 128..129 (95% set)") for n in res.notes)
    # --follow measures each advised level (clients) for its requests, as closed levels
    more = bench.follow(cell, data, rows, 0)
    sizes = more.groupby("level").size()
    for level, n in zip(rows["level"], rows["requests"], strict=True):
        assert sizes[level] == n


@pytest.mark.parametrize(
    ("counts", "end"),
    [
        ({"c_exact": (19, 20), "c_told": (20, 20)}, "=> exact"),
        (
            {"c_exact": (3, 20), "c_told": (20, 20), "c_exact_after": (20, 20)},
            "=> design-limited: the fit says it cannot tell, and its advice pins c",
        ),
        (
            {"c_exact": (3, 20), "c_told": (19, 20)},
            "=> design-limited: the fit says it cannot tell (--follow checks its advice)",
        ),
        ({"c_exact": (3, 20), "c_told": (10, 20)}, "=> WRONG: c wrong without saying so"),
        (
            {"c_exact": (3, 20), "c_told": (20, 20), "c_exact_after": (10, 20)},
            "=> advice short: following it does not pin c",
        ),
        (
            {"c_exact": (19, 20), "c_told": (20, 20), "c_silent": (1, 20)},
            "=> exact; DEFECT: 1/20 sets of several values without advice",
        ),
        (
            {"c_exact": (3, 20), "c_told": (20, 20), "c_exact_after": (19, 20)}
            | {"c_silent_after": (2, 20)},
            "advice pins c; DEFECT: 2/20 sets of several values without advice after following",
        ),
    ],
)
def test_c_verdict(bench, counts, end):
    text = bench.c_verdict(counts)
    assert text.endswith(end)
    assert text.startswith(f"exact {counts['c_exact'][0]}/20 (")


def test_break_truth_is_simulated_where_no_formula_is_exact(bench):
    """The plan's break is judged on an exact simulation for a non-exponential service (the
    M/G/c approximations the fit uses would hide their own bias), and the simulation agrees
    with the exact formulas where they exist: M/M/c, M/M/c/K, and closed N <= c (the service)."""
    from scipy import stats

    n = 20_000
    cells = {c.name: replace(c, truth_requests=n) for c in bench._cells()}
    for name in ("mmc-open-c4-cv0.05", "mmc-opencap-c4-cv0.05"):
        cell = cells[name]
        target, batches = bench._target(cell)
        sim, _ = bench.simulated_p95("rate", 0.7 * 4 * bench.MU, 4, 0.05, cell.queue_cap, n)
        assert target == sim and len(batches) == 20
    assert bench._target(cells["mmc-open-c4-cv1"])[1] is None  # the exact formula
    # --target-load: the truth's p95 at another share of capacity, simulated the same way
    cell = replace(cells["mmc-open-c4-cv0.05"], target_load=0.9)
    sim, _ = bench.simulated_p95("rate", 0.9 * 4 * bench.MU, 4, 0.05, None, n)
    assert bench._target(cell)[0] == sim > bench._target(cells["mmc-open-c4-cv0.05"])[0]
    lam = 0.7 * 4 * bench.MU
    exact = {
        None: float(llmlat.queueing.mmc_response_quantile(0.95, lam, bench.MU, 4)),
        8: float(bench._mmck_quantile(0.95, np.array([lam]), {"mu": 2.0, "c": 4, "k_sys": 12})[0]),
    }
    for cap, want in exact.items():
        sim, batches = bench.simulated_p95("rate", lam, 4, 1.0, cap, n)
        se = np.std(batches, ddof=1) / np.sqrt(len(batches))
        assert abs(sim - want) < 4 * se + 0.01 * want
    sim, _ = bench.simulated_p95("concurrency", 3, 4, 0.3, None, n)  # 3 clients, 4 servers
    assert sim == pytest.approx(stats.gamma.ppf(0.95, 1 / 0.09, scale=0.09 / bench.MU), rel=0.01)


def test_a_plans_load_is_judged_paired_against_the_targets(bench):
    """The plan gets the target simulated long; whether its load breaks it is read on the same
    draws at the target's load: a rate 0.5% past it breaks, 0.5% short of it does not, both
    told beyond two standard errors (each p95 alone is about 2% uncertain at this size)."""
    from types import SimpleNamespace

    cells = {c.name: c for c in bench._cells()}
    cell = replace(cells["mmc-opencap-c4-cv0.05"], truth_requests=200_000)
    target, groups = bench._target(cell)
    lam = 0.7 * cell.c * bench.MU
    for factor, broken in ((1.005, 1.0), (0.995, 0.0)):
        wanted = []
        plan = SimpleNamespace(feasible=True, rate_rps=factor * lam, concurrency=None)
        res = SimpleNamespace(plan=lambda p95, plan=plan, wanted=wanted: wanted.append(p95) or plan)
        out = bench._plan_breaks(cell, res)
        assert wanted == [target]
        assert (out["break"], out["break_sure"], out["infeasible"]) == (broken, 1.0, 0.0)
    assert out["target_se_s"] == pytest.approx(np.std(groups, ddof=1) / np.sqrt(20))
    # a plan that says no load meets the target breaks nothing, and is counted as such
    refused = SimpleNamespace(plan=lambda p95: SimpleNamespace(feasible=False))
    out = bench._plan_breaks(cell, refused)
    assert (out["break"], out["infeasible"], out["target_s"]) == (0.0, 1.0, target)
    assert bench._counts([out, out | {"infeasible": 0.0}])["infeasible"] == (1, 2)


def test_capped_quantile_of_near_constant_service_is_the_simulated_one(bench):
    """Behind a queue cap, near-constant service on 4 servers at 70% load: the M/D/c/K law
    (states of the chain one service apart, the wait by Crommelin's count of those ahead)
    reads the exact simulation's p95 (-5% with the gamma law by spells before it)."""
    lam, p = 0.7 * 4 * bench.MU, {"mu": bench.MU, "c": 4, "k_sys": 12, "cv_s": 0.05}
    sim, batches = bench.simulated_p95("rate", lam, 4, 0.05, 8, 100_000)
    model = float(bench._mmck_quantile(0.95, np.array([lam]), p)[0])
    se = np.std(batches, ddof=1) / np.sqrt(len(batches))
    assert se < 0.012 * sim
    assert abs(model - sim) < 0.005 * sim + 3 * se


def test_closed_quantile_spreads_the_wait_by_the_servers_phases(bench):
    """5 clients on 4 near-constant servers: the wait for the next departure is spread by the
    other servers' phases; as j service times in a row alone the p95 read 18% low."""
    sim, _ = bench.simulated_p95("concurrency", 5, 4, 0.05, None, 50_000)
    model = llmlat.queueing.closed_mgc_response_quantile(0.95, [5], bench.MU, 4, 0.0, 0.05)[0]
    assert model == pytest.approx(sim, rel=0.05)


def test_follow_follows_what_a_refused_fit_said_to_measure(bench):
    # two open levels below capacity: the fit refuses ("no saturation reached") and its error
    # tabulates the levels to add and their lengths (next_levels()); --follow measures them
    # and refits, as it follows a fit's advice
    cell = replace({c.name: c for c in bench._cells()}["mmc-open-c16-cv1"], loads=(0.3, 0.6))
    row = bench.run_seed(cell, 0, fit_only=True, follows=True)
    assert row["failed"] == 1.0 and "no saturation reached" in row["error"]
    assert row["followed"] == 1.0 and row["requests_after"] > 1000
    assert row["c_after"][1] <= 16 <= row["c_after"][2]  # the refit bounds c


def test_a_batching_cells_plan_is_judged_on_the_truths_p95_at_its_concurrency(bench):
    """A batching cell's plans were not judged at all. The target is the truth's p95 at 70% of
    the slots in flight; a plan for it recommends clients, judged on the truth's p95 there,
    which grows with them (below the cap every client lengthens every step)."""
    cell = {c.name: c for c in bench._cells()}["batch-closed-s8"]
    target, groups = bench.batch_p95(cell, 6)  # round(0.7 * 8)
    assert len(groups) == 20 and np.min(groups) < target < np.max(groups)
    assert bench.batch_p95(cell, 5)[0] < target < bench.batch_p95(cell, 7)[0]
    res = llmlat.fit(cell.simulate(0), model="batch")
    row = bench._plan_breaks(cell, res)
    assert row["target_s"] == target and row["infeasible"] == 0.0
    plan = res.plan(p95=target)
    assert row["break"] == float(bench.batch_p95(cell, plan.concurrency)[0] > target)
    assert 1 <= plan.concurrency <= 6 and row["break"] == 0.0
