"""Admission control over real HTTP: the waiting-queue limit and the RPM / TPM token buckets.

A refused request gets 429 with ``Retry-After`` and the ``x-ratelimit-*`` headers; the hint is
checked against the simulator's own truth (a full queue: its length over the service rate, as
providers estimate it; a bucket: when it really refilled) and by waiting it out: a request sent
after the hint is admitted."""

from __future__ import annotations

import asyncio
import math
import re

import aiohttp
import numpy as np
import pytest
from sim_http import body_for, call

import llmlat
from llmlat.sim import Simulator

pytestmark = pytest.mark.timeout(60)

RESET = re.compile(r"^(\d+ms|\d+(\.\d+)?s|\d+m\d+s)$")


async def wait_admitted(sim: Simulator, count: int) -> None:
    while (sim.truth()["t_admitted"].notna()).sum() < count:
        await asyncio.sleep(0.005)


def check_429(reply, limit_kinds=("requests",)) -> float:
    assert reply.status == 429
    assert reply.json()["error"]["code"] == "rate_limit_exceeded"
    retry = int(reply.headers["retry-after-ms"]) / 1000  # the exact wait, rounded up
    # Retry-After: RFC 9110's whole seconds, rounded up so that waiting it is enough too
    assert reply.headers["retry-after"] == str(math.ceil(retry))
    for kind in limit_kinds:
        assert int(reply.headers[f"x-ratelimit-limit-{kind}"]) > 0
        assert int(reply.headers[f"x-ratelimit-remaining-{kind}"]) >= 0
        assert RESET.match(reply.headers[f"x-ratelimit-reset-{kind}"])
    return retry


@pytest.mark.parametrize("api", ["openai-chat", "anthropic-messages"])
def test_each_api_says_when_to_retry_as_the_real_one_and_the_client_reads_it(api):
    # OpenAI's flavour: Retry-After in whole seconds, the exact wait in retry-after-ms (Azure
    # OpenAI's) and x-ratelimit-*; Anthropic's: Retry-After and anthropic-ratelimit-* alone
    # a bucket of one request, refilled in 5 s: the later ones are refused on any machine
    with Simulator(preset="instant", rpm=12, limit_burst_s=5) as sim:
        res = llmlat.sweep(
            "hi", url=sim.url, api=api, model="llmlat-sim", concurrency=3, requests=3,
            warmup=0, retries=0, max_tokens=4, progress=False,
        )  # fmt: skip

        async def raw():
            async with aiohttp.ClientSession() as session:
                return await call(session, sim.url, api, body_for(api, max_tokens=4))

        reply = asyncio.run(raw())
        truth = sim.truth()
    assert reply.status == 429
    names = set(reply.headers)
    anthropic = api == "anthropic-messages"
    assert "retry-after" in names and ("retry-after-ms" in names) is not anthropic
    limits = {
        f"anthropic-ratelimit-requests-{w}" if anthropic else f"x-ratelimit-{w}-requests"
        for w in ("limit", "remaining", "reset")
    }
    assert {n for n in names if "ratelimit" in n} == limits
    refused = res.attempts[res.attempts["status"] == 429]
    assert len(refused) == 2 and (refused["ratelimit_limit_requests"] == 12).all()
    # the two refused at once may be logged and answered in either order: the header rounds
    # up, which keeps their order, so the sorted hints pair with the sorted waits
    exact = np.sort(truth.loc[truth["outcome"] == "rate_limited", "retry_after_s"].iloc[:2])
    hint = np.sort(refused["retry_after_s"].to_numpy())
    # what the client reads: the exact wait where the API says it, else its whole seconds
    assert hint == pytest.approx(np.ceil(exact) if anthropic else exact, abs=0.001)


def test_queue_limit_batch_mode():
    # 2 slots + 2 waiting; each request decodes 20 steps of 20 ms
    options = {"slots": 2, "queue_limit": 2, "t0_s": 0.02, "t1_s": 0.0, "rpm": 100000}
    options |= {"prefill_per_token_s": 0.0, "output_tokens": 20, "output_dist": "fixed"}

    async def go():
        async with Simulator(**options) as sim, aiohttp.ClientSession() as session:
            body = body_for("openai-chat")
            first = [
                asyncio.create_task(call(session, sim.url, "openai-chat", body)) for _ in range(4)
            ]
            await wait_admitted(sim, 4)
            refused = await asyncio.gather(
                *(call(session, sim.url, "openai-chat", body) for _ in range(2))
            )
            retry = max(int(r.headers["retry-after-ms"]) / 1000 for r in refused)
            await asyncio.sleep(retry)
            after = await call(session, sim.url, "openai-chat", body)
            served = await asyncio.gather(*first)
            return served, refused, after, sim.truth()

    served, refused, after, truth = asyncio.run(go())
    assert [r.status for r in served] == [200] * 4
    assert after.status == 200
    for reply, (_, row) in zip(
        refused, truth[truth["outcome"] == "queue_full"].iterrows(), strict=True
    ):
        retry = check_429(reply)
        assert row["retry_after_s"] == pytest.approx(retry, abs=0.001)
        # (2 waiting + this one) / (2 slots / (20 tokens * 20 ms)) = 0.6 s: when its turn comes
        assert retry == pytest.approx(3 / (2 / (20 * 0.02)), abs=0.001)
    assert (truth["outcome"] == "queue_full").sum() == 2


