"""What the measuring client costs and how far off it is, against a canned streaming server.

The server is a minimal asyncio HTTP/1.1 server in a child process pinned with ``taskset`` to
one core; this process (the client) is pinned to the other. Every answer is an OpenAI chat
stream of 16 tokens (or 32 for accuracy), chunked, each token written as its own chunk (as real
servers do), then the usage chunk and ``[DONE]``. The server keeps its own log: when each
request arrived, as the kernel's receive time of the read (``SO_TIMESTAMPNS``), and when it
wrote the first token, just before the ``send`` system call. (Stamped when the server's event
loop got to it, the arrival time left the server's own loop lag out of its TTFT: at 128 in
flight that lag, 1-40 ms at p99, was all of the "client's" error.) Server and client read the
same monotonic clock, so each error splits into client write -> server kernel and server write
-> client read.

Printed:

1. CPU: zero delays, 128 in flight; client CPU milliseconds per 16-token request for
   ``Client.send`` (both transports) and the whole ``asweep``; baseline in the same run:
   aiohttp's ``ClientSession`` reading each answer without parsing it; and the floor, a raw
   asyncio protocol that only reads (the event loop and system calls every client pays).
2. Accuracy: ~20 ms to the first token, 2 ms between tokens, at 16 and 128 in flight
   (connections opened before the level, so connect excluded): p50 / p99 of client TTFT minus
   the server's (its log, joined on ``x-llmlat-request-id``), and its two parts: the client's
   write of the request to the server kernel's receipt, the server's write of the first token
   to the client's read; the same error for aiohttp reading the raw stream and timing the first
   content event.
3. Memory: peak RSS of a fresh client process running one level of 5,000 in flight.

Targets (issue 11): <= 0.06 ms CPU per 16-token request; TTFT p99 error <= 2 ms at 16 in
flight and <= 5 ms at 128; <= 150 MB at 5,000 in flight. The machine's load average is printed
before and after: figures mean little while other processes compete for the cores.

Usage: ``python benchmarks/bench_client.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import ClassVar

import numpy as np
import pandas as pd

PROMPT = "Say something."
PAYLOAD = {"messages": [{"role": "user", "content": PROMPT}]}
CPU_SERVER = {"tokens": 16, "ttft_s": 0.0, "itl_s": 0.0}
ACCURACY_SERVER = {"tokens": 32, "ttft_s": 0.020, "itl_s": 0.002}
MEMORY_SERVER = {"tokens": 16, "ttft_s": 0.2, "itl_s": 0.01}


def raise_open_files() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


# -- the canned server (child process) ---------------------------------------------------------
def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(obj: dict) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; the socket module lacks it
_ANCILLARY = socket.CMSG_SPACE(16)  # one struct timespec


def _kernel_time(ancillary: list) -> float:
    """The kernel's receive time of a read, on the ``perf_counter`` clock.

    The kernel stamps a segment when it comes off the (loopback) device, before this server's
    event loop gets to it: so the server's own loop lag is not counted against the client.
    The stamp is ``CLOCK_REALTIME``; the offset to ``CLOCK_MONOTONIC`` is read at this moment,
    ms after the stamp, so clock slewing cannot matter.
    """
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
            sec, nsec = struct.unpack("qq", data[:16])
            return (sec * 10**9 + nsec - (time.time_ns() - time.perf_counter_ns())) / 1e9
    return time.perf_counter()


class _Canned:
    """Keep-alive HTTP/1.1 server: a chunked token stream per request, one write per token.

    Plain non-blocking sockets on the loop's reader callbacks (not asyncio protocols): a read
    comes with the kernel's receive time (``SO_TIMESTAMPNS``), the arrival time of the log;
    a write is one ``send`` system call at once, right after its time is taken.
    """

    spec: ClassVar[dict] = {}
    log: ClassVar[list] = []
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    base: ClassVar[dict] = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
    }

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.sock, self.loop = sock, loop
        self.fd = sock.fileno()
        self.buf = b""
        self.out = bytearray()  # what the socket did not take yet
        self.closed = False
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        loop.add_reader(self.fd, self.readable)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.loop.remove_reader(self.fd)
            self.loop.remove_writer(self.fd)
            self.sock.close()

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        if self.out:
            self.out += data
            return
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self.close()
            return
        if sent < len(data):
            self.out += data[sent:]
            self.loop.add_writer(self.fd, self.writable)

    def writable(self) -> None:
        try:
            sent = self.sock.send(self.out)
        except BlockingIOError:
            return
        except OSError:
            self.close()
            return
        del self.out[:sent]
        if not self.out:
            self.loop.remove_writer(self.fd)

    def readable(self) -> None:
        try:
            data, ancillary, _, _ = self.sock.recvmsg(65536, _ANCILLARY)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        t_arrival = _kernel_time(ancillary)
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head = self.buf[:end].lower()
            at = head.find(b"content-length:")
            size = int(head[at + 15 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
            if len(self.buf) < end + 4 + size:
                return
            self.buf = self.buf[end + 4 + size :]
            if head.startswith(b"get /log"):
                body = json.dumps(_Canned.log).encode()
                self.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                continue
            at = head.find(b"x-llmlat-request-id:")
            rid = head[at + 20 :].split(b"\r\n", 1)[0].strip().decode() if at >= 0 else ""
            self.answer(rid, t_arrival)

    def answer(self, rid: str, t_arrival: float) -> None:
        spec, write = self.spec, self.write
        entry = [rid, t_arrival, None]
        if rid:
            _Canned.log.append(entry)
        write(self.head + _event({**self.base, "choices": [{"delta": {"role": "assistant"}}]}))
        tokens = [
            _event({**self.base, "choices": [{"delta": {"content": f"tok{i} "}}]})
            for i in range(spec["tokens"])
        ]
        usage = {"prompt_tokens": 4, "completion_tokens": spec["tokens"]}
        tail = (
            _event({**self.base, "choices": [{"delta": {}, "finish_reason": "stop"}]})
            + _event({**self.base, "choices": [], "usage": usage})
            + _chunk(b"data: [DONE]\n\n")
            + b"0\r\n\r\n"
        )

        def send(i: int) -> None:
            if self.closed:
                return
            if i == 0:
                entry[2] = time.perf_counter()
            if i < len(tokens):
                write(tokens[i])
                if spec["itl_s"]:
                    self.loop.call_later(spec["itl_s"], send, i + 1)
                else:
                    self.loop.call_soon(send, i + 1)  # its own write, on its own turn
            else:
                write(tail)

        if spec["ttft_s"]:
            self.loop.call_later(spec["ttft_s"], send, 0)
        else:
            send(0)


async def serve(spec: dict) -> None:
    _Canned.spec = spec
    loop = asyncio.get_running_loop()
    listener = socket.create_server(("127.0.0.1", 0), backlog=8192)
    listener.setblocking(False)
    print(f"http://127.0.0.1:{listener.getsockname()[1]}", flush=True)
    while True:
        sock, _ = await loop.sock_accept(listener)
        _Canned(sock, loop)


class Server:
    """A canned server child process pinned with taskset to ``core``."""

    def __init__(self, spec: dict, core: int) -> None:
        cmd = ["taskset", "-c", str(core), sys.executable, __file__, "--serve", json.dumps(spec)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url:
            raise RuntimeError("the server did not start")

    def log(self) -> pd.DataFrame:
        import urllib.request

        with urllib.request.urlopen(self.url + "/log") as resp:
            rows = json.loads(resp.read())
        return pd.DataFrame(rows, columns=["rid", "t_arrival", "t_first_token"]).set_index("rid")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


# -- clients (this process) --------------------------------------------------------------------
async def _closed_loop(worker: Callable[[int], Awaitable[None]], n: int, requests: int) -> float:
    """Warm ``n`` connections, then time ``n`` workers sending ``requests``: CPU ms/request."""
    await asyncio.gather(*(worker(2) for _ in range(n)))
    cpu = time.process_time()
    await asyncio.gather(*(worker(requests // n + (i < requests % n)) for i in range(n)))
    return (time.process_time() - cpu) / requests * 1e3


async def llmlat_loop(url: str, n: int, requests: int, transport: str = "http11") -> float:
    from llmlat._client import Client, RetryPolicy, Target
    from llmlat.schema import Record

    t0 = time.perf_counter_ns()
    target = Target(url, model="bench")
    retry = RetryPolicy(retries=0)
    async with Client(target, retry, run_id="b", t0_ns=t0, transport=transport) as client:
        ids = iter(range(10**9))

        async def worker(count: int) -> None:
            for _ in range(count):
                record = Record("b", n, "concurrency", next(ids), t_scheduled=0.0)
                await client.send(record, PAYLOAD)
                assert record.ok and record.chunks == 16, record.error

        return await _closed_loop(worker, n, requests)


async def aiohttp_loop(url: str, n: int, requests: int) -> float:
    """Baseline: aiohttp's ClientSession reading each answer, parsing nothing."""
    import aiohttp

    from llmlat._apis import get_endpoint

    endpoint = get_endpoint("openai-chat")
    target = endpoint.url(url)
    body = json.dumps(endpoint.body(PAYLOAD, model="bench")).encode()
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:

        async def worker(count: int) -> None:
            for _ in range(count):
                async with session.post(target, data=body, headers=headers) as resp:
                    while await resp.content.readany():
                        pass
                    assert resp.status == 200

        return await _closed_loop(worker, n, requests)


