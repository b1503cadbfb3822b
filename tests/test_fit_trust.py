"""What a user sees of a fit and a plan: no search bound, NaN or unidentified value as an answer."""

from __future__ import annotations

import re

import numpy as np
import pytest

from llmlat import datasets
from llmlat._synth import mmc_closed_requests
from llmlat.fitting import compare, fit

# a number printed as an answer where there is none
_NOT_A_NUMBER = re.compile(r"\b(nan|NaN|None)\b")


@pytest.fixture(scope="module")
def no_queue():
    """InferenceX minimax: throughput still grows at N = 512, so no sustained queue shows."""
    return fit(datasets.load("inferencex-closedloop/minimax-m2.5"))


@pytest.fixture(scope="module")
def identified():
    return fit(mmc_closed_requests([1, 2, 4, 8, 16], mu=2.0, c=4, n=600, seed=5), model="mmc")


def test_a_cap_no_queue_shows_and_a_bounded_parameter_are_not_identified(no_queue):
    res = no_queue
    assert res.model == "batch"
    assert not res.identified["slots"] and not res.identified["join_steps"]
    assert res.identified[["t0_s", "t1_s"]].all()
    # from the largest profiled cap inside the 95% set (430 or 437, as the search evaluates)
    # up to twice the largest level
    edge = re.search(r"measure at more levels between (\d+) and 1024", res.unidentified["slots"])
    assert edge and 400 <= int(edge.group(1)) < 512
    ci = res.conf_int()
    # the integer keeps the lower end the data support; a continuous one has no interval
    assert ci.loc["slots", "lower"] <= res.params["slots"] and np.isinf(ci.loc["slots", "upper"])
    assert ci.loc["join_steps"].isna().all()
    assert np.isfinite(ci.loc["t0_s"]).all()


def test_summary_repr_and_report_text_say_not_identified(no_queue):
    res = no_queue
    text = res.summary().as_text()
    table = text.split("slots", 1)[1].split("level", 1)[0]
    assert table.count("not identified") == 2
    # neither the optimiser's slots nor join_steps' search bound 0.001 is shown as a value
    assert f"{res.params['slots']:.4g}" not in table and "0.001 " not in table
    assert not _NOT_A_NUMBER.search(text)
    assert "Capacity (req/s):" in text and "not identified (>=" in text
    assert "slots=not identified" in repr(res) and "join_steps=not identified" in repr(res)
    assert "not identified" in res._repr_html_()


def test_identified_fit_prints_values_and_the_integer_interval_source(identified):
    res = identified
    assert res.identified.all() and not res.unidentified
    text = res.summary().as_text()
    assert "not identified" not in text and not _NOT_A_NUMBER.search(text)
    assert "profile" in text  # the integer's interval: the profile likelihood, no std err
    lo, hi = res.conf_int().loc["c"]
    assert lo <= res.params["c"] <= hi < np.inf


def test_plan_stays_within_the_measured_loads_when_the_cap_is_not_identified(no_queue):
    top = float(no_queue.levels.index.max())
    plan = no_queue.plan(p95=100.0)  # far above every level: the model alone would go past
    assert plan.feasible and plan.concurrency is not None and plan.concurrency <= top
    assert "slots not identified" in plan.note
    assert plan.rate_rps <= np.nanmax(no_queue.levels["throughput_rps"])
    # the capacity rests on the unidentified cap: no share of it is stated as an answer
    assert not plan.capacity_identified and "the capacity is not identified" in plan.describe()
    table = plan.to_frame(text=True)["value"]
    assert table["capacity_rps"] == "not identified" == table["utilization_at_max_rate"]


def test_plan_text_shows_no_search_bound_or_nan(identified):
    plan = identified.plan(p95=3.0)  # no rpm/tpm/utilization limits: those bounds are absent
    shown = repr(plan)
    assert "no bound" in shown and not _NOT_A_NUMBER.search(shown) and "inf" not in shown
    assert plan.to_frame().loc["limit_rate_rps", "value"] == np.inf  # the data stay numbers
    nope = identified.plan(p95=1e-4)
    assert not nope.feasible and "n/a" in repr(nope)


def test_compare_names_what_each_model_cannot_identify():
    # no think time in the data: the closed model's think_s runs to its search bound, and
    # its interval to 0 (a zero lower end once made the check divide by zero)
    table = mmc_closed_requests([1, 2, 4, 8, 16], mu=2.0, c=4, n=600, seed=5)
    ranking = compare(table)
    assert "think_s=not identified" in ranking.loc["closed", "params"]
    assert "not identified" not in ranking.loc["mmc", "params"]