def test_queue_limit_mmc_mode_retry_after_is_the_expected_wait():
    # each second request must arrive while the first is served: this seed's four services
    # last 0.21-0.44 s, far longer than a busy machine's round trip (seed 5's first lasted
    # 50 ms, and a loaded run's second request found the server free: 200, not 429)
    options = {"mode": "mmc", "slots": 1, "mu": 4.0, "queue_limit": 0, "seed": 11}

    async def go():
        async with Simulator(**options) as sim, aiohttp.ClientSession() as session:
            body = body_for("openai-chat")
            hints = []
            for _ in range(4):
                first = asyncio.create_task(call(session, sim.url, "openai-chat", body))
                await wait_admitted(sim, len(hints) + 1)
                refused = await call(session, sim.url, "openai-chat", body)
                hints.append(check_429(refused, limit_kinds=()))
                assert (await first).status == 200
            return hints, sim.truth()

    hints, truth = asyncio.run(go())
    ok = truth[truth["outcome"] == "ok"].reset_index(drop=True)
    refused = truth[truth["outcome"] == "queue_full"].reset_index(drop=True)
    assert len(ok) == len(refused) == 4
    assert (ok["t_last_token"] - ok["t_service_start"]).min() > 0.15  # the seed's promise
    # the expected wait for the one server, 1 / mu (memoryless: whatever it has served already)
    assert hints == [pytest.approx(1 / 4.0, abs=0.001)] * 4
    assert refused["retry_after_s"].tolist() == pytest.approx([0.25] * 4)


def test_rpm_bucket():
    rpm = 60  # one request per second refills a bucket of a minute's allowance
    minute = {"rpm": rpm, "limit_burst_s": 60}

    async def go():
        async with Simulator(preset="instant", **minute) as sim, aiohttp.ClientSession() as session:
            body = body_for("openai-chat")
            replies = []
            while not replies or replies[-1].status == 200:
                replies.append(await call(session, sim.url, "openai-chat", body))
                assert len(replies) <= 2 * rpm
            retry = check_429(replies[-1])
            await asyncio.sleep(retry)
            after = await call(session, sim.url, "openai-chat", body)
            again = await call(session, sim.url, "openai-chat", body)
            return replies, after, again, sim.truth()

    replies, after, again, truth = asyncio.run(go())
    admitted = len(replies) - 1
    assert admitted >= rpm
    remaining = [int(r.headers["x-ratelimit-remaining-requests"]) for r in replies[:admitted]]
    assert remaining[0] == rpm - 1 and remaining == sorted(remaining, reverse=True)
    assert all(r.headers["x-ratelimit-limit-requests"] == str(rpm) for r in replies)
    # bucket state when refused: full at the first request, drained one per request, refilled
    # at rpm / 60 per second since then
    refused = truth[truth["outcome"] == "rate_limited"].iloc[0]
    elapsed = refused["t_arrival"] - truth["t_arrival"].iloc[0]
    level = rpm - admitted + elapsed * rpm / 60
    assert refused["retry_after_s"] == pytest.approx((1 - level) / (rpm / 60), abs=0.02)
    assert after.status == 200  # waiting the hint was enough
    assert again.status == 429  # and the bucket is empty again


def test_tpm_bucket():
    tpm, max_tokens = 600, 14
    body = body_for("openai-chat", "x" * 24, max_tokens=max_tokens)  # 6 prompt tokens
    cost = 6 + max_tokens
    minute = {"tpm": tpm, "limit_burst_s": 60}  # a bucket of a minute's allowance

    async def go():
        async with Simulator(preset="instant", **minute) as sim, aiohttp.ClientSession() as session:
            replies = []
            while not replies or replies[-1].status == 200:
                replies.append(await call(session, sim.url, "openai-chat", body))
                assert len(replies) <= 2 * tpm // cost
            retry = check_429(replies[-1], limit_kinds=("tokens",))
            assert "x-ratelimit-limit-requests" not in replies[-1].headers
            await asyncio.sleep(retry)
            after = await call(session, sim.url, "openai-chat", body)
            return replies, after, sim.truth()

    replies, after, truth = asyncio.run(go())
    admitted = len(replies) - 1
    assert admitted >= tpm // cost
    assert replies[0].headers["x-ratelimit-remaining-tokens"] == str(tpm - cost)
    refused = truth[truth["outcome"] == "rate_limited"].iloc[0]
    elapsed = refused["t_arrival"] - truth["t_arrival"].iloc[0]
    level = tpm - admitted * cost + elapsed * tpm / 60
    assert refused["retry_after_s"] == pytest.approx((cost - level) / (tpm / 60), abs=0.02)
    assert after.status == 200