class _Reader(asyncio.Protocol):
    """The floor: a connection that only notes each read's time and spots the body's end."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.done: asyncio.Future | None = None

    def data_received(self, data: bytes) -> None:
        time.perf_counter_ns()
        if data.endswith(b"0\r\n\r\n") and self.done is not None:
            self.done.set_result(None)


async def floor_loop(url: str, n: int, requests: int) -> float:
    """What any asyncio client pays: the loop, the syscalls, one Python call per read."""
    loop = asyncio.get_running_loop()
    host, port = url.split("//")[1].split(":")
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    free = [(await loop.create_connection(_Reader, host, int(port)))[1] for _ in range(n)]

    async def worker(count: int) -> None:
        conn = free.pop()
        for _ in range(count):
            conn.done = loop.create_future()
            conn.transport.write(request)
            await conn.done
        free.append(conn)

    try:
        return await _closed_loop(worker, n, requests)
    finally:
        for conn in free:
            conn.transport.close()


async def asweep_cpu(url: str, n: int, requests: int) -> float:
    import llmlat

    result = await llmlat.asweep(
        PROMPT, url=url, model="bench", concurrency=[n], requests=requests, retries=0,
        progress=False,
    )  # fmt: skip
    assert result.requests["ok"].all()
    return float(result.levels["cpu_s"].iloc[0]) / requests * 1e3


async def aiohttp_ttft(url: str, n: int, requests: int, run_id: str) -> pd.DataFrame:
    """aiohttp reading the raw stream: perf_counter of the first content event per request."""
    import aiohttp

    from llmlat._apis import get_endpoint

    endpoint = get_endpoint("openai-chat")
    target = endpoint.url(url)
    body = json.dumps(endpoint.body(PAYLOAD, model="bench")).encode()
    rows = []
    ids = iter(range(10**9))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def worker(count: int) -> None:
            for _ in range(count):
                rid = f"{run_id}/{next(ids)}/1"
                headers = {"Content-Type": "application/json", "x-llmlat-request-id": rid}
                t_sent = time.perf_counter()
                first = None
                async with session.post(target, data=body, headers=headers) as resp:
                    async for line in resp.content:
                        if first is None and b'"content"' in line:
                            first = time.perf_counter()
                rows.append((rid, t_sent, first))

        await asyncio.gather(*(worker(1) for _ in range(n)))  # open the connections
        rows.clear()
        await asyncio.gather(*(worker(requests // n) for _ in range(n)))
    return pd.DataFrame(rows, columns=["rid", "t_sent", "t_first_token"]).set_index("rid")


async def accuracy(server: Server, levels: dict[int, int]) -> pd.DataFrame:
    import llmlat

    out = []
    for n, requests in levels.items():
        result = await llmlat.asweep(
            PROMPT, url=server.url, model="bench", concurrency=[n], requests=requests,
            warmup=n, retries=0, progress=False, run_id=f"acc{n}",
        )  # fmt: skip
        req = result.requests[(result.requests["phase"] == "measure") & result.requests["ok"]]
        assert req["connect_s"].isna().all(), "connect not excluded"
        t0 = result.meta["t0_perf_s"]
        log = server.log()
        keys = req["run_id"] + "/" + req["request_id"].astype(str) + "/1"
        srv = log.loc[keys.to_numpy()]
        server_ttft = (srv["t_first_token"] - srv["t_arrival"]).to_numpy()
        sent, first = t0 + req["t_sent"].to_numpy(), t0 + req["t_first_token"].to_numpy()
        errs = {
            "llmlat ttft_s": (req["ttft_s"].to_numpy() - server_ttft) * 1e3,
            "llmlat from t_sent": (first - sent - server_ttft) * 1e3,
            # one clock on both sides: where the error arises
            "  client write -> server": (srv["t_arrival"].to_numpy() - sent) * 1e3,
            "  server write -> client": (first - srv["t_first_token"].to_numpy()) * 1e3,
        }
        base = await aiohttp_ttft(server.url, n, requests, f"aio{n}")
        srv = server.log().loc[base.index]
        errs["aiohttp (raw stream)"] = (
            (base["t_first_token"] - base["t_sent"]) - (srv["t_first_token"] - srv["t_arrival"])
        ).to_numpy() * 1e3
        for how, err in errs.items():
            out.append(
                {
                    "in_flight": n,
                    "client": how,
                    "n": len(err),
                    "server_ttft_p50_ms": np.median(server_ttft) * 1e3,
                    "err_p50_ms": np.percentile(err, 50),
                    "err_p99_ms": np.percentile(err, 99),
                }
            )
    return pd.DataFrame(out)


MEMORY_CODE = """
import asyncio, resource, sys
import llmlat

