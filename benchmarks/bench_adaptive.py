"""Adaptive sweeps on seeded truths: does ``concurrency="auto"`` / ``rate="auto"`` find the knee?

Each seed drives :class:`llmlat._adaptive.AdaptiveSearch` with exact simulations of whole
levels (``llmlat._synth.mgc_sweep``: c exponential FCFS servers with mu = 1, each level started
empty with its default length; no HTTP), so the knee is known: N* = c for a closed loop without
think time, the capacity c mu for an open loop. Per cell it prints the median and range over
the seeds of the knee over its truth, how many seeds stopped where they should (throughput
levelled off / a level served clearly less than offered), the levels run, and, open loop, the
highest placed level over the capacity (placements must stay below 1).

    nice -n 10 .venv/bin/python benchmarks/bench_adaptive.py
    nice -n 10 .venv/bin/python benchmarks/bench_adaptive.py --seeds 40
"""

from __future__ import annotations

import argparse
import contextlib
import io

import numpy as np

from llmlat._adaptive import AdaptiveSearch
from llmlat._synth import mgc_sweep
from llmlat.config import SweepConfig


def run(kind: str, c: int, seed: int) -> AdaptiveSearch:
    """Run one search on exact levels of ``c`` servers (mu = 1)."""
    if kind == "concurrency":
        config = SweepConfig(concurrency="auto", seed=seed)
        length = 1.0
    else:
        config = SweepConfig(rate="auto", start_rate=0.1, seed=seed)
        length = 0.5
    search = AdaptiveSearch(config)

    def rows(value: float) -> tuple:
        return mgc_sweep(kind, [value], mu=1.0, c=c, seed=seed, length=length), None

    with contextlib.redirect_stderr(io.StringIO()):  # the search's one-line notices
        for _ in search.plans(rows, lambda: 0.0):
            pass
    return search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=12)
    args = parser.parse_args()
    print(f"{'cell':<18}{'knee/truth':>12}{'range':>18}{'stopped ok':>12}{'levels':>8}{'top':>7}")
    for kind, c, expect in [
        ("concurrency", 4, "throughput"),
        ("concurrency", 8, "throughput"),
        ("concurrency", 16, "throughput"),
        ("rate", 2, "capacity"),
        ("rate", 8, "capacity"),
    ]:
        searches = [run(kind, c, seed) for seed in range(args.seeds)]
        ratio = np.array([s.knee / c for s in searches])
        ok = sum(s.stopped_by == expect for s in searches)
        levels = np.mean([len(s.values) for s in searches])
        top = max((max(s.placed, default=0.0) / c for s in searches), default=np.nan)
        top_text = f"{top:7.2f}" if kind == "rate" else f"{'':>7}"
        print(
            f"{kind + f' c={c}':<18}{np.median(ratio):12.3f}"
            f"{f'[{ratio.min():.3f}, {ratio.max():.3f}]':>18}{f'{ok}/{len(searches)}':>12}"
            f"{levels:8.1f}{top_text}"
        )


if __name__ == "__main__":
    main()
