"""The simulator's wire protocol over real loopback HTTP: OpenAI chat/completions and Anthropic
messages, streamed and not, usage, prompt caching, 400s for bad bodies, 404, the truth table."""

from __future__ import annotations

import asyncio
import itertools
import json
import math

import aiohttp
import pandas as pd
import pytest
from sim_http import PATHS, body_for, call

from llmlat.sim import PRESETS, SimConfig, Simulator, config_from_options
from llmlat.sim.model import TRUTH_COLUMNS

pytestmark = pytest.mark.timeout(60)

FAST = {"t0_s": 0.002, "t1_s": 0.0005, "output_tokens": 6, "output_dist": "fixed", "seed": 3}
PROMPT = "Hello there, simulator."  # 23 characters -> 6 prompt tokens
APIS = list(PATHS)


def run(coro):
    return asyncio.run(coro)


async def with_sim(func, **options):
    async with Simulator(**{**FAST, **options}) as sim, aiohttp.ClientSession() as session:
        return await func(sim, session)


def openai_text(events: list[tuple[str | None, str]]) -> tuple[str, list[dict]]:
    """Concatenated content of an OpenAI stream, and its decoded chunks (without [DONE])."""
    assert events[-1] == (None, "[DONE]")
    chunks = [json.loads(data) for _, data in events[:-1]]
    text = ""
    for chunk in chunks:
        for choice in chunk["choices"]:
            text += choice.get("text") or choice.get("delta", {}).get("content") or ""
    return text, chunks


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("max_tokens", [None, 9])
def test_non_streamed_body_and_usage(api, max_tokens):
    extra = {} if max_tokens is None else {"max_tokens": max_tokens}

    async def go(sim, session):
        return await call(session, sim.url, api, body_for(api, PROMPT, **extra))

    reply = run(with_sim(go))
    if api == "anthropic-messages" and max_tokens is None:  # required, as by the real API
        assert reply.status == 400
        assert reply.json()["error"]["message"] == "max_tokens: Field required"
        return
    assert reply.status == 200, reply.body
    assert reply.headers["content-type"].startswith("application/json")
    body = reply.json()
    n = max_tokens or FAST["output_tokens"]
    if api == "anthropic-messages":
        assert body["type"] == "message" and body["role"] == "assistant"
        text = body["content"][0]["text"]
        assert body["usage"]["input_tokens"] == math.ceil(len(PROMPT) / 4)
        assert body["usage"]["output_tokens"] == n
        assert body["stop_reason"] == ("max_tokens" if max_tokens else "end_turn")
    else:
        choice = body["choices"][0]
        text = choice["text"] if api == "openai-completions" else choice["message"]["content"]
        assert body["usage"] == {
            "prompt_tokens": math.ceil(len(PROMPT) / 4),
            "completion_tokens": n,
            "total_tokens": math.ceil(len(PROMPT) / 4) + n,
            "prompt_tokens_details": {"cached_tokens": 0},
        }
        assert choice["finish_reason"] == ("length" if max_tokens else "stop")
    assert len(text.split()) == n


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions"])
@pytest.mark.parametrize("include_usage", [False, True])
def test_openai_stream_is_well_formed(api, include_usage):
    body = body_for(api, PROMPT, stream=True, max_tokens=7)
    if include_usage:
        body["stream_options"] = {"include_usage": True}

    async def go(sim, session):
        return await call(session, sim.url, api, body)

    reply = run(with_sim(go))
    assert reply.status == 200
    assert reply.headers["content-type"] == "text/event-stream"
    text, chunks = openai_text(reply.events())
    assert len(text.split()) == 7
    assert len({c["id"] for c in chunks}) == 1
    kind = "chat.completion.chunk" if api == "openai-chat" else "text_completion"
    assert all(c["object"] == kind and c["model"] == "m" for c in chunks)
    if api == "openai-chat":  # a role-only chunk first, then one chunk per token
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        chunks = chunks[1:]
    content = chunks[:7]
    assert all(c["choices"][0]["finish_reason"] is None for c in content)
    assert chunks[7]["choices"][0]["finish_reason"] == "length"
    if include_usage:
        assert len(chunks) == 9
        assert chunks[8]["choices"] == []
        assert chunks[8]["usage"]["completion_tokens"] == 7
        assert chunks[8]["usage"]["prompt_tokens"] == math.ceil(len(PROMPT) / 4)
    else:
        assert len(chunks) == 8
        assert all("usage" not in c for c in chunks)
    assert len(reply.token_times) == 7


