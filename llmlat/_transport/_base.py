"""What every transport shares: the answer being filled, the errors, header validation."""

from __future__ import annotations

import errno
import os
import re
import socket
import ssl
import zlib
from collections.abc import Callable, Mapping

__all__ = [
    "CONNECT_FAILED",
    "IDLE_S",
    "MAX_ERROR_BODY",
    "BadResponse",
    "ConnectionFailed",
    "Decoder",
    "Response",
    "connect_error",
    "validate_headers",
]

#: How the text of every failed connect (refused, TLS, DNS, ...) starts.
CONNECT_FAILED = "cannot connect"
#: Bytes kept of a non-2xx answer's body.
MAX_ERROR_BODY = 64 * 1024
#: Idle connections older than this are not reused (uvicorn-based servers close at 5 s).
IDLE_S = 4.0

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# any control character but horizontal tab, and DEL: a CR or LF would inject headers
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# errors of this machine, not of the server: too many open files, no memory or ports
_CLIENT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class ConnectionFailed(Exception):
    """The connection could not be made, or closed before the answer was complete.

    Parameters
    ----------
    message : str
        Says why (never a header value).
    kind : str
        The error kind to record: ``"connection"``, or ``"client_error"`` when this machine ran
        out of something (open files, ports, memory).
    retryable : bool
        Whether another attempt can help (not after a TLS verification failure).
    stale : bool
        A reused keep-alive connection closed before any byte of the answer arrived: the server
        had closed it while idle, and a new connection will likely do.
    """

    def __init__(
        self, message: str, *, kind: str = "connection", retryable: bool = True, stale: bool = False
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable
        self.stale = stale


class BadResponse(Exception):
    """The server's bytes are not a valid HTTP/1.1 answer (or one llmlat cannot decode)."""


class Response:
    """What one HTTP exchange received, filled in place as it arrives.

    Parameters
    ----------
    sink : callable, optional
        ``sink(data, t_ns)`` gets the (decoded) body of a 2xx answer read by read; a true return
        value says the answer is over for the caller (its protocol's end of message): the
        exchange completes at once, and the connection is reused only if the HTTP body ended in
        the same read. Other answers, and every answer when there is no sink, are kept in
        :attr:`body`.

    Attributes
    ----------
    status : int
        0 until the head has arrived.
    headers : dict of str to str
        Lower-case names; repeated headers joined with ``", "``.
    connect_ns : int
        Nanoseconds the TCP (and TLS) connect took for this exchange; -1 on a reused connection.
    t_sent_ns : int
        ``perf_counter_ns`` just before the request was written (after any connect); 0 if never.
    t_head_ns, t_end_ns : int
        ``perf_counter_ns`` of the read that completed the head, and of the one that completed
        the answer; 0 until then.
    body : bytearray
        The body when it did not go to the sink (at most 64 KiB of a non-2xx answer).
    """

    __slots__ = (
        "body",
        "connect_ns",
        "headers",
        "sink",
        "status",
        "t_end_ns",
        "t_head_ns",
        "t_sent_ns",
    )

    def __init__(self, sink: Callable[[bytes, int], object] | None = None) -> None:
        self.sink = sink
        self.status = 0
        self.headers: dict[str, str] = {}
        self.connect_ns = -1
        self.t_sent_ns = 0
        self.t_head_ns = 0
        self.t_end_ns = 0
        self.body = bytearray()

    @property
    def content_type(self) -> str:
        """The media type of the ``Content-Type`` header, lower case (``""`` when none)."""
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()


class Decoder:
    """Undoes a ``Content-Encoding`` (gzip or deflate) read by read.

    Parameters
    ----------
    coding : str
        The header's value.

    Raises
    ------
    BadResponse
        For a coding llmlat does not decode (the message names it).
    """

    __slots__ = ("_raw_ok", "_z")

    def __init__(self, coding: str) -> None:
        coding = coding.strip().lower()
        self._raw_ok = coding == "deflate"  # some servers send deflate without its zlib header
        if coding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == "deflate":
            self._z = zlib.decompressobj(zlib.MAX_WBITS)
        else:
            raise BadResponse(
                f"the server sent Content-Encoding {coding[:20]!r}, which llmlat does not decode "
                "(it asks for identity; gzip and deflate are decoded)"
            )

    def __call__(self, data: bytes) -> bytes:
        """Decode the next piece of the body."""
        try:
            out = self._z.decompress(data)
        except zlib.error:
            if not self._raw_ok:
                raise BadResponse("the compressed body is corrupt") from None
            self._raw_ok = False  # the first bytes were no zlib header: raw deflate
            self._z = zlib.decompressobj(-zlib.MAX_WBITS)
            return self(data)
        self._raw_ok = self._raw_ok and not data
        return out

    def flush(self) -> bytes:
        """What is left once the body has ended.

        Raises
        ------
        BadResponse
            If the compressed stream was cut short.
        """
        rest = self._z.flush()
        if not self._z.eof:
            raise BadResponse("the compressed body was cut short")
        return rest


def validate_headers(headers: Mapping[str, str], field: str = "headers") -> None:
    """Check header names and values before anything is sent.

    Parameters
    ----------
    headers : mapping of str to str
    field : str
        The option named in the error.

    Raises
    ------
    ValueError
        For a name that is not an HTTP token, or a value with a line break, another control
        character or a non-Latin-1 character; the message names the header, never its value.
    """
    for name, value in headers.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise ValueError(f"{field}: invalid header name {str(name)[:40]!r}")
        if not isinstance(value, str):
            raise ValueError(f"{field}: the value of header {name!r} is not a string")
        if _BAD_VALUE.search(value):
            raise ValueError(
                f"{field}: the value of header {name!r} contains a line break or control character"
            )
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise ValueError(
                f"{field}: the value of header {name!r} must be Latin-1 text"
            ) from None


def connect_error(exc: OSError) -> ConnectionFailed:
    """What a failed connect means: the reason, its kind and whether to retry."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return ConnectionFailed(
            f"{CONNECT_FAILED}: TLS certificate verify failed: {exc.verify_message}",
            retryable=False,
        )
    if isinstance(exc, ssl.SSLError):
        return ConnectionFailed(f"{CONNECT_FAILED}: TLS: {exc.reason or type(exc).__name__}")
    if exc.errno in _CLIENT_ERRNOS:
        return ConnectionFailed(
            f"this client ran out of resources: {os.strerror(exc.errno)} (raise 'ulimit -n', "
            "or lower the concurrency)",
            kind="client_error",
            retryable=False,
        )
    if isinstance(exc, socket.gaierror) or not exc.errno or exc.errno < 0:
        reason = exc.strerror or str(exc) or type(exc).__name__
    else:
        reason = os.strerror(exc.errno)
    return ConnectionFailed(f"{CONNECT_FAILED}: {reason}")
