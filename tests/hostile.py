"""Test helper: one raw asyncio HTTP server on 127.0.0.1 that misbehaves on demand.

Not a test module. The first path segment picks the fault (``/stall/v1/chat/completions``);
each mode answers as a broken or unusual server would. Streams are written event by event.
``KEY_ECHO`` modes put the request's credential header value into the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import threading
from collections.abc import Iterator

EVENTS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
    {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
    {"choices": [{"index": 0, "delta": {"content": "lo"}}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
]
# a complete answer that generated nothing (a content filter, say): no content delta at all
EMPTY_EVENTS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "content_filter"}]},
    {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 0}},
]
EMPTY_BODY = {
    "choices": [
        {"message": {"role": "assistant", "content": ""}, "finish_reason": "content_filter"}
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 0},
}
BODY = {
    "choices": [{"message": {"role": "assistant", "content": "Hello"}}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2},
}


def sse(events: list, done: bool = True) -> list[bytes]:
    out = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]
    return [*out, b"data: [DONE]\n\n"] if done else out


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


IDLE_CLOSE_S = 0.02  # the idle_close mode closes a connection idle this long

STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
)


class HostileServer:
    """The server; ``url(mode)`` is the base URL of one fault mode, ``requests`` counts them."""

    def __init__(self) -> None:
        self.requests = 0
        self.connections = 0
        self.proxied = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task] = set()

    async def __aenter__(self) -> HostileServer:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):  # stalled answers wait forever: end them
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.server.wait_closed()

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.port}/{mode}/v1"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            idle_limit = None  # set by the idle_close mode after its first answer
            while True:
                async with asyncio.timeout(idle_limit):  # as uvicorn closes idle connections
                    head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines[1:])
                    if k
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests += 1
                target = lines[0].split(" ")[1]
                if target.startswith("http://"):  # a proxy's absolute form
                    self.proxied += 1
                    target = "/" + target.split("/", 3)[3]
                mode = target.split("/")[1]
                stream = json.loads(body or b"{}").get("stream", False)
                key = headers.get("authorization", "").removeprefix("Bearer ")
                key = key or headers.get("api-key") or headers.get("x-api-key", "")
                if not await self._answer(mode, stream, key, writer):
                    break
                if mode == "idle_close":
                    idle_limit = IDLE_CLOSE_S
        except (
            asyncio.IncompleteReadError,
            ConnectionError,
            asyncio.LimitOverrunError,
            TimeoutError,
        ):
            pass
        finally:
            self._writers.discard(writer)
            self._tasks.discard(task)
            writer.close()

    async def _write(self, writer: asyncio.StreamWriter, *parts: bytes) -> None:
        for part in parts:
            writer.write(part)
            await writer.drain()

    async def _ok(
        self, writer, stream: bool, *, close_header: bool = False, empty: bool = False
    ) -> None:
        extra = b"Connection: close\r\n" if close_header else b""
        if stream:
            events = EMPTY_EVENTS if empty else EVENTS
            await self._write(writer, STREAM_HEAD + extra + b"\r\n")
            await self._write(writer, *(chunk(e) for e in sse(events)), b"0\r\n\r\n")
        else:
            data = json.dumps(EMPTY_BODY if empty else BODY).encode()
            await self._write(
                writer,
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%s"
                b"Content-Length: %d\r\n\r\n%s" % (extra, len(data), data),
            )

    async def _answer(self, mode: str, stream: bool, key: str, writer) -> bool:
        """Answer one request; False closes the connection."""
        if mode in ("ok", "idle_close"):
            await self._ok(writer, stream)
        elif mode == "empty":  # 200, complete, not one generated token
            await self._ok(writer, stream, empty=True)
        elif mode == "close_after_answer":  # keep-alive by default, but it closes at once
            await self._ok(writer, stream)
            return False
        elif mode == "drop_before_head":
            return False
        elif mode == "drop_mid_body":
            if stream:
                await self._write(writer, STREAM_HEAD + b"\r\n", chunk(sse(EVENTS)[1]))
            else:
                await self._write(writer, b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{")
            return False
        elif mode == "stall":
            await self._write(writer, STREAM_HEAD + b"\r\n")
            await asyncio.Event().wait()
        elif mode == "malformed_head":
            await self._write(writer, b"HTTP/1.1 OK\r\n\r\n")
            return False
        elif mode == "bad_json_after_content":
            if stream:
                events = sse(EVENTS[:2], done=False)
                events.append(b'data: {"choices": [{"delta": {"content": "x"}}\n\n')
                await self._write(writer, STREAM_HEAD + b"\r\n", *map(chunk, events))
                await self._write(writer, b"0\r\n\r\n")
            else:
                await self._write(writer, b'HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{"choices')
        elif mode == "gzip":
            data = sse(EVENTS) if stream else [json.dumps(BODY).encode()]
            packed = gzip.compress(b"".join(data))
            ctype = b"text/event-stream" if stream else b"application/json"
            await self._write(
                writer,
                b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Encoding: gzip\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (ctype, len(packed), packed),
            )
        elif mode == "brotli":
            await self._write(
                writer, b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 3\r\n\r\nabc"
            )
        elif mode in ("status_500", "status_429", "status_401"):
            status = int(mode[-3:])
            data = json.dumps({"error": {"message": f"status {status} from the hostile server"}})
            await self._write(
                writer,
                b"HTTP/1.1 %d X\r\nRetry-After: 0\r\nContent-Length: %d\r\n\r\n%s"
                % (status, len(data), data.encode()),
            )
        elif mode == "done_stays_open":  # [DONE] and usage, then the body never ends
            if not stream:
                await self._ok(writer, stream)
                return True
            await self._write(writer, STREAM_HEAD + b"\r\n", *(chunk(e) for e in sse(EVENTS)))
            await asyncio.Event().wait()
        elif mode == "key_echo":  # the key in the content type, the headers and the body
            data = f"no such thing: {key.upper()} / {key[3:17]}".encode()
            await self._write(
                writer,
                b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nX-Echo: %s\r\nContent-Length: %d\r\n\r\n%s"
                % (key.lower().encode(), key.encode(), len(data), data),
            )
        elif mode == "key_echo_401":
            data = json.dumps({"error": {"message": f"Incorrect API key: {key.swapcase()}"}})
            await self._write(
                writer,
                b"HTTP/1.1 401 X\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data.encode()),
            )
        else:
            raise AssertionError(f"unknown mode {mode}")
        return True


@contextlib.contextmanager
def serving_in_a_thread() -> Iterator[HostileServer]:
    """A HostileServer on its own event loop in a thread (for sync code and subprocesses)."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict = {}

    async def serve() -> None:
        async with HostileServer() as server:
            box["server"], box["stop"] = server, asyncio.Event()
            started.set()
            await box["stop"].wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield box["server"]
    finally:
        loop.call_soon_threadsafe(box["stop"].set)
        thread.join(10)
        loop.close()
