"""One logical request in, one measured :class:`~llmlat.schema.Record` out.

:class:`Client` sends a payload to a :class:`Target`, times it with ``perf_counter_ns`` (send,
first byte, first generated content, each content chunk, end), classifies what went wrong into
:data:`~llmlat.schema.ERROR_KINDS`, and retries per a :class:`RetryPolicy` (exponential backoff
with full jitter, ``Retry-After`` honoured). It never raises for an HTTP, protocol, timeout or
connection error: those are data. A complete 200 answer that carried no generated token is a
failure too (``error_kind="protocol"``, its finish reason in ``error``): it has no first token,
and counted as a success its short latency would flatter the level. Given fallback URLs it acts
as a gateway would: an attempt that fails as :class:`Failover` says goes on at once to the next
URL, and the record says which one answered; a client-side :class:`TokenBucket` can pace every
attempt.

The API key is read from the environment variable the target names when the client starts and
lives only in the request headers: not in a Target, a Record, an error text or a repr (every
error text goes through :func:`llmlat._redact.one_line`, which masks the key, the values of
credential headers, re-cased or in fragments).

What each time includes: ``t_sent`` is taken once the attempt's connection is open, so
``connect_s`` (TCP and TLS connect, NaN on a reused connection) is apart from ``service_s``
(first send to end); ``ttft_s`` and ``latency_s`` count from ``t_scheduled`` and so include any
connect, schedule lag and retry waits. A reused keep-alive connection that the server had closed
is retried at once on a new one, whatever the retry policy (it shows as an attempt with
``error_kind="connection"``); that happens once per request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import itertools
import json
import math
import os
import random
import time
import urllib.request
import warnings
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

from llmlat._apis import API_NAMES, BodyResult, StreamParser, get_endpoint, make_payload
from llmlat._ratelimit import read_limits
from llmlat._redact import credential_header, forget, one_line, redact_url, remember
from llmlat._transport import (
    CONNECT_FAILED,
    TRANSPORTS,
    BadResponse,
    ConnectionFailed,
    Response,
    Transport,
    make_transport,
    validate_headers,
)
from llmlat._version import __version__
from llmlat.schema import Attempt, Record

__all__ = [
    "FALLBACK_ON",
    "RETRYABLE",
    "Client",
    "FailFast",
    "Failover",
    "RetryPolicy",
    "Target",
    "TokenBucket",
    "classify_status",
    "list_models",
]

#: Error kinds worth another attempt.
RETRYABLE = frozenset({"rate_limited", "server_error", "connection"})
#: What ``fallback_on`` may name -> the error kind of an attempt that goes on to the next target.
FALLBACK_ON = {
    "429": "rate_limited",
    "5xx": "server_error",
    "timeout": "timeout",
    "connection": "connection",
}

_NAN = float("nan")


@dataclass(frozen=True)
class Target:
    """Where to send requests and how.

    Parameters
    ----------
    url : str
        Base URL (``http://host:port`` or ``.../v1``) or the full endpoint URL.
    api : str
        One of :data:`llmlat._apis.endpoints.API_NAMES`.
    model : str, optional
        Sent as the body's ``model`` when given.
    api_key_env : str, optional
        Name of the environment variable that holds the API key (never the key itself).
    headers : dict of str to str, optional
        Extra request headers (their values are not shown in the repr).
    timeout_s : float
        Limit for one attempt, from send to the end of the answer.
    stream : bool
        Ask for a server-sent-event stream (needed for TTFT and inter-token latency).
    max_tokens : int, optional
        Output token limit (overrides the payload's).

    Raises
    ------
    ValueError
        Naming the field that is invalid.
    """

    url: str
    api: str = "openai-chat"
    model: str | None = None
    api_key_env: str | None = None
    headers: dict[str, str] | None = field(default=None, hash=False)
    timeout_s: float = 60.0
    stream: bool = True
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.url, str):
            raise ValueError("url: expected an http:// or https:// URL")
        try:
            parts = urlsplit(self.url)
            parts.port  # noqa: B018 - parsed on access: a port out of range raises here
        except ValueError as exc:  # a malformed host ("Invalid IPv6 URL") or port
            raise ValueError(f"url: {exc}") from None
        if parts.scheme not in ("http", "https"):
            raise ValueError("url: expected an http:// or https:// URL")
        if not parts.hostname:
            raise ValueError("url: no host name")
        if self.api not in API_NAMES:
            raise ValueError(f"api: expected one of {', '.join(API_NAMES)}, got {self.api!r}")
        if self.model is not None and not isinstance(self.model, str):
            raise ValueError("model: expected a string")
        if self.api_key_env is not None and (
            not isinstance(self.api_key_env, str) or not self.api_key_env
        ):
            raise ValueError("api_key_env: expected the name of an environment variable")
        if self.headers is not None:
            if not isinstance(self.headers, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.headers.items()
            ):
                raise ValueError("headers: expected a dict of str to str")
            validate_headers(self.headers)
            object.__setattr__(self, "headers", dict(self.headers))
        if (
            not isinstance(self.timeout_s, int | float)
            or isinstance(self.timeout_s, bool)
            or not self.timeout_s > 0
            or not math.isfinite(self.timeout_s)
        ):
            raise ValueError("timeout_s: expected a positive number of seconds")
        if not isinstance(self.stream, bool):
            raise ValueError("stream: expected True or False")
        if self.max_tokens is not None and (
            not isinstance(self.max_tokens, int)
            or isinstance(self.max_tokens, bool)
            or self.max_tokens < 1
        ):
            raise ValueError("max_tokens: expected a positive integer")

    def api_key(self) -> str | None:
        """Read the API key from ``os.environ[api_key_env]`` (None when no variable is named).

        Returns
        -------
        str or None

        Raises
        ------
        ValueError
            If the named variable is not set or empty, or its value would not make a valid
            header (a line break, say); the message names the variable only.
        """
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ValueError(f"api_key_env: environment variable {self.api_key_env} is not set")
        try:
            validate_headers({"key": key})
        except ValueError:
            raise ValueError(
                f"api_key_env: the value of {self.api_key_env} contains a line break, control "
                "or non-Latin-1 character"
            ) from None
        return key

    def __repr__(self) -> str:
        parts = [f"url={redact_url(self.url)!r}", f"api={self.api!r}"]
        if self.model is not None:
            parts.append(f"model={self.model!r}")
        if self.api_key_env is not None:
            parts.append(f"api_key_env={self.api_key_env!r}")
        if self.headers:
            parts.append(f"headers=[{', '.join(sorted(self.headers))}]")
        parts += [f"timeout_s={self.timeout_s!r}", f"stream={self.stream!r}"]
        if self.max_tokens is not None:
            parts.append(f"max_tokens={self.max_tokens!r}")
        return f"Target({', '.join(parts)})"


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before another attempt.

    Rate-limited (429), server (5xx) and connection errors are retried; the wait before retry
    ``k`` (1-based) is drawn uniformly from ``[0, min(backoff_max_s, backoff_base_s * 2**(k-1))]``
    (full jitter; without ``backoff_jitter`` it is that bound itself: plain exponential
    backoff) and, with ``honour_retry_after``, is at least the server's ``Retry-After``, which
    is capped at ``max_retry_wait_s``. ``backoff_base_s=0`` without ``honour_retry_after``
    retries at once.

    Parameters
    ----------
    retries : int
        Further attempts after the first (0 records raw refusals).
    backoff_base_s : float
        Scale of the exponential backoff.
    backoff_max_s : float
        Largest backoff before jitter.
    max_retry_wait_s : float
        Cap on a ``Retry-After`` hint.
    backoff_jitter : bool
        Full jitter (a uniform draw below the exponential bound) or none.
    honour_retry_after : bool
        Wait at least the server's ``Retry-After`` hint.

    Raises
    ------
    ValueError
        Naming the field that is invalid.
    """

    retries: int = 3
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    max_retry_wait_s: float = 60.0
    backoff_jitter: bool = True
    honour_retry_after: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.retries, int) or isinstance(self.retries, bool) or self.retries < 0:
            raise ValueError("retries: expected an integer >= 0")
        for name in ("backoff_jitter", "honour_retry_after"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: expected True or False")
        for name in ("backoff_base_s", "backoff_max_s", "max_retry_wait_s"):
            value = getattr(self, name)
            if (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not 0 <= value < math.inf
            ):
                raise ValueError(f"{name}: expected a finite number of seconds >= 0")

    def wait_s(self, retry: int, retry_after_s: float, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (1-based).

        Parameters
        ----------
        retry : int
            1 for the first retry.
        retry_after_s : float
            The server's hint (NaN when none).
        rng : random.Random
            Source of the jitter.

        Returns
        -------
        float
        """
        bound = min(self.backoff_max_s, self.backoff_base_s * 2.0 ** (retry - 1))
        wait = rng.uniform(0.0, bound) if self.backoff_jitter else bound
        if self.honour_retry_after and retry_after_s == retry_after_s:  # not NaN
            wait = max(wait, min(retry_after_s, self.max_retry_wait_s))
        return wait


@dataclass(frozen=True)
class Failover:
    """When an attempt goes on at once to the next target, as a gateway with fallbacks does.

    An attempt whose error is one of ``on`` is sent again to the next URL of the list, without
    waiting and without spending a retry, while the failover budget lasts: ``max_s`` seconds
    from the request's first send (to the failed attempt's end). When the last target fails
    too, or the budget is spent, the :class:`RetryPolicy` decides: a retry waits its backoff and
    starts again at the primary.

    Parameters
    ----------
    on : tuple of str or str
        Keys of :data:`FALLBACK_ON` (``"429"``, ``"5xx"``, ``"timeout"``, ``"connection"``), or
        them comma-separated.
    max_s : float
        The failover budget, seconds.

    Raises
    ------
    ValueError
        Naming the field that is invalid (``fallback_on``, ``failover_max_s``: the options).
    """

    on: tuple[str, ...] | str = tuple(FALLBACK_ON)
    max_s: float = 30.0

    def __post_init__(self) -> None:
        on = self.on
        if isinstance(on, str):
            on = tuple(p.strip() for p in on.split(",") if p.strip())
        if (
            not isinstance(on, tuple | list)
            or not on
            or not all(isinstance(k, str) and k in FALLBACK_ON for k in on)
        ):
            raise ValueError(
                f"fallback_on: expected some of {', '.join(FALLBACK_ON)}, got {self.on!r}"
            )
        object.__setattr__(self, "on", tuple(dict.fromkeys(on)))
        if (
            not isinstance(self.max_s, int | float)
            or isinstance(self.max_s, bool)
            or not 0 <= self.max_s < math.inf
        ):
            raise ValueError("failover_max_s: expected a finite number of seconds >= 0")

    @property
    def kinds(self) -> frozenset[str]:
        """The error kinds that fail over."""
        return frozenset(FALLBACK_ON[k] for k in self.on)


class TokenBucket:
    """A client-side limit on attempts per minute: one every ``60 / rpm`` seconds, no burst.

    Each :meth:`take` reserves the next free instant in order (a generic cell rate algorithm),
    so waiting callers go out evenly spaced in the order they came.

    Parameters
    ----------
    rpm : float
        Attempts per minute.
    """

    def __init__(self, rpm: float) -> None:
        self.interval_s = 60.0 / rpm
        self._next = 0.0

    async def take(self) -> None:
        """Wait for this caller's instant."""
        now = time.perf_counter()
        at = max(self._next, now)
        self._next = at + self.interval_s
        if at > now:
            await asyncio.sleep(at - now)


def classify_status(status: int) -> str | None:
    """Error kind of an HTTP status: None for 2xx.

    Parameters
    ----------
    status : int

    Returns
    -------
    str or None
        ``"rate_limited"`` (429), ``"server_error"`` (5xx), ``"client_error"`` (anything else).
    """
    if 200 <= status < 300:
        return None
    if status == 429:
        return "rate_limited"
    if status >= 500:
        return "server_error"
    return "client_error"


def _retry_after(headers: Any, now: float | None = None) -> float:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds or HTTP date); NaN if none.

    ``headers`` has lower-case names, as :class:`llmlat._transport._http11.Response` keeps them;
    an HTTP date counts from ``now``, the wall-clock time (``time.time()``) they came (now when
    None).
    """
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return _NAN
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - (
                time.time() if now is None else now
            )
        except (TypeError, ValueError, IndexError):
            return _NAN
    return max(0.0, seconds) if math.isfinite(seconds) else _NAN


def _error_message(raw: bytes) -> str:
    try:
        obj = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    return raw.decode("utf-8", "replace")


class Client:
    """Sends logical requests to one target and measures each into a Record.

    Use as ``async with Client(target, retry, run_id=..., t0_ns=..., seed=...) as client:``
    inside the event loop that will run the requests (its connections belong to that loop).

    Parameters
    ----------
    target : Target
        Where to send.
    retry : RetryPolicy, optional
        Retry rules (default ``RetryPolicy()``).
    run_id : str
        The run's id (the ``x-llmlat-request-id`` header carries each record's own).
    t0_ns : int
        ``perf_counter_ns()`` at the run's t=0: every time recorded is seconds since it.
    seed : int
        Seeds the backoff jitter (per request, so the order requests finish in doesn't matter).
    transport : str
        ``"http11"`` (the default: llmlat's own HTTP/1.1 pool) or ``"aiohttp"`` (aiohttp's
        client with ``trust_env=True``: honours ``HTTP(S)_PROXY`` and ``NO_PROXY``).
    fallbacks : sequence of str
        URLs tried after ``target.url`` by :class:`Failover` rules (each with its own
        connections; everything but the URL is the target's).
    failover : Failover, optional
        When to go on to the next URL (default ``Failover()``; unused without fallbacks).
    rpm : float, optional
        A client-side :class:`TokenBucket`: at most this many attempts per minute.

    Warns
    -----
    UserWarning
        On start, before any connection, when credentials would go over plain ``http`` to a
        host that is not this machine.
    """

    def __init__(
        self,
        target: Target,
        retry: RetryPolicy | None = None,
        *,
        run_id: str,
        t0_ns: int,
        seed: int = 0,
        transport: str = "http11",
        fallbacks: tuple[str, ...] | list[str] = (),
        failover: Failover | None = None,
        rpm: float | None = None,
    ) -> None:
        if not isinstance(target, Target):
            raise ValueError("target: expected a llmlat._client.Target")
        if transport not in TRANSPORTS:
            raise ValueError(
                f"transport: expected one of {', '.join(TRANSPORTS)}, got {transport!r}"
            )
        self.target = target
        self.retry = RetryPolicy() if retry is None else retry
        self.run_id = run_id
        self.t0_ns = t0_ns
        self.seed = seed
        self.transport = transport
        self._endpoint = get_endpoint(target.api)
        self._url = self._endpoint.url(target.url)
        self._targets = [target, *(dataclasses.replace(target, url=u) for u in fallbacks)]
        self.failover = Failover() if failover is None else failover
        self._bucket = None if rpm is None else TokenBucket(rpm)
        self._pool: Transport | None = None
        self._pools: list[Transport] = []
        self._secrets: list[str] = []
        self._last: tuple[Any, bytes] = (None, b"")

    async def __aenter__(self) -> Client:
        """Read the API key and make the connection pool (connections open as needed)."""
        for target in self._targets:
            headers = _request_headers(target)
            _warn_if_proxy_unused(target.url, self.transport)
            url = self._endpoint.url(target.url)
            self._pools.append(make_transport(self.transport, url, headers))
            # masked in every text while this is open
            self._secrets += remember(headers=headers)
        self._pool = self._pools[0]
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close the connections."""
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections (idempotent)."""
        if self._pool is not None:
            for pool in self._pools:
                await pool.aclose()
            self._pool = None
            self._pools = []
            forget(self._secrets)
            self._secrets = []

    async def preconnect(self, n: int) -> int:
        """Open connections until ``n`` are idle, so the requests that follow find them warm.

        They open at the primary. When it refuses some or lets them time out (it is down) and
        such a failure fails over (:class:`Failover`), the requests it cannot take go on to the
        next target, so that target's are opened too, and so on down the list: with the primary
        down, the fallback's first requests find warm connections as the primary's would. Each
        connect takes at most the target's ``timeout_s``, as a request's does.

        Parameters
        ----------
        n : int
            How many connections the next requests will use at once.

        Returns
        -------
        int
            How many are idle across the targets (0 with the aiohttp transport, which opens
            them per request).
        """
        if self._pool is None:
            raise RuntimeError("Client.preconnect: use 'async with Client(...)' first")
        ready = 0
        for i, pool in enumerate(self._pools):
            if i and not {"connection", "timeout"} & self.failover.kinds:
                break  # a request the primary cannot connect would not go on either
            ready += await pool.preconnect(n - ready, self.target.timeout_s)
            if ready >= n:
                break
        return ready

    def __repr__(self) -> str:
        return f"Client({self.target!r}, {self.retry!r}, run_id={self.run_id!r})"

    async def send(
        self,
        record: Record,
        payload: dict[str, Any] | str,
        attempts: list[Attempt] | None = None,
    ) -> list[Attempt]:
        """Send one logical request (with retries) and fill ``record``.

        Parameters
        ----------
        record : Record
            With ``run_id, level, level_kind, request_id, phase, worker, in_flight,
            t_scheduled`` set by the caller; every other field is filled here.
        payload : dict or str
            The request (see :func:`llmlat._apis.endpoints.make_payload`). A dict is not changed,
            and must not be changed after it was sent: the encoded body of the last payload
            object is reused when the same object comes again.
        attempts : list of Attempt, optional
            Each attempt is appended here as it starts, so the caller keeps them even when the
            send is cancelled.

        Returns
        -------
        list of Attempt
            One per HTTP attempt of this request.

        Raises
        ------
        asyncio.CancelledError
            When cancelled; ``record`` is filled first (``error_kind="cancelled"``).
        RuntimeError
            If the client was not started (``async with``).
        """
        if self._pool is None:
            raise RuntimeError("Client.send: use 'async with Client(...)' first")
        target = self.target
        if payload is self._last[0]:
            body = self._last[1]  # a closed loop sends one payload object again and again
        else:
            made = payload if isinstance(payload, dict) else make_payload(payload, target.api)
            body = json.dumps(
                self._endpoint.body(
                    made, model=target.model, stream=target.stream, max_tokens=target.max_tokens
                ),
                separators=(",", ":"),
            ).encode()
            self._last = (payload, body)
        mine: list[Attempt] = []
        rid = f"{record.run_id}/{record.request_id}/"
        retries = self.retry.retries
        hint = _NAN
        wait = 0.0
        result: StreamParser | BodyResult | None = None
        rng: random.Random | None = None
        stale_retried = False
        slept_from = 0  # perf_counter_ns when the current backoff sleep began, 0 when awake
        where = 0  # the target of the next attempt (0: the primary)
        spent = 0  # retries spent (a failover to the next target spends none)
        try:
            while True:
                if self._bucket is not None:  # client-side RPM: the wait shows as lag / retry wait
                    await self._bucket.take()
                if slept_from:
                    wait = (time.perf_counter_ns() - slept_from) / 1e9
                    slept_from = 0
                    record.retry_wait_s += wait
                att = Attempt(
                    record.run_id,
                    record.level,
                    record.request_id,
                    len(mine) + 1,
                    wait_before_s=wait,
                    target=where,
                )
                mine.append(att)
                if attempts is not None:
                    attempts.append(att)
                result = self._endpoint.stream_parser() if target.stream else None
                result, verdict = await self._attempt(
                    att, body, rid + str(att.attempt), result, fresh=stale_retried
                )
                if att.retry_after_s == att.retry_after_s:
                    hint = att.retry_after_s
                wait = 0.0
                if verdict == "stale" and not stale_retried:
                    stale_retried = True  # the server closed an idle connection: not its failure
                    continue
                if self._fails_over(att, mine[0]):
                    where += 1
                    continue
                if verdict != "retry" or spent >= retries:
                    break
                spent += 1
                where = 0
                if rng is None:
                    rng = random.Random(f"{self.seed}/{record.request_id}")
                slept_from = time.perf_counter_ns()
                await asyncio.sleep(self.retry.wait_s(spent, att.retry_after_s, rng))
        except asyncio.CancelledError:
            now = time.perf_counter_ns()
            t_end = (now - self.t0_ns) / 1e9
            if not mine:  # cancelled waiting for the client-side bucket: nothing was sent
                record.t_end = t_end
                record.error_kind, record.error, record.ok = "cancelled", "cancelled", False
                record.latency_s = t_end - record.t_scheduled
                raise
            att = mine[-1]
            if slept_from:
                record.retry_wait_s += (now - slept_from) / 1e9
            elif att.t_end != att.t_end:  # cancelled during the attempt
                att.t_end = t_end
                att.error_kind, att.error = "cancelled", "cancelled"
            self._finish(record, mine, result, hint)
            record.t_end = t_end
            record.error_kind, record.error, record.ok = "cancelled", "cancelled", False
            record.latency_s = t_end - record.t_scheduled
            record.service_s = t_end - record.t_sent
            raise
        self._finish(record, mine, result, hint)
        return mine

    def _fails_over(self, att: Attempt, first: Attempt) -> bool:
        """Whether the failed ``att`` goes on at once to the next target (see :class:`Failover`)."""
        return (
            att.target + 1 < len(self._pools)
            and att.error_kind in self.failover.kinds
            and att.t_end - first.t_sent <= self.failover.max_s
        )

    async def _attempt(
        self, att: Attempt, body: bytes, rid: str, parser: StreamParser | None, *, fresh: bool
    ) -> tuple[StreamParser | BodyResult | None, str]:
        """One HTTP attempt: fills ``att``; returns what the answer said and what to do next.

        The verdict is ``"done"``, ``"retry"`` (worth another attempt by the policy) or
        ``"stale"`` (a reused connection the server had closed: try once more at once).
        """
        assert self._pool is not None
        pool = self._pools[att.target]
        t0 = self.t0_ns
        resp = Response(parser.feed if parser is not None else None)
        out: StreamParser | BodyResult | None = parser
        verdict = "done"
        error = None
        att.t_sent = (time.perf_counter_ns() - t0) / 1e9  # until it is sent (a cancel, say)
        try:
            await pool.send(
                body,
                resp,
                {"x-llmlat-request-id": rid},
                fresh=fresh,
                timeout_s=self.target.timeout_s,
            )
            t = resp.t_end_ns
        except TimeoutError:
            t = time.perf_counter_ns()
            att.error_kind = "timeout"
            att.error = f"no complete answer within timeout_s={self.target.timeout_s:g}"
        except ConnectionFailed as exc:
            t = resp.t_end_ns or time.perf_counter_ns()
            att.error_kind, error = exc.kind, str(exc)
            if exc.stale:
                verdict = "stale"
                error = "the server had closed this idle keep-alive connection; sent again"
            elif exc.retryable and exc.kind in RETRYABLE:
                verdict = "retry"
        except BadResponse as exc:
            t = resp.t_end_ns or time.perf_counter_ns()
            att.error_kind, error = "protocol", str(exc)
        else:
            status = resp.status
            kind = classify_status(status)
            # a time the server wrote counts from when its headers came, not from the end of
            # a long answer
            came = time.time() - (time.perf_counter_ns() - resp.t_head_ns) / 1e9
            att.retry_after_s = _retry_after(resp.headers, came)
            read_limits(resp.headers, att, came)  # what the provider declared, on every answer
            if kind is not None:
                raw = bytes(resp.body)
                error = f"HTTP {status}: {_error_message(raw)}" if raw else f"HTTP {status}"
                att.error_kind = kind
            elif parser is not None:
                parser.close(t)
                if parser.error is not None:
                    att.error_kind, error = parser.error_kind, parser.error
                elif not parser.done:
                    att.error_kind = "protocol"
                    error = (
                        "stream ended before the answer was complete"
                        if parser.times or resp.content_type == "text/event-stream"
                        else f"expected an event stream, got {resp.content_type or 'no type'}"
                    )
                elif not parser.times:
                    att.error_kind, error = "protocol", _no_token(parser)
            else:
                out = self._endpoint.parse_body(bytes(resp.body))
                if out.error is not None:
                    att.error_kind, error = out.error_kind, out.error
                elif not out.content:
                    att.error_kind, error = "protocol", _no_token(out)
            if att.error_kind in RETRYABLE:
                verdict = "retry"
        if error is not None:
            att.error = one_line(error)  # what the server said may hold anything: the key too
        if resp.connect_ns >= 0:
            att.connect_s = resp.connect_ns / 1e9
        att.t_sent = ((resp.t_sent_ns or t) - t0) / 1e9
        if resp.status:
            att.status = resp.status
            att.t_first_byte = (resp.t_head_ns - t0) / 1e9
        att.t_end = (t - t0) / 1e9
        return out, verdict

    def _finish(
        self,
        record: Record,
        mine: list[Attempt],
        result: StreamParser | BodyResult | None,
        hint: float,
    ) -> None:
        """Fill ``record`` from its attempts and the last attempt's answer."""
        first, last = mine[0], mine[-1]
        record.attempts = len(mine)
        record.t_sent = first.t_sent
        record.connect_s = first.connect_s
        record.t_first_byte = last.t_first_byte
        record.t_end = last.t_end
        record.status = last.status
        record.error_kind, record.error = last.error_kind, last.error
        record.ok = last.error_kind is None
        record.retry_after_s = hint
        if record.ok:
            record.served_by = last.target
            record.failover_s = last.t_sent - first.t_sent if last.target != first.target else 0.0
        record.latency_s = record.t_end - record.t_scheduled
        record.service_s = record.t_end - record.t_sent
        connect = first.connect_s if first.connect_s == first.connect_s else 0.0
        record.lag_s = record.t_sent - connect - record.t_scheduled
        if result is None:
            return
        record.prompt_tokens = result.prompt_tokens
        record.completion_tokens = result.completion_tokens
        record.cached_tokens = result.cached_tokens
        record.cache_creation_tokens = result.cache_creation_tokens
        if isinstance(result, StreamParser) and result.times:
            _chunk_stats(record, result.times, self.t0_ns)


def _request_headers(target: Target) -> dict[str, str]:
    """Build the headers of every request to ``target``.

    Warns before credentials would go over plain http to another machine.
    """
    key = target.api_key()
    headers = {"User-Agent": f"llmlat/{__version__}", "Accept": "*/*"}
    headers.update(get_endpoint(target.api).headers(key))
    headers["Accept-Encoding"] = "identity"  # the stream is parsed as it arrives, raw
    if target.headers:
        headers.update(target.headers)
    credentials = key is not None or any(credential_header(k) for k in target.headers or {})
    parts = urlsplit(target.url)
    if credentials and parts.scheme == "http" and not _loopback(parts.hostname or ""):
        warnings.warn(
            f"sending credentials over plain http to {parts.hostname}: anyone on the way can "
            "read them; use https",
            stacklevel=3,
        )
    return headers


def _warn_if_proxy_unused(url: str, transport: str) -> None:
    """Warn when the environment sets a proxy for ``url`` that ``transport`` will not use."""
    if transport == "http11" and _proxy_for(url):
        warnings.warn(
            f"a proxy is set for {urlsplit(url).hostname} (HTTP(S)_PROXY), but the "
            "http11 transport connects directly: use transport='aiohttp' to go through it",
            stacklevel=3,
        )


def _proxy_for(url: str) -> bool:
    """Whether the environment routes ``url`` through a proxy (loopback targets never)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return (
        not _loopback(host)
        and parts.scheme in urllib.request.getproxies()
        and not urllib.request.proxy_bypass(host)
    )


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def list_models(target: Target, *, transport: str = "http11") -> list[str]:
    """List the models the target's API offers (``GET /v1/models``), in its order.

    Parameters
    ----------
    target : Target
        The server (its key and headers are sent).
    transport : str
        As for :class:`Client`.

    Returns
    -------
    list of str
        Model ids.

    Raises
    ------
    ValueError
        A one-line reason when the server lists none (no such path, an error, no answer).
    """
    endpoint = get_endpoint(target.api)
    url = endpoint.url(target.url, "/v1/models")
    headers = _request_headers(target)
    pool = make_transport(transport, url, headers, method="GET")
    secrets = remember(headers=headers)
    resp = Response()
    try:
        await pool.send(b"", resp, timeout_s=min(target.timeout_s, 30.0))
    except (ConnectionFailed, BadResponse, TimeoutError) as exc:
        reason = str(exc) or "no answer in time"
        raise ValueError(
            one_line(f"model: not given, and {redact_url(url)} failed: {reason}")
        ) from None
    finally:
        await pool.aclose()
        forget(secrets)
    models = endpoint.models(bytes(resp.body)) if resp.status == 200 else []
    if not models:
        said = f"HTTP {resp.status}" if resp.status != 200 else "no models"
        raise ValueError(
            one_line(f"model: not given, and {redact_url(url)} lists none ({said}); pass model=")
        )
    return models


class FailFast:
    """Says when a run's first requests all failed the same way, so more would too.

    The ways that stop a run are the ones no waiting cures: a connect that fails (refused, TLS,
    DNS; not a connection dropped later) and HTTP 400, 401, 403 and 404.

    Parameters
    ----------
    first : int
        How many first finished requests must fail alike.
    """

    FATAL_STATUS = frozenset({400, 401, 403, 404})

    def __init__(self, first: int = 3) -> None:
        self.first = first
        self._seen = 0
        self._way: tuple[Any, Any] | None = None

    def observe(self, record: Record) -> str | None:
        """Take a finished request; return the reason to stop, once, or None.

        Parameters
        ----------
        record : Record

        Returns
        -------
        str or None
            One line: how many failed, and what the server (or the connection) said.
        """
        if self._seen >= self.first:
            return None
        self._seen += 1
        fatal = (record.error or "").startswith(CONNECT_FAILED) or (
            record.error_kind == "client_error" and record.status in self.FATAL_STATUS
        )
        way = (record.error_kind, record.status)
        if not fatal or (self._way is not None and way != self._way):
            self._seen = self.first  # disarmed for good
            return None
        self._way = way
        if self._seen < self.first:
            return None
        return f"the first {self.first} requests all failed the same way: {record.error}"


def _no_token(answer: StreamParser | BodyResult) -> str:
    """Return the error text of a complete 200 answer without a generated token.

    Not a success: it has no first token, and its short latency would flatter the level.
    """
    said = [f"finish reason {answer.finish_reason}"] if answer.finish_reason else []
    if answer.completion_tokens is not None:
        said.append(f"{answer.completion_tokens} completion tokens")
    return "HTTP 200 without a generated token" + (f" ({', '.join(said)})" if said else "")


def _chunk_stats(record: Record, times: list[int], t0_ns: int) -> None:
    """TTFT, inter-token latency and time per output token from content-chunk arrival times."""
    n = len(times)
    first = times[0]
    record.chunks = n
    record.t_first_token = (first - t0_ns) / 1e9
    record.ttft_s = record.t_first_token - record.t_scheduled
    if n > 1:
        gaps = sorted([b - a for a, b in itertools.pairwise(times)])
        m = len(gaps)
        mid = gaps[m // 2] if m % 2 else (gaps[m // 2 - 1] + gaps[m // 2]) / 2
        record.itl_mean_s = (times[-1] - first) / (n - 1) / 1e9
        record.itl_p50_s = mid / 1e9
        record.itl_max_s = gaps[-1] / 1e9
    tokens = record.completion_tokens
    if tokens is not None and tokens > 1:
        record.tpot_s = (record.t_end - record.t_first_token) / (tokens - 1)
