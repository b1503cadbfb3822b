"""Sharded sweeps (issue 13): throughput from 1 and 2 shard processes, 20,000 streams, Ray start-up.

Client-bound set-up: the canned streaming server of ``bench_client.py`` (16 tokens per answer,
no delay, one write per token) in its own process pinned with ``taskset`` to one core; this
process (the coordinator) and its shard processes, which inherit its affinity, pinned to the
other core. On a two-core machine that leaves the shards one core whatever their number, so
step 2 also runs 2 shards unpinned (over both cores, sharing one with the server) and says so.

Printed:

1. Achieved req/s of a closed-loop level (256 in flight) with ``workers=1`` and ``workers=2``,
   the shards' CPU per request (their levels rows, so the coordinator is left out and shown
   apart), the server's CPU per request (from /proc) to show who is the bottleneck; and on
   paper, 8 and 64 workers at one core each from the measured per-core cost (the server and
   the network assumed to keep up).
2. 20,000 streams in flight over 2 workers (one level of concurrency 20,000, answers of 16
   tokens 50 ms apart), without retries and with the default 3: rows == requests issued, how
   many failed and why (20,000 connects at once meet the listen backlog, net.core.somaxconn).
3. Ray start-up: ``ray.init(num_cpus=2)`` and a one-level sweep on it against the same sweep
   on local processes.

Targets (issue 13): 2 workers >= 1.4x one worker; shard CPU per request grows <= 10% from 1 to
2 workers; nothing lost at 20,000 in flight.

Usage: ``flock /tmp/llmlat-bench.lock python benchmarks/bench_scale.py [--quick] [--sections 2,3]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from contextlib import contextmanager, suppress

import numpy as np
from bench_client import CPU_SERVER, Server, raise_open_files

from llmlat import sweep

STREAM_SERVER = {"tokens": 16, "ttft_s": 0.2, "itl_s": 0.05}
COMMON = {"model": "bench", "retries": 0, "progress": False, "seed": 1}


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def cores(which: set[int]):
    """Run the block (and the shard processes it spawns) on ``which``."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, which)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def throughput(server: Server, workers: int, requests: int) -> dict:
    """One closed-loop level of 256 in flight: req/s, shard and server CPU per request."""
    server_cpu = proc_cpu_s(server.proc.pid)
    own_cpu = time.process_time()
    result = sweep(url=server.url, concurrency=256, requests=requests, workers=workers, **COMMON)
    req, levels = result.requests, result.levels
    assert len(req) == requests and req["ok"].all(), "requests lost or failed"
    span = req["t_end"].max() - levels["t_start"].min()
    return {
        "rps": requests / span,
        "shard_ms": levels["cpu_s"].sum() / requests * 1e3,
        "coordinator_ms": (time.process_time() - own_cpu) / requests * 1e3,
        "server_ms": (proc_cpu_s(server.proc.pid) - server_cpu) / requests * 1e3,
        "cpu_util": levels["cpu_util"].round(2).tolist(),
    }


def many_streams(url: str, streams: int, retries: int) -> str:
    t0 = time.perf_counter()
    options = {**COMMON, "retries": retries}
    result = sweep(url=url, concurrency=streams, requests=streams, workers=2, **options)
    req = result.requests
    lost = streams - len(req)
    failed = int((~req["ok"]).sum())
    errors = req["error"].value_counts().head(3).to_dict()
    retried = int((req["attempts"] > 1).sum())
    peak = result.requests.groupby("shard")["in_flight"].max().sum()
    return (
        f"retries={retries}: {len(req)} rows of {streams} issued ({lost} lost), {failed} failed "
        f"{errors or ''}, {retried} retried; peak in flight {peak} (sum over shards); "
        f"{time.perf_counter() - t0:.1f} s wall"
    )


