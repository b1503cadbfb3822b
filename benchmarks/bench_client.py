"""What the measuring client costs and how far off it is, against the simulator on loopback.

The simulator runs in a child process pinned to one core; this process (the llmlat client) is
pinned to the other. Printed:

1. Throughput: zero service time, 16-token streams, 128 in flight, 3,000 requests, driven by
   ``llmlat.asweep`` (the whole engine) and by a bare ``Client.send`` closed loop; requests/s
   and client CPU milliseconds per request (best of three runs, and the median: other work on
   a shared machine only ever slows a run down). The same again against a minimal asyncio server
   that answers a canned 16-token stream, to separate the client's cost from the simulator's.
   Baseline in the same run: a closed loop on aiohttp's ``ClientSession`` that reads each answer
   and parses nothing (what llmlat's client cost before it got its own HTTP/1.1 transport).
2. Accuracy: 32-token streams, about 20 ms to the first token and 2 ms between tokens, at 1, 16
   and 128 in flight: p50 / p99 of (client TTFT - server TTFT) and (client end-to-end - server
   end-to-end), joined per request on ``x-llmlat-request-id`` with the simulator's truth table
   (its times are absolute ``perf_counter`` seconds, the same clock as the client's).
3. Start-up: CPU seconds of a fresh ``python`` that runs a one-request sweep; peak memory.
   Baselines: a fresh ``python`` that does nothing, and one that imports pandas (which the
   result's tables need).

The machine's load average is printed before and after: the accuracy figures mean little when
other processes compete for the two cores.

Targets (issue 3): >= 4,000 requests/s, <= 0.25 ms CPU per request, TTFT p99 error <= 5 ms at
16 in flight and <= 20 ms at 128, start-up < 0.5 s CPU.

Usage: ``python benchmarks/bench_client.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable

import numpy as np
import pandas as pd

# the server's "20 ms to first token": an 18 ms hold before the request joins the batch (it
# does not stall the other sequences, as prefill would), then 2 ms decode steps
ACCURACY_SIM = {
    "slots": 512,
    "t0_s": 0.002,
    "t1_s": 0.0,
    "prefill_per_token_s": 0.0,
    "output_tokens": 32,
    "output_dist": "fixed",
    "p_stall": 1.0,
    "stall_s": 0.018,
}
THROUGHPUT_SIM = {"preset": "instant"}
PROMPT = "Say something."
PAYLOAD = {"messages": [{"role": "user", "content": PROMPT}]}


def pin(core: int) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


# -- servers (child process) -------------------------------------------------------------------
def _canned_response(tokens: int) -> bytes:
    def event(obj: dict) -> bytes:
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    head = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    parts = [event({**head, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})]
    parts += [event({**head, "choices": [{"index": 0, "delta": {"content": "tok "}}]})] * tokens
    parts.append(event({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    usage = {"prompt_tokens": 4, "completion_tokens": tokens, "total_tokens": tokens + 4}
    parts.append(event({**head, "choices": [], "usage": usage}))
    body = b"".join(parts) + b"data: [DONE]\n\n"
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


class _Canned(asyncio.Protocol):
    """Minimal keep-alive HTTP server: every request gets the same 16-token stream."""

    response = _canned_response(16)

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
            at = head.find(b"content-length:")
            size = int(head[at + 15 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
            if len(self.buf) < end + 4 + size:
                return
            self.buf = self.buf[end + 4 + size :]
            self.transport.write(self.response)


async def serve(spec: dict) -> None:
    if spec.get("canned"):
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Canned, "127.0.0.1", 0, backlog=1024)
        print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
        await server.serve_forever()
    from llmlat.sim import Simulator

    async with Simulator(**spec) as sim:
        print(sim.url, flush=True)
        await asyncio.Event().wait()


class Server:
    """A server child process pinned to ``core``."""

    def __init__(self, spec: dict, core: int) -> None:
        cmd = [sys.executable, __file__, "--serve", json.dumps(spec), "--core", str(core)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url:
            raise RuntimeError("the server did not start")

    def truth(self) -> pd.DataFrame:
        with urllib.request.urlopen(self.url + "/llmlat/truth") as resp:
            return pd.DataFrame(json.loads(resp.read()))

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


# -- measurements (this process) ---------------------------------------------------------------
async def sweep_level(url: str, n: int, requests: int, run_id: str, warmup: int = 0):
    import llmlat

    return await llmlat.asweep(
        PROMPT,
        url=url,
        model="bench",
        concurrency=[n],
        requests=requests,
        warmup=warmup,
        retries=0,
        progress=False,
        run_id=run_id,
    )


async def _closed_loop(
    worker: Callable[[int], Awaitable[None]], n: int, requests: int
) -> tuple[float, float]:
    """Open the connections, then time ``n`` workers sending ``requests`` in all.

    Returns (requests/s, CPU ms per request).
    """
    await asyncio.gather(*(worker(4) for _ in range(n)))
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker(requests // n + (i < requests % n)) for i in range(n)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return requests / wall, cpu / requests * 1e3


async def bare_loop(url: str, n: int, requests: int) -> tuple[float, float]:
    """Closed loop of ``n`` workers on Client.send alone: (requests/s, CPU ms per request)."""
    from llmlat.client import Client, RetryPolicy, Target
    from llmlat.schema import Record

    t0 = time.perf_counter_ns()
    target = Target(url, model="bench")
    async with Client(target, RetryPolicy(retries=0), run_id="bare", t0_ns=t0) as client:
        counter = iter(range(10**9))

        async def worker(count: int) -> None:
            for _ in range(count):
                record = Record("bare", n, "concurrency", next(counter))
                record.t_scheduled = (time.perf_counter_ns() - t0) / 1e9
                await client.send(record, PAYLOAD)
                assert record.ok, record.error

        return await _closed_loop(worker, n, requests)


async def aiohttp_loop(url: str, n: int, requests: int) -> tuple[float, float]:
    """Baseline: closed loop on aiohttp's ClientSession, answers read and not parsed."""
    import aiohttp

    from llmlat.apis import get_endpoint

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


