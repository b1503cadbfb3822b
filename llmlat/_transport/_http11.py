"""The default transport: HTTP/1.1 keep-alive connections on asyncio protocols, framed by llhttp.

Responses are framed by ``httptools.HttpResponseParser`` (llhttp, Node's parser: maintained, strict,
cheap). The answer's body goes to a sink read by read, with that read's ``perf_counter_ns`` time, so
a streamed answer is parsed without another task, queue or await per chunk. A read is stamped the
moment the loop hands it over and parsed later in the same turn of the loop, after the other reads
of that turn are stamped (64 at most are parsed before the loop looks for new ones): with many
streams in flight, a read is not stamped late by the parsing of the reads that happened to come
before it. ``gzip`` and ``deflate`` bodies are decoded (the client asks for ``identity``); other
codings are refused with a message that says so. Plain ``http`` and ``https`` (the system's trust
store, which honours ``SSL_CERT_FILE``); no proxies (use the ``aiohttp`` transport), no redirects.

Keep-alive: an idle connection is not reused after ``idle_s`` (4 s by default, under the 5 s of
uvicorn, which vLLM and many other servers run on, and under a ``Keep-Alive: timeout=``
the server announces), so a request does not race the server closing it. A reused connection
that closes before any byte of the answer fails with ``ConnectionFailed(stale=True)``: the
caller may retry on a fresh connection (``send(..., fresh=True)``).

Why not aiohttp's ``ClientSession`` by default: its request pipeline alone costs more CPU per
request than the whole of this client, parsing included (``benchmarks/bench_client.py`` prints
both), and an instrument must cost less than what it measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import ssl
import time
from collections.abc import Callable, Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools

from llmlat._transport._base import (
    IDLE_S,
    MAX_ERROR_BODY,
    BadResponse,
    ConnectionFailed,
    Decoder,
    Response,
    connect_error,
    validate_headers,
)

__all__ = ["Pool"]

_MAX_HEAD = 64 * 1024  # bytes of a response head (status line and headers, 1xx heads included)
_CONNECTS_AT_ONCE = 256  # most connections preconnect opens at a time
# reads parsed per turn of the loop: a read that arrives while others are parsed waits at most
# this many parses for its time stamp (~1.5 ms), not the parsing of a whole burst. Fewer cost
# CPU: each turn polls again and picks up smaller reads (bench_client, 128 streams in flight:
# 16 -> TTFT error p99 0.7 ms but +10% CPU on main; 64 -> ~2 ms, CPU as main; no limit -> ~4 ms)
_READS_PER_TURN = 64
_CLOCK_SLACK_S = 1e-3  # uvloop's clock counts whole ms: a timer may wake that much early
_CLOSE_WAIT_S = 1.0  # longest aclose waits for the transports to report their close
_KEEP_ALIVE_TIMEOUT = re.compile(r"timeout=(\d+(?:\.\d+)?)", re.IGNORECASE)


class Pool:
    """Keep-alive HTTP/1.1 connections to one origin for one kind of request, never capped.

    Parameters
    ----------
    url : str
        The request URL (``http`` or ``https``).
    headers : mapping of str to str
        Headers of every request (validated: see :func:`~llmlat._transport.validate_headers`).
    method : str
        ``"POST"`` (the default), ``"GET"``, ...
    idle_s : float
        An idle connection is not reused after this many seconds.

    Raises
    ------
    ValueError
        For an invalid header (named, its value never shown).
    """

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        method: str = "POST",
        idle_s: float = IDLE_S,
    ) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or ""
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.idle_s = idle_s
        headers = dict(headers or {})
        validate_headers(headers)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.port != (443 if self.tls else 80):
            host = f"{host}:{self.port}"
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self._head = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        self._ssl: ssl.SSLContext | None = None
        self._idle: dict[_Connection, float] = {}  # -> loop time released; warmest last
        self._open: set[_Connection] = set()
        self._live = 0  # transports made and not yet reported lost (closed or not)
        self._reads: list[tuple[_Connection, bytes, int]] = []  # stamped, not yet parsed
        # answers awaited -> their deadline (loop time), and one timer for the earliest: a
        # timer per request costs more CPU and memory than the whole of its bookkeeping here
        self._deadlines: dict[asyncio.Future[None], float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._drained: asyncio.Future[None] | None = None  # aclose waits on it

    async def send(
        self,
        body: bytes,
        response: Response,
        headers: Mapping[str, str] | None = None,
        *,
        fresh: bool = False,
        timeout_s: float | None = None,
    ) -> None:
        """Send one request and wait until ``response`` is complete.

        Parameters
        ----------
        body : bytes
            The request body (``Content-Length`` is added).
        response : Response
            Filled as the answer arrives; what arrived stays there if this raises.
        headers : mapping of str to str, optional
            Headers of this request only (trusted: not validated).
        fresh : bool
            Use a new connection, not an idle one.
        timeout_s : float, optional
            Limit for the whole exchange, connect included.

        Raises
        ------
        ConnectionFailed
            No connection, or it closed before the answer was complete.
        BadResponse
            The answer is not valid HTTP/1.1, or has a coding llmlat does not decode.
        TimeoutError
            When ``timeout_s`` passed first: the connection is closed.
        asyncio.CancelledError
            When cancelled: the connection is closed.
        """
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = None if timeout_s is None else now + timeout_s
        conn = None if fresh else self._reuse(now)
        if conn is None:
            t = time.perf_counter_ns()
            try:
                async with asyncio.timeout_at(deadline):
                    conn = await self._connect(loop)
            finally:
                response.connect_ns = time.perf_counter_ns() - t
            if conn.transport.is_closing():  # closed while connecting: no answer would come
                self._forget(conn)
                raise ConnectionFailed("server closed the connection")
        done = loop.create_future()
        conn.begin(done, response, response.connect_ns < 0)
        if headers:
            extra = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in headers.items())
            data = b"%s%sContent-Length: %d\r\n\r\n%s" % (self._head, extra, len(body), body)
        else:
            data = b"%sContent-Length: %d\r\n\r\n%s" % (self._head, len(body), body)
        if deadline is not None:
            self._deadlines[done] = deadline
            if deadline < self._timer_at:
                self._arm(loop, deadline)
        response.t_sent_ns = time.perf_counter_ns()
        try:
            conn.transport.write(data)
            del data  # not held while waiting: thousands may wait
            await done
        except BaseException:
            conn.abandon(done)
            raise
        finally:
            if deadline is not None:
                del self._deadlines[done]

    async def preconnect(self, n: int, timeout_s: float | None = None) -> int:
        """Open connections until ``n`` are idle (failures are left to the requests to meet).

        Parameters
        ----------
        n : int
            How many idle connections are wanted.
        timeout_s : float, optional
            Limit for each connect, as a request's ``timeout_s`` bounds its own: a host that
            drops the connects (down behind a firewall) costs that, not the system's minutes.

        Returns
        -------
        int
            How many are idle now: fewer than ``n`` when connects failed.
        """
        loop = asyncio.get_running_loop()
        now = loop.time()
        for conn, released in list(self._idle.items()):
            if now - released > min(self.idle_s, conn.idle_s) or conn.transport.is_closing():
                self._idle.pop(conn)
                conn.close()
        left = n - len(self._idle)
        opened: list[_Connection] = []

        async def opener() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                with contextlib.suppress(Exception):  # left to the requests to meet
                    async with asyncio.timeout(timeout_s):
                        opened.append(await self._connect(loop))

        # a few hundred at once, not thousands: their tasks' memory would stay in the process,
        # and a burst of thousands of connects can overflow the server's accept queue
        await asyncio.gather(*(opener() for _ in range(min(left, _CONNECTS_AT_ONCE))))
        now = loop.time()  # the clock of their idleness starts when all are open
        for conn in opened:
            self._idle[conn] = now
        return len(self._idle)

    async def aclose(self) -> None:
        """Close every connection."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, math.inf
        for conn in list(self._open):
            conn.transport.close()
        self._idle.clear()
        self._open.clear()
        if self._live:  # until then each transport holds its buffers and its connection
            self._drained = asyncio.get_running_loop().create_future()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_CLOSE_WAIT_S):
                    await self._drained
        await asyncio.sleep(0)  # let the transports run their close callbacks

    def _reuse(self, now: float) -> _Connection | None:
        """The warmest idle connection still fit for reuse; older ones are closed."""
        idle = self._idle
        while idle:
            conn, released = idle.popitem()
            if now - released <= min(self.idle_s, conn.idle_s) and not conn.transport.is_closing():
                return conn
            conn.close()
            if now - released > self.idle_s:  # the warmest is too old: so are all the others
                for old in list(idle):
                    old.close()
        return None

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        if self.tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        try:
            _, conn = await loop.create_connection(
                lambda: _Connection(self),
                self.host,
                self.port,
                ssl=self._ssl if self.tls else None,
                server_hostname=self.host if self.tls else None,
            )
        except OSError as exc:
            raise connect_error(exc) from None
        self._open.add(conn)
        return conn

    def _release(self, conn: _Connection) -> None:
        self._idle[conn] = asyncio.get_running_loop().time()

    def _forget(self, conn: _Connection) -> None:
        self._idle.pop(conn, None)
        self._open.discard(conn)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = loop.call_at(when, self._expire)

    def _expire(self) -> None:
        """Fail the answers past their deadline; wake up again at the earliest one left."""
        self._timer, self._timer_at = None, math.inf
        loop = asyncio.get_running_loop()
        now = loop.time()
        for done, deadline in list(self._deadlines.items()):
            if deadline <= now + _CLOCK_SLACK_S and not done.done():
                done.set_exception(TimeoutError())
        if left := [d for f, d in self._deadlines.items() if not f.done()]:
            self._arm(loop, min(left))

    def _parse_reads(self, *, every: bool = False) -> None:
        """Parse the reads stamped so far, in order: a few, then let the loop stamp new ones."""
        reads = self._reads
        if every or len(reads) <= _READS_PER_TURN:
            self._reads = []
        else:
            reads, self._reads = reads[:_READS_PER_TURN], reads[_READS_PER_TURN:]
        for conn, data, t in reads:
            try:
                conn.parse(data, t)
            except Exception as exc:  # a bug of ours: that answer fails, the others go on
                conn._fail(BadResponse(f"unexpected {type(exc).__name__}: {exc}"))
        if self._reads and not every:
            asyncio.get_running_loop().call_soon(self._parse_reads)

    def _lost(self) -> None:
        self._live -= 1
        if not self._live and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)


