"""The closed M/G/c p95 and mean with think time against long exact simulations.

N clients think (mean Z: constant as the engine's ``think_time_s``, exponential, or gamma with
another CV) and send to c FCFS servers of gamma service (mean 1 s, CV 0.05, 0.5 or 2): the fit's
p95 (:func:`llmlat.queueing.closed_mgc_response_quantile`) and mean (the exponential system's,
:func:`llmlat.queueing.closed_mmc`) against an exact simulation of ``--requests`` requests per
cell (``llmlat._synth.mgc_sweep``, its first tenth cut), at N below, at and past the knee
``c (1 + Z / S)``. The simulation's p95 has a standard error from 20 batch means. Each row
shows N over the knee; the closing table gives the p95 error's range per think law and
service CV, by where N sits (below the knee, at it, past it) and by c.

    .venv/bin/python benchmarks/bench_closed_quantile.py [--requests 150000] [--think-cv 0 0.5 1]
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from llmlat import queueing as q
from llmlat._loadshapes import default_length
from llmlat._synth import mgc_sweep

SERVERS = (1, 4, 16)
THINK = (0.1, 0.3, 1.0)  # Z over the mean service time
CVS = (0.05, 0.5, 2.0)


def levels(c: int, z: float) -> list[int]:
    """N below, at and past the knee ``c (1 + Z / S)``."""
    knee = c * (1.0 + z)
    return sorted({max(2, round(0.8 * knee)), round(knee), round(1.25 * knee) + 1})


def region(n: int, c: int, z: float) -> str:
    """Where N sits against the knee: ``below``, ``at`` (its rounding) or ``past``."""
    knee = round(c * (1.0 + z))
    return "below" if n < knee else "at" if n == knee else "past"


def law_name(think_cv: float) -> str:
    return {0.0: "const", 1.0: "exp"}.get(think_cv, f"tcv{think_cv:g}")


def simulate(n: int, c: int, z: float, cv: float, law: float, requests: int, seed: int):
    """Response times of one long closed level, its start-up cut."""
    length = requests / default_length("concurrency", n)[0]
    frame = mgc_sweep(
        "concurrency", [n], 1.0, c, cv_s=cv, seed=seed, length=length, think_s=z, think_cv=law
    )
    times = frame.sort_values("t_sent")["latency_s"].to_numpy()
    return times[len(times) // 10 :]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=150_000)
    parser.add_argument(
        "--think-cv", type=float, nargs="+", default=[0.0, 0.5, 1.0],
        help="think-time CVs: 0 constant, 1 exponential, else gamma",
    )  # fmt: skip
    parser.add_argument("--servers", type=int, nargs="+", default=list(SERVERS))
    parser.add_argument("--cv", type=float, nargs="+", default=list(CVS), help="service CVs")
    args = parser.parse_args()
    rows = []
    truth: dict[tuple, dict[float, tuple[float, float]]] = {}
    print("cell                              N/knee  p95 sim          model   err     mean err")
    for c in args.servers:
        for z in THINK:
            for cv in args.cv:
                for think_cv in args.think_cv:
                    for n in levels(c, z):
                        t = simulate(n, c, z, cv, think_cv, args.requests, seed=1000 * c + n)
                        p95 = float(np.quantile(t, 0.95))
                        batches = [np.quantile(b, 0.95) for b in np.array_split(t, 20)]
                        se = float(np.std(batches, ddof=1) / np.sqrt(20))
                        model = q.closed_mgc_response_quantile(0.95, [n], 1.0, c, z, cv)[0]
                        mean = q.closed_mmc([n], 1.0, c, think_s=z)["response_mean_s"].iloc[0]
                        e95, em = model / p95 - 1.0, mean / float(np.mean(t)) - 1.0
                        key = f"{law_name(think_cv)} cv{cv:g}"
                        rows.append((key, c, region(n, c, z), e95, em))
                        truth.setdefault((c, z, cv, n), {})[think_cv] = (p95, se)
                        name = f"c{c} Z/S{z:g} cv{cv:g} {law_name(think_cv)} N{n}"
                        print(
                            f"{name:32s}  {n / (c * (1 + z)):5.2f}  {p95:.4f} +- {se:.4f}  "
                            f"{model:.4f}  {e95:+6.1%}  {em:+6.1%}",
                            flush=True,
                        )
    keys = list(dict.fromkeys(r[0] for r in rows))
    for key in keys:
        e95, em = np.array([(r[3], r[4]) for r in rows if r[0] == key]).T
        print(
            f"{key:10s}  p95 err min {e95.min():+.1%} max {e95.max():+.1%} mean |err| "
            f"{np.abs(e95).mean():.1%} (> 2%: {(np.abs(e95) > 0.02).sum()}/{len(e95)});  "
            f"mean err min {em.min():+.1%} max {em.max():+.1%}"
        )
    # a law never low for one think law is never low for steadier ones where the truth's p95
    # rises with the think CV (within two standard errors)
    rising = [
        all(a[0] <= b[0] + 2.0 * np.hypot(a[1], b[1]) for a, b in itertools.pairwise(v))
        for v in ([cell[k] for k in sorted(cell)] for cell in truth.values())
    ]
    print(f"the simulated p95 rises with the think CV in {sum(rising)}/{len(rising)} cells")
    # where the error sits: p95 error's range per think law and CV, by region and by c
    groups = [("below", "at", "past"), tuple(f"c{c}" for c in args.servers)]
    head = "".join(f"{g:>16s}" for part in groups for g in part)
    print(f"\np95 err (min..max)  {head}")
    for key in keys:
        cells = []
        for g in (*groups[0], *groups[1]):
            errs = [r[3] for r in rows if r[0] == key and g in (r[2], f"c{r[1]}")]
            cells.append(f"{min(errs):+.0%}..{max(errs):+.0%}" if errs else "-")
        print(f"{key:18s}  " + "".join(f"{s:>16s}" for s in cells))


if __name__ == "__main__":
    main()
