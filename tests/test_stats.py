"""The one statistics module: intervals, transient cut and throughput window."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmlat import stats
from llmlat._summary import summarize


def test_order_statistic_ci_covers_the_true_quantile():
    # distribution-free: coverage holds for any continuous law; exponential median = ln 2
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(400):
        _, low, high = stats.quantile_interval(rng.exponential(1.0, 200), 0.5)
        hits += low <= np.log(2) <= high
    assert 0.92 <= hits / 400 <= 0.995


def test_column_reads_every_schema_dtype_as_a_float_copy():
    frame = pd.DataFrame(
        {
            "f": [0.5, np.nan, 2.0],
            "i": pd.array([1, None, 3], dtype="Int64"),
            "n": np.array([1, 2, 3], dtype=np.int64),
            "b": [True, False, True],
            "nb": pd.array([True, None, False], dtype="boolean"),
            "o": pd.Series(["1.5", "x", None], dtype=object),
            "s": pd.array(["2", None, "y"], dtype="string"),
        }
    )
    expected = {
        "f": [0.5, np.nan, 2.0],
        "i": [1.0, np.nan, 3.0],
        "n": [1.0, 2.0, 3.0],
        "b": [1.0, 0.0, 1.0],
        "nb": [1.0, np.nan, 0.0],
        "o": [1.5, np.nan, np.nan],
        "s": [2.0, np.nan, np.nan],
        "missing": [np.nan] * 3,
    }
    for name, values in expected.items():
        got = stats.column(frame, name)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, values, err_msg=name)
        got[:] = -1.0  # a copy: the caller may write into it
    assert frame["f"].iloc[0] == 0.5 and frame["n"].iloc[0] == 1


def _ar1(rng, n, phi):
    x = np.empty(n)
    x[0] = rng.normal()
    for i in range(1, n):
        x[i] = phi * x[i - 1] + np.sqrt(1 - phi**2) * rng.normal()
    return x


def test_batch_means_interval_holds_on_correlated_draws_where_iid_fails():
    # an AR(1) sequence (phi 0.8) has mean 0; its iid interval is ~3x too narrow
    rng = np.random.default_rng(3)
    bm = iid = 0
    for _ in range(300):
        x = _ar1(rng, 400, 0.8)
        _, lo, hi = stats.mean_interval(x)
        bm += lo <= 0 <= hi
        half = 1.96 * x.std(ddof=1) / np.sqrt(len(x))
        iid += abs(x.mean()) <= half
    assert bm / 300 >= 0.88
    assert iid / 300 < 0.7


def test_mser5_cuts_a_start_up_ramp_and_nothing_from_a_stationary_sequence():
    rng = np.random.default_rng(1)
    flat = rng.exponential(1.0, 400)
    assert stats.mser5(flat) <= 40
    ramp = np.concatenate([np.linspace(20, 1, 60), rng.exponential(1.0, 340)])
    assert 40 <= stats.mser5(ramp) <= 100


def _closed_level(n_clients: int, n_requests: int, service_s: float, warmup: int = 0):
    """N clients on one server with constant service: the i-th request ends at (i + 1) * s."""
    rows = []
    for i in range(n_requests + warmup):
        end = (i + 1) * service_s
        start = 0.0 if i < n_clients else (i + 1 - n_clients) * service_s
        rows.append(
            {
                "level_kind": "concurrency",
                "level": float(n_clients),
                "phase": "warmup" if i < warmup else "measure",
                "ok": True,
                "t_scheduled": start,
                "t_sent": start,
                "t_end": end,
                "latency_s": end - start,
            }
        )
    return pd.DataFrame(rows)


def test_a_level_too_short_for_a_steady_window_reports_completions_over_its_span():
    # 45 requests at 40 clients (5 of them warmup), served one every 0.1 s: 4.5 s in all.
    # Every client starts at 0, so the window from the first end to the last start holds
    # almost nothing; the rate must be completions over the span, not 31,000 req/s.
    req = _closed_level(40, 40, 0.1, warmup=5)
    row = summarize(req).iloc[0]
    assert row["throughput_rps"] == pytest.approx(40 / 4.5, rel=0.02)
    assert not row["steady"]


def test_the_first_n_completions_of_a_closed_level_are_transient_and_left_out():
    req = _closed_level(10, 60, 0.1)
    phase = stats.phases(req)
    assert (phase == "transient").sum() == 10
    assert set(np.flatnonzero(phase == "transient")) == set(range(10))
    row = summarize(req).iloc[0]
    assert row["n"] == 60 and row["n_transient"] == 10
    # past the transient every request waits for 9 others: latency exactly 10 x 0.1 s
    assert row["latency_p50_s"] == pytest.approx(1.0)
    assert row["latency_mean_s"] == pytest.approx(1.0)
    assert row["throughput_rps"] == pytest.approx(10.0)
    assert row["steady"]


def test_a_spread_closed_start_is_transient_up_to_the_last_clients_first_send():
    # the engine starts client 0 alone and the others over its first cycle: client 0 sends
    # again (at 1.0) before clients 1 and 2 first send (1.3, 1.6), while fewer than N are in
    # the system. Those rows are the start-up too: kept, their short latencies read c = 17
    # for 16 in 4 of 10 exact M/M/16 sweeps
    sends = [(0, 0.0), (0, 1.0), (1, 1.3), (2, 1.6), (0, 2.0), (1, 2.3), (2, 2.6), (0, 3.0)]
    req = pd.DataFrame(
        [
            {
                "level_kind": "concurrency",
                "level": 3.0,
                "phase": "measure",
                "ok": True,
                "worker": w,
                "t_scheduled": t,
                "t_sent": t,
                "t_end": t + 1.0,
                "latency_s": 1.0,
            }
            for w, t in sends
        ]
    )
    start, _ = stats.row_times(req)
    assert list(stats.first_sends(start, stats.column(req, "worker"))) == [0.0, 1.3, 1.6]
    assert list(np.flatnonzero(stats.phases(req) == "transient")) == [0, 1, 2, 3]
    # without client ids: the first N sends
    assert list(np.flatnonzero(stats.phases(req.drop(columns="worker")) == "transient")) == [
        0,
        1,
        2,
    ]


def test_quantile_interval_is_scipys_quantile_test_interval():
    from scipy.stats import quantile_test

    rng = np.random.default_rng(5)
    for n, q in ((7, 0.5), (40, 0.95), (250, 0.99), (1000, 0.9)):
        x = rng.exponential(1.0, n)
        est, low, high = stats.quantile_interval(x, q)
        ci = quantile_test(x, q=est, p=q).confidence_interval(0.95)
        np.testing.assert_allclose([low, high], [ci.low, ci.high], equal_nan=True)


def _closed_throughput_errors(frames, truth: float, n_clients: int) -> tuple[float, float]:
    """Mean relative error of a closed level's throughput, and its interval's coverage."""
    errors, hits = [], []
    for frame in frames:
        start, end = stats.row_times(frame)
        ok = stats.ok_mask(frame)
        cut = stats.transient_mask("concurrency", n_clients, start, end, end - start, ok)
        x, low, high = stats.throughput_interval(
            start, end, ok, cut, ok, min_batch=n_clients, clients=n_clients,
            workers=stats.column(frame, "worker"),
        )  # fmt: skip
        errors.append(x / truth - 1)
        hits.append(low <= truth <= high)
    return float(np.mean(errors)), float(np.mean(hits))


@pytest.mark.parametrize("servers", [1, 16])
def test_a_short_closed_levels_throughput_is_unbiased_and_its_interval_covers(servers):
    # the demo's length at 10 clients: 30 requests, three rounds (one start-up, one drain).
    # The completions over the window from the first round's end to the last send ran +14%
    # on one server (m completions over m gaps: m / (m - 1)) and -33% on 16, where the window
    # was too short and the whole span's fill and drain were counted (coverage 0.30)
    from llmlat._synth import mgc_sweep
    from llmlat.queueing import closed_mmc

    truth = float(closed_mmc([10], 1.0, servers)["throughput_rps"].iloc[0])
    frames = [mgc_sweep("concurrency", [10], 1.0, servers, seed=s, length=0.3) for s in range(200)]
    assert len(frames[0]) == 30
    bias, cover = _closed_throughput_errors(frames, truth, 10)
    # relative sd per level ~0.3-0.4: the mean of 200 has a standard error of ~0.025
    assert abs(bias) < 0.06
    assert 0.90 <= cover <= 0.99


def test_a_short_closed_level_on_a_batching_server_is_unbiased():
    # 20 clients on 32 slots for 60 requests: near-constant service started in step, and a
    # drain that decodes the last requests faster. The old window ran -7%
    from llmlat._synth import batch_closed_requests

    long = batch_closed_requests([20], 32, 0.02, 0.0055, 32, 5000, seed=99, warmup=0)
    ends = np.sort(long["t_end"].to_numpy())
    truth = 2500 / (ends[3750] - ends[1250])  # the middle half of a long level
    frames = [
        batch_closed_requests([20], 32, 0.02, 0.0055, 32, 60, seed=s, warmup=0, drain=True)
        for s in range(100)
    ]
    bias, cover = _closed_throughput_errors(frames, truth, 20)
    assert abs(bias) < 0.03  # relative sd per level ~0.07: standard error ~0.007
    assert cover >= 0.9


def _closed_truth(n_clients: int, servers: int, think_s: float = 0.0) -> float:
    from llmlat.queueing import closed_mmc

    return float(closed_mmc([n_clients], 1.0, servers, think_s=think_s)["throughput_rps"].iloc[0])


@pytest.mark.parametrize(("length", "think_s"), [(1.0, 0.0), (0.3, 2.0)])
def test_a_closed_levels_send_rate_is_its_throughput(length, think_s):
    # sends per second over the span from the first send counted the first round's N sends
    # at once: +11% at 100 requests of 8 clients on 4 servers, +18% at 30 requests of 10
    # clients thinking 2 s (without the first round, the sends of thinking clients start late:
    # -18%). A closed level sends as many requests as it completes
    from llmlat._synth import mgc_sweep

    n_clients = 8 if think_s == 0 else 10
    truth = _closed_truth(n_clients, 4, think_s)
    errors = []
    for seed in range(40):
        frame = mgc_sweep(
            "concurrency", [n_clients], 1.0, 4, seed=seed, length=length, think_s=think_s
        )
        sent = stats.send_rate(frame, np.ones(len(frame), bool), n_clients)
        errors.append(sent / truth - 1)
    row = summarize(frame).iloc[0]
    assert row["achieved_rate_rps"] == pytest.approx(row["throughput_rps"])
    assert row["achieved_rate_rps"] == pytest.approx(sent)
    # relative sd per level ~0.05 (100 requests) and ~0.08 (30): standard errors ~0.01
    assert abs(np.mean(errors)) < 0.04


def test_an_open_levels_send_rate_is_its_realised_arrival_rate():
    # the fit's offered rate and the summary's achieved rate are one definition
    from llmlat._aggregate import observe
    from llmlat._synth import mgc_sweep

    frame = mgc_sweep("rate", [3.0, 6.0], 1.0, 8, seed=4, length=0.2)
    offered = observe(frame).levels.set_index("level")["offered_rps"]
    summary = summarize(frame).set_index("level")["achieved_rate_rps"]
    for level, rows in frame.groupby("level"):
        sent = np.sort(rows["t_sent"].to_numpy())
        realised = (len(sent) - 1) / (sent[-1] - sent[0])
        assert offered[level] == pytest.approx(realised)
        assert summary[level] == pytest.approx(realised)


def test_a_short_open_levels_throughput_is_not_cut_by_its_fill():
    # 50 arrivals at 10/s on 16 servers of mean 1 s: the level holds 10 requests once full,
    # a fifth of its arrivals. Counted from its first completion, the fill went uncounted:
    # -11% (coverage still 0.95, the interval as wide as the bias)
    from llmlat._synth import mgc_sweep

    errors, hits = [], []
    for seed in range(200):
        frame = mgc_sweep("rate", [10.0], 1.0, 16, seed=seed, length=0.05)
        start, end = stats.row_times(frame)
        ok = stats.ok_mask(frame)
        phase = stats.phases(frame)
        x, low, high = stats.throughput_interval(start, end, ok, phase == "transient", ok)
        errors.append(x / 10.0 - 1)
        hits.append(low <= 10.0 <= high)
    # relative sd per level ~0.18: the mean of 200 has a standard error of ~0.013
    assert abs(np.mean(errors)) < 0.06
    assert 0.9 <= np.mean(hits) <= 0.99


def test_a_closed_level_whose_clients_think_counts_by_littles_law():
    # 30 requests of 8 clients thinking 2 s on 4 servers: counted in the window the rate ran
    # -4% (and +9% on one server); N / mean(R + Z), each row's think time from its client's
    # next send, is within 1%
    from llmlat._synth import mgc_sweep

    truth = _closed_truth(8, 4, 2.0)
    frames = [
        mgc_sweep("concurrency", [8], 1.0, 4, seed=s, length=0.3, think_s=2.0) for s in range(200)
    ]
    bias, cover = _closed_throughput_errors(frames, truth, 8)
    # relative sd per level ~0.09: the mean of 200 has a standard error of ~0.006
    assert abs(bias) < 0.02
    assert cover >= 0.9  # conservative: the gaps between sends of thinking clients vary less


@pytest.mark.parametrize("servers, cap", [(16, None), (64, 128)])
def test_an_overloaded_open_levels_window_is_while_its_servers_are_busy(servers, cap):
    # 120% load on exponential servers of mean 0.5 s: the queue grows (or fills its cap) the
    # whole level, and the latencies' transient (MSER-5 on a growing sequence) is half of
    # it. The servers complete c mu while all are busy: the window counts from then until
    # the queue left at the last send no longer keeps them so, and keeps most completions
    # (counted from the transient's end it kept 0.44 at 16 servers, 0.37 at 64 behind 128
    # places), at c mu within its Poisson noise
    from llmlat._synth import mgc_sweep

    errors, shares = [], []
    for seed in range(12):
        frame = mgc_sweep("rate", [1.2 * servers * 2.0], 2.0, servers, queue_cap=cap, seed=seed)
        start, end = stats.row_times(frame)
        ok = stats.ok_mask(frame)
        phase = stats.phases(frame)
        _, n = stats.completion_slope(start, end, ok, phase == "transient", ok | ~ok)
        rate, _ = stats.throughput(start, end, ok, phase == "transient", ok | ~ok)
        errors.append(rate / (2.0 * servers) - 1)
        shares.append(n / ok.sum())
    assert np.mean(shares) > 0.85
    # each level's count has a relative sd of about 1 / sqrt(n) (0.029-0.036): the mean of
    # 12 has one of about 0.01 (behind the cap, a few idle moments take ~0.5% off)
    assert abs(np.mean(errors)) < 0.03
