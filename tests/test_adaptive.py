"""Adaptive sweeps (``concurrency="auto"`` / ``rate="auto"``, llmlat._adaptive).

The search's decisions are checked on exact simulations of whole levels (llmlat._synth: c FCFS
servers, or a continuous-batching server, seeded), where the knee is known: N* = c for c
exponential servers fed by clients without think time, the capacity c mu for an open loop, and
the slot cap where a batching server's throughput levels off. The engine's side (levels run one
at a time, the record in meta and the saved sidecar, the fit) against the HTTP simulator.
"""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

import llmlat
from llmlat._adaptive import AdaptiveSearch, level_outcome
from llmlat._loadshapes import default_length
from llmlat._synth import batch_closed_requests, mgc_sweep
from llmlat.cli.options import add_config_options, options_from_args
from llmlat.config import SweepConfig


def _search(config: SweepConfig, level_rows) -> tuple[AdaptiveSearch, list[float]]:
    search = AdaptiveSearch(config)
    run = [plan.value for plan in search.plans(lambda v: (level_rows(v), None), lambda: 0.0)]
    return search, run


@pytest.mark.parametrize("seed", [0, 3])
def test_closed_loop_knee_is_the_number_of_servers(seed):
    c = 8
    search, run = _search(
        SweepConfig(concurrency="auto", seed=seed),
        lambda n: mgc_sweep("concurrency", [n], mu=1.0, c=c, seed=seed, length=0.6),
    )
    # x2 until throughput is clearly flat past 8 (one level more when the intervals are wide)
    assert search.growth[:5] == [1, 2, 4, 8, 16] and len(search.growth) <= 6
    assert search.stopped_by == "throughput" and search.knee_reached
    assert abs(search.knee - c) < 0.15 * c
    # placed around the knee, on both sides, none where a level already ran
    assert search.placed and min(search.placed) < c < max(search.placed)
    assert set(search.placed).isdisjoint(search.growth)
    assert run == search.values == [*search.growth, *search.placed]
    assert search.meta()["adaptive"]["placed_around"] == "knee"  # flat from N* on: no batching


def _batching(slots, n):
    """One closed level of a continuous-batching server at its default length (exact)."""
    return batch_closed_requests(
        [int(n)], slots, 0.02, 0.002, 40, n=default_length("concurrency", n)[0], seed=int(n),
        warmup=0, drain=True,
    )  # fmt: skip


def test_batching_levels_go_around_the_slot_cap():
    # continuous batching, 32 slots: N* = X_max W_1 ~ 8 is where the asymptotes cross, far
    # below the cap; growth stops at max_concurrency 64 (as a queue cap's 429s drop the top
    # level of a real replica), so only 64 lies past the cap. Levels around N* (6, 9, 11, 13)
    # left the fit on the latency alone at "slots >= 32, not identified"
    slots, ran = 32, {}

    def level(n):
        ran[n] = _batching(slots, n)
        return ran[n]

    search, run = _search(SweepConfig(concurrency="auto", max_concurrency=64), level)
    assert search.growth == [1, 2, 4, 8, 16, 32, 64] and search.knee < 12
    meta = search.meta()["adaptive"]
    assert meta["plateau_start"] == 32 and meta["placed_around"] == "plateau_start"
    # inside the bracket (16, 32], and past the cap for a second level there
    assert search.placed == [24, 48]
    assert "levels off by N = 32" in search.summary_line(search.placed)
    latency = pd.concat([ran[n] for n in run], ignore_index=True).drop(columns="itl_mean_s")
    fit = llmlat.fit(latency, model="batch")
    low, high = fit.conf_int().loc["slots"]
    assert fit.capacity_identified and low <= slots <= high <= slots + 2


def test_no_plateau_claimed_while_throughput_still_rises():
    # 128 slots, the p95 budget spent at 64 clients: the top level has the most throughput
    # only because it is the last; with no level past it to show throughput level, the
    # levels stay around N* (a lower bound here)
    search, _ = _search(SweepConfig(concurrency="auto", max_p95_s=5.0), lambda n: _batching(128, n))
    assert search.growth[-1] == 64 and search.stopped_by == "p95_budget"
    assert search.meta()["adaptive"]["placed_around"] == "knee"
    assert search.placed and max(search.placed) < 2.5 * search.knee


