"""A seeded slice of benchmarks/bench_calibration.py: the same checks, few seeds, loose bounds.

Exact simulations of llmlat's own sweep design (each level starts empty, default lengths, the
start-up transient in the data). The full grid and its figures are in the benchmark.
"""

from __future__ import annotations

import numpy as np
import pytest

import llmlat
from llmlat import queueing
from llmlat._synth import mgc_sweep

C, MU = 4, 2.0
LEVELS = [1, 2, 4, 6, 8, 12]
RATES = [f * C * MU for f in (0.3, 0.6, 0.8, 0.9, 1.2)]
SEEDS = range(1000, 1006)


def _cover(fits, name: str, truth: float) -> float:
    cis = [f.conf_int() for f in fits]
    return float(np.mean([ci.loc[name, "lower"] <= truth <= ci.loc[name, "upper"] for ci in cis]))


def _sweep(kind: str, seed: int):
    if kind == "closed":
        return mgc_sweep("concurrency", LEVELS, MU, C, seed=seed)
    return mgc_sweep("rate", RATES, MU, C, queue_cap=2 * C if kind == "cap" else None, seed=seed)


@pytest.fixture(scope="module", params=["closed", "open", "cap"])
def fits(request):
    return request.param, [llmlat.fit(_sweep(request.param, s), model="mmc") for s in SEEDS]


def test_c_is_found_and_intervals_hold_the_truth(fits):
    _, fits = fits
    # the benchmark finds c in 20 of 20 seeds for these cells, and mu's 95% interval holds
    # the truth in 85-100% of them (closed: 85%): 3 of 6 or fewer would be a defect (p < 1%)
    assert np.mean([f.params["c"] == C for f in fits]) >= 5 / 6
    assert _cover(fits, "c", C) >= 5 / 6 and _cover(fits, "mu", MU) > 3 / 6
    # median error: the benchmark's is 1-3.5% for these cells
    assert np.median([abs(f.params["mu"] / MU - 1) for f in fits]) <= 0.05


def test_refusals_are_blocking_behind_a_cap_and_capacity_past_it(fits):
    kind, fits = fits
    if kind == "closed":
        return
    if kind == "open":  # the overloaded level measures capacity by its throughput
        assert all(f.levels.loc[RATES[-1], "overloaded"] for f in fits)
        return
    assert all(any("queue cap" in n for n in f.notes) for f in fits)
    # the admitted rate lambda (1 - P_block) where 20% are refused: the truth's within 3%
    top = [f.predict([RATES[-1]], kind="rate")["throughput_rps"].iloc[0] for f in fits]
    truth = queueing.mmck(RATES[-1], MU, C, 3 * C)["throughput_rps"].iloc[0]
    np.testing.assert_allclose(top, truth, rtol=0.03)


def test_plans_from_those_fits_do_not_break_their_target(fits):
    kind, fits = fits
    if kind != "closed":
        return
    # target: the true p95 at 70% of capacity; the plan's concurrency must meet it for real
    target = float(np.ravel(queueing.mmc_response_quantile(0.95, 0.7 * C * MU, MU, C))[0])
    for f in fits:
        plan = f.plan(p95=target)
        assert plan.feasible and plan.concurrency is not None
        true = queueing.closed_mmc_response_quantile(0.95, np.array([plan.concurrency]), MU, C, 0.0)
        assert float(true[0]) <= target
