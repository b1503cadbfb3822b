"""The simulator's prompt cache: provider rules (minimum, TTL, readiness, 128-token steps), the
usage it reports over HTTP, the records of a sweep with ``cache_system_prompt``, and prefill
made cheaper by a hit."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from sim_http import call

import llmlat
from llmlat._apis import cacheable_system
from llmlat.sim import Simulator
from llmlat.sim.cache import Prefix, PrefixCache

pytestmark = pytest.mark.timeout(60)

SYSTEM = "You are a careful assistant. " * 200  # 5800 characters -> 1450 tokens
FAST = {"t0_s": 0.002, "t1_s": 0.0005, "output_tokens": 4, "output_dist": "fixed", "seed": 1}


class Writer:
    """The fields of a simulator Sequence the cache reads: tokens emitted, finished."""

    def __init__(self) -> None:
        self.emitted = 0
        self.finished = False


def use(cache: PrefixCache, api: str, prefixes: list[Prefix], now: float) -> tuple:
    """Look up, register a writer that prefills at once; return (read, written)."""
    got = cache.lookup(api, prefixes, now)
    writer = Writer()
    if got.writes:
        cache.wrote(got, writer, prefixes, now)
    writer.emitted = 1
    return got.read_tokens, got.write_tokens


def test_minimum_ttl_refresh_and_longest_prefix():
    cache = PrefixCache(min_tokens=1024, ttl_s=300.0)
    short = [Prefix(1, 1000)]
    assert use(cache, "anthropic-messages", short, 0.0) == (0, 0)
    assert use(cache, "anthropic-messages", short, 1.0) == (0, 0)  # below the minimum: never
    two = [Prefix(2, 1500), Prefix(3, 4000)]  # two breakpoints: the longer holds the shorter
    assert use(cache, "anthropic-messages", two, 0.0) == (0, 4000)
    assert use(cache, "anthropic-messages", two, 200.0) == (4000, 0)
    assert use(cache, "anthropic-messages", two, 450.0) == (4000, 0)  # refreshed at 200
    # a new tail after the cached system prefix: read 1500, write the rest
    other = [Prefix(2, 1500), Prefix(4, 2500)]
    assert use(cache, "anthropic-messages", other, 460.0) == (1500, 1000)
    assert use(cache, "anthropic-messages", two, 760.0) == (0, 4000)  # idle 310 s: expired
    # a breakpoint added before a cached one: the cached longer prefix still reads
    assert use(cache, "anthropic-messages", [Prefix(8, 3000)], 800.0) == (0, 3000)
    assert use(cache, "anthropic-messages", [Prefix(9, 1200), Prefix(8, 3000)], 801.0) == (3000, 0)


def test_openai_counts_128_token_steps_and_reports_no_write():
    cache = PrefixCache(min_tokens=1024, ttl_s=300.0)
    prefixes = [Prefix(7, 1300)]
    assert use(cache, "openai-chat", prefixes, 0.0) == (0, 0)
    assert use(cache, "openai-chat", prefixes, 1.0) == (1280, 0)  # 1024 + 2 * 128


def test_an_entry_is_readable_only_once_its_writer_has_prefilled():
    cache = PrefixCache(min_tokens=10, ttl_s=300.0)
    prefixes = [Prefix(5, 50)]
    first = cache.lookup("anthropic-messages", prefixes, 0.0)
    writer = Writer()
    cache.wrote(first, writer, prefixes, 0.0)
    again = cache.lookup("anthropic-messages", prefixes, 0.1)
    assert (again.read_tokens, again.write_tokens) == (0, 50)  # sent together: both write
    writer.emitted = 1
    assert cache.lookup("anthropic-messages", prefixes, 0.2).read_tokens == 50


def anthropic_body(marks: int = 1) -> dict:
    blocks = [{"type": "text", "text": SYSTEM}]
    blocks += [
        {"type": "text", "text": f"part {i} " * 10, "cache_control": {"type": "ephemeral"}}
        for i in range(marks)
    ]
    return {
        "model": "m",
        "max_tokens": 3,
        "system": blocks,
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_concurrent_requests_all_write_and_later_ones_read_over_http():
    async def go():
        async with Simulator(**FAST) as sim, aiohttp.ClientSession() as session:
            together = await asyncio.gather(
                *(call(session, sim.url, "anthropic-messages", anthropic_body()) for _ in range(3))
            )
            after = await call(session, sim.url, "anthropic-messages", anthropic_body())
            five = await call(session, sim.url, "anthropic-messages", anthropic_body(marks=5))
            # the old defect: a second breakpoint on each request's own question keyed the cache
            # on the whole prompt, so every request wrote and none read the shared system prefix
            asks = []
            for question in ("Can I return a helmet?", "Do you fix brakes?"):
                body = anthropic_body()
                body["messages"] = [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "text",
                                "text": question,
                                "cache_control": {"type": "ephemeral"},
                            }
                        ],
                    }
                ]
                asks.append((await call(session, sim.url, "anthropic-messages", body)).json())
            usage = [r.json()["usage"] for r in together]
            return usage, after.json()["usage"], five, asks, sim.truth()

    together, after, five, asks, truth = asyncio.run(go())
    second = asks[1]["usage"]
    assert (second["cache_read_input_tokens"], second["cache_creation_input_tokens"]) == (1468, 5)
    assert [u["cache_creation_input_tokens"] for u in together] == [1468] * 3
    assert [u["cache_read_input_tokens"] for u in together] == [0] * 3
    assert after["cache_read_input_tokens"] == 1468 and after["cache_creation_input_tokens"] == 0
    assert after["input_tokens"] == 1
    assert five.status == 400 and "maximum of 4 blocks" in five.json()["error"]["message"]
    assert truth["cache_creation_tokens"].tolist()[:4] == [1468, 1468, 1468, 0]


def test_cache_system_prompt_marks_anthropic_and_checks_openai():
    marked = cacheable_system({"system": "S", "messages": []}, "anthropic-messages")
    assert marked["system"] == [
        {"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}
    ]
    body = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}]}
    assert cacheable_system(body, "openai-chat") == body  # OpenAI caches by itself
    with pytest.raises(ValueError, match=r"^cache_system_prompt: the payload has no system"):
        llmlat.sweep("hello", api="anthropic-messages", cache_system_prompt=True, concurrency=1)
    with pytest.raises(ValueError, match=r"^cache_system_prompt: openai-completions"):
        cacheable_system({"prompt": "x"}, "openai-completions")


def test_sweep_records_the_cache_and_a_hit_prefills_faster():
    """Cache off vs on, same payload: the records keep what the server reported, and the
    requests that read the 1,450-token system prompt get their first token sooner."""
    payload = {"system": SYSTEM, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    sim = {**FAST, "prefill_per_token_s": 1e-4}  # a 1,450-token prefill: 0.145 s
    runs = {
        on: llmlat.sweep(
            payload,
            api="anthropic-messages",
            concurrency=[1],
            requests=6,
            progress=False,
            simulator=sim,
            simulator_process=False,
            cache_system_prompt=on,
        ).requests
        for on in (False, True)
    }
    off, on = runs[False], runs[True]
    assert (off["cached_tokens"] == 0).all() and (off["cache_creation_tokens"] == 0).all()
    assert on["cache_creation_tokens"].tolist() == [1450, 0, 0, 0, 0, 0]
    assert on["cached_tokens"].tolist() == [0, 1450, 1450, 1450, 1450, 1450]
    assert (on["prompt_tokens"] == 1451).all()
    # relative: the hits skip a prefill 30x their remaining step time
    assert on["ttft_s"].iloc[1:].median() < 0.5 * off["ttft_s"].median()


def test_a_refused_request_never_writes():
    """A 429 is answered before the cache: the retry that gets in writes, not the refusal."""

    async def go():
        async with Simulator(**FAST, rpm=1) as sim, aiohttp.ClientSession() as session:
            first = await call(session, sim.url, "anthropic-messages", anthropic_body())
            refused = await call(session, sim.url, "anthropic-messages", anthropic_body(marks=2))
            return first, refused, sim.truth()

    first, refused, truth = asyncio.run(go())
    assert first.status == 200 and refused.status == 429
    assert truth["cache_creation_tokens"].tolist()[0] == 1468
    assert truth["cache_creation_tokens"].isna().tolist() == [False, True]
