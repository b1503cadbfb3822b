"""A lean HTTP/1.1 client for the measuring path: keep-alive connections on asyncio protocols.

The answer's body goes to a sink as each network read arrives, with that read's
``perf_counter_ns`` time, so a streamed answer is parsed without another task, queue or await
per chunk. Framing: ``Content-Length``, ``chunked`` and read-until-close; 1xx answers are
skipped; a connection is reused unless the answer says otherwise. Plain ``http`` and ``https``
(the system's trust store, which honours ``SSL_CERT_FILE``), no proxies, no redirects, no
compression (the client asks for ``identity``).

Why not aiohttp's ``ClientSession`` (the simulator is an aiohttp server): its request pipeline
alone costs more CPU per request than the whole of this client, parsing included
(``benchmarks/bench_client.py`` prints both), and an instrument must cost less than what it
measures.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import time
from collections.abc import Callable
from urllib.parse import urlsplit

__all__ = ["BadResponse", "ConnectionFailed", "Pool", "Response"]

_MAX_HEAD = 64 * 1024  # bytes of a response head (status line and headers)
_MAX_ERROR_BODY = 64 * 1024  # bytes kept of a non-2xx answer's body
# chunked-body states besides "bytes left in this chunk" (> 0)
_SIZE, _DATA_END, _TRAILER = -1, -2, -3


class ConnectionFailed(Exception):
    """The connection could not be made, or closed before the answer was complete."""


class BadResponse(Exception):
    """The server's bytes are not a valid HTTP/1.1 answer."""


class Response:
    """What one HTTP exchange received, filled in place as it arrives.

    Parameters
    ----------
    sink : callable, optional
        ``sink(data, t_ns)`` gets the body of a 2xx answer read by read; a true return value
        abandons the answer (the connection is closed). Other answers, and every answer when
        there is no sink, are kept in :attr:`body`.

    Attributes
    ----------
    status : int
        0 until the head has arrived.
    headers : dict of str to str
        Lower-case names; repeated headers joined with ``", "``.
    t_head_ns, t_end_ns : int
        ``perf_counter_ns`` of the read that completed the head, and of the one that completed
        (or abandoned) the answer; 0 until then.
    body : bytearray
        The body when it did not go to the sink (at most 64 KiB of a non-2xx answer).
    """

    __slots__ = ("body", "headers", "sink", "status", "t_end_ns", "t_head_ns")

    def __init__(self, sink: Callable[[bytes, int], object] | None = None) -> None:
        self.sink = sink
        self.status = 0
        self.headers: dict[str, str] = {}
        self.t_head_ns = 0
        self.t_end_ns = 0
        self.body = bytearray()

    @property
    def content_type(self) -> str:
        """The media type of the ``Content-Type`` header, lower case (``""`` when none)."""
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()


