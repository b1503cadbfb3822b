"""A simulator that cannot be frozen (issue 11, item 6), over real loopback HTTP.

The provider limits (context window, body size, nesting, Anthropic's required ``max_tokens``)
are answered as the real APIs answer them, chunked prefill keeps one huge prompt from holding
up everyone else's tokens, and every request the replica received gets an outcome in the truth.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from sim_http import body_for, call

from llmlat.sim import Simulator

pytestmark = pytest.mark.timeout(60)

APIS = ("openai-chat", "openai-completions", "anthropic-messages")


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("api", APIS)
def test_context_window_is_refused_like_the_provider(api):
    async def go():
        sim = Simulator(preset="instant", context_tokens=1000)
        async with sim, aiohttp.ClientSession() as session:
            long_prompt = body_for(api, "x" * 4004, max_tokens=5)  # 1001 tokens
            fits_alone = body_for(api, "x" * 3600, max_tokens=200)  # 900 + 200 tokens
            fits = body_for(api, "x" * 3600, max_tokens=100)  # 900 + 100 tokens
            replies = [await call(session, sim.url, api, b) for b in (long_prompt, fits_alone)]
            return replies, await call(session, sim.url, api, fits), sim.truth()

    (long_prompt, with_output), fits, truth = run(go())
    assert fits.status == 200
    for reply in (long_prompt, with_output):
        assert reply.status == 400
        error = reply.json()["error"]
        if api == "anthropic-messages":
            assert error["type"] == "invalid_request_error"
        else:
            assert error["code"] == "context_length_exceeded"
            assert error["param"] == ("prompt" if api == "openai-completions" else "messages")
            assert "maximum context length is 1000 tokens" in error["message"]
    if api == "anthropic-messages":
        assert long_prompt.json()["error"]["message"].startswith("prompt is too long: 1001 tokens")
        assert "900 + 200 > 1000" in with_output.json()["error"]["message"]
    assert truth["outcome"].tolist() == ["invalid", "invalid", "ok"]


def test_the_issues_4_mb_prompt_is_refused_and_the_next_request_is_not_held_up():
    async def go():
        async with Simulator(preset="article") as sim, aiohttp.ClientSession() as session:
            huge = call(session, sim.url, "openai-chat", body_for("openai-chat", "x" * 4_000_000))
            small = body_for("openai-chat", max_tokens=2)
            return await huge, await call(session, sim.url, "openai-chat", small), sim.truth()

    huge, small, truth = run(go())
    assert huge.status == 400 and huge.json()["error"]["code"] == "context_length_exceeded"
    assert small.status == 200
    # the small request was served as if alone: two steps of the article's replica
    served = truth.iloc[1]
    assert served["t_service_start"] - served["t_arrival"] < served["t_end"] - served["t_arrival"]
    assert served["queue_wait_s"] < 0.1 * (served["t_last_token"] - served["t_service_start"])


@pytest.mark.parametrize("api", APIS)
def test_body_size_limit_is_a_413_in_the_apis_shape(api):
    async def go():
        sim = Simulator(preset="instant", max_body_bytes=10_000)
        async with sim, aiohttp.ClientSession() as session:
            big = await call(session, sim.url, api, body_for(api, "x" * 20_000, max_tokens=2))
            ok = await call(session, sim.url, api, body_for(api, max_tokens=2))
            return big, ok, sim.truth()

    big, ok, truth = run(go())
    assert big.status == 413 and ok.status == 200
    error = big.json()["error"]
    if api == "anthropic-messages":
        assert error["type"] == "request_too_large"
    else:
        assert error["code"] == "request_too_large"
    assert "10000 bytes" in error["message"]
    assert truth["status"].tolist() == [413, 200]
    assert truth["outcome"].tolist() == ["invalid", "ok"]


def test_chunked_prefill_slows_the_huge_prompts_steps_not_everyones():
    # 20,000 prompt tokens at 0.1 ms each: 2 s of prefill, 1,000 tokens (0.1 s) per step
    options = {"t0_s": 0.01, "t1_s": 0.0, "prefill_per_token_s": 1e-4, "prefill_chunk_tokens": 1000}
    options |= {"output_tokens": 2, "output_dist": "fixed", "context_tokens": 100_000}

    async def go():
        async with Simulator(**options) as sim, aiohttp.ClientSession() as session:
            huge = asyncio.create_task(
                call(session, sim.url, "openai-chat", body_for("openai-chat", "x" * 80_000))
            )
            while sim.truth()["t_service_start"].isna().all():
                await asyncio.sleep(0.005)
            small = await call(session, sim.url, "openai-chat", body_for("openai-chat", "hi"))
            return await huge, small, sim.truth()

    huge, small, truth = run(go())
    assert huge.status == small.status == 200
    big, little = truth.iloc[0], truth.iloc[1]
    prefill_s = 20_000 * options["prefill_per_token_s"]
    step_s = options["t0_s"] + 1000 * options["prefill_per_token_s"]
    # the huge prompt's first token comes after its 20 chunks, each in its own step
    assert big["t_first_token"] - big["t_service_start"] >= prefill_s
    # the small request, which joined mid-prefill, got its 2 tokens in about 2 of those steps:
    # without chunking it would have waited for the whole 2 s prefill
    assert little["t_end"] < big["t_first_token"]
    assert little["t_last_token"] - little["t_arrival"] < 4 * step_s < prefill_s / 4


def test_every_request_received_gets_an_outcome():
    async def go():
        async with Simulator(preset="instant") as sim:
            host, port = sim.url.removeprefix("http://").split(":")
            # a client that goes away while its body is being read
            _reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                b'\r\nContent-Length: 1000\r\n\r\n{"model": '
            )
            await writer.drain()
            while len(sim.truth()) < 1:
                await asyncio.sleep(0.005)
            writer.close()
            while sim.truth()["outcome"].isna().any():
                await asyncio.sleep(0.005)
            return sim.truth()

    truth = run(go())
    assert truth["outcome"].tolist() == ["disconnected"]
    assert truth["t_end"].notna().all()


def test_requests_cut_off_by_a_stop_get_an_outcome():
    async def go():
        sim = Simulator(t0_s=10.0, output_tokens=2, output_dist="fixed")
        async with aiohttp.ClientSession() as session:
            async with sim:
                sent = asyncio.create_task(
                    call(session, sim.url, "openai-chat", body_for("openai-chat"))
                )
                while sim.truth()["t_service_start"].isna().all():
                    await asyncio.sleep(0.005)
            await sent
        return sim.truth()

    truth = run(go())
    assert truth["outcome"].tolist() == ["disconnected"] and truth["t_end"].notna().all()