def ray_startup(url: str) -> str:
    import ray

    options = {"url": url, "concurrency": 16, "requests": 200, **COMMON}
    t0 = time.perf_counter()
    sweep(workers=2, **options)
    local_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    init_s = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        sweep(cluster="ray", workers=2, **options)
        on_ray_s = time.perf_counter() - t0
    finally:
        ray.shutdown()
    return (
        f"ray.init(num_cpus=2) {init_s:.2f} s; the same 200-request sweep on 2 shards: "
        f"local processes {local_s:.2f} s, Ray actors {on_ray_s:.2f} s (+{on_ray_s - local_s:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests and repetitions")
    parser.add_argument("--sections", default="1,2,3", help="which parts to run, e.g. 2,3")
    args = parser.parse_args()
    sections = {int(x) for x in args.sections.split(",")}
    with suppress(ValueError, OSError):  # as root: room for 20,000 sockets in the server too
        resource.setrlimit(resource.RLIMIT_NOFILE, (65536, 65536))
    raise_open_files()
    all_cores = sorted(os.sched_getaffinity(0))
    server_core, client_core = all_cores[0], all_cores[-1]
    requests = 6000 if args.quick else 20000
    repeat = 1 if args.quick else 3
    streams = 4000 if args.quick else 20000
    print(f"{len(all_cores)} cores; server on core {server_core}, coordinator and shards on "
          f"core {client_core} (taskset), uvloop")  # fmt: skip
    print("machine load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))

    if 1 in sections:
        scale(server_core, client_core, requests, repeat)
    if 2 in sections:
        print(f"\n2. {streams} streams in flight over 2 workers (16 tokens, 0.2 s TTFT, 50 ms ITL)")
        server = Server(STREAM_SERVER, server_core)
        try:
            for retries in (0, 3):  # raw, then with the default retries of connection errors
                print("   " + many_streams(server.url, streams, retries))
        finally:
            server.close()
    if 3 in sections:
        print("\n3. Ray start-up")
        server = Server(CPU_SERVER, server_core)
        try:
            print("   " + ray_startup(server.url))
        finally:
            server.close()
    print("machine load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


def scale(server_core: int, client_core: int, requests: int, repeat: int) -> None:
    print(f"\n1. closed loop, 256 in flight, {requests} requests of 16 tokens; best of {repeat}")
    server = Server(CPU_SERVER, server_core)
    runs: dict[str, list[dict]] = {}
    try:
        for _ in range(repeat):
            with cores({client_core}):
                runs.setdefault("1 worker, 1 core", []).append(throughput(server, 1, requests))
                runs.setdefault("2 workers, 1 core", []).append(throughput(server, 2, requests))
            runs.setdefault("2 workers, both cores", []).append(throughput(server, 2, requests))
    finally:
        server.close()
    best = {how: max(r, key=lambda x: x["rps"]) for how, r in runs.items()}
    base = best["1 worker, 1 core"]
    base_total = base["shard_ms"] + base["coordinator_ms"]
    print("   CPU ms per request: client = shards + coordinator; growth against 1 worker")
    for how, r in best.items():
        total = r["shard_ms"] + r["coordinator_ms"]
        print(
            f"   {how:22s} {r['rps']:7.0f} req/s ({r['rps'] / base['rps']:.2f}x)  client "
            f"{total:.3f} ({total / base_total - 1:+.0%}) = shards {r['shard_ms']:.3f} + "
            f"coordinator {r['coordinator_ms']:.3f}; server {r['server_ms']:.3f}; "
            f"shards' cpu_util {r['cpu_util']}"
        )
    per_core = 1e3 / base["shard_ms"]
    print(f"   on paper, one core per shard at {base['shard_ms']:.3f} ms/req: "
          f"1 -> {per_core:.0f}, 8 -> {8 * per_core:.0f}, 64 -> {64 * per_core:.0f} req/s "
          "(if the server, the network and the coordinator keep up)")  # fmt: skip
    coordinator = np.median([r["coordinator_ms"] for r in runs["2 workers, 1 core"]])
    print(f"   the coordinator's own CPU, {coordinator:.3f} ms/req: one core of it merges "
          f"about {1e3 / coordinator:.0f} req/s")  # fmt: skip


if __name__ == "__main__":
    main()
