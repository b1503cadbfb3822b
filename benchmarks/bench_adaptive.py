"""Adaptive sweeps on seeded truths: does ``concurrency="auto"`` / ``rate="auto"`` find the knee?

Each seed drives :class:`llmlat._adaptive.AdaptiveSearch` with exact simulations of whole
levels (no HTTP), each level started empty with its default length, so the truth is known.

M/M/c cells (``llmlat._synth.mgc_sweep``: c exponential FCFS servers with mu = 1): the knee is
N* = c for a closed loop without think time, the capacity c mu for an open loop. Per cell it
prints the median and range over the seeds of the knee over its truth, how many seeds stopped
where they should (throughput levelled off / a level served clearly less than offered), the
levels run, open loop, the highest placed level over the capacity (placements must stay
below 1), and in how many seeds the levels went around a plateau's start rather than the knee
(the batching rule: must be none).

Batching cells (``llmlat._synth.batch_closed_requests``: continuous batching, step
``0.02 + 0.002 * batch`` s, 40 tokens a request, the calibration's truth): a closed loop's N*
is where the asymptotes cross, far below the slot cap, so the levels must also land around the
cap, where throughput levels off. Per cell: the knee N*, the plateau's start the search found
(median; "-": none), the placed levels (seed 0), the requests of the sweep (mean), and the
batch fit on what the search ran, from the latency alone (a non-streamed API) and with the
decode step times (streamed): how many seeds gave the slot cap exactly (a 95% set of one),
in a set holding it, not identified (with a lower bound that holds), or wrongly (a set, or
a lower bound, that excludes it), and the median relative error of t0 and t1.
``limit 64``: ``max_concurrency=64`` stops growth just past the cap, as a queue cap's 429s
drop the top level of a real replica.

    nice -n 10 .venv/bin/python benchmarks/bench_adaptive.py
    nice -n 10 .venv/bin/python benchmarks/bench_adaptive.py --seeds 40 --cells batch
"""

from __future__ import annotations

import argparse
import contextlib
import io
import warnings

import numpy as np
import pandas as pd

import llmlat
from llmlat._adaptive import AdaptiveSearch
from llmlat._loadshapes import default_length
from llmlat._synth import batch_closed_requests, mgc_sweep
from llmlat.config import SweepConfig

#: The batching truth (as benchmarks/bench_calibration.py's batch cells).
T0, T1, TOKENS = 0.02, 0.002, 40
MMC_CELLS = [
    ("concurrency", 4, "throughput"),
    ("concurrency", 8, "throughput"),
    ("concurrency", 16, "throughput"),
    ("rate", 2, "capacity"),
    ("rate", 8, "capacity"),
]
#: Slot cap and the search's max_concurrency (None: the default).
BATCH_CELLS = [(8, None), (24, None), (32, None), (128, None), (24, 64), (32, 64)]


def _drive(config: SweepConfig, level) -> tuple[AdaptiveSearch, pd.DataFrame]:
    """Run one search, each level's rows from ``level(value)``; return it and every row."""
    search = AdaptiveSearch(config)
    ran: dict[float, pd.DataFrame] = {}

    def rows(value: float) -> tuple:
        ran[value] = level(value)
        return ran[value], None

    with contextlib.redirect_stderr(io.StringIO()):  # the search's one-line notices
        for _ in search.plans(rows, lambda: 0.0):
            pass
    return search, pd.concat([ran[v] for v in search.values], ignore_index=True)


def run(kind: str, c: int, seed: int) -> AdaptiveSearch:
    """Run one search on exact levels of ``c`` servers (mu = 1)."""
    if kind == "concurrency":
        config = SweepConfig(concurrency="auto", seed=seed)
        length = 1.0
    else:
        config = SweepConfig(rate="auto", start_rate=0.1, seed=seed)
        length = 0.5
    search, _ = _drive(
        config, lambda v: mgc_sweep(kind, [v], mu=1.0, c=c, seed=seed, length=length)
    )
    return search