class Pool:
    """Keep-alive HTTP/1.1 connections to one origin, opened as needed, never capped.

    Parameters
    ----------
    url : str
        Any URL of the origin (``http`` or ``https``).
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or ""
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self._ssl: ssl.SSLContext | None = None
        self._idle: dict[_Connection, None] = {}  # insertion-ordered: reuse the warmest first
        self._open: set[_Connection] = set()

    def head(self, method: str, url: str, headers: dict[str, str]) -> bytes:
        """The start of a request head: request line, ``Host`` and ``headers``.

        Add per-request headers and the closing ``\\r\\n\\r\\n`` to it.

        Parameters
        ----------
        method : str
            ``"POST"``, ...
        url : str
            The request URL (its path and query are used).
        headers : dict of str to str
            Header names and values (without line breaks).

        Returns
        -------
        bytes

        Raises
        ------
        ValueError
            If a header does not encode as Latin-1 (the message names no value).
        """
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.port != (443 if self.tls else 80):
            host = f"{host}:{self.port}"
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        try:
            return ("\r\n".join(lines) + "\r\n").encode("latin-1")
        except UnicodeEncodeError:
            raise ValueError("headers: names and values must be Latin-1 text") from None

    async def send(self, data: bytes, response: Response) -> None:
        """Send a whole request and wait until ``response`` is complete.

        Parameters
        ----------
        data : bytes
            Request head and body.
        response : Response
            Filled as the answer arrives; what arrived stays there if this raises.

        Raises
        ------
        ConnectionFailed
            No connection, or it closed before the answer was complete.
        BadResponse
            The answer is not valid HTTP/1.1.
        asyncio.CancelledError
            When cancelled (a timeout, say): the connection is closed.
        """
        loop = asyncio.get_running_loop()
        conn = None
        while self._idle:
            conn = self._idle.popitem()[0]
            if not conn.transport.is_closing():
                break
            conn = None
        if conn is None:
            conn = await self._connect(loop)
            if conn.transport.is_closing():  # closed while connecting: no answer would come
                self._forget(conn)
                raise ConnectionFailed("server closed the connection")
        done = loop.create_future()
        conn.begin(done, response)
        conn.transport.write(data)
        try:
            await done
        except BaseException:
            conn.abandon(done)
            raise

    async def aclose(self) -> None:
        """Close every connection."""
        for conn in list(self._open):
            conn.transport.close()
        self._idle.clear()
        self._open.clear()
        await asyncio.sleep(0)  # let the transports run their close callbacks

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
            raise ConnectionFailed(f"cannot connect: {_reason(exc)}") from None
        self._open.add(conn)
        return conn

    def _release(self, conn: _Connection) -> None:
        self._idle[conn] = None

    def _forget(self, conn: _Connection) -> None:
        self._idle.pop(conn, None)
        self._open.discard(conn)


class _Connection(asyncio.Protocol):
    """One keep-alive connection; reads one answer at a time into a :class:`Response`."""

    transport: asyncio.Transport

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._done: asyncio.Future[None] | None = None
        self._resp = Response()
        self._sink: Callable[[bytes, int], object] | None = None
        self._head = b""  # the head read so far; None once it is complete
        self._buf = b""  # an incomplete chunk-size or trailer line
        self._left = 0  # body bytes still to come (Content-Length), or a chunked state
        self._chunked = False
        self._until_close = False
        self._keep = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def begin(self, done: asyncio.Future[None], response: Response) -> None:
        """Expect the answer to a request about to be written."""
        self._done = done
        self._resp = response
        self._sink = None
        self._head = b""
        self._buf = b""

    def abandon(self, done: asyncio.Future[None]) -> None:
        """The sender gave up (cancelled): an answer may still be coming, so close."""
        if self._done is done:
            self._done = None
            self._close()

    def _close(self) -> None:
        self.transport.close()
        self._pool._forget(self)  # now, not when the loop reports the close

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter_ns()
        if self._done is None:  # nobody asked: nothing sane to do with it
            self._close()
            return
        try:
            if self._head is not None:
                data = self._read_head(data, t)
                if self._head is not None:
                    return
            if self._chunked:
                data = self._dechunk(data)
            elif not self._until_close:
                if len(data) > self._left:
                    raise BadResponse("the server sent more than its Content-Length")
                self._left -= len(data)
            if data and self._deliver(data, t):
                self._keep = False
                self._finish(t)
            elif self._left == 0 and not self._until_close:
                self._finish(t)
        except BadResponse as exc:
            self._fail(exc)
        except Exception as exc:  # a sink's bug: the answer is recorded as unreadable, not lost
            self._fail(BadResponse(f"unexpected {type(exc).__name__}: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._pool._forget(self)
        if self._done is None:
            return
        if self._until_close and self._head is None and exc is None:
            self._keep = False
            self._finish(time.perf_counter_ns())
        elif self._head is None or self._head:
            self._fail(ConnectionFailed("connection dropped before the answer was complete"))
        else:
            self._fail(ConnectionFailed("server closed the connection"))

    # -- reading an answer ----------------------------------------------------------------
    def _read_head(self, data: bytes, t: int) -> bytes:
        """Take the head off ``data``; return what follows it (``b""`` while incomplete)."""
        while self._head is not None:
            buf = self._head + data if self._head else data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise BadResponse("response head too large")
                self._head = buf
                return b""
            data = buf[end + 4 :]
            status, headers, version = _parse_head(buf[:end])
            if 100 <= status < 200:  # 100 Continue, 103 Early Hints: the answer follows
                self._head = b""
                continue
            resp = self._resp
            resp.status, resp.headers, resp.t_head_ns = status, headers, t
            if 200 <= status < 300:
                self._sink = resp.sink
            self._head = None
            connection = headers.get("connection", "").lower()
            self._keep = "close" not in connection and (
                version == b"HTTP/1.1" or "keep-alive" in connection
            )
            coding = headers.get("transfer-encoding", "").lower()
            self._chunked = coding.rstrip().endswith("chunked")
            self._until_close = False
            self._left = 0
            if status in (204, 304):
                self._chunked = False
            elif self._chunked:
                self._left = _SIZE
            elif "content-length" in headers:
                try:
                    self._left = int(headers["content-length"])
                except ValueError:
                    raise BadResponse("invalid Content-Length") from None
                if self._left < 0:
                    raise BadResponse("invalid Content-Length")
            else:
                self._until_close = True
                self._keep = False
        return data

    def _dechunk(self, data: bytes) -> bytes:
        """The payload in ``data`` of a chunked body; ``self._left`` becomes 0 at its end."""
        if self._buf:
            data = self._buf + data
            self._buf = b""
        out: list[bytes] = []
        pos, size = 0, len(data)
        while pos < size:
            left = self._left
            if left > 0:
                take = min(left, size - pos)
                out.append(data[pos : pos + take])
                pos += take
                self._left = left - take or _DATA_END
            elif left == _DATA_END:
                if size - pos < 2:
                    break
                if data[pos : pos + 2] != b"\r\n":
                    raise BadResponse("malformed chunked body")
                pos += 2
                self._left = _SIZE
            elif left == 0:
                raise BadResponse("the server sent more than its chunked body")
            else:  # a chunk-size line or a trailer line
                eol = data.find(b"\r\n", pos)
                if eol < 0:
                    break
                line = data[pos:eol]
                pos = eol + 2
                if left == _TRAILER:
                    if not line:
                        self._left = 0
                    continue
                try:
                    chunk = int(line.split(b";", 1)[0], 16)
                except ValueError:
                    raise BadResponse("malformed chunked body") from None
                if chunk < 0:
                    raise BadResponse("malformed chunked body")
                self._left = chunk or _TRAILER
        rest = data[pos:]
        if len(rest) > _MAX_HEAD:
            raise BadResponse("malformed chunked body")
        self._buf = rest
        return out[0] if len(out) == 1 else b"".join(out)

    def _deliver(self, data: bytes, t: int) -> object:
        """Give body bytes to the sink; true when the sink abandons the answer."""
        if self._sink is not None:
            return self._sink(data, t)
        body = self._resp.body
        if len(body) < _MAX_ERROR_BODY or 200 <= self._resp.status < 300:
            body += data
        return False

    def _finish(self, t: int) -> None:
        done, self._done = self._done, None
        self._resp.t_end_ns = t
        if self._keep and not self._buf:
            self._pool._release(self)
        else:
            self._close()
        if done is not None and not done.done():
            done.set_result(None)

    def _fail(self, exc: Exception) -> None:
        done, self._done = self._done, None
        self._resp.t_end_ns = time.perf_counter_ns()
        self._close()
        if done is not None and not done.done():
            done.set_exception(exc)


def _reason(exc: OSError) -> str:
    """A short reason for a failed connect (asyncio's own text repeats the address)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or type(exc).__name__}"
    if isinstance(exc, socket.gaierror) or not exc.errno or exc.errno < 0:
        return exc.strerror or str(exc) or type(exc).__name__
    return os.strerror(exc.errno)


def _parse_head(head: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, version) of a response head without its closing blank line."""
    lines = head.split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise BadResponse("not an HTTP/1.1 response")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise BadResponse("malformed response header")
        key = name.decode("latin-1").lower()
        text = value.strip().decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return int(code), headers, version