#: What a connection holds when no answer is expected: a finished answer, its parser and its
#: times are not kept alive by an idle connection (thousands may be idle at once)
_NO_RESPONSE = Response()


class _Extra(Exception):
    """The server sent bytes beyond the answer (its framing is not to be trusted)."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; reads one answer at a time into a :class:`Response`."""

    # thousands may be open at once: no per-instance dict
    __slots__ = (
        "_complete",
        "_decode",
        "_done",
        "_ended",
        "_got",
        "_headed",
        "_keep",
        "_parser",
        "_pending",
        "_pool",
        "_resp",
        "_reused",
        "_sink",
        "_t",
        "_until_close",
        "idle_s",
        "on_body",
        "transport",
    )

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._pending: list[bytes] = []  # body bytes of the read being parsed
        # llhttp's body callback, one call per HTTP chunk: the list's own append, no Python
        # frame; what the bytes are for is sorted out once per read (_hand_over)
        self.on_body: Callable[[bytes], None] = self._pending.append
        self._parser = httptools.HttpResponseParser(self)
        self._done: asyncio.Future[None] | None = None
        self._resp = _NO_RESPONSE
        self._sink: Callable[[bytes, int], object] | None = None
        self._decode: Decoder | None = None
        self._t = 0  # arrival time of the read being parsed
        self._got = 0  # bytes of this answer fed to the parser
        self._headed = False  # the final head (not a 1xx) has been parsed
        self._complete = False  # the HTTP message ended
        self._ended = False  # the sink said the answer is over
        self._keep = False  # the message said the connection may be reused
        self._until_close = False
        self._reused = False
        self.idle_s = pool.idle_s
        self.transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream connection's
        self._pool._live += 1

    def begin(self, done: asyncio.Future[None], response: Response, reused: bool) -> None:
        """Expect the answer to a request about to be written."""
        self._done = done
        self._resp = response
        self._sink = self._decode = None
        self._pending.clear()
        self._got = 0
        self._headed = self._complete = self._ended = self._until_close = False
        self._reused = reused

    def abandon(self, done: asyncio.Future[None]) -> None:
        """The sender gave up (cancelled): an answer may still be coming, so close."""
        if self._done is done:
            self._done = None
            self.close()

    def close(self) -> None:
        self.transport.close()
        self._pool._forget(self)  # now, not when the loop reports the close

    def data_received(self, data: bytes) -> None:
        # only the time now: the parsing waits until every read of this turn of the loop has
        # its time, so reads late in a busy turn are not stamped after the parsing of the others
        reads = self._pool._reads
        if not reads:
            asyncio.get_running_loop().call_soon(self._pool._parse_reads)
        reads.append((self, data, time.perf_counter_ns()))

    def parse(self, data: bytes, t: int) -> None:
        """Parse a read that arrived at ``t`` (``perf_counter_ns``)."""
        if self._done is None:  # nobody asked: nothing sane to do with it
            self.close()
            return
        self._t = t
        try:
            if not self._headed and self._got + len(data) > _MAX_HEAD:
                # the head must end within its first 64 KiB however the bytes arrive
                room = _MAX_HEAD - self._got
                self._got += room
                self._parser.feed_data(data[:room])
                if not self._headed:
                    raise BadResponse("response head too large")
                data = data[room:]
            self._got += len(data)
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if isinstance(cause, _Extra):  # the answer is whole; the connection is not reusable
                if self._hand_over():
                    self._finish(t, keep=False)
            elif isinstance(cause, BadResponse):
                self._fail(cause)
            else:  # a bug of ours
                self._fail(BadResponse(f"unexpected {type(cause).__name__}: {cause}"))
            return
        except httptools.HttpParserError as exc:
            self._fail(BadResponse(f"malformed HTTP answer: {exc}"))
            return
        except BadResponse as exc:
            self._fail(exc)
            return
        if (self._pending or self._decode is not None) and not self._hand_over():
            return
        if self._complete:
            self._finish(t, keep=self._keep)
        elif self._ended:
            self._finish(t, keep=False)  # the rest of the body would be left unread

    def connection_lost(self, exc: Exception | None) -> None:
        self._pool._parse_reads(every=True)  # what arrived before the close comes first
        self._pool._forget(self)
        self._pool._lost()
        del self._parser  # it holds this protocol's methods: a cycle, for the GC to find late
        if self._done is None:
            return
        t = time.perf_counter_ns()
        if self._until_close and exc is None:
            self._t = t
            if self._hand_over(final=True):
                self._finish(t, keep=False)
        elif self._got:
            self._fail(ConnectionFailed("connection dropped before the answer was complete"))
        else:
            self._fail(ConnectionFailed("server closed the connection", stale=self._reused))

    # -- llhttp callbacks -----------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self._complete or self._ended:
            raise _Extra

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers = self._resp.headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        resp = self._resp
        status = self._parser.get_status_code()
        if status < 200:  # 100 Continue, 103 Early Hints: the answer follows
            resp.headers = {}
            return
        resp.status, resp.t_head_ns = status, self._t
        self._headed = True
        headers = resp.headers
        if 200 <= status < 300:
            self._sink = resp.sink
        coding = headers.get("content-encoding")
        if coding and coding.strip().lower() != "identity":
            self._decode = Decoder(coding)
        self._until_close = (
            status not in (204, 304)
            and "content-length" not in headers
            and "chunked" not in headers.get("transfer-encoding", "").lower()
        )
        alive = headers.get("keep-alive")
        if alive and (m := _KEEP_ALIVE_TIMEOUT.search(alive)):
            self.idle_s = max(0.0, float(m.group(1)) - 1.0)  # the server's own idle limit

    def on_message_complete(self) -> None:
        if self._headed:
            self._complete = True
            self._keep = self._parser.should_keep_alive()  # (llhttp forgets it after this call)

    # -- delivering -----------------------------------------------------------------------
    def _hand_over(self, *, final: bool = False) -> bool:
        """Give what this read brought to the sink, else to the body; False if the answer failed.

        The sink gets each read once (decoded), not each HTTP chunk. ``final``: the body ended
        with the connection.
        """
        pending = self._pending
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        try:
            if self._decode is not None:
                data = self._decode(data)
                if final or self._complete:
                    data += self._decode.flush()
            if self._sink is None:
                body, status = self._resp.body, self._resp.status
                body += data if 200 <= status < 300 else data[: max(0, MAX_ERROR_BODY - len(body))]
            elif data and self._sink(data, self._t):
                self._ended = True
        except BadResponse as exc:
            self._fail(exc)
            return False
        except Exception as exc:  # a sink's bug: the answer is recorded as unreadable, not lost
            self._fail(BadResponse(f"unexpected {type(exc).__name__}: {exc}"))
            return False
        return True

    def _finish(self, t: int, *, keep: bool) -> None:
        done, self._done = self._done, None
        self._resp.t_end_ns = t
        self._resp, self._sink, self._decode = _NO_RESPONSE, None, None
        if keep:
            self._pool._release(self)
        else:
            self.close()
        if done is not None and not done.done():
            done.set_result(None)

    def _fail(self, exc: Exception) -> None:
        done, self._done = self._done, None
        self._resp.t_end_ns = time.perf_counter_ns()
        self._resp, self._sink, self._decode = _NO_RESPONSE, None, None
        self.close()
        if done is not None and not done.done():
            done.set_exception(exc)
