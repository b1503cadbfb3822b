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
SEEDS = range(1000, 1005)


@pytest.fixture(scope="module")
def closed_fits():
    return [llmlat.fit(mgc_sweep("concurrency", LEVELS, MU, C, seed=s), model="mmc") for s in SEEDS]


def test_closed_mmc_intervals_hold_the_truth_and_c_is_found(closed_fits):
    cis = [f.conf_int() for f in closed_fits]
    c_cover = np.mean([ci.loc["c", "lower"] <= C <= ci.loc["c", "upper"] for ci in cis])
    mu_cover = np.mean([ci.loc["mu", "lower"] <= MU <= ci.loc["mu", "upper"] for ci in cis])
    # 95% intervals: 5 of 5 is expected, 4 of 5 happens (p ~ 0.2); 3 of 5 would be a defect
    assert c_cover >= 0.8 and mu_cover >= 0.8
    assert np.mean([f.params["c"] == C for f in closed_fits]) >= 0.6
    errors = [abs(f.params["mu"] / MU - 1) for f in closed_fits]
    assert np.median(errors) <= 0.08


def test_plans_from_those_fits_do_not_break_their_target(closed_fits):
    # target: the true p95 at 70% of capacity; the plan's concurrency must meet it for real
    target = float(np.ravel(queueing.mmc_response_quantile(0.95, 0.7 * C * MU, MU, C))[0])
    for f in closed_fits:
        plan = f.plan(p95=target)
        assert plan.feasible and plan.concurrency is not None
        true = queueing.closed_mmc_response_quantile(0.95, np.array([plan.concurrency]), MU, C, 0.0)
        assert float(true[0]) <= target
