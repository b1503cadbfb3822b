"""llmlat.verify_plan: a confirmation sweep at a plan's recommended load, on the simulator."""

from __future__ import annotations

import numpy as np
import pytest

import llmlat
from llmlat._synth import mmc_closed_requests
from llmlat.fitting import PlanCheck
from llmlat.sim import SimConfig

pytestmark = pytest.mark.timeout(120)

SIM = SimConfig(mode="mmc", slots=2, mu=40.0, output_tokens=4, seed=1)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return tmp_path_factory.mktemp("verify") / "sweep.parquet"


@pytest.fixture(scope="module")
def closed_fit(saved):
    res = llmlat.sweep(
        "hi",
        simulator=SIM,
        concurrency=[1, 2, 4, 8],
        requests=80,
        warmup=4,
        progress=False,
        seed=1,
        save=saved,
    )
    return llmlat.fit(res, model="mmc")


def test_verify_repeats_the_sweep_at_the_plan_and_measures_the_target(closed_fit, saved):
    before = saved.read_bytes()
    plan = closed_fit.plan(p95=0.15)
    assert plan.check is None
    check = llmlat.verify_plan(closed_fit, plan)
    assert isinstance(check, PlanCheck) and plan.check is check
    assert check.kind == "concurrency" and check.load == plan.concurrency
    meta = check.result.meta
    # the same simulator, seed and request options as the fitted sweep, at one level
    assert meta["simulator"] == closed_fit.data.meta["simulator"]
    assert meta["levels"] == [float(plan.concurrency)] and meta["seed"] == 1
    # long enough: the transient cut, then at least 200 steady-state requests
    assert check.n_steady >= 200 and check.requests >= check.n_steady + plan.concurrency
    assert check.statistic == "p95" and check.target_s == 0.15
    assert check.lower_s <= check.measured_s <= check.upper_s
    assert check.passed == (check.measured_s <= check.target_s and check.n_failed == 0)
    assert f"{check.measured_s:.3g}" in plan.describe() and "Check at" in repr(plan)
    # the check is a run of its own: it never writes over the fitted sweep's file
    assert meta["load"]["save"] is None and saved.read_bytes() == before
    assert meta["run_id"] != closed_fit.data.meta["run_id"]


def test_verify_says_when_the_plan_breaks_its_target(closed_fit):
    plan = closed_fit.plan(p95=0.15)
    # the same plan measured on a server three times slower: the target must break
    check = llmlat.verify_plan(closed_fit, plan, simulator=SIM.replace(mu=12.0), requests=60)
    assert not check.passed and check.measured_s > check.target_s
    assert check.describe().startswith(f"Check at {plan.concurrency:g} in flight: FAILED")
    assert "the target is broken" in check.describe()


def test_verify_needs_the_sweep_it_repeats():
    table = mmc_closed_requests([1, 2, 4, 8], mu=2.0, c=2, n=200, seed=3)
    fit = llmlat.fit(table, model="mmc")
    plan = fit.plan(p95=5.0)
    assert plan.feasible
    with pytest.raises(ValueError, match=r"^data: the fit was not made from a sweep"):
        llmlat.verify_plan(fit, plan)
    with pytest.raises(ValueError, match=r"^plan: only a feasible plan"):
        llmlat.verify_plan(fit, fit.plan(rpm=60))
    assert np.isnan(fit.plan(rpm=60).target_s)


def test_verify_checks_the_open_loop_rate_of_a_closed_loop_fit(closed_fit):
    plan = closed_fit.plan(p95=0.15)
    check = llmlat.verify_plan(closed_fit, plan, kind="rate")
    meta = check.result.meta
    assert check.kind == "rate" and meta["level_kind"] == "rate"
    assert meta["levels"] == [pytest.approx(plan.rate_rps)]
    # near capacity a queue takes long to settle: the check covers ten relaxation times
    rho = plan.rate_rps / closed_fit.capacity_rps
    assert check.requests >= 10 * rho / (1 - np.sqrt(rho)) ** 2
    assert f"{plan.rate_rps:.3g} req/s" in check.describe()
    with pytest.raises(ValueError, match=r"^kind: expected"):
        llmlat.verify_plan(closed_fit, plan, kind="trace")