@pytest.mark.parametrize("seed", [0, 1])
def test_open_loop_knee_is_the_capacity(seed):
    c, mu = 4, 1.0
    search, _ = _search(
        SweepConfig(rate="auto", start_rate=0.05, seed=seed),
        lambda lam: mgc_sweep("rate", [lam], mu=mu, c=c, seed=seed, length=0.3),
    )
    assert search.stopped_by == "capacity"  # the last level served clearly less than offered
    assert search.growth[-1] > c * mu
    # one short overloaded level measures capacity to about +-12% (seeds 0-7: 3.45 to 4.31)
    assert abs(search.knee - c * mu) < 0.2 * c * mu
    assert search.base < c * mu  # the lower bound the levels are placed under
    # below the capacity only: a level past it never settles
    assert search.placed and max(search.placed) < c * mu
    # from 0.05 requests in flight, the first jump goes straight to a load where one server
    # would be half busy: 0.5 / W_1 = 0.5/s
    assert 0.35 < search.growth[1] < 0.7


def test_budgets_stop_growth_and_bound_placement():
    c = 4
    search, _ = _search(
        SweepConfig(concurrency="auto", max_p95_s=2.5, max_requests=1500),
        lambda n: mgc_sweep("concurrency", [n], mu=1.0, c=c, seed=2, length=0.5),
    )
    breaker = search.growth[-1]
    assert search.stopped_by == "p95_budget" and not search.knee_reached
    assert all(v < breaker for v in search.placed)
    assert sum(o.sent for o in search.outcomes) <= 1500
    meta = search.meta()["adaptive"]
    assert meta["limits"]["max_p95_s"] == 2.5 and "p95" in meta["stop_detail"]
    # a queue cap's refusals spend the 429 budget
    search, _ = _search(
        SweepConfig(rate="auto", start_rate=0.5, max_429_rate=0.02),
        lambda lam: mgc_sweep("rate", [lam], mu=1.0, c=c, queue_cap=2, seed=1, length=0.3),
    )
    assert search.stopped_by == "429_budget"
    assert all(v < search.growth[-1] for v in search.placed)


def test_a_limit_below_the_knee_gives_a_lower_bound():
    search, run = _search(
        SweepConfig(concurrency="auto", max_concurrency=3),
        lambda n: mgc_sweep("concurrency", [n], mu=1.0, c=8, seed=1, length=0.5),
    )
    assert search.growth == [1, 2, 3] and search.stopped_by == "limit"
    assert not search.knee_reached and max(run) == 3
    assert "at least" in search.summary_line([])


def test_time_budget_counts_what_a_level_would_take():
    # one client served at ~1/s: 100 requests at two clients would take ~50 s, past 30 s
    search, run = _search(
        SweepConfig(concurrency="auto", max_time_s=30),
        lambda n: mgc_sweep("concurrency", [n], mu=1.0, c=4, seed=0),
    )
    assert run == [1] and search.stopped_by == "max_time_s"


def test_429s_retried_count_against_the_budget():
    requests = mgc_sweep("rate", [2.0], mu=1.0, c=4, seed=0, length=0.1)  # all answered
    refused = requests.iloc[::4][["level", "request_id"]].assign(attempt=1, status=429)
    assert level_outcome(requests, None, 2.0).rate_limited == 0.0
    outcome = level_outcome(requests, refused, 2.0)  # a quarter were refused once, then served
    assert outcome.rate_limited == pytest.approx(len(refused) / len(requests))


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"concurrency": "many"}, "concurrency"),
        ({"concurrency": 4, "max_concurrency": 8}, "max_concurrency"),
        ({"concurrency": "auto", "max_rate": 8}, "max_rate"),
        ({"concurrency": "auto", "requests": [10, 20]}, "requests"),
        ({"concurrency": "auto", "workers": 2}, "concurrency"),
        ({"rate": "auto", "start_rate": 4, "max_rate": 2}, "start_rate"),
        ({"rate": "auto", "max_429_rate": 1.5}, "max_429_rate"),
    ],
)
def test_bad_auto_options_name_the_field(options, field):
    with pytest.raises(ValueError, match=rf"^{field}: "):
        SweepConfig(**options)


