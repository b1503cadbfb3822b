"""The optional transport on aiohttp's ``ClientSession``: proxies and the rest of HTTP.

It honours ``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``NO_PROXY`` (``trust_env=True``), ``.netrc``
and redirects, and decodes every coding aiohttp knows. It costs more CPU per request than the
default transport (``benchmarks/bench_client.py`` prints both); its timings are taken the same
way (each read's arrival time, connect time from aiohttp's tracing hooks).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import aiohttp

from llmlat._transport._base import (
    IDLE_S,
    MAX_ERROR_BODY,
    BadResponse,
    ConnectionFailed,
    Response,
    connect_error,
    validate_headers,
)

__all__ = ["AiohttpPool"]


async def _connect_start(session: Any, ctx: SimpleNamespace, params: Any) -> None:
    ctx.trace_request_ctx.connect_ns = -time.perf_counter_ns()  # made positive at the end


async def _connect_end(session: Any, ctx: SimpleNamespace, params: Any) -> None:
    ctx.trace_request_ctx.connect_ns += time.perf_counter_ns()


async def _headers_sent(session: Any, ctx: SimpleNamespace, params: Any) -> None:
    ctx.trace_request_ctx.t_sent_ns = time.perf_counter_ns()


class AiohttpPool:
    """Requests of one kind to one URL through an ``aiohttp.ClientSession``.

    Same interface as :class:`~llmlat._transport.Pool`.

    Parameters
    ----------
    url : str
        The request URL.
    headers : mapping of str to str
        Headers of every request (validated).
    method : str
        ``"POST"`` (the default), ``"GET"``, ...
    idle_s : float
        Idle connections are closed after this many seconds.

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
        self.url = url
        self.method = method
        self.headers = dict(headers or {})
        validate_headers(self.headers)
        self.idle_s = idle_s
        self._sessions: dict[bool, aiohttp.ClientSession] = {}

    def _get_session(self, fresh: bool = False) -> aiohttp.ClientSession:
        """The session; with ``fresh``, one whose connections are never reused."""
        session = self._sessions.get(fresh)
        if session is None:
            trace = aiohttp.TraceConfig()
            trace.on_connection_create_start.append(_connect_start)
            trace.on_connection_create_end.append(_connect_end)
            trace.on_request_headers_sent.append(_headers_sent)
            connector = (
                aiohttp.TCPConnector(limit=0, force_close=True)
                if fresh
                else aiohttp.TCPConnector(limit=0, keepalive_timeout=self.idle_s)
            )
            session = self._sessions[fresh] = aiohttp.ClientSession(
                connector=connector,
                headers=self.headers,
                trust_env=True,
                trace_configs=[trace],
                timeout=aiohttp.ClientTimeout(total=None),
            )
        return session

    async def send(
        self,
        body: bytes,
        response: Response,
        headers: Mapping[str, str] | None = None,
        *,
        fresh: bool = False,
        timeout_s: float | None = None,
    ) -> None:
        """Send one request and wait until ``response`` is complete (see ``Pool.send``)."""
        async with asyncio.timeout(timeout_s):
            await self._send(body, response, headers, fresh)

    async def _send(
        self, body: bytes, response: Response, headers: Mapping[str, str] | None, fresh: bool
    ) -> None:
        session = self._get_session(fresh)
        sink = None
        try:
            async with session.request(
                self.method,
                self.url,
                data=body,
                headers=headers,
                trace_request_ctx=response,
                allow_redirects=True,
            ) as resp:
                t = time.perf_counter_ns()
                response.status, response.t_head_ns = resp.status, t
                for name, value in resp.headers.items():
                    key = name.lower()
                    old = response.headers.get(key)
                    response.headers[key] = value if old is None else f"{old}, {value}"
                if 200 <= resp.status < 300:
                    sink = response.sink
                body_buf = response.body
                while data := await resp.content.readany():
                    t = time.perf_counter_ns()
                    if sink is not None:
                        if sink(data, t):
                            resp.close()  # the rest is not read: the connection is not reused
                            break
                    elif len(body_buf) < MAX_ERROR_BODY or 200 <= resp.status < 300:
                        body_buf += data
                response.t_end_ns = time.perf_counter_ns() if sink is None else t
        except aiohttp.ClientConnectorError as exc:
            response.t_end_ns = time.perf_counter_ns()
            raise connect_error(exc.os_error) from None
        except aiohttp.ClientOSError as exc:
            response.t_end_ns = time.perf_counter_ns()
            raise ConnectionFailed(
                f"connection failed: {exc.strerror or type(exc).__name__}"
            ) from None
        except aiohttp.ServerDisconnectedError:
            response.t_end_ns = time.perf_counter_ns()
            if response.status:
                raise ConnectionFailed(
                    "connection dropped before the answer was complete"
                ) from None
            # no connect traced: a reused connection the server had closed while idle
            raise ConnectionFailed(
                "server closed the connection", stale=response.connect_ns < 0
            ) from None
        except aiohttp.ClientPayloadError as exc:
            response.t_end_ns = time.perf_counter_ns()
            cause = type(exc.__cause__ or exc).__name__
            if "Encoding" in cause and "Transfer" not in cause:
                raise BadResponse(f"cannot decode the body ({cause})") from None
            raise ConnectionFailed("connection dropped before the answer was complete") from None
        except aiohttp.ClientResponseError as exc:
            response.t_end_ns = time.perf_counter_ns()
            raise BadResponse(f"malformed HTTP answer: {exc.message}") from None
        except aiohttp.ClientError as exc:
            response.t_end_ns = time.perf_counter_ns()
            raise ConnectionFailed(f"{type(exc).__name__}: {exc}") from None

    async def preconnect(self, n: int, timeout_s: float | None = None) -> int:
        """Warm nothing: aiohttp opens connections per request (returns 0 idle)."""
        self._get_session()
        return 0

    async def aclose(self) -> None:
        """Close the session and its connections."""
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()
        await asyncio.sleep(0)
