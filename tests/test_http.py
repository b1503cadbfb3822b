"""The lean HTTP/1.1 transport against raw servers on 127.0.0.1: framing, reuse, faults, TLS."""

from __future__ import annotations

import asyncio
import gzip
import ssl
import time
import zlib

import pytest

from llmlat._client import Client, RetryPolicy, Target
from llmlat._transport import BadResponse, ConnectionFailed, Pool, Response
from llmlat.schema import Record

BODY = b"{}"
SSE = (
    b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"b"}}]}\n\n'
    b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def chunked(body: bytes, size: int) -> bytes:
    parts = [
        b"%x;ext=1\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size])
        for i in range(0, len(body), size)
    ]
    return b"".join(parts) + b"0\r\nx-trailer: 1\r\n\r\n"


class RawServer:
    """Answers each request with the next canned answer, written in ``piece``-byte writes.

    An answer of None closes the connection instead, as does running out of answers or, with
    ``close_after``, having written one; ``connections`` counts accepted connections.
    """

    def __init__(self, answers, piece=1 << 20, ssl_ctx=None, close_after=False):
        self.answers = list(answers)
        self.piece = piece
        self.ssl_ctx = ssl_ctx
        self.close_after = close_after
        self.connections = 0
        self.requests: list[bytes] = []

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0, ssl=self.ssl_ctx)
        port = self.server.sockets[0].getsockname()[1]
        scheme = "https" if self.ssl_ctx else "http"
        self.url = f"{scheme}://127.0.0.1:{port}/v1/x"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                size = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                self.requests.append(head + await reader.readexactly(size))
                answer = self.answers.pop(0)
                if answer is None:
                    break
                for i in range(0, len(answer), self.piece):
                    writer.write(answer[i : i + self.piece])
                    await writer.drain()
                    if self.piece < len(answer):
                        await asyncio.sleep(0.001)  # separate reads on the client side
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def exchange(answers, *, piece=1 << 20, sink=None, requests=1, close_after=False):
    """Send ``requests`` requests in turn; (responses or exceptions, server, open connections)."""

    async def go():
        async with RawServer(answers, piece, close_after=close_after) as server:
            pool = Pool(server.url)
            out = []
            for _ in range(requests):
                resp = Response(sink)
                try:
                    await asyncio.wait_for(pool.send(BODY, resp), 5)
                    out.append(resp)
                except (ConnectionFailed, BadResponse) as exc:
                    out.append(exc)
            still_open = len(pool._open)
            await pool.aclose()
            return out, server, still_open

    return asyncio.run(go())


@pytest.mark.parametrize("piece", [1, 3, 7, 1 << 20])
def test_chunked_body_reaches_the_sink_whole_in_any_split_and_the_connection_is_reused(piece):
    got: list[bytes] = []
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunked(SSE, 17)
    )

    def sink(data: bytes, t_ns: int) -> bool:
        got.append(data)
        return False

    out, server, _ = exchange([answer, answer], piece=piece, sink=sink, requests=2)
    assert all(isinstance(r, Response) for r in out), out
    assert b"".join(got) == SSE * 2
    assert out[0].status == 200 and out[0].content_type == "text/event-stream"
    assert 0 < out[0].t_head_ns <= out[0].t_end_ns
    assert server.connections == 1  # kept alive
    if piece == 1:
        assert len(got) > 10  # the sink saw the body as it came, not at the end


def test_content_length_body_and_headers_without_sink():
    answer = (
        b"HTTP/1.1 429 Too Many\r\nRetry-After: 2\r\nX-A: 1\r\nx-a: 2\r\n"
        b"Content-Length: 5\r\n\r\nslow!"
    )
    (resp,), server, _ = exchange([answer])
    assert resp.status == 429 and bytes(resp.body) == b"slow!"
    assert resp.headers["retry-after"] == "2" and resp.headers["x-a"] == "1, 2"
    assert len(server.requests) == 1 and server.requests[0].endswith(b"\r\n\r\n{}")
    assert b"\r\nContent-Length: 2\r\n" in server.requests[0]


@pytest.mark.parametrize("piece", [1000, 1 << 20])
def test_an_error_body_is_kept_up_to_64_kib_in_any_split(piece):
    body = bytes(range(256)) * 400  # 100 KiB
    answer = b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    (resp,), _, _ = exchange([answer], piece=piece)
    assert resp.status == 500 and bytes(resp.body) == body[: 64 * 1024]


def test_informational_answers_are_skipped_and_204_has_no_body():
    answer = (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
        b"HTTP/1.1 204 No Content\r\n\r\n"
    )
    out, server, _ = exchange([answer, answer], piece=5, requests=2)
    assert [r.status for r in out] == [204, 204] and not out[0].body
    assert server.connections == 1


