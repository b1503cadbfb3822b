"""Client.send against the simulator over 127.0.0.1: timing, usage, errors, retries, secrets."""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import socket
import time
from email.utils import formatdate

import pytest
from aiohttp import web

from llmlat._client import Client, RetryPolicy, Target, _retry_after, classify_status
from llmlat._redact import redact_url
from llmlat.schema import ERROR_KINDS, Attempt, Record, attempts_frame, requests_frame
from llmlat.sim import Simulator

SENTINEL = "sk-SENTINEL-7f3a9c1e55d04b2e"
NO_RETRY = RetryPolicy(retries=0)
FAST_RETRY = RetryPolicy(retries=2, backoff_base_s=0.01, backoff_max_s=0.02)
# one slow-ish decode step per token, nothing else: token i is due at service start + (i+1) step
STEPPED = {"t0_s": 0.1, "t1_s": 0.0, "prefill_per_token_s": 0.0, "output_dist": "fixed"}


def run(coro):
    return asyncio.run(coro)


def now_s(t0_ns: int) -> float:
    return (time.perf_counter_ns() - t0_ns) / 1e9


async def measure(url, payload="Say hi.", *, n=1, retry=NO_RETRY, run_id="run", **target):
    """Send ``n`` concurrent requests; return records, attempts per record, t0 (perf seconds)."""
    target.setdefault("model", "m")
    t0 = time.perf_counter_ns()
    async with Client(Target(url, **target), retry, run_id=run_id, t0_ns=t0, seed=7) as client:
        records = [Record(run_id, 1.0, "concurrency", i, t_scheduled=now_s(t0)) for i in range(n)]
        sent = await asyncio.gather(*(client.send(r, payload) for r in records))
    return records, sent, t0 / 1e9


def truth_of(sim, record, attempt=1):
    truth = sim.truth()
    rows = truth[truth["client_request_id"] == f"{record.run_id}/{record.request_id}/{attempt}"]
    assert len(rows) == 1
    return rows.iloc[0]


def check_invariants(record: Record, attempts: list[Attempt]) -> None:
    assert record.attempts == len(attempts) >= 1
    assert [a.attempt for a in attempts] == list(range(1, len(attempts) + 1))
    assert record.t_sent == attempts[0].t_sent
    assert record.t_end == attempts[-1].t_end
    assert record.latency_s == pytest.approx(record.t_end - record.t_scheduled)
    assert record.service_s == pytest.approx(record.t_end - record.t_sent)
    # t_sent is taken once connected: the connect is its own number, not schedule lag
    connect = record.connect_s if record.connect_s == record.connect_s else 0.0
    assert record.connect_s == attempts[0].connect_s or record.connect_s != record.connect_s
    assert record.lag_s == pytest.approx(record.t_sent - connect - record.t_scheduled)
    assert all(a.connect_s != a.connect_s or 0 <= a.connect_s <= a.t_sent for a in attempts)
    assert record.error_kind is None or record.error_kind in ERROR_KINDS
    assert record.ok == (record.error_kind is None)
    assert record.error is None or len(record.error) < 200
    # the tables build with their stable dtypes
    assert len(requests_frame([record])) == 1 and len(attempts_frame(attempts)) == len(attempts)


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions", "anthropic-messages"])
def test_stream_timing_and_usage_match_the_server(api):
    async def go():
        async with Simulator(**STEPPED, output_tokens=6) as sim:
            records, sent, t0 = await measure(sim.url, api=api, max_tokens=6)
            return records[0], sent[0], truth_of(sim, records[0]), t0

    record, attempts, truth, t0 = run(go())
    check_invariants(record, attempts)
    assert record.ok and record.status == 200 and record.attempts == 1
    assert record.chunks == record.completion_tokens == truth["completion_tokens"] == 6
    assert record.prompt_tokens == truth["prompt_tokens"] > 0
    assert record.cached_tokens == 0
    # TTFT is the first content chunk, not the headers / role chunk sent at service start:
    # the client saw it after the server wrote it, and well before the next step's token
    step = truth["t_first_token"] - truth["t_service_start"]
    seen = t0 + record.t_first_token
    assert seen >= truth["t_first_token"]
    assert seen - truth["t_first_token"] < 0.5 * step
    assert record.t_first_byte < record.t_first_token < record.t_end
    assert record.ttft_s == pytest.approx(record.t_first_token - record.t_scheduled)
    # inter-token latency from chunk arrivals, against the server's own token times
    server_itl = (truth["t_last_token"] - truth["t_first_token"]) / 5
    assert record.itl_mean_s == pytest.approx(server_itl, rel=0.25)
    assert record.itl_p50_s == pytest.approx(server_itl, rel=0.25)
    assert record.itl_max_s >= record.itl_p50_s
    assert record.tpot_s == pytest.approx((record.t_end - record.t_first_token) / 5)


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions", "anthropic-messages"])
def test_non_stream_answers_have_usage_but_no_token_times(api):
    async def go():
        async with Simulator(preset="instant") as sim:
            records, sent, _ = await measure(sim.url, api=api, stream=False, max_tokens=16)
            return records[0], sent[0], truth_of(sim, records[0])

    record, attempts, truth = run(go())
    check_invariants(record, attempts)
    assert record.ok and not truth["stream"]
    assert record.completion_tokens == truth["completion_tokens"] == 16
    assert record.prompt_tokens == truth["prompt_tokens"]
    assert record.chunks == 0 and math.isnan(record.t_first_token) and math.isnan(record.ttft_s)
    assert not math.isnan(record.t_first_byte)


