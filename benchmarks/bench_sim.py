"""Capacity of the built-in simulator on this machine, next to a minimal asyncio server.

The server runs in a child process pinned to one core, the load generator in another child
pinned to a different core (a raw asyncio keep-alive HTTP/1.1 client, so it is not the
bottleneck). Each server is measured with zero service time (preset ``instant``):
non-streamed and 16-token streamed chat completions, then a minimal asyncio HTTP server that
answers a fixed response, as the baseline (a raw ``asyncio.Protocol`` on uvloop, and the same
with asyncio streams on the default loop), and aiohttp answering the same fixed response (the
floor of any aiohttp server).

Printed per case: requests/s answered; the server's CPU time per request (from /proc); how busy
the server process was (CPU seconds over wall seconds: well below 100% means other processes
held its core, so the rate understates it); and requests/s per core = 1 / CPU per request, what
one fully available core sustains.

    .venv/bin/python benchmarks/bench_sim.py [--seconds 5] [--connections 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

from aiohttp import web

BODY = {"model": "bench", "messages": [{"role": "user", "content": "Say something."}]}
BASELINE_BODY = b"data: " + b"x" * 200 + b"\n\n"


def pin(core: int) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


# -- servers (child process) -------------------------------------------------------------
class Baseline(asyncio.Protocol):
    """Answers every request with a fixed response: the floor of what asyncio can do."""

    RESPONSE = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
        % (len(BASELINE_BODY), BASELINE_BODY)
    )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].lower()
            i = head.find(b"content-length:")
            length = int(head[i + 15 :].split(b"\r\n", 1)[0]) if i >= 0 else 0
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            self.transport.write(self.RESPONSE)


async def streams_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The same fixed answer with asyncio streams (the usual way to write a small server)."""
    try:
        while True:
            head = (await reader.readuntil(b"\r\n\r\n")).lower()
            i = head.find(b"content-length:")
            await reader.readexactly(int(head[i + 15 :].split(b"\r\n", 1)[0]) if i >= 0 else 0)
            writer.write(Baseline.RESPONSE)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


async def aiohttp_hello(request: web.Request) -> web.Response:
    """The same fixed answer from aiohttp: the floor of any aiohttp server."""
    await request.read()
    return web.Response(body=BASELINE_BODY, content_type="text/event-stream")