async def throughput(url: str, requests: int, repeat: int) -> dict[str, list[tuple[float, float]]]:
    """(requests/s, CPU ms per request) of each way of driving the client, ``repeat`` times."""
    out: dict[str, list[tuple[float, float]]] = {}
    await sweep_level(url, 128, 512, "warm")  # connections, code paths, allocator
    for i in range(repeat):
        cpu, wall = time.process_time(), time.perf_counter()
        result = await sweep_level(url, 128, requests, f"tput{i}")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert result.requests["ok"].all(), result.requests["error"].dropna().head()
        level = result.levels.iloc[0]
        span = level["t_end"] - level["t_start"]
        figures = {
            "asweep, level only": (requests / span, level["cpu_s"] / requests * 1e3),
            "asweep, whole call": (requests / wall, cpu / requests * 1e3),
            "Client.send loop": await bare_loop(url, 128, requests),
            "aiohttp, no parsing": await aiohttp_loop(url, 128, requests),
        }
        for how, pair in figures.items():
            out.setdefault(how, []).append(pair)
    return out


async def accuracy(server: Server, levels: dict[int, int], tag: str = "") -> pd.DataFrame:
    rows = []
    for n, requests in levels.items():
        result = await sweep_level(server.url, n, requests, f"acc{tag}{n}", warmup=n)
        t0 = result.meta["t0_perf_s"]
        req = result.requests[(result.requests["phase"] == "measure") & result.requests["ok"]]
        truth = server.truth().set_index("client_request_id")
        keys = req["run_id"] + "/" + req["request_id"].astype(str) + "/1"
        tr = truth.loc[keys.to_numpy()]
        server_ttft = tr["t_first_token"].to_numpy() - tr["t_arrival"].to_numpy()
        server_e2e = tr["t_end"].to_numpy() - tr["t_arrival"].to_numpy()
        ttft_err = (req["ttft_s"].to_numpy() - server_ttft) * 1e3
        e2e_err = (req["latency_s"].to_numpy() - server_e2e) * 1e3
        send_lag = (tr["t_arrival"].to_numpy() - (t0 + req["t_sent"].to_numpy())) * 1e3
        # from the server writing the first token to the client having parsed it
        recv_lag = (t0 + req["t_first_token"].to_numpy() - tr["t_first_token"].to_numpy()) * 1e3
        rows.append(
            {
                "in_flight": n,
                "n": len(req),
                "server_ttft_p50_ms": np.median(server_ttft) * 1e3,
                "ttft_err_p50_ms": np.percentile(ttft_err, 50),
                "ttft_err_p99_ms": np.percentile(ttft_err, 99),
                "e2e_err_p50_ms": np.percentile(e2e_err, 50),
                "e2e_err_p99_ms": np.percentile(e2e_err, 99),
                "send_lag_p99_ms": np.percentile(send_lag, 99),
                "first_token_lag_p99_ms": np.percentile(recv_lag, 99),
                "client_cpu_util": result.levels.iloc[0]["cpu_util"],
            }
        )
    return pd.DataFrame(rows)