def test_zero_service_time_stream_counts_every_token():
    async def go():
        async with Simulator(preset="instant") as sim:
            records, sent, _ = await measure(sim.url, n=20)
            return records, sent

    records, sent = run(go())
    for record, attempts in zip(records, sent, strict=True):
        check_invariants(record, attempts)
        assert record.ok and record.chunks == record.completion_tokens == 16
        assert record.itl_mean_s >= 0 and record.t_first_token <= record.t_end


@pytest.mark.parametrize(
    ("api", "payload"),
    [
        (
            "openai-chat",
            {
                "messages": [
                    {"role": "system", "content": "You are terse. " * 300},
                    {"role": "user", "content": "hi"},
                ]
            },
        ),
        (
            "anthropic-messages",
            {
                "system": [
                    {
                        "type": "text",
                        "text": "You are terse. " * 300,
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
                "messages": [{"role": "user", "content": "hi"}],
            },
        ),
    ],
)
def test_cached_prompt_tokens_are_reported(api, payload):
    async def go():
        async with Simulator(preset="instant") as sim:
            first, _, _ = await measure(sim.url, payload, api=api, run_id="a", max_tokens=4)
            second, _, _ = await measure(sim.url, payload, api=api, run_id="b", max_tokens=4)
            return first[0], second[0], truth_of(sim, second[0])

    first, second, truth = run(go())
    assert first.cached_tokens == 0
    assert second.cached_tokens == truth["cached_tokens"] > 0
    assert second.prompt_tokens == truth["prompt_tokens"] > second.cached_tokens


def test_request_id_header_and_body_options_reach_the_server():
    async def go():
        async with Simulator(preset="instant") as sim:
            records, _, _ = await measure(sim.url, max_tokens=3)
            return records[0], sim.truth()

    record, truth = run(go())
    assert list(truth["client_request_id"]) == ["run/0/1"]
    assert record.completion_tokens == 3 == record.chunks  # max_tokens was sent


async def exhaust(sim, n):
    """Use up an RPM bucket of n requests."""
    records, _, _ = await measure(sim.url, n=n, api="openai-completions", stream=False)
    assert all(r.ok for r in records)


def test_retry_after_is_honoured_and_the_retry_succeeds():
    # rpm=30 held as a minute's bucket: 30 requests empty it, then one token refills every 2 s
    # (at rpm=120 the 0.5 s refill raced a busy machine: it refilled before the request was sent)
    async def go():
        async with Simulator(preset="instant", rpm=30, limit_burst_s=60) as sim:
            await exhaust(sim, 30)
            retry = RetryPolicy(retries=3, backoff_base_s=0.001, backoff_max_s=0.001)
            records, sent, _ = await measure(sim.url, retry=retry)
            return records[0], sent[0], sim.truth()

    record, attempts, truth = run(go())
    check_invariants(record, attempts)
    assert record.ok and record.attempts >= 2
    first = attempts[0]
    assert first.status == 429 and first.error_kind == "rate_limited"
    assert 0 < first.retry_after_s <= 2.1
    for before, after in itertools.pairwise(attempts):
        assert after.wait_before_s >= before.retry_after_s  # waited at least the hint
        assert after.t_sent - before.t_end >= before.retry_after_s
    assert record.retry_wait_s == pytest.approx(sum(a.wait_before_s for a in attempts))
    assert record.retry_after_s == attempts[-2].retry_after_s
    # the server saw each attempt, tagged with its number
    tagged = set(truth["client_request_id"].dropna())
    assert {f"run/0/{a.attempt}" for a in attempts} <= tagged


def test_retries_zero_reports_the_raw_429():
    # rpm=2, a minute's bucket of 2: it refills in 30 s, so the request is refused however slow
    # the machine is
    async def go():
        async with Simulator(preset="instant", rpm=2, limit_burst_s=60) as sim:
            await exhaust(sim, 2)
            records, sent, _ = await measure(sim.url, retry=RetryPolicy(retries=0))
            return records[0], sent[0]

    record, attempts = run(go())
    check_invariants(record, attempts)
    assert not record.ok and record.status == 429 and record.error_kind == "rate_limited"
    assert record.attempts == 1 and record.retry_wait_s == 0.0
    assert record.retry_after_s > 0 and "429" in record.error


def test_retry_after_is_capped_by_max_retry_wait():
    # rpm=2, a minute's bucket: after two requests the hint is 30 s; the cap keeps the wait near
    # 0.1 s
    async def go():
        async with Simulator(preset="instant", rpm=2, limit_burst_s=60) as sim:
            await exhaust(sim, 2)
            retry = RetryPolicy(retries=1, backoff_base_s=0.001, max_retry_wait_s=0.1)
            records, sent, _ = await measure(sim.url, retry=retry)
            return records[0], sent[0]

    record, _ = run(go())
    assert record.attempts == 2 and record.error_kind == "rate_limited"
    assert record.retry_after_s > 20
    assert 0.1 <= record.retry_wait_s < 0.1 * record.retry_after_s


@pytest.mark.parametrize(("fault", "status"), [("p_500", 500), ("p_503", 503)])
def test_server_errors_are_retried_then_reported(fault, status):
    async def go():
        async with Simulator(preset="instant", **{fault: 1.0}) as sim:
            records, sent, _ = await measure(sim.url, retry=FAST_RETRY)
            return records[0], sent[0]

    record, attempts = run(go())
    check_invariants(record, attempts)
    assert record.error_kind == "server_error" and record.status == status
    assert record.attempts == 3 and all(a.status == status for a in attempts)
    assert record.retry_wait_s > 0 and math.isnan(record.retry_after_s)


def test_client_errors_are_not_retried():
    async def go():
        async with Simulator(preset="instant") as sim:
            # no model: the API answers 400
            records, sent, _ = await measure(sim.url, retry=FAST_RETRY, model=None)
            return records[0], sent[0]

    record, attempts = run(go())
    check_invariants(record, attempts)
    assert record.error_kind == "client_error" and record.status == 400
    assert record.attempts == 1 and "model" in record.error


def test_timeout_is_recorded_and_not_retried():
    async def go():
        async with Simulator(preset="instant", p_stall=1.0, stall_s=60.0) as sim:
            records, sent, _ = await measure(sim.url, retry=FAST_RETRY, timeout_s=0.3)
            return records[0], sent[0]

    record, attempts = run(go())
    check_invariants(record, attempts)
    assert record.error_kind == "timeout" and record.attempts == 1
    # the timeout counts the connect too (t_sent is taken once connected): on a busy machine
    # a slow connect left service_s at 0.287
    connect = record.connect_s if record.connect_s == record.connect_s else 0.0
    assert connect + record.service_s >= 0.29 and "timeout_s=0.3" in record.error


def test_connection_dropped_mid_stream():
    async def go():
        async with Simulator(**{**STEPPED, "t0_s": 0.01}, output_tokens=8, p_drop=1.0) as sim:
            records, sent, _ = await measure(sim.url, retry=FAST_RETRY)
            return records[0], sent[0]

    record, attempts = run(go())
    check_invariants(record, attempts)
    assert record.error_kind == "connection" and record.attempts == 3
    assert record.status == 200 and 0 < record.chunks < 8  # half the tokens came through
    assert not math.isnan(record.t_first_token)


def test_connection_refused():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    records, sent, _ = run(measure(f"http://127.0.0.1:{port}", retry=FAST_RETRY))
    record = records[0]
    check_invariants(record, sent[0])
    assert record.error_kind == "connection" and record.status is None
    assert record.attempts == 3 and math.isnan(record.t_first_byte)


@pytest.mark.parametrize("stream", [True, False])
def test_malformed_answer_is_a_protocol_error(stream):
    async def go():
        async with Simulator(preset="instant", p_malformed=1.0) as sim:
            records, sent, _ = await measure(sim.url, retry=FAST_RETRY, stream=stream)
            return records[0], sent[0]

    record, attempts = run(go())
    check_invariants(record, attempts)
    assert record.error_kind == "protocol" and record.attempts == 1 and record.status == 200
    if stream:
        assert record.chunks == 8  # the events before the bad one were counted


def test_cancellation_fills_the_record_and_reraises():
    async def go():
        async with Simulator(preset="instant", p_stall=1.0, stall_s=60.0) as sim:
            t0 = time.perf_counter_ns()
            target = Target(sim.url, model="m")
            async with Client(target, FAST_RETRY, run_id="run", t0_ns=t0, seed=0) as client:
                record = Record("run", 1.0, "concurrency", 5, t_scheduled=now_s(t0))
                kept: list[Attempt] = []
                task = asyncio.create_task(client.send(record, "hi", attempts=kept))
                await asyncio.sleep(0.2)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                return record, kept

    record, kept = run(go())
    check_invariants(record, kept)
    assert record.error_kind == "cancelled" and not record.ok and record.attempts == 1
    assert kept[0].error_kind == "cancelled" and kept[0].t_end == record.t_end
    assert record.latency_s >= 0.19  # it was cancelled 0.2 s after it was scheduled


def test_cancellation_while_waiting_to_retry():
    async def go():
        async with Simulator(preset="instant", p_503=1.0) as sim:
            t0 = time.perf_counter_ns()
            slow = RetryPolicy(retries=3, backoff_base_s=30.0)
            async with Client(Target(sim.url, model="m"), slow, run_id="r", t0_ns=t0) as client:
                record = Record("r", 1.0, "concurrency", 0, t_scheduled=now_s(t0))
                kept: list[Attempt] = []
                task = asyncio.create_task(client.send(record, "hi", attempts=kept))
                while not kept or math.isnan(kept[0].t_end):
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.05)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                return record, kept

    record, kept = run(go())
    assert record.error_kind == "cancelled" and record.attempts == 1
    assert kept[0].error_kind == "server_error"  # the finished attempt keeps its own outcome
    assert record.t_end > kept[0].t_end
    assert record.retry_wait_s >= 0.045  # the part of the backoff slept before the cancel


@pytest.fixture
def odd_server():
    """A tiny real HTTP server for answers the simulator never gives."""

    async def echo_key(request):  # a 401 that echoes the credentials back
        key = request.headers.get("x-api-key") or request.headers.get("Authorization", "")
        return web.json_response({"error": {"message": f"bad key {key}"}}, status=401)

    async def truncated(request):  # a stream that ends cleanly without [DONE]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n')
        await resp.write_eof()
        return resp

    async def json_instead(request):  # a server that ignores stream=true
        return web.json_response({"choices": [{"message": {"content": "x"}}]})

    async def dated(request):  # Retry-After as an HTTP date
        date = formatdate(time.time() + 30, usegmt=True)
        return web.json_response({}, status=429, headers={"Retry-After": date})

    app = web.Application()
    app.router.add_post("/echo/v1/chat/completions", echo_key)
    app.router.add_post("/echo/v1/messages", echo_key)
    app.router.add_post("/truncated/v1/chat/completions", truncated)
    app.router.add_post("/dated/v1/chat/completions", dated)
    app.router.add_post("/json/v1/chat/completions", json_instead)
    return app


async def serve(app):
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


def test_stream_ending_without_completion_is_a_protocol_error(odd_server):
    async def go():
        runner, url = await serve(odd_server)
        try:
            return await measure(url + "/truncated")
        finally:
            await runner.cleanup()

    records, sent, _ = run(go())
    record = records[0]
    check_invariants(record, sent[0])
    assert record.error_kind == "protocol" and record.chunks == 1 and "complete" in record.error


def test_json_answer_to_a_stream_request_is_a_protocol_error(odd_server):
    async def go():
        runner, url = await serve(odd_server)
        try:
            return await measure(url + "/json")
        finally:
            await runner.cleanup()

    records, _, _ = run(go())
    assert records[0].error_kind == "protocol" and "application/json" in records[0].error


def test_retry_after_http_date(odd_server):
    async def go():
        runner, url = await serve(odd_server)
        try:
            return await measure(url + "/dated", retry=NO_RETRY)
        finally:
            await runner.cleanup()

    records, _, _ = run(go())
    assert records[0].error_kind == "rate_limited"
    assert records[0].retry_after_s == pytest.approx(30, abs=2)


@pytest.mark.parametrize("api", ["openai-chat", "anthropic-messages"])
def test_sentinel_key_appears_nowhere(odd_server, monkeypatch, api):
    monkeypatch.setenv("LLMLAT_TEST_KEY", SENTINEL)

    async def go():
        runner, url = await serve(odd_server)
        try:
            t0 = time.perf_counter_ns()
            target = Target(url + "/echo", api=api, api_key_env="LLMLAT_TEST_KEY", model="m")
            async with Client(target, NO_RETRY, run_id="r", t0_ns=t0) as client:
                record = Record("r", 1.0, "concurrency", 0, t_scheduled=now_s(t0))
                attempts = await client.send(record, "hi")
                return target, client, record, attempts
        finally:
            await runner.cleanup()

    target, client, record, attempts = run(go())
    assert record.error_kind == "client_error" and record.status == 401
    assert "bad key" in record.error  # the server did echo something back
    texts = [repr(target), repr(client), repr(record), str(record.error)]
    texts += [repr(a) for a in attempts]
    texts += [requests_frame([record]).to_csv(), attempts_frame(attempts).to_csv()]
    for text in texts:
        assert SENTINEL not in text and "SENTINEL" not in text


def test_unset_key_variable_is_a_value_error_naming_it(monkeypatch):
    monkeypatch.delenv("LLMLAT_NO_SUCH_KEY", raising=False)
    target = Target("http://127.0.0.1:9", api_key_env="LLMLAT_NO_SUCH_KEY")

    async def go():
        async with Client(target, run_id="r", t0_ns=0):
            pass

    with pytest.raises(ValueError, match="LLMLAT_NO_SUCH_KEY"):
        run(go())


def test_target_repr_hides_credentials_and_header_values():
    target = Target(
        "http://user:pw@127.0.0.1:1/v1?key=abc",
        api_key_env="K",
        headers={"Authorization": "Bearer s3cret"},
    )
    text = repr(target)
    assert "pw" not in text and "abc" not in text and "s3cret" not in text
    assert "Authorization" in text and "api_key_env='K'" in text
    assert redact_url("http://127.0.0.1:1/x") == "http://127.0.0.1:1/x"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"url": "ftp://x"}, "url"),
        ({"url": "http://"}, "url"),
        ({"api": "gemini"}, "api"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": float("inf")}, "timeout_s"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stream": "yes"}, "stream"),
        ({"headers": {"a": 1}}, "headers"),
        ({"headers": {"a": "x\r\nb: y"}}, "headers"),
        ({"api_key_env": ""}, "api_key_env"),
        ({"model": 3}, "model"),
    ],
)
def test_target_validation_names_the_field(kwargs, field):
    args = {"url": "http://127.0.0.1:1", **kwargs}
    with pytest.raises(ValueError, match=rf"^{field}:"):
        Target(**args)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"retries": -1}, "retries"),
        ({"retries": 1.5}, "retries"),
        ({"backoff_base_s": -1}, "backoff_base_s"),
        ({"max_retry_wait_s": float("nan")}, "max_retry_wait_s"),
    ],
)
def test_retry_policy_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}:"):
        RetryPolicy(**kwargs)


