"""HTTP transports: how the client's bytes reach the server and the answer's bytes come back.

A transport sends requests of one kind (method, URL, headers) and fills a :class:`Response` as
the answer arrives, handing each read of a 2xx body to a sink with the time it arrived. Two
implement the same interface (``send``, ``preconnect``, ``aclose``), chosen by name with
:func:`make_transport`:

- ``"http11"`` (:class:`Pool`, the default): HTTP/1.1 on asyncio protocols, llhttp framing, a
  keep-alive pool; the cheapest and most exact.
- ``"aiohttp"``: aiohttp's ``ClientSession`` with ``trust_env=True``, for proxies
  (``HTTP(S)_PROXY``, ``NO_PROXY``) and everything else of HTTP.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from llmlat._transport._base import (
    CONNECT_FAILED,
    BadResponse,
    ConnectionFailed,
    Response,
    validate_headers,
)
from llmlat._transport._http11 import Pool

__all__ = [
    "CONNECT_FAILED",
    "TRANSPORTS",
    "BadResponse",
    "ConnectionFailed",
    "Pool",
    "Response",
    "Transport",
    "make_transport",
    "validate_headers",
]

#: Names of the transports.
TRANSPORTS = ("http11", "aiohttp")


class Transport(Protocol):
    """What the client needs of a transport (requests of one kind to one URL)."""

    async def send(
        self,
        body: bytes,
        response: Response,
        headers: Mapping[str, str] | None = None,
        *,
        fresh: bool = False,
        timeout_s: float | None = None,
    ) -> None:
        """Send one request; fill ``response`` as the answer arrives (see :meth:`Pool.send`)."""

    async def preconnect(self, n: int, timeout_s: float | None = None) -> int:
        """Open connections until ``n`` are idle, each connect within ``timeout_s``; return how
        many are idle (fewer: some failed)."""

    async def aclose(self) -> None:
        """Close every connection."""


def make_transport(
    name: str, url: str, headers: Mapping[str, str] | None = None, *, method: str = "POST"
) -> Transport:
    """Make a transport for requests of one kind.

    Parameters
    ----------
    name : str
        One of :data:`TRANSPORTS`.
    url : str
        The request URL.
    headers : mapping of str to str, optional
        Headers of every request.
    method : str
        The request method.

    Returns
    -------
    Transport
        A :class:`Pool`, or an ``AiohttpPool``.

    Raises
    ------
    ValueError
        For an unknown name or an invalid header (named, never its value).
    """
    if name == "http11":
        return Pool(url, headers, method=method)
    if name == "aiohttp":
        from llmlat._transport._aiohttp import AiohttpPool

        return AiohttpPool(url, headers, method=method)
    raise ValueError(f"transport: expected one of {', '.join(TRANSPORTS)}, got {name!r}")
