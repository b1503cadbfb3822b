"""Load shapes: open-loop schedules, trace replay and level planning (pure, no I/O)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmlat._loadshapes import (
    arrival_gaps,
    default_length,
    open_loop_schedule,
    plan_levels,
    trace_schedule,
)


def cv2(x: np.ndarray) -> float:
    return float(np.var(x, ddof=1) / np.mean(x) ** 2)


@pytest.mark.parametrize(
    ("arrival", "burstiness", "expected_cv2"),
    [("poisson", 1.0, 1.0), ("gamma", 4.0, 4.0), ("gamma", 0.25, 0.25), ("constant", 1.0, 0.0)],
)
def test_gaps_have_the_target_rate_and_variability(arrival, burstiness, expected_cv2):
    gaps = arrival_gaps(
        5.0, 50_000, arrival=arrival, burstiness=burstiness, rng=np.random.default_rng(1)
    )
    # mean of 50k gaps: relative sd <= 2/sqrt(50k) ~ 0.9% even at CV^2 = 4; 4% is > 4 sigma
    assert np.mean(gaps) == pytest.approx(0.2, rel=0.04)
    # sample CV^2: relative sd ~ 2.3% for gamma(1/4) (excess kurtosis 24); 12% is > 5 sigma
    assert cv2(gaps) == pytest.approx(expected_cv2, rel=0.12, abs=1e-9)


def test_schedule_by_count_starts_at_zero_and_hits_the_rate():
    sched = open_loop_schedule(20.0, requests=4001, seed=3)
    assert len(sched) == 4001
    assert sched.offsets_s[0] == 0.0
    assert np.all(np.diff(sched.offsets_s) >= 0)
    assert sched.rate() == pytest.approx(20.0, rel=0.06)  # 4000 gaps: sd 1.6%


def test_schedule_by_duration_stays_inside_the_horizon():
    sched = open_loop_schedule(50.0, duration_s=100.0, arrival="gamma", burstiness=2.0, seed=5)
    assert sched.offsets_s.max() < 100.0
    # count over 100 s of a renewal process with CV^2 = 2: sd ~ sqrt(2 * 5000) = 100 (2%)
    assert len(sched) == pytest.approx(5000, rel=0.08)


def test_constant_schedule_is_exact():
    sched = open_loop_schedule(4.0, requests=5, arrival="constant")
    np.testing.assert_allclose(sched.offsets_s, [0.0, 0.25, 0.5, 0.75, 1.0])
    assert sched.rate() == pytest.approx(4.0)


def test_seeds_reproduce_and_differ():
    a = open_loop_schedule(3.0, requests=200, seed=7)
    b = open_loop_schedule(3.0, requests=200, seed=7)
    c = open_loop_schedule(3.0, requests=200, seed=8)
    np.testing.assert_array_equal(a.offsets_s, b.offsets_s)
    assert not np.allclose(a.offsets_s, c.offsets_s)
    d1 = open_loop_schedule(3.0, duration_s=30.0, arrival="gamma", burstiness=3.0, seed=7)
    d2 = open_loop_schedule(3.0, duration_s=30.0, arrival="gamma", burstiness=3.0, seed=7)
    np.testing.assert_array_equal(d1.offsets_s, d2.offsets_s)


def test_trace_table_is_sorted_shifted_and_keeps_tokens():
    frame = pd.DataFrame(
        {
            "TIMESTAMP": pd.to_datetime(
                ["2024-05-01 10:00:02.5", "2024-05-01 10:00:01.0", "2024-05-01 10:00:04.0"]
            ),
            "ContextTokens": [30, 10, 50],
            "GeneratedTokens": [3, 1, 5],
        }
    )
    sched = trace_schedule(frame)
    np.testing.assert_allclose(sched.offsets_s, [0.0, 1.5, 3.0])
    np.testing.assert_array_equal(sched.prompt_tokens, [10, 30, 50])
    np.testing.assert_array_equal(sched.completion_tokens, [1, 3, 5])
    assert len(trace_schedule(frame, requests=2)) == 2
    assert len(trace_schedule(frame, duration_s=2.0)) == 2


def test_trace_from_a_list_of_offsets():
    sched = trace_schedule([5.0, 5.5, 7.0])
    np.testing.assert_allclose(sched.offsets_s, [0.0, 0.5, 2.0])
    assert sched.prompt_tokens is None and sched.completion_tokens is None


@pytest.mark.parametrize(
    ("trace", "field"),
    [
        ([], "trace"),
        ([0.0, float("nan")], "trace"),
        (["a", "b"], "trace"),
        (pd.DataFrame({"when": [1.0]}), "trace"),
        (pd.DataFrame({"offset_s": [0.0], "prompt_tokens": [-1]}), "trace"),
    ],
)
def test_bad_traces_name_the_field(trace, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        trace_schedule(trace)


def test_closed_loop_plan_has_a_steady_state_default_and_warmup():
    plans = plan_levels(concurrency=[1, 10, 100], warmup=3)
    assert [p.kind for p in plans] == ["concurrency"] * 3
    assert [p.workers for p in plans] == [1, 10, 100]
    assert [p.total() for p in plans] == [103, 103, 1003]
    assert default_length("concurrency", 100) == (1000, None)
    assert [plans[0].phase(i, 0.0) for i in range(4)] == ["warmup"] * 3 + ["measure"]


def test_open_loop_plan_uses_distinct_seeded_streams_per_level():
    plans = plan_levels(rate=[2.0, 2.0], requests=50, warmup=5, seed=11)
    assert [p.total() for p in plans] == [55, 55]
    assert not np.allclose(plans[0].schedule.offsets_s, plans[1].schedule.offsets_s)
    again = plan_levels(rate=[2.0, 2.0], requests=50, warmup=5, seed=11)
    np.testing.assert_array_equal(plans[1].schedule.offsets_s, again[1].schedule.offsets_s)


def test_open_loop_default_runs_long_enough_for_a_thousand_arrivals():
    (plan,) = plan_levels(rate=0.5, arrival="constant")
    assert default_length("rate", 0.5) == (None, 2000.0)
    assert len(plan.schedule) == 1000
    (plan,) = plan_levels(rate=10, duration_s=2.0, warmup_s=1.0, arrival="constant")
    assert len(plan.schedule) == 30
    assert plan.phase(9, plan.schedule.offsets_s[9]) == "warmup"
    assert plan.phase(10, plan.schedule.offsets_s[10]) == "measure"


def phases(plan) -> list[str]:
    return [plan.phase(i, t) for i, t in enumerate(plan.schedule.offsets_s)]


@pytest.mark.parametrize("arrival", ["constant", "poisson", "gamma"])
def test_requests_count_only_measured_sends_whatever_the_warmup(arrival):
    (by_time,) = plan_levels(rate=10, requests=20, warmup_s=1.0, arrival=arrival, seed=4)
    (by_count,) = plan_levels(rate=10, requests=20, warmup=7, arrival=arrival, seed=4)
    for plan in (by_time, by_count):
        p = phases(plan)
        assert p.count("measure") == 20 and p[-20:] == ["measure"] * 20
    assert phases(by_count).count("warmup") == 7
    if arrival == "constant":
        assert phases(by_time).count("warmup") == 10


def test_duration_counts_from_the_end_of_the_warmup():
    (plan,) = plan_levels(rate=10, duration_s=2.0, warmup=5, arrival="constant")
    assert phases(plan) == ["warmup"] * 5 + ["measure"] * 20
    (plan,) = plan_levels(trace=np.arange(40) / 10, duration_s=2.0, warmup_s=0.5)
    assert phases(plan) == ["warmup"] * 5 + ["measure"] * 20
    (plan,) = plan_levels(trace=np.arange(40) / 10, requests=20, warmup_s=0.5)
    assert phases(plan) == ["warmup"] * 5 + ["measure"] * 20
    (closed,) = plan_levels(concurrency=4, requests=8, warmup_s=1.0)
    assert closed.requests == 8 and closed.total() is None  # the warmup's size is not known


def test_trace_plan_is_one_level():
    (plan,) = plan_levels(trace=[0.0, 1.0, 2.0], max_in_flight=2)
    assert (plan.kind, plan.value, plan.total(), plan.max_in_flight) == ("trace", 1.0, 3, 2)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({}, "concurrency"),
        ({"concurrency": [1], "rate": [1.0]}, "concurrency"),
        ({"concurrency": []}, "concurrency"),
        ({"concurrency": [0]}, "concurrency"),
        ({"concurrency": [1.5]}, "concurrency"),
        ({"rate": [-1.0]}, "rate"),
        ({"rate": [float("inf")]}, "rate"),
        ({"rate": 1.0, "arrival": "uniform"}, "arrival"),
        ({"rate": 1.0, "arrival": "gamma", "burstiness": 0}, "burstiness"),
        ({"concurrency": 2, "requests": 0}, "requests"),
        ({"concurrency": 2, "requests": 5, "duration_s": 1.0}, "requests"),
        ({"concurrency": 2, "duration_s": -1.0}, "duration_s"),
        ({"concurrency": 2, "warmup": -1}, "warmup"),
        ({"concurrency": 2, "think_time_s": float("nan")}, "think_time_s"),
        ({"rate": 1.0, "max_in_flight": 0}, "max_in_flight"),
        ({"rate": 1.0, "seed": -2}, "seed"),
        ({"trace": [0.0, 5.0], "duration_s": 0.0}, "duration_s"),
    ],
)
def test_bad_options_name_the_field(options, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        plan_levels(**options)