def test_a_one_second_burst_refuses_within_the_first_second_and_says_when():
    # 600 per minute held as 1 s of it: 10 pass at once, then one every 0.1 s (the minute's
    # bucket of 600 would let a run of several seconds through without a single 429)
    rpm = 600

    async def go():
        async with (
            Simulator(preset="instant", rpm=rpm, limit_burst_s=1) as sim,
            aiohttp.ClientSession() as session,
        ):
            body = body_for("openai-chat")
            replies = []
            while not replies or replies[-1].status == 200:
                replies.append(await call(session, sim.url, "openai-chat", body))
                assert len(replies) <= rpm // 2
            retry = check_429(replies[-1])
            await asyncio.sleep(retry)
            after = await call(session, sim.url, "openai-chat", body)
            return replies, after, sim.truth()

    replies, after, truth = asyncio.run(go())
    admitted = len(replies) - 1
    remaining = [int(r.headers["x-ratelimit-remaining-requests"]) for r in replies[:admitted]]
    assert remaining[0] == 9 and max(remaining) <= 10  # the bucket holds 10
    assert all(r.headers["x-ratelimit-limit-requests"] == str(rpm) for r in replies)  # declared
    refused = truth[truth["outcome"] == "rate_limited"].iloc[0]
    elapsed = refused["t_arrival"] - truth["t_arrival"].iloc[0]
    level = 10 - admitted + elapsed * rpm / 60
    assert 10 <= admitted <= 10 + elapsed * rpm / 60 + 1
    assert refused["retry_after_s"] == pytest.approx((1 - level) / (rpm / 60), abs=0.02)
    assert after.status == 200  # the hint was honest


def test_a_request_larger_than_the_burst_passes_when_full_and_leaves_a_debt():
    tpm = 6000  # 100 tokens a second, held as 1 s: a request of 206 tokens never fits the bucket
    body = body_for("openai-chat", "x" * 24, max_tokens=200)  # 6 prompt tokens

    async def go():
        async with (
            Simulator(preset="instant", tpm=tpm, limit_burst_s=1) as sim,
            aiohttp.ClientSession() as session,
        ):
            first = await call(session, sim.url, "openai-chat", body)
            second = await call(session, sim.url, "openai-chat", body)
            return first, second, sim.truth()

    first, second, truth = asyncio.run(go())
    assert first.status == 200 and first.headers["x-ratelimit-remaining-tokens"] == "0"
    retry = check_429(second, limit_kinds=("tokens",))
    # full (100) at the first, 206 taken: a debt of 106 to repay and 100 to refill, at 100/s
    elapsed = truth["t_arrival"].iloc[1] - truth["t_arrival"].iloc[0]
    assert truth["retry_after_s"].iloc[1] == pytest.approx(2.06 - elapsed, abs=0.02)
    assert retry == pytest.approx(truth["retry_after_s"].iloc[1], abs=0.002)


def test_request_larger_than_tpm_is_400():
    async def go():
        async with Simulator(preset="instant", tpm=100) as sim, aiohttp.ClientSession() as session:
            return await call(
                session, sim.url, "openai-chat", body_for("openai-chat", max_tokens=500)
            )

    reply = asyncio.run(go())
    assert reply.status == 400
    assert "tokens-per-minute" in reply.json()["error"]["message"]


def test_article_preset_shows_the_cliff_at_100_not_at_10():
    """Batch cap 32, a queue of 32, then 429s: checked on a burst, before anything finishes
    (the shortest article request decodes 16 steps of about 0.2 s)."""

    async def burst(sim, session, n):
        while sim.truth()["t_end"].isna().any():  # the replica forgot the previous burst
            await asyncio.sleep(0.01)
        start = len(sim.truth())
        tasks = [
            asyncio.create_task(call(session, sim.url, "openai-chat", body_for("openai-chat")))
            for _ in range(n)
        ]
        while True:
            rows = sim.truth().iloc[start:]
            if len(rows) == n and (rows["t_admitted"].notna() | rows["outcome"].notna()).all():
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # a step boundary: the admitted join the batch
        truth = sim.truth().iloc[start:]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return truth

    async def go():
        async with Simulator(preset="article") as sim, aiohttp.ClientSession() as session:
            return await burst(sim, session, 10), await burst(sim, session, 100)

    ten, hundred = asyncio.run(go())
    assert ten["outcome"].isna().all()  # all admitted, none refused
    assert ten["t_service_start"].notna().all()  # all decoding together
    assert (hundred["outcome"] == "queue_full").sum() == 100 - 64
    admitted = hundred[hundred["outcome"].isna()]
    assert len(admitted) == 64
    assert admitted["t_service_start"].notna().sum() == 32  # the batch cap
    refused = hundred[hundred["outcome"] == "queue_full"]
    assert (refused["retry_after_s"] > 1.0).all()  # until the first of the 32 finishes