def test_anthropic_stream_is_well_formed():
    async def go(sim, session):
        body = body_for("anthropic-messages", PROMPT, stream=True, max_tokens=5)
        return await call(session, sim.url, "anthropic-messages", body)

    reply = run(with_sim(go))
    assert reply.status == 200
    events = reply.events()
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * 5,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    data = [json.loads(d) for _, d in events]
    assert all(d["type"] == name for d, name in zip(data, names, strict=True))
    assert data[0]["message"]["usage"]["input_tokens"] == math.ceil(len(PROMPT) / 4)
    assert len("".join(d["delta"]["text"] for d in data[2:7]).split()) == 5
    assert data[-2]["usage"]["output_tokens"] == 5
    assert data[-2]["delta"]["stop_reason"] == "max_tokens"


def test_max_completion_tokens_and_drawn_lengths():
    async def go(sim, session):
        fixed = await call(
            session, sim.url, "openai-chat", body_for("openai-chat", max_completion_tokens=3)
        )
        drawn = [
            await call(session, sim.url, "openai-chat", body_for("openai-chat")) for _ in range(40)
        ]
        return fixed, drawn

    fixed, drawn = run(with_sim(go, output_tokens=20, output_dist="uniform"))
    assert fixed.json()["usage"]["completion_tokens"] == 3
    lengths = [r.json()["usage"]["completion_tokens"] for r in drawn]
    assert min(lengths) >= 10 and max(lengths) <= 30
    assert len(set(lengths)) > 5  # really drawn


