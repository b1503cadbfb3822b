"""Bias and 95% coverage of a level's rates on exact simulations, over many seeds.

Each level is an exact M/M/c run as llmlat runs it (``llmlat._synth.mgc_sweep``: the level
starts empty, the start-up in the data). Per cell it prints the mean relative error of
``throughput_rps`` (:func:`llmlat.stats.throughput_interval`) against the truth, with twice its
standard error over the seeds, and how often the 95% interval holds the truth; and the same
error for ``achieved_rate_rps`` (:func:`llmlat.stats.send_rate`) against the throughput of a
closed level and the arrival rate of an open one (NaN for closed levels that fail requests).
Truths: the closed M/M/c with think time (:func:`llmlat.queueing.closed_mmc`), the arrival
rate below capacity, or the middle half of a level 40-200 times as long (capped, overloaded,
refusing closed levels).

    .venv/bin/python benchmarks/bench_level_rates.py [--seeds 300] [--groups closed open think fail]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import pandas as pd

from llmlat import stats
from llmlat._synth import mgc_sweep
from llmlat.queueing import closed_mmc

# (servers, clients, think s, length factor): 30-320 requests
CLOSED = [(1, 10, 0.0, 0.3), (4, 10, 0.0, 0.3), (16, 10, 0.0, 0.3), (16, 32, 0.0, 1.0),
          (4, 8, 0.0, 1.0)]  # fmt: skip
THINK = [(c, n, 2.0, length) for c in (1, 4, 16) for n in (2, 8, 32) for length in (0.3, 1.0)]
# (servers, arrival rate, arrivals, queue cap): mean service 1 s
OPEN = [(16, 10.0, 50, None), (16, 10.0, 200, None), (16, 10.0, 1000, None),
        (1, 0.7, 50, None), (1, 0.7, 200, None), (4, 3.0, 100, None), (64, 50.0, 200, None),
        (16, 19.2, 1000, 32), (16, 24.0, 400, None)]  # fmt: skip
# (servers, clients, queue cap, think s, length factor): closed levels that fail requests
FAIL = [(4, 12, 2, 1.0, 1.0), (4, 12, 2, 1.0, 0.3), (8, 24, 4, 2.0, 0.5), (2, 10, 1, 0.5, 1.0)]


def rates(frame: pd.DataFrame, kind: str, level: float) -> tuple[float, float, float, float]:
    """Return ``(throughput, low, high, send rate)`` of one level as the summary gives them."""
    start, end = stats.row_times(frame)
    phase = stats.phases(frame)
    clients = stats.closed_clients(kind, level)
    x, low, high = stats.throughput_interval(
        start, end, stats.ok_mask(frame), phase == "transient", phase != "warmup",
        min_batch=stats.level_batch(kind, level), clients=clients,
        workers=stats.column(frame, "worker"),
    )  # fmt: skip
    return x, low, high, stats.send_rate(frame, phase != "warmup", clients)


def long_truth(kind: str, level: float, c: int, length: float, **kw) -> float:
    """Return the completion rate over the middle half of a long level."""
    frame = mgc_sweep(kind, [level], 1.0, c, seed=10**6, length=length, **kw)
    ends = np.sort(frame.loc[frame["ok"], "t_end"].to_numpy())
    k = len(ends)
    return (k // 2) / (ends[3 * k // 4] - ends[k // 4])


def cell(name: str, seeds: int, make, kind: str, level: float, truth: float, sends: float) -> None:
    """Print one cell's throughput and send-rate errors over the seeds."""
    out = np.array([rates(make(s), kind, level) for s in range(seeds)])
    err, send = out[:, 0] / truth - 1, out[:, 3] / sends - 1
    cover = np.mean((out[:, 1] <= truth) & (truth <= out[:, 2]))

    def fmt(e: np.ndarray) -> str:
        return f"{np.mean(e):+.3f} +-{2 * np.std(e, ddof=1) / math.sqrt(len(e)):.3f}"

    print(f"{name:36s} throughput {fmt(err)} cover {cover:.3f}  send rate {fmt(send)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=300)
    parser.add_argument("--groups", nargs="*", default=["closed", "open", "think", "fail"])
    args = parser.parse_args()
    n = args.seeds
    for group in args.groups:
        if group in ("closed", "think"):
            for c, big_n, z, length in CLOSED if group == "closed" else THINK:
                truth = float(closed_mmc([big_n], 1.0, c, think_s=z)["throughput_rps"].iloc[0])
                k = int(length * max(100, 10 * big_n))
                cell(
                    f"{group} c{c} N{big_n} Z{z:g} k{k}", n,
                    lambda s, c=c, big_n=big_n, z=z, length=length: mgc_sweep(
                        "concurrency", [big_n], 1.0, c, seed=s, length=length, think_s=z
                    ),
                    "concurrency", big_n, truth, truth,
                )  # fmt: skip
        elif group == "open":
            for c, lam, arrivals, cap in OPEN:
                length = arrivals / (lam * max(10.0, 1000 / lam))
                past = cap is not None or lam >= c
                truth = long_truth("rate", lam, c, 40, queue_cap=cap) if past else lam
                cell(
                    f"open c{c} lam{lam:g} n{arrivals} cap{cap}", n,
                    lambda s, c=c, lam=lam, length=length, cap=cap: mgc_sweep(
                        "rate", [lam], 1.0, c, seed=s, length=length, queue_cap=cap
                    ),
                    "rate", lam, truth, lam,
                )  # fmt: skip
        elif group == "fail":
            for c, big_n, cap, z, length in FAIL:
                truth = long_truth("concurrency", big_n, c, 200, queue_cap=cap, think_s=z)
                cell(
                    f"fail c{c} N{big_n} cap{cap} Z{z:g} x{length:g}", n,
                    lambda s, c=c, big_n=big_n, cap=cap, z=z, length=length: mgc_sweep(
                        "concurrency", [big_n], 1.0, c, seed=s, length=length, queue_cap=cap,
                        think_s=z,
                    ),
                    "concurrency", big_n, truth, math.nan,
                )  # fmt: skip


if __name__ == "__main__":
    main()