@pytest.mark.parametrize(
    ("answer", "close_after"),
    [
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", False),
        (b"HTTP/1.1 200 OK\r\n\r\nok", True),  # no length: the body ends when the server closes
    ],
)
def test_answers_that_end_the_connection_are_not_reused(answer, close_after):
    out, server, _ = exchange([answer, answer], requests=2, close_after=close_after)
    assert [bytes(r.body) for r in out] == [b"ok", b"ok"]
    assert server.connections == 2


def test_an_idle_connection_the_server_closed_is_replaced():
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"

    async def go():
        async with RawServer([ok], close_after=True) as server:
            pool = Pool(server.url)
            first, second = Response(), Response()
            await pool.send(BODY, first)
            await asyncio.sleep(0.05)  # the server's close reaches the idle connection
            server.answers.append(ok)
            await pool.send(BODY, second)
            await pool.aclose()
            return first.status, second.status, server.connections

    assert asyncio.run(go()) == (200, 200, 2)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"ICY 200 OK\r\n\r\n", "Expected HTTP/"),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "status code"),
        (b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "header token"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", "chunk"),
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 1\r\n\r\nx", "'br'"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"x" * 70_000, "head too large"),
    ],
)
def test_malformed_answers_are_bad_responses(answer, message):
    (exc,), _, still_open = exchange([answer], piece=4096)
    assert isinstance(exc, BadResponse) and message in str(exc)
    assert still_open == 0  # a connection in an unknown state is closed


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (None, "server closed the connection"),
        (b"HTTP/1.1 200 OK\r\nContent-Le", "dropped before the answer was complete"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", "dropped before the answer"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", "dropped"),
    ],
)
def test_a_connection_closed_early_fails_with_what_arrived(answer, message):
    out, _, still_open = exchange([answer], close_after=True)
    assert isinstance(out[0], ConnectionFailed) and message in str(out[0])
    assert still_open == 0


def test_a_sink_can_abandon_the_answer():
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabcdef"
    out, server, still_open = exchange([answer] * 2, piece=3, sink=lambda d, t: True, requests=2)
    assert [r.status for r in out] == [200, 200]
    assert server.connections == 2 and still_open == 0  # the rest was never read: not reused


def test_cancelling_mid_answer_closes_the_connection():
    async def go():
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc"
        async with RawServer([answer, None]) as server:  # holds the connection open
            pool = Pool(server.url)
            resp = Response()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await pool.send(BODY, resp)
            return resp.status, bytes(resp.body), len(pool._open), len(pool._idle)

    assert asyncio.run(go()) == (200, b"abc", 0, 0)


def test_each_answer_times_out_at_its_own_deadline_though_one_timer_serves_them_all():
    async def go():
        held = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc"  # never completes
        whole = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        async with RawServer([held] * 3 + [whole]) as server:
            pool = Pool(server.url)

            async def send(timeout_s: float) -> float:
                t = time.perf_counter()
                with pytest.raises(TimeoutError):
                    await pool.send(BODY, Response(), timeout_s=timeout_s)
                return time.perf_counter() - t

            # the second deadline is the earliest: the timer is moved forward for it
            waited = await asyncio.wait_for(asyncio.gather(send(0.3), send(0.1), send(0.2)), 10)
            left = dict(pool._deadlines)
            resp = Response()
            await pool.send(BODY, resp, timeout_s=30)  # a fresh connection; its timer stays
            await pool.aclose()
            return waited, left, bytes(resp.body), pool._timer

    waited, left, body, timer = asyncio.run(go())
    assert all(w >= t - 0.002 for w, t in zip(waited, (0.3, 0.1, 0.2), strict=True)), waited
    assert left == {} and body == b"ok" and timer is None


def test_reads_of_one_turn_of_the_loop_are_stamped_before_any_is_parsed():
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    calls: list[tuple[int, int, int]] = []  # (stamp, sink called, sink returned)

    def slow_sink(data: bytes, t_ns: int) -> bool:
        start = time.perf_counter_ns()
        while time.perf_counter_ns() - start < 5_000_000:  # parsing that takes a while
            pass
        calls.append((t_ns, start, time.perf_counter_ns()))
        return False

    async def go():
        writers: list[asyncio.StreamWriter] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n{}")
            writers.append(writer)
            if len(writers) == 2:  # both answers in one callback: readable in the same turn
                for w in writers:
                    w.write(answer)

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        pool = Pool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/")
        await asyncio.gather(*(pool.send(BODY, Response(slow_sink)) for _ in range(2)))
        await pool.aclose()
        server.close()

    asyncio.run(go())
    first, second = sorted(calls, key=lambda c: c[1])
    assert second[0] < first[2]  # stamped before the first read's parsing was over