def test_prompt_caching():
    system = "You are a careful assistant. " * 200  # 5800 characters -> 1450 tokens
    anthropic = {
        "model": "m",
        "max_tokens": 2,
        "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hi"}],
    }
    openai = {
        "model": "m",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
    }

    async def go(sim, session):
        out = []
        for _ in range(2):
            out.append((await call(session, sim.url, "anthropic-messages", anthropic)).json())
            out.append((await call(session, sim.url, "openai-chat", openai)).json())
        return out, sim.truth()

    (a1, o1, a2, o2), truth = run(with_sim(go))
    assert a1["usage"]["cache_creation_input_tokens"] == 1450
    assert a1["usage"]["cache_read_input_tokens"] == 0
    assert a2["usage"]["cache_read_input_tokens"] == 1450
    assert a2["usage"]["input_tokens"] == 1
    assert o1["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # OpenAI: the whole 1451-token prompt was seen; hits count 1024 + 128 k tokens
    assert o2["usage"]["prompt_tokens_details"]["cached_tokens"] == 1408
    assert o2["usage"]["prompt_tokens"] == 1451
    assert truth["cached_tokens"].tolist() == [0, 0, 1450, 1408]
    assert truth["cache_creation_tokens"].tolist() == [1450, 0, 0, 0]


BAD_BODIES = [
    ("openai-chat", b"{not json", None),
    ("openai-chat", b"[1, 2]", None),
    ("openai-chat", {"messages": [{"role": "user", "content": "x"}]}, "model"),
    ("openai-chat", {"model": 3, "messages": [{"role": "user", "content": "x"}]}, "model"),
    ("openai-chat", {"model": "m"}, "messages"),
    ("openai-chat", {"model": "m", "messages": "hi"}, "messages"),
    ("openai-chat", {"model": "m", "messages": []}, "messages"),
    ("openai-chat", {"model": "m", "messages": [{"content": "x"}]}, "messages"),
    ("openai-chat", {"model": "m", "messages": [{"role": "user", "content": 5}]}, None),
    ("openai-chat", {**body_for("openai-chat"), "stream": "yes"}, "stream"),
    ("openai-chat", {**body_for("openai-chat"), "max_tokens": "9"}, "max_tokens"),
    ("openai-chat", {**body_for("openai-chat"), "max_tokens": 0}, "max_tokens"),
    ("openai-chat", {**body_for("openai-chat"), "max_tokens": True}, "max_tokens"),
    ("openai-chat", {**body_for("openai-chat"), "max_completion_tokens": 1.5}, None),
    ("openai-chat", {**body_for("openai-chat"), "stream_options": 1}, "stream_options"),
    ("openai-completions", {"model": "m"}, "prompt"),
    ("openai-completions", {"model": "m", "prompt": {"a": 1}}, "prompt"),
    ("anthropic-messages", {"model": "m", "max_tokens": 5}, "messages"),
    ("anthropic-messages", {"model": "m", "max_tokens": 5, "messages": [{"role": "user"}]}, None),
    ("anthropic-messages", {**body_for("anthropic-messages", max_tokens=5), "system": 1}, None),
    ("anthropic-messages", body_for("anthropic-messages"), None),  # no max_tokens
    ("openai-chat", b"[" * 100_000 + b"]" * 100_000, None),  # nested too deeply to decode
    ("openai-chat", b'{"model": "m", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}", None),
]


def test_bad_bodies_get_400_and_the_server_keeps_serving():
    async def go(sim, session):
        bad = [await call(session, sim.url, api, body) for api, body, _ in BAD_BODIES]
        good = await call(session, sim.url, "openai-chat", body_for("openai-chat"))
        return bad, good, sim.truth()

    bad, good, truth = run(with_sim(go))
    for (api, body, param), reply in zip(BAD_BODIES, bad, strict=True):
        assert reply.status == 400, (body, reply.body)
        error = reply.json()
        if api == "anthropic-messages":
            assert error["type"] == "error"
            assert error["error"]["type"] == "invalid_request_error"
            assert error["error"]["message"]
        else:
            assert set(error["error"]) == {"message", "type", "param", "code"}
            assert error["error"]["type"] == "invalid_request_error"
            if param is not None:
                assert error["error"]["param"] == param
    assert good.status == 200
    assert len(truth) == len(BAD_BODIES) + 1
    assert (truth["outcome"].iloc[:-1] == "invalid").all()
    assert (truth["status"].iloc[:-1] == 400).all()


def test_unknown_path_is_404_and_models_are_listed():
    async def go(sim, session):
        out = []
        for method, path in [
            ("GET", "/v1/nothing"),
            ("POST", "/v2/chat/completions"),
            ("GET", "/"),
        ]:
            async with session.request(method, sim.url + path, json={}) as r:
                out.append((r.status, await r.json()))
        async with session.get(sim.url + "/v1/models") as r:
            out.append((r.status, await r.json()))
        return out, sim.truth()

    out, truth = run(with_sim(go, model="my-model"))
    for status, body in out[:3]:
        assert status == 404
        assert body["error"]["code"] == "not_found"
    status, models = out[3]
    assert status == 200
    assert [m["id"] for m in models["data"]] == ["my-model"]
    assert truth.empty and list(truth.columns) == list(TRUTH_COLUMNS)


def test_truth_keeps_the_last_truth_limit_rows_and_counts_on():
    async def go(sim, session):
        for i in range(5):  # one after the other: arrival order is request order
            await call(
                session,
                sim.url,
                "openai-chat",
                body_for("openai-chat"),
                headers={"x-llmlat-request-id": f"r/{i}/1"},
            )
        return sim.truth()

    truth = run(with_sim(go, truth_limit=3))
    assert truth["request_id"].tolist() == [2, 3, 4]
    assert truth["client_request_id"].tolist() == ["r/2/1", "r/3/1", "r/4/1"]
    assert SimConfig().truth_limit == 200_000 and SimConfig(truth_limit=None).truth_limit is None
    with pytest.raises(ValueError, match="truth_limit: must be > 0"):
        SimConfig(truth_limit=0)


def test_truth_one_row_per_request_with_consistent_times():
    n = 30

    async def go(sim, session):
        async def one(i):
            api = APIS[i % 3]
            body = body_for(api, stream=bool(i % 2), max_tokens=7) if i % 10 else b"{oops"
            return await call(
                session, sim.url, api, body, headers={"x-llmlat-request-id": f"r/{i}/0"}
            )

        replies = await asyncio.gather(*(one(i) for i in range(n)))
        async with session.get(sim.url + "/llmlat/truth") as r:
            over_http = await r.json()
        return replies, sim.truth(), over_http

    replies, truth, over_http = run(with_sim(go, slots=4, t0_s=0.005))
    assert list(truth.columns) == list(TRUTH_COLUMNS)
    assert dict(truth.dtypes.astype(str)) == TRUTH_COLUMNS
    assert len(truth) == n and truth["request_id"].tolist() == list(range(n))
    assert sorted(truth["client_request_id"]) == sorted(f"r/{i}/0" for i in range(n))
    by_id = truth.set_index("client_request_id")
    for i, reply in enumerate(replies):
        row = by_id.loc[f"r/{i}/0"]
        assert row["status"] == reply.status
        assert row["api"] == APIS[i % 3]
        if reply.status == 200:
            assert row["outcome"] == "ok"
            assert bool(row["stream"]) == bool(i % 2)
            usage = reply.json()["usage"] if not i % 2 else None
            if usage:
                key = (
                    "output_tokens" if APIS[i % 3] == "anthropic-messages" else "completion_tokens"
                )
                assert row["completion_tokens"] == usage[key]
    ok = truth[truth["outcome"] == "ok"]
    assert len(ok) == n - 3
    chain = ["t_arrival", "t_admitted", "t_service_start", "t_first_token", "t_last_token", "t_end"]
    for a, b in itertools.pairwise(chain):
        assert (ok[a] <= ok[b]).all(), (a, b)
    assert (ok["queue_wait_s"] - (ok["t_service_start"] - ok["t_admitted"])).abs().max() < 1e-12
    bad = truth[truth["outcome"] == "invalid"]
    assert bad["t_admitted"].isna().all() and bad["t_end"].notna().all()
    # the HTTP view is the same table
    http = pd.DataFrame(over_http)
    assert http["request_id"].tolist() == truth["request_id"].tolist()
    assert http["outcome"].tolist() == truth["outcome"].tolist()


def test_sync_context_manager_and_truth_clock():
    import time

    async def client(url):
        async with aiohttp.ClientSession() as session:
            return await call(session, url, "openai-chat", body_for("openai-chat"))

    before = time.perf_counter()
    with Simulator(preset="instant") as sim:
        assert sim.url.startswith("http://127.0.0.1:")
        reply = asyncio.run(client(sim.url))
        truth = sim.truth()
    after = time.perf_counter()
    assert sim.url is None
    assert reply.status == 200
    # truth times are absolute perf_counter seconds, the same clock as this process's
    assert before < truth["t_arrival"].iloc[0] <= truth["t_end"].iloc[0] < after


def test_config_validation_and_presets():
    assert {"article", "mmc", "instant", "flaky"} <= set(PRESETS)
    article = SimConfig.from_preset("article")
    assert (article.mode, article.slots, article.queue_limit) == ("batch", 32, 32)
    assert config_from_options("article", slots="8", rpm="none").slots == 8
    assert config_from_options({"queue-limit": "4"}).queue_limit == 4
    cases = {
        "mode": {"mode": "fifo"},
        "slots": {"slots": 0},
        "t0_s": {"t0_s": -1},
        "p_500": {"p_500": 1.5},
        "queue_limit": {"queue_limit": 1.5},
        "rpm": {"rpm": "fast"},
        "nonsense": {"nonsense": 1},
    }
    for name, bad in cases.items():
        with pytest.raises(ValueError, match=f"^{name}"):
            config_from_options(None, **bad)
    with pytest.raises(ValueError, match=r"^preset"):
        SimConfig.from_preset("nope")
    with pytest.raises(ValueError, match=r"p_500 \+ p_503"):
        SimConfig(p_500=0.6, p_503=0.6)
    with pytest.raises(ValueError, match=r"^port"):
        Simulator(port=-1)
