"""The closed M/G/c p95 and mean with think time against long exact simulations.

N clients think (mean Z: constant as the engine's ``think_time_s``, exponential, or gamma with
another CV) and send to c FCFS servers of gamma service (mean 1 s, CV 0.05, 0.5 or 2): the fit's
p95 (:func:`llmlat.queueing.closed_mgc_response_quantile`) and mean
(``llmlat.queueing._closed_mgc_mean``), both given the think time's CV, against an exact
simulation of ``--requests`` requests per cell (``llmlat._synth.mgc_sweep``, its first tenth
cut), at N from 0.6 to 1.6 times the knee ``c (1 + Z / S)``. Beside them, the exponential
network's (the law before the think CV was used: the arrival theorem of exponential think
times alone, with the first departure at CV > 1 as now, and the exponential system's mean).
The simulation's p95 has a standard error from 20 batch means. Each row shows N over the
knee; the closing tables give the errors' ranges per think law and service CV, by where N sits
(below the knee, at it, past it) and by c.

    .venv/bin/python benchmarks/bench_closed_quantile.py [--requests 40000] [--think-cv 0 0.5 1 2]

Think CVs left out of the defaults (0.25, 0.75, 1.5) are the held-out check of the two laws'
weights (``llmlat.queueing._network_weight``).
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from llmlat import queueing as q
from llmlat._loadshapes import default_length
from llmlat._synth import mgc_sweep

SERVERS = (1, 4, 16)
THINK = (0.1, 0.3, 1.0, 3.0)  # Z over the mean service time
CVS = (0.05, 0.5, 2.0)


def levels(c: int, z: float) -> list[int]:
    """N from 0.6 to 1.6 times the knee ``c (1 + Z / S)``."""
    knee = c * (1.0 + z)
    return sorted({max(2, round(f * knee)) for f in (0.6, 0.8, 1.0, 1.25, 1.6)})


def region(n: int, c: int, z: float) -> str:
    """Where N sits against the knee: ``below``, ``at`` (within 5%) or ``past``."""
    ratio = n / (c * (1.0 + z))
    return "below" if ratio < 0.95 else "at" if ratio <= 1.05 else "past"


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
    parser.add_argument("--requests", type=int, default=40_000)
    parser.add_argument(
        "--think-cv", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0],
        help="think-time CVs: 0 constant, 1 exponential, else gamma",
    )  # fmt: skip
    parser.add_argument("--servers", type=int, nargs="+", default=list(SERVERS))
    parser.add_argument("--cv", type=float, nargs="+", default=list(CVS), help="service CVs")
    args = parser.parse_args()
    rows = []
    truth: dict[tuple, dict[float, tuple[float, float]]] = {}
    print("cell                              N/knee  p95 sim          model   err   "
          "mean err  | exp. network: p95 err  mean err")  # fmt: skip
    for c in args.servers:
        for z in THINK:
            for cv in args.cv:
                for think_cv in args.think_cv:
                    for n in levels(c, z):
                        t = simulate(n, c, z, cv, think_cv, args.requests, seed=1000 * c + n)
                        p95 = float(np.quantile(t, 0.95))
                        batches = [np.quantile(b, 0.95) for b in np.array_split(t, 20)]
                        se = float(np.std(batches, ddof=1) / np.sqrt(20))
                        model = q.closed_mgc_response_quantile(0.95, [n], 1.0, c, z, cv, think_cv)
                        mean = q._closed_mgc_mean(np.array([n]), 1.0, c, z, cv, think_cv)
                        waits = q._network_waits(np.array([n]), 1.0, c, z, cv)
                        net = q._queued_gamma_quantile(0.95, *waits, 1.0, cv)[0]
                        net_mean = q.closed_mmc([n], 1.0, c, think_s=z)["response_mean_s"].iloc[0]
                        sim_mean = float(np.mean(t))
                        errs = (model[0] / p95, mean[0] / sim_mean, net / p95, net_mean / sim_mean)
                        e95, em, n95, nm = (e - 1.0 for e in errs)
                        key = f"{law_name(think_cv)} cv{cv:g}"
                        rows.append((key, c, region(n, c, z), e95, em, n95, nm))
                        truth.setdefault((c, z, cv, n), {})[think_cv] = (p95, se)
                        name = f"c{c} Z/S{z:g} cv{cv:g} {law_name(think_cv)} N{n}"
                        print(
                            f"{name:32s}  {n / (c * (1 + z)):5.2f}  {p95:.4f} +- {se:.4f}  "
                            f"{model[0]:.4f}  {e95:+6.1%}  {em:+6.1%}  |  {n95:+6.1%}  {nm:+6.1%}",
                            flush=True,
                        )
    keys = list(dict.fromkeys(r[0] for r in rows))
    print("\nby think law and service CV: the law's p95 and mean error, then the exponential "
          "network's")  # fmt: skip
    for key in keys:
        e95, em, n95, nm = np.array([r[3:] for r in rows if r[0] == key]).T
        print(
            f"{key:12s}  p95 {e95.min():+.1%}..{e95.max():+.1%}  mean {em.min():+.1%}.."
            f"{em.max():+.1%}  |  p95 {n95.min():+.1%}..{n95.max():+.1%}  mean "
            f"{nm.min():+.1%}..{nm.max():+.1%}"
        )
    everything = np.array([r[3:5] for r in rows])
    rms = np.sqrt(np.mean(everything**2, axis=0))
    print(f"RMS error over {len(rows)} cells: p95 {rms[0]:.1%}, mean {rms[1]:.1%}")
    # the simulated p95 rises with the think CV (within two standard errors) where it does
    rising = [
        all(a[0] <= b[0] + 2.0 * np.hypot(a[1], b[1]) for a, b in itertools.pairwise(v))
        for v in ([cell[k] for k in sorted(cell)] for cell in truth.values())
    ]
    print(f"the simulated p95 rises with the think CV in {sum(rising)}/{len(rising)} cells")
    # where the error sits: the law's p95 and mean error ranges per think law and CV, by
    # region and by c
    groups = [("below", "at", "past"), tuple(f"c{c}" for c in args.servers)]
    for col, what in ((3, "p95"), (4, "mean")):
        head = "".join(f"{g:>16s}" for part in groups for g in part)
        print(f"\n{what} err (min..max)  {head}")
        for key in keys:
            cells = []
            for g in (*groups[0], *groups[1]):
                errs = [r[col] for r in rows if r[0] == key and g in (r[2], f"c{r[1]}")]
                cells.append(f"{min(errs):+.0%}..{max(errs):+.0%}" if errs else "-")
            print(f"{key:18s}  " + "".join(f"{s:>16s}" for s in cells))


if __name__ == "__main__":
    main()
