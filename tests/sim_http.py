"""Test helper: talk to the simulator over real loopback HTTP with aiohttp's client.

Not a test module: shared by tests/test_sim_*.py. ``call`` sends one request and returns what
came back (status, headers, raw body, parsed SSE events, client-side token arrival times, or the
exception that ended it), never raising for HTTP or connection problems.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

PATHS = {
    "openai-chat": "/v1/chat/completions",
    "openai-completions": "/v1/completions",
    "anthropic-messages": "/v1/messages",
}


def body_for(api: str, text: str = "Hello there, simulator.", **extra: Any) -> dict:
    """A minimal valid request body of an API flavour."""
    if api == "openai-completions":
        return {"model": "m", "prompt": text, **extra}
    return {"model": "m", "messages": [{"role": "user", "content": text}], **extra}


@dataclass
class Reply:
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    error: str | None = None  # exception class name when the exchange broke
    token_times: list[float] = field(default_factory=list)  # perf_counter per content event

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[tuple[str | None, str]]:
        """SSE events as (event name, data) pairs; asserts the framing is well formed."""
        return parse_sse(self.body)


def parse_sse(raw: bytes) -> list[tuple[str | None, str]]:
    text = raw.decode()
    assert text.endswith("\n\n"), "an SSE stream ends with a blank line"
    out = []
    for block in text[:-2].split("\n\n"):
        name, data = None, None
        for line in block.split("\n"):
            key, sep, value = line.partition(": ")
            assert sep, f"malformed SSE line {line!r}"
            if key == "event":
                name = value
            else:
                assert key == "data", f"unexpected SSE field {key!r}"
                data = value
        assert data is not None, f"SSE event without data: {block!r}"
        out.append((name, data))
    return out


def _is_content(line: bytes) -> bool:
    """Whether an SSE data line carries generated text (not a role-only or final chunk)."""
    try:
        data = json.loads(line[6:])
    except ValueError:
        return False
    if data.get("type") == "content_block_delta":
        return bool(data["delta"].get("text"))
    choices = data.get("choices") or [{}]
    return bool(choices[0].get("text") or choices[0].get("delta", {}).get("content"))


async def call(
    session: aiohttp.ClientSession,
    url: str,
    api: str,
    body: dict | bytes | str,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> Reply:
    """POST one request; record the arrival time of every content event when streamed."""
    reply = Reply()
    if isinstance(body, dict):
        data = json.dumps(body).encode()
    else:
        data = body.encode() if isinstance(body, str) else body
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    timeout = aiohttp.ClientTimeout(sock_read=timeout_s) if timeout_s else None
    try:
        async with session.post(url + PATHS[api], data=data, headers=hdrs, timeout=timeout) as r:
            reply.status = r.status
            reply.headers = {k.lower(): v for k, v in r.headers.items()}
            chunks = []
            async for line in r.content:
                chunks.append(line)
                if line.startswith(b"data: ") and _is_content(line):
                    reply.token_times.append(time.perf_counter())
            reply.body = b"".join(chunks)
    except (TimeoutError, aiohttp.ClientError) as exc:
        reply.error = type(exc).__name__
    return reply


async def closed_loop(
    url: str, api: str, body: dict, *, clients: int, requests: int, **kwargs: Any
) -> list[Reply]:
    """``clients`` workers send back to back until ``requests`` replies are in."""
    replies: list[Reply] = []
    left = [requests]
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while left[0] > 0:
                left[0] -= 1
                replies.append(await call(session, url, api, body, **kwargs))

        await asyncio.gather(*(worker() for _ in range(clients)))
    return replies
