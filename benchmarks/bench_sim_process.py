"""The built-in simulator in a child process versus on the client's own event loop.

Sweeps two replicas both ways: ``instant`` (no service time: throughput is bounded by the CPU
of client and server) and a batch of 64 slots with 2 ms decode steps (about 1,000 requests/s),
at concurrency 64, and prints for each the measured throughput and latency p50 / p95, the
client's event-loop lag p99 and CPU share (from the levels table), and the ratios of the
same-loop figures to the child-process ones. When client and server share a loop, the server's
work shows up as client lag and inflated latency; in a child process it does not.
"""

from __future__ import annotations

import llmlat

REPLICAS = {
    "instant": "instant",
    "batch 64 x 2 ms": {"slots": 64, "t0_s": 0.002, "t1_s": 0.0, "output_tokens": 8},
}
OPTIONS = {"concurrency": [64], "requests": 4000, "warmup": 64, "progress": False, "seed": 1}


def measure(replica: object, in_child: bool) -> dict[str, float]:
    result = llmlat.sweep("hi", simulator=replica, simulator_process=in_child, **OPTIONS)
    row = result.summary().iloc[0]
    levels = result.levels.iloc[0]
    return {
        "throughput_rps": float(row["throughput_rps"]),
        "latency_p50_s": float(row["latency_p50_s"]),
        "latency_p95_s": float(row["latency_p95_s"]),
        "loop_lag_p99_s": float(levels["loop_lag_p99_s"]),
        "cpu_util": float(levels["cpu_util"]),
    }


def main() -> None:
    for name, replica in REPLICAS.items():
        child, inside = measure(replica, True), measure(replica, False)
        print(f"\n{name:16} {'child process':>14} {'same loop':>12} {'same/child':>11}")
        for key in child:
            ratio = inside[key] / child[key] if child[key] else float("nan")
            print(f"{key:16} {child[key]:14.4g} {inside[key]:12.4g} {ratio:11.3g}")


if __name__ == "__main__":
    main()
