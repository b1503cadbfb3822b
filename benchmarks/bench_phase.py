"""A closed level's p95, mean and throughput when its clients start at once or spread.

Each level is an exact M/G/c closed loop of the default length (``llmlat._synth``), gamma
service of CV ``cv`` and mean 0.5 s, no think time. ``at once``: the N clients send at time 0,
as the sweep engine did; ``spread``: client 0 alone, the others over its first cycle, as it now
does (``mgc_sweep``). Per cell and start it prints the mean relative error (and its standard
deviation over the seeds) of the level's p95, mean and throughput against the steady truth (long
runs after a warm-up, :func:`llmlat._synth.fcfs_responses`), how often the p95's 95% interval
(:func:`llmlat.stats.quantile_interval`) holds the truth, and how often a check at the
``verify_plan`` length (``max(200, 3 N) + N`` requests) would read a plan whose target is 3%
above the true p95 as broken.

    .venv/bin/python benchmarks/bench_phase.py [--seeds 40] [--first-seed 100] [--cv 0.05 1]
        [--cells 64,68 16,18]
"""

from __future__ import annotations

import argparse

import numpy as np

from llmlat import stats
from llmlat._loadshapes import default_length
from llmlat._synth import FCFS, _frame, _service, _sorted_rows, fcfs_responses, mgc_sweep

MU = 2.0
# (servers, clients): just past c, below it, one server
CELLS = [(64, 68), (16, 18), (4, 5), (1, 2), (16, 14), (64, 60)]


def at_once(n: int, c: int, cv: float, seed: int, requests: int):
    """One closed level whose N clients all send at time 0 (the engine's old start)."""
    rng = np.random.default_rng(seed)
    steps = FCFS(c, 1, clients=n).run(_service(rng, MU, cv, requests)[:, None])
    sent, start, end, worker, _ = _sorted_rows(steps, 0, requests)
    return _frame(n, "concurrency", sent, start, end, list(worker))


def spread(n: int, c: int, cv: float, seed: int, requests: int):
    """One closed level as the engine now starts it."""
    length = requests / default_length("concurrency", n)[0]
    return mgc_sweep("concurrency", [n], MU, c, cv_s=cv, seed=seed, length=length)


def measure(frame, n: int) -> tuple[float, float, float, float, float]:
    """``(p95, low, high, mean, throughput)`` of a level, as the summary reads them."""
    phase = stats.phases(frame)
    keep = phase == "measure"
    lat = frame["latency_s"].to_numpy()[keep]
    p95, low, high = stats.quantile_interval(lat, 0.95)
    start, end = stats.row_times(frame)
    x, _ = stats.throughput(
        start, end, stats.ok_mask(frame), phase == "transient", phase != "warmup",
        clients=n, workers=stats.column(frame, "worker"),
    )  # fmt: skip
    return p95, low, high, float(lat.mean()), x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--cv", type=float, nargs="+", default=[0.05, 0.2, 1.0])
    parser.add_argument("--cells", nargs="+", help="e.g. 64,68 16,18 (default: all)")
    args = parser.parse_args()
    cells = [tuple(map(int, cell.split(","))) for cell in args.cells] if args.cells else CELLS
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    print("cell            start    p95 err (sd)     cover  mean err  X err   check broke")
    for cv in args.cv:
        for c, n in cells:
            truth = fcfs_responses(c, MU, cv, 20, max(2000, 100 * n) // 20 * 20, 9, clients=n)
            t95, tmean = float(np.quantile(truth, 0.95)), float(truth.mean())
            tx = n / tmean  # Little's law, no think time
            level = default_length("concurrency", n)[0]
            check = max(200, 3 * n) + n
            for name, run in (("at once", at_once), ("spread", spread)):
                rows = np.array([measure(run(n, c, cv, s, level), n) for s in seeds])
                broke = np.mean(
                    [measure(run(n, c, cv, s, check), n)[0] > 1.03 * t95 for s in seeds]
                )
                err = rows[:, 0] / t95 - 1
                cover = np.mean((rows[:, 1] <= t95) & (t95 <= rows[:, 2]))
                print(
                    f"c{c:<3} N{n:<3} cv{cv:<4} {name:8} {err.mean():+6.1%} ({err.std():4.1%})"
                    f"  {cover:5.0%}  {rows[:, 3].mean() / tmean - 1:+6.1%}"
                    f"  {rows[:, 4].mean() / tx - 1:+6.1%}  {broke:5.0%}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