def test_auto_on_the_command_line_and_in_config():
    import argparse

    from llmlat._ipython import LLMSweep

    parser = argparse.ArgumentParser()
    add_config_options(parser)
    args = parser.parse_args(["--concurrency", "auto", "--max-concurrency", "16"])
    assert SweepConfig(**options_from_args(args)).auto() == "concurrency"
    defaults = LLMSweep()
    defaults.rate = "auto"  # %config LLMSweep.rate = "auto"
    assert defaults.rate == "auto"


def test_auto_sweep_against_the_simulator(tmp_path):
    # the engine's side: levels chosen one at a time, all in the data, recorded and saved, and
    # fitted like any sweep (the knee's accuracy is checked on the exact sweeps above: here
    # short levels on a busy machine give wide intervals). Up to 8 clients on 2 servers: with 4
    # at most, one loaded run's level 4 read faster than its level 3 and the fit rightly said
    # that the levels do not bound c. 20 ms services: the knee X_max / X_1 = c mu (1/mu + o)
    # counts the client's own turnaround o in one client's cycle; with 10 ms services a loaded
    # run's o ~ 10 ms read a knee of 4.04 for 2 servers
    out = tmp_path / "auto.parquet"
    result = llmlat.sweep(
        concurrency="auto",
        max_concurrency=8,
        simulator={"mode": "mmc", "slots": 2, "mu": 50.0, "seed": 4},
        requests=60,
        save=out,
        progress=False,
    )
    meta = result.meta["adaptive"]
    levels = sorted(result.requests["level"].unique())
    assert sorted(result.meta["levels"]) == levels  # every level the search chose is in the data
    assert meta["growth_levels"] == [1, 2, 4, 8][: len(meta["growth_levels"])]
    assert meta["stopped_by"] in ("throughput", "limit")
    assert meta["knee_reached"] == (meta["stopped_by"] == "throughput")
    assert meta["limits"]["max_concurrency"] == 8 and max(levels) <= 8
    assert set(meta["placed_levels"]) | set(meta["growth_levels"]) == set(levels)
    assert 0.8 < meta["knee"] < 4  # 2 servers
    assert meta["placed_around"] == "knee" and meta["plateau_start"] is None  # not batching
    assert llmlat.read(out).meta["adaptive"] == meta
    # an ordinary sweep to the fitting code: every level fitted, and a capacity near the true
    # 2 x 50 = 100/s. Not c itself: the client's turnaround shares this loop with the simulator,
    # and on a loaded machine it reads as more, slower servers (c 5 for 2 once). Nor the highest
    # level's throughput: at 60 requests a level it is within ~16% (one s.d.) of the truth, and
    # the highest of four read 123/s once, where the fit said 89.5
    fit = llmlat.fit(result, model="mmc")
    assert sorted(fit.levels.index) == levels
    assert 60 < fit.capacity_rps < 150


def test_auto_rate_against_the_simulator():
    # capacity 2 x 100 = 200/s; 0.4 s a level; the request budget cuts the placement short
    result = llmlat.sweep(
        rate="auto",
        start_rate=40,
        duration_s=0.4,
        max_requests=300,
        simulator={"mode": "mmc", "slots": 2, "mu": 100.0, "seed": 2},
        progress=False,
    )
    meta = result.meta["adaptive"]
    assert result.level_kind == "rate"
    # doubling at least: faster while a level holds under half a request in flight, which a
    # 0.4 s level's few latencies decide (one run measured 0.25 at 40/s and grew to 80.8)
    growth = meta["growth_levels"]
    assert growth[0] == 40 and len(growth) >= 3
    assert all(b >= 1.99 * a for a, b in itertools.pairwise(growth))
    # past capacity at 320/s (or, on a busy machine, at the request budget before it)
    assert meta["stopped_by"] in ("capacity", "max_requests")
    assert 100 < meta["knee"] < 300
    assert all(v < meta["knee"] for v in meta["placed_levels"])
    assert set(meta["skipped_levels"].values()) == {"max_requests 300 would be passed"}
    assert len(result.requests) <= 300
    assert sorted(result.meta["levels"]) == sorted(result.requests["level"].unique())