def peak_mb():  # VmHWM: this process image's own peak (ru_maxrss keeps the forking parent's)
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 1024

_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
import llmlat._engine  # what a sweep loads before measuring (pandas comes with the result)
before = peak_mb()
result = llmlat.sweep("Say something.", url=sys.argv[1], model="bench", concurrency=[5000],
                      requests=5000, retries=0, progress=False, timeout_s=120)
ok = int(result.requests["ok"].sum())
print(before, peak_mb(), ok, result.requests["error"].dropna().head(3).tolist())
"""


def memory(url: str, core: int) -> tuple[float, float, int, str]:
    cmd = ["taskset", "-c", str(core), sys.executable, "-c", MEMORY_CODE, url]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split(" ", 3)
    return float(out[0]), float(out[1]), int(out[2]), out[3].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests and repetitions")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args()
    raise_open_files()
    if args.serve:
        new_loop().run_until_complete(serve(json.loads(args.serve)))
        return
    cores = sorted(os.sched_getaffinity(0))
    server_core, client_core = cores[0], cores[-1]
    if server_core == client_core:
        print("warning: one core only: server and client share it", flush=True)
    os.sched_setaffinity(0, {client_core})
    requests = 2000 if args.quick else 6000
    repeat = 1 if args.quick else 3
    levels = {16: 320, 128: 1280} if args.quick else {16: 800, 128: 2560}
    loop = new_loop()
    print(f"client on core {client_core}, server on core {server_core} (taskset), uvloop")
    print("machine load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))

    print(f"\n1. client CPU per 16-token request, 128 in flight, {requests} requests")
    print(f"   least of {repeat} runs (median in brackets): other work only ever adds")
    server = Server(CPU_SERVER, server_core)
    runs: dict[str, list[float]] = {}
    try:
        for _ in range(repeat):
            for how, make in (
                ("llmlat Client.send (http11)", lambda: llmlat_loop(server.url, 128, requests)),
                ("llmlat asweep, level CPU", lambda: asweep_cpu(server.url, 128, requests)),
                (
                    "llmlat Client.send (aiohttp)",
                    lambda: llmlat_loop(server.url, 128, requests, "aiohttp"),
                ),
                ("aiohttp, no parsing (baseline)", lambda: aiohttp_loop(server.url, 128, requests)),
                ("floor: raw protocol, no parsing", lambda: floor_loop(server.url, 128, requests)),
            ):
                runs.setdefault(how, []).append(loop.run_until_complete(make()))
    finally:
        server.close()
    base = min(runs["aiohttp, no parsing (baseline)"])
    for how, cpus in runs.items():
        print(
            f"   {how:32s} {min(cpus):.4f} ({np.median(cpus):.4f}) ms"
            f"   {min(cpus) / base:.2f}x the baseline"
        )

    print("\n2. TTFT error against the server's log (~20 ms TTFT, 2 ms ITL, connect excluded)")
    server = Server(ACCURACY_SERVER, server_core)
    try:
        table = loop.run_until_complete(accuracy(server, levels))
    finally:
        server.close()
    with pd.option_context("display.width", 200, "display.precision", 2):
        print(table.to_string(index=False))

    print("\n3. memory: a fresh client process, one level of 5,000 in flight")
    server = Server(MEMORY_SERVER, server_core)
    try:
        before, peak, ok, errors = memory(server.url, client_core)
    finally:
        server.close()
    print(
        f"   after imports {before:.0f} MB, peak {peak:.0f} MB; {ok} of 5000 requests ok {errors}"
    )
    print("machine load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
