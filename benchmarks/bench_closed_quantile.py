"""The closed M/G/c p95 and mean with think time against long exact simulations.

N clients think (mean Z, constant as the engine's ``think_time_s`` or exponential) and send
to c FCFS servers of gamma service (mean 1 s, CV 0.05 or 0.5): the fit's p95
(:func:`llmlat.queueing.closed_mgc_response_quantile`) and mean (the exponential system's,
:func:`llmlat.queueing.closed_mmc`) against an exact simulation of ``--requests`` requests per
cell (``llmlat._synth.mgc_sweep``, its first tenth cut), at N below, at and past the knee
``c (1 + Z / S)``. The simulation's p95 has a standard error from 20 batch means.

    .venv/bin/python benchmarks/bench_closed_quantile.py [--requests 150000]
"""

from __future__ import annotations

import argparse

import numpy as np

from llmlat import queueing as q
from llmlat._loadshapes import default_length
from llmlat._synth import mgc_sweep

SERVERS = (1, 4, 16)
THINK = (0.1, 0.3, 1.0)  # Z over the mean service time
CVS = (0.05, 0.5)
LAWS = {"const": 0.0, "exp": 1.0}  # the think time's CV


def levels(c: int, z: float) -> list[int]:
    """N below, at and past the knee ``c (1 + Z / S)``."""
    knee = c * (1.0 + z)
    return sorted({max(2, round(0.8 * knee)), round(knee), round(1.25 * knee) + 1})


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
    args = parser.parse_args()
    errors: dict[str, list[tuple[float, float]]] = {}
    print("cell                              p95 sim          model   err     mean err")
    for c in SERVERS:
        for z in THINK:
            for cv in CVS:
                for law, think_cv in LAWS.items():
                    for n in levels(c, z):
                        t = simulate(n, c, z, cv, think_cv, args.requests, seed=1000 * c + n)
                        p95 = float(np.quantile(t, 0.95))
                        batches = [np.quantile(b, 0.95) for b in np.array_split(t, 20)]
                        se = float(np.std(batches, ddof=1) / np.sqrt(20))
                        model = q.closed_mgc_response_quantile(0.95, [n], 1.0, c, z, cv)[0]
                        mean = q.closed_mmc([n], 1.0, c, think_s=z)["response_mean_s"].iloc[0]
                        e95, em = model / p95 - 1.0, mean / float(np.mean(t)) - 1.0
                        errors.setdefault(f"{law} cv{cv:g}", []).append((e95, em))
                        name = f"c{c} Z/S{z:g} cv{cv:g} {law} N{n}"
                        print(
                            f"{name:32s}  {p95:.4f} +- {se:.4f}  {model:.4f}  {e95:+6.1%}  "
                            f"{em:+6.1%}",
                            flush=True,
                        )
    for key, pairs in errors.items():
        e95, em = np.array(pairs).T
        print(
            f"{key:10s}  p95 err min {e95.min():+.1%} max {e95.max():+.1%} mean |err| "
            f"{np.abs(e95).mean():.1%} (> 2%: {(np.abs(e95) > 0.02).sum()}/{len(e95)});  "
            f"mean err min {em.min():+.1%} max {em.max():+.1%}"
        )


if __name__ == "__main__":
    main()