def run_batch(slots: int, limit: int | None, seed: int) -> tuple[AdaptiveSearch, pd.DataFrame]:
    """Run one closed search on exact streamed levels of a batching server."""

    def level(value: float) -> pd.DataFrame:
        n = int(value)
        return batch_closed_requests(
            [n],
            slots,
            T0,
            T1,
            TOKENS,
            n=default_length("concurrency", n)[0] or 0,
            seed=seed * 1000 + n,
            warmup=0,
            drain=True,  # a sweep's closed level ends as its last requests finish
        )

    return _drive(SweepConfig(concurrency="auto", max_concurrency=limit, seed=seed), level)


def _slots(data: pd.DataFrame, slots: int) -> tuple[str, float, float]:
    """Fit ``batch``: the slot cap's verdict, t0's and t1's relative errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = llmlat.fit(data, model="batch")
    lo, hi = fit.conf_int().loc["slots"]  # not identified: [the bound the data give, inf]
    if not lo <= slots <= hi:
        verdict = "wrong"
    elif not fit.capacity_identified:
        verdict = "unident"
    else:
        verdict = "exact" if lo == hi else "set"
    return verdict, fit.params["t0_s"] / T0 - 1, fit.params["t1_s"] / T1 - 1


def mmc_table(seeds: int) -> None:
    print(
        f"{'cell':<18}{'knee/truth':>12}{'range':>18}{'stopped ok':>12}{'levels':>8}{'top':>7}"
        f"{'plateau':>9}"
    )
    for kind, c, expect in MMC_CELLS:
        searches = [run(kind, c, seed) for seed in range(seeds)]
        ratio = np.array([s.knee / c for s in searches])
        ok = sum(s.stopped_by == expect for s in searches)
        levels = np.mean([len(s.values) for s in searches])
        top = max((max(s.placed, default=0.0) / c for s in searches), default=np.nan)
        top_text = f"{top:7.2f}" if kind == "rate" else f"{'':>7}"
        # seeds whose levels went around a plateau's start rather than N* (batching only)
        plateau = sum(s.plateau == s.plateau for s in searches)
        print(
            f"{kind + f' c={c}':<18}{np.median(ratio):12.3f}"
            f"{f'[{ratio.min():.3f}, {ratio.max():.3f}]':>18}{f'{ok}/{len(searches)}':>12}"
            f"{levels:8.1f}{top_text}{f'{plateau}/{len(searches)}':>9}"
        )


def batch_table(seeds: int) -> None:
    verdicts = ("exact", "set", "unident", "wrong")
    print(
        f"{'cell':<18}{'N*':>6}{'plateau':>8}  {'placed (seed 0)':<22}{'requests':>9}"
        f"  {'latency only: ' + '/'.join(verdicts):<38}{'t0':>7}{'t1':>7}"
        f"  {'streamed':<12}{'t0':>7}{'t1':>7}"
    )
    for slots, limit in BATCH_CELLS:
        runs = [run_batch(slots, limit, seed) for seed in range(seeds)]
        plain = [_slots(d.drop(columns=["itl_mean_s"]), slots) for _, d in runs]
        streamed = [_slots(d, slots) for _, d in runs]
        searches = [s for s, _ in runs]
        plateau = np.array([s.plateau for s in searches])
        plateau_text = f"{np.nanmedian(plateau):g}" if np.isfinite(plateau).any() else "-"
        placed = ",".join(f"{v:g}" for v in searches[0].placed)
        cells = []
        for fits in (plain, streamed):
            count = "/".join(str(sum(f[0] == v for f in fits)) for v in verdicts)
            t0 = np.median([abs(f[1]) for f in fits])
            t1 = np.median([abs(f[2]) for f in fits])
            cells.append((count, t0, t1))
        name = f"batch s{slots}" + (f" limit {limit}" if limit else "")
        print(
            f"{name:<18}{np.median([s.knee for s in searches]):6.3g}{plateau_text:>8}  "
            f"{placed:<22}{np.mean([len(d) for _, d in runs]):9.0f}"
            f"  {cells[0][0]:<38}{cells[0][1]:7.1%}{cells[0][2]:7.1%}"
            f"  {cells[1][0]:<12}{cells[1][1]:7.1%}{cells[1][2]:7.1%}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--cells", choices=("all", "mmc", "batch"), default="all")
    args = parser.parse_args()
    if args.cells in ("all", "mmc"):
        mmc_table(args.seeds)
    if args.cells in ("all", "batch"):
        batch_table(args.seeds)


if __name__ == "__main__":
    main()
