"""Gateway fallback, measured: ``url=[primary, fallback]`` against two simulators on 127.0.0.1.

The primary has 2 slots and refuses (429) past 2 waiting; the fallback has room. At a light
rate the primary serves everything; at a spike the refusals fail over to the fallback, every
request is answered, and the queue wait at the primary still shows in p95.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import llmlat
from llmlat.sim import Simulator

MODEL = "llmlat-sim"
# fixed service (8 tokens of 10 ms): latencies move only by queueing
STEADY = {
    "mode": "batch",
    "t0_s": 0.01,
    "t1_s": 0.0,
    "output_tokens": 8,
    "output_dist": "fixed",
    "prefill_per_token_s": 0.0,
}

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def pair():
    with (
        Simulator(slots=2, queue_limit=2, seed=1, **STEADY) as primary,
        Simulator(slots=16, seed=2, **STEADY) as fallback,
    ):
        yield primary.url, fallback.url


@pytest.fixture(scope="module")
def spike(pair):
    return llmlat.sweep(
        "hi", url=list(pair), model=MODEL, rate=[5, 60], duration_s=1.5, progress=False, seed=1
    )


def test_fallback_absorbs_the_spike_and_rows_say_who_served(spike, pair):
    req, att = spike.requests, spike.attempts
    assert req["ok"].all()  # nothing lost: what the primary refused, the fallback answered
    light, heavy = req[req["level"] == 5.0], req[req["level"] == 60.0]
    assert (light["served_by"] == 0).all() and (light["failover_s"] == 0).all()
    by_fallback = heavy[heavy["served_by"] == 1]
    assert len(by_fallback) > 0.2 * len(heavy)
    # each failover is one refused attempt at the primary, then one answered at the fallback
    assert (by_fallback["attempts"] == 2).all()
    firsts = att.merge(by_fallback[["request_id"]], on="request_id")
    assert (firsts.loc[firsts["attempt"] == 1, ["target", "status"]] == [0, 429]).all().all()
    assert (firsts.loc[firsts["attempt"] == 2, ["target", "status"]] == [1, 200]).all().all()
    # failover took a round trip to the primary, far less than the answer itself
    took = by_fallback["failover_s"].to_numpy()
    assert (took > 0).all() and (took < by_fallback["latency_s"].to_numpy()).all()
    assert (by_fallback["retry_wait_s"] == 0).all()  # no backoff: straight on to the fallback
    assert (att.loc[att["target"] == 1, "status"] == 200).all()
    assert spike.meta["targets"] == list(pair)
    # the queue wait at the primary still surfaces in p95
    summary = spike.summary().set_index("level")
    assert summary.loc[60.0, "rate_limited_rate"] == 0
    assert summary.loc[60.0, "latency_p95_s"] > 1.4 * summary.loc[5.0, "latency_p50_s"]


def test_fallback_on_limits_what_fails_over(pair):
    # 5xx only: the primary's 429s are final (no retries), and such rows name no server
    res = llmlat.sweep(
        "hi",
        url=",".join(pair),  # the command line's spelling
        fallback_on="5xx",
        retries=0,
        model=MODEL,
        rate=60,
        duration_s=1.0,
        progress=False,
        seed=2,
    )
    req = res.requests
    refused = req[~req["ok"]]
    assert len(refused) and (refused["status"] == 429).all()
    assert refused["served_by"].isna().all() and refused["failover_s"].isna().all()
    assert (res.attempts["target"] == 0).all() and (req.loc[req["ok"], "served_by"] == 0).all()


def test_a_timeout_fails_over_within_the_budget(pair):
    # a primary that never answers: each attempt times out, then the fallback answers, unless
    # the failover budget was spent before the timeout
    fallback = pair[1]
    common = {"model": MODEL, "concurrency": 2, "requests": 4, "progress": False}
    with Simulator(p_stall=1.0, seed=3, **STEADY) as stalled:
        urls = [stalled.url, fallback]
        res = llmlat.sweep("hi", url=urls, timeout_s=0.3, retries=0, **common)
        spent = llmlat.sweep("hi", url=urls, timeout_s=0.3, retries=0, failover_max_s=0.1, **common)
    req = res.requests
    assert req["ok"].all() and (req["served_by"] == 1).all()
    assert (req["failover_s"] > 0.29).all()  # the timeout (to a timer tick), then straight on
    first = res.attempts[res.attempts["attempt"] == 1]
    assert (first["error_kind"] == "timeout").all() and (first["target"] == 0).all()
    late = spent.requests
    assert (~late["ok"]).all() and (late["error_kind"] == "timeout").all()
    assert late["served_by"].isna().all() and (spent.attempts["target"] == 0).all()


def test_with_the_primary_down_the_fallback_connections_are_opened_ahead(pair):
    # the primary accepts no connection: each level's connections open at the fallback before
    # its clock starts, so no request served there pays a connect (each pays a refused one)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{s.getsockname()[1]}"
    res = llmlat.sweep(
        "hi", url=[down, pair[1]], model=MODEL, concurrency=[2, 4], requests=8, progress=False
    )
    req, att = res.requests, res.attempts
    assert req["ok"].all() and (req["served_by"] == 1).all()
    assert (att.loc[att["target"] == 0, "error_kind"] == "connection").all()
    assert att.loc[att["target"] == 1, "connect_s"].isna().all()  # none connected: warm


def test_a_primary_that_drops_connects_costs_timeout_s_then_the_fallback_is_warmed(pair):
    # a host down behind a firewall: its connects hang (here a listener that never accepts,
    # its queue full); each level's preconnect gives up after timeout_s, as a request does,
    # and opens the fallback's instead of waiting the system's minutes
    import asyncio
    import socket
    import time

    from llmlat._client import Client, Target

    with contextlib.ExitStack() as stack:
        hole = stack.enter_context(socket.socket())
        hole.bind(("127.0.0.1", 0))
        hole.listen(0)
        for _ in range(4):
            filler = stack.enter_context(socket.socket())
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(hole.getsockname())

        async def go():
            target = Target(f"http://127.0.0.1:{hole.getsockname()[1]}", model="m", timeout_s=0.3)
            client = Client(target, run_id="r", t0_ns=time.perf_counter_ns(), fallbacks=[pair[1]])
            async with client:
                return await asyncio.wait_for(client.preconnect(2), 30)  # hung before: minutes

        assert asyncio.run(go()) == 2  # both at the fallback


def test_fallback_options_are_checked():
    cfg = llmlat.SweepConfig(url="http://127.0.0.1:1, http://u:pw@127.0.0.1:2", rate=1)
    assert cfg.urls() == ["http://127.0.0.1:1", "http://u:pw@127.0.0.1:2"]
    assert "pw" not in str(cfg.to_meta()) and "pw" not in repr(cfg)
    assert cfg.failover().kinds == {"rate_limited", "server_error", "timeout", "connection"}
    with pytest.raises(ValueError, match=r"^fallback_on: expected some of"):
        llmlat.SweepConfig(fallback_on="429,4xx")
    with pytest.raises(ValueError, match=r"^failover_max_s:"):
        llmlat.SweepConfig(failover_max_s=-1)
    with pytest.raises(ValueError, match=r"^url:"):
        llmlat.SweepConfig(url=["http://127.0.0.1:1", "ftp://x"])
    assert np.isnan(llmlat.Record("r", 1.0, "rate", 0).failover_s)


def test_the_command_line_spells_the_new_options():
    import argparse

    from llmlat.cli.options import add_config_options, options_from_args

    parser = argparse.ArgumentParser()
    add_config_options(parser)
    args = parser.parse_args(
        [
            "--url",
            "http://127.0.0.1:1,http://127.0.0.1:2",
            "--fallback-on",
            "429,timeout",
            "--failover-max-s",
            "2",
            "--no-backoff-jitter",
            "--no-honour-retry-after",
            "--client-rpm",
            "600",
            "--rate",
            "1",
        ]
    )
    cfg = llmlat.SweepConfig(**options_from_args(args))
    assert cfg.urls() == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    assert cfg.failover().kinds == {"rate_limited", "timeout"} and cfg.failover().max_s == 2
    policy = cfg.retry_policy()
    assert not policy.backoff_jitter and not policy.honour_retry_after
    assert cfg.client_rpm == 600