def test_backoff_is_full_jitter_seeded_and_respects_hints():
    policy = RetryPolicy(backoff_base_s=0.5, backoff_max_s=4.0, max_retry_wait_s=10.0)
    draws = [policy.wait_s(3, math.nan, random.Random(i)) for i in range(2000)]
    assert all(0 <= d <= 2.0 for d in draws)  # retry 3: up to 0.5 * 2**2
    assert sum(draws) / len(draws) == pytest.approx(1.0, rel=0.05)  # uniform mean; sd ~1.3%
    assert [policy.wait_s(9, math.nan, random.Random(1)) <= 4.0 for _ in range(3)] == [True] * 3
    a = [policy.wait_s(k, math.nan, random.Random(5)) for k in (1, 2, 3)]
    assert a == [policy.wait_s(k, math.nan, random.Random(5)) for k in (1, 2, 3)]
    assert policy.wait_s(1, 3.0, random.Random(0)) >= 3.0
    assert policy.wait_s(1, 300.0, random.Random(0)) == 10.0


def test_retry_after_header_forms():
    assert _retry_after({"retry-after": "2"}) == 2.0
    assert _retry_after({"retry-after": "0.25", "retry-after-ms": "250"}) == 0.25
    assert _retry_after({"retry-after": "-3"}) == 0.0
    assert math.isnan(_retry_after({}))
    assert math.isnan(_retry_after({"retry-after": "soon"}))


def test_status_classes():
    assert classify_status(200) is None
    assert classify_status(429) == "rate_limited"
    assert classify_status(503) == "server_error"
    assert classify_status(404) == "client_error"