def test_connection_refused_names_the_reason():
    async def go():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(ConnectionFailed, match=r"cannot connect: .*[Rr]efused"):
            await Pool(f"http://127.0.0.1:{port}").send(BODY, Response())

    asyncio.run(go())


def test_request_head_has_host_and_headers():
    pool = Pool("http://[::1]:8080/v1/chat?q=1", {"A": "b"})
    assert pool._head == b"POST /v1/chat?q=1 HTTP/1.1\r\nHost: [::1]:8080\r\nA: b\r\n"
    get = Pool("https://example.org", method="GET")
    assert get._head.startswith(b"GET / HTTP/1.1\r\nHost: example.org\r\n")


@pytest.mark.parametrize(
    "value", ["Bearer sk-\u20acSECRETVALUE", "SECRETVALUE\r\nX-Evil: 1", "SECRET\nVALUE", "a\x00b"]
)
def test_header_values_are_checked_before_sending_naming_the_header_not_the_value(value):
    with pytest.raises(ValueError, match=r"^headers: the value of header 'Authorization'") as info:
        Pool("http://127.0.0.1:1/", {"Authorization": value})
    assert "SECRET" not in str(info.value) and "Bearer" not in str(info.value)
    with pytest.raises(ValueError, match="invalid header name"):
        Pool("http://127.0.0.1:1/", {"Bad Name": "x"})


def test_client_over_https_with_a_trusted_ca(monkeypatch, tmp_path):
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
        % (len(SSE), SSE)
    )

    async def go(trusted: bool):
        async with RawServer([answer], ssl_ctx=server_ctx) as server:
            target = Target(server.url, timeout_s=5)
            t0 = time.perf_counter_ns()
            async with Client(target, RetryPolicy(retries=3), run_id="tls", t0_ns=t0) as client:
                record = Record("tls", 1.0, "concurrency", 0, t_scheduled=0.0)
                await client.send(record, "hi")
            return record

    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    untrusted = asyncio.run(go(False))
    assert untrusted.error_kind == "connection" and "certificate" in untrusted.error
    assert untrusted.attempts == 1  # a verification failure is not retried
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    record = asyncio.run(go(True))
    assert record.ok, record.error
    assert record.chunks == 2 and record.status == 200


@pytest.mark.parametrize("piece", [997, 4096, 1 << 20])
def test_the_head_limit_does_not_depend_on_how_the_bytes_arrive(piece):
    def answer(size: int) -> bytes:
        return b"HTTP/1.1 200 OK\r\nX: " + b"x" * size + b"\r\nContent-Length: 2\r\n\r\nok"

    (small,), _, _ = exchange([answer(60_000)], piece=piece)
    (large,), _, _ = exchange([answer(66_000)], piece=piece)
    assert isinstance(small, Response) and bytes(small.body) == b"ok"
    assert isinstance(large, BadResponse) and "head too large" in str(large)


def test_bytes_beyond_the_body_leave_the_answer_whole_but_the_connection_unused():
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokGARBAGE"
    out, server, _ = exchange([answer, answer], requests=2)
    assert [bytes(r.body) for r in out] == [b"ok", b"ok"]
    assert server.connections == 2


def test_idle_connections_expire_before_the_server_closes_them():
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    announced = b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=1\r\nContent-Length: 0\r\n\r\n"

    async def go(idle_s, answer):
        async with RawServer([answer, answer]) as server:
            pool = Pool(server.url, idle_s=idle_s)
            await pool.send(BODY, Response())
            idle_limits = [conn.idle_s for conn in pool._idle]
            await pool.send(BODY, Response())
            await pool.aclose()
            return server.connections, idle_limits

    assert asyncio.run(go(4.0, ok)) == (1, [4.0])  # reused while fresh
    assert asyncio.run(go(-1.0, ok))[0] == 2  # an idle connection past its limit is not reused
    assert asyncio.run(go(4.0, announced))[1] == [0.0]  # the server's timeout, less a second


def test_gzip_and_deflate_bodies_are_decoded_in_any_split():
    body = b"hello " * 50
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    packed = {b"gzip": gzip.compress(body), b"deflate": zlib.compress(body)}
    for coding, data in [*packed.items(), (b"deflate", raw.compress(body) + raw.flush())]:
        answer = b"HTTP/1.1 200 OK\r\nContent-Encoding: %s\r\nContent-Length: %d\r\n\r\n%s" % (
            coding,
            len(data),
            data,
        )
        got: list[bytes] = []
        out, _, _ = exchange([answer], piece=7, sink=lambda d, t, got=got: got.append(d))
        assert isinstance(out[0], Response) and b"".join(got) == body, coding
    truncated = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 10\r\n\r\n"
    (exc,), _, _ = exchange([truncated + packed[b"gzip"][:10]])
    assert isinstance(exc, BadResponse) and "cut short" in str(exc)