def startup_cpu(url: str, repeat: int) -> dict[str, float]:
    """CPU seconds of fresh interpreters (the least of ``repeat`` runs each)."""
    codes = {
        "python doing nothing": "pass",
        "python + import pandas": "import pandas",
        "python + import llmlat.client": "import llmlat.client",
        "python + one-request llmlat.sweep": (
            f"import llmlat; r = llmlat.sweep('hi', url={url!r}, model='bench', "
            "concurrency=[1], requests=1, progress=False); assert r.requests['ok'].all()"
        ),
    }
    out = {}
    for label, code in codes.items():
        runs = []
        for _ in range(repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            runs.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        out[label] = min(runs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--core", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        pin(args.core)
        new_loop().run_until_complete(serve(json.loads(args.serve)))
        return
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    server_core, client_core = cores[0], cores[-1]
    if server_core == client_core:
        print("warning: one core only: server and client share it", flush=True)
    pin(client_core)
    requests = 1000 if args.quick else 3000
    repeat = 1 if args.quick else 3
    levels = {1: 60, 16: 320, 128: 1280} if args.quick else {1: 150, 16: 800, 128: 2560}
    loop = new_loop()
    print(f"client on core {client_core}, server on core {server_core}, {loop.__class__.__name__}")
    print("machine load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))

    print(f"\n1. throughput: zero service time, 16-token streams, 128 in flight, {requests} req")
    print(f"   best of {repeat} runs (median in brackets)")
    for label, spec in (("simulator", THROUGHPUT_SIM), ("canned server", {"canned": True})):
        server = Server(spec, server_core)
        try:
            figures = loop.run_until_complete(throughput(server.url, requests, repeat))
        finally:
            server.close()
        for how, runs in figures.items():
            rates, cpus = np.array(runs).T
            print(
                f"   {label:14s} {how:20s} {rates.max():6,.0f} ({np.median(rates):6,.0f}) req/s"
                f"   {cpus.min():.3f} ({np.median(cpus):.3f}) ms CPU/request"
            )

    print("\n2. accuracy: 32-token streams, ~20 ms to first token, 2 ms between tokens")
    server = Server(ACCURACY_SIM, server_core)
    try:
        table = loop.run_until_complete(accuracy(server, levels))
        with pd.option_context("display.width", 200, "display.precision", 2):
            print(table.to_string(index=False))
        print(f"\n3. start-up (least of {repeat} runs) and memory")
        startup = startup_cpu(server.url, repeat)
    finally:
        server.close()
    for label, seconds in startup.items():
        print(f"   fresh {label:34s} {seconds:.2f} s CPU")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"   peak memory of this client process: {peak:.0f} MiB")
    print("machine load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