async def serve(kind: str) -> None:
    loop = asyncio.get_running_loop()
    if kind == "aiohttp":
        app = web.Application()
        app.router.add_post("/v1/chat/completions", aiohttp_hello)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        print(f"http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
        await asyncio.Event().wait()
    if kind == "streams":
        server = await asyncio.start_server(streams_client, "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        print(f"http://127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()
    if kind == "baseline":
        server = await loop.create_server(Baseline, "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        print(f"http://127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()
    from llmlat.sim import Simulator

    async with Simulator(preset="instant") as sim:
        print(sim.url, flush=True)
        await asyncio.Event().wait()


# -- load generator (child process) ------------------------------------------------------
class Conn(asyncio.Protocol):
    """One keep-alive connection sending requests back to back."""

    def __init__(self, request: bytes, counter: list[int], done: asyncio.Future) -> None:
        self.request = request
        self.counter = counter
        self.done = done
        self.buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        transport.write(self.request)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"server closed a connection: {exc}"))

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self._complete():
            self.counter[0] += 1
            self.transport.write(self.request)

    def _complete(self) -> bool:
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = buf[:end].lower()
        if not head.startswith(b"http/1.1 200"):
            raise RuntimeError(head.split(b"\r\n", 1)[0].decode())
        i = head.find(b"content-length:")
        if i >= 0:
            stop = end + 4 + int(head[i + 15 :].split(b"\r\n", 1)[0])
        else:  # chunked: walk the chunks to the terminating one
            pos = end + 4
            while True:
                line_end = buf.find(b"\r\n", pos)
                if line_end < 0:
                    return False
                size = int(buf[pos:line_end], 16)
                pos = line_end + 2 + size + 2
                if pos > len(buf):
                    return False
                if size == 0:
                    break
            stop = pos
        if len(buf) < stop:
            return False
        self.buf = buf[stop:]
        return True


async def generate(url: str, path: str, body: bytes, connections: int, seconds: float) -> None:
    host, port = url.removeprefix("http://").split(":")
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    loop = asyncio.get_running_loop()
    counter = [0]
    done = loop.create_future()
    transports = []
    for _ in range(connections):
        transport, _ = await loop.create_connection(
            lambda: Conn(request, counter, done), host, int(port)
        )
        transports.append(transport)
    await asyncio.sleep(min(1.0, seconds / 4))  # warm up
    start_count, t0 = counter[0], time.perf_counter()
    await asyncio.wait([done], timeout=seconds)
    if done.done():
        done.result()  # a connection broke: fail loudly
    done.set_result(None)  # closing our own connections below is not a failure
    rate = (counter[0] - start_count) / (time.perf_counter() - t0)
    for transport in transports:
        transport.close()
    print(json.dumps({"rate": rate, "total": counter[0]}), flush=True)


# -- driver ------------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(kind: str, body: bytes, args: argparse.Namespace) -> dict[str, float]:
    """Run one server and one load generator; return rate, server CPU per request and use."""
    me = [sys.executable, __file__]
    server = subprocess.Popen([*me, "--serve", kind], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        cpu0, wall0 = cpu_seconds(server.pid), time.perf_counter()
        gen = subprocess.run(
            [
                *me,
                "--generate",
                url,
                "--body",
                body.decode(),
                "--seconds",
                str(args.seconds),
                "--connections",
                str(args.connections),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        cpu, wall = cpu_seconds(server.pid) - cpu0, time.perf_counter() - wall0
    finally:
        server.terminate()
        server.wait()
    out = json.loads(gen.stdout.strip().splitlines()[-1])
    return {"rate": out["rate"], "cpu_us": cpu / out["total"] * 1e6, "busy": cpu / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--serve", choices=["sim", "baseline", "streams", "aiohttp"])
    parser.add_argument("--generate")
    parser.add_argument("--path", default="/v1/chat/completions")
    parser.add_argument("--body", default="")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    if args.serve:
        pin(cores[0])
        loop = asyncio.new_event_loop() if args.serve == "streams" else new_loop()
        loop.run_until_complete(serve(args.serve))
        return
    if args.generate:
        pin(cores[-1])
        loop = new_loop()
        loop.run_until_complete(
            generate(args.generate, args.path, args.body.encode(), args.connections, args.seconds)
        )
        return
    if len(cores) < 2:
        print("warning: fewer than 2 cores: server and load generator share one", flush=True)
    cases = [
        ("simulator, not streamed", "sim", json.dumps(BODY).encode()),
        ("simulator, 16-token stream", "sim", json.dumps({**BODY, "stream": True}).encode()),
        ("minimal asyncio server", "baseline", b"{}"),
        ("asyncio streams, no uvloop", "streams", b"{}"),
        ("aiohttp hello world", "aiohttp", b"{}"),
    ]
    print(f"server on core {cores[0]}, load generator on core {cores[-1]}, zero service time,")
    print(f"{args.connections} keep-alive connections, {args.seconds:g} s per case")
    print(f"load average before: {os.getloadavg()[0]:.2f} (other processes share these cores)")
    print(
        f"{'':30s} {'req/s':>9s} {'server CPU':>14s} {'server busy':>12s} {'req/s per core':>15s}"
    )
    results = {}
    for label, kind, body in cases:
        r = results[label] = measure(kind, body, args)
        print(
            f"{label:30s} {r['rate']:9,.0f} {r['cpu_us']:9.1f} us/req {r['busy']:11.0%}"
            f" {1e6 / r['cpu_us']:15,.0f}"
        )
    base = results["minimal asyncio server"]["rate"]
    floor = results["aiohttp hello world"]["rate"]
    for label in ("simulator, not streamed", "simulator, 16-token stream"):
        rate = results[label]["rate"]
        print(
            f"{label:30s} {rate / base:6.0%} of the minimal asyncio server's req/s,"
            f" {rate / floor:4.0%} of aiohttp hello world's"
        )
    print("req/s per core = 1 / server CPU per request: the rate one fully available core allows")


if __name__ == "__main__":
    main()
