"""The open M/G/c response-time law against exact simulation: p95 and p99 relative errors.

For each number of servers c, load (share of capacity) and service CV (gamma service, mean
1 / MU), an exact FCFS simulation of Poisson arrivals (``llmlat._synth.fcfs_responses``,
``--reps`` independent replications advanced together, each started empty and run about ten
relaxation times before it is measured, ``10 / (1 - sqrt(load))**2`` arrivals or ten service
times if longer) gives
the true p95 and p99 with a standard error (over 20 groups of replications). Against it:

- ``before``: the law llmlat used until issue 10u, gamma service plus Erlang C's probability of
  waiting and an exponential wait with Allen-Cunneen's mean;
- ``after``: :func:`llmlat.queueing.mgc_response_quantile`.

and for the mean response time (what an open M/G/c fit matches to the level means): before,
Allen-Cunneen's wait; after, the fit's interpolation of the exact M/D/c and M/M/c mean waits.
Errors are ``model / simulation - 1`` in percent; ``se`` is the simulation's own standard error
in percent (the rows of one c and load share their random numbers, so the exact CV 1 row shows
how far that sample itself lies from the truth). Target: |after| well under 1% at CV 0.05
near the knee, and no worse than before.

    nice -n 10 .venv/bin/python benchmarks/bench_mgc.py [--servers 1 4 16 64] [--cvs 0.05 1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from llmlat import queueing
from llmlat._synth import fcfs_responses

MU = 2.0
PROBS = np.array([0.95, 0.99])
GROUPS = 20


def simulate(lam: float, c: int, cv: float, reps: int, length: int, seed: int) -> np.ndarray:
    """Response times, ``(length, reps)``: ``reps`` seeded FCFS M/G/c runs after their warm-up
    (:func:`llmlat._synth.fcfs_responses`)."""
    return fcfs_responses(c, MU, cv, reps, length, seed, rate=lam)


def before(lam: float, c: int, cv: float) -> np.ndarray:
    """The law before 10u: Erlang C's P(wait), exponential wait with Allen-Cunneen's mean."""
    pw = queueing.erlang_c(c, lam / MU)
    theta = 2.0 * (c * MU - lam) / (1.0 + cv**2)
    return queueing._service_plus_wait_quantile(PROBS, MU, cv, pw, theta)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--servers", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--loads", type=float, nargs="+", default=[0.5, 0.7, 0.8, 0.9, 0.95])
    ap.add_argument("--cvs", type=float, nargs="+", default=[0.05, 0.25, 0.5, 1.0])
    ap.add_argument("--reps", type=int, default=1000, help="replications per point")
    ap.add_argument("--length", type=int, default=10000, help="measured arrivals per replication")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print(
        f"{'c':>3} {'load':>5} {'cv':>5} | {'p95 sim':>8} {'se%':>5} {'before%':>8} {'after%':>7}"
        f" | {'p99 sim':>8} {'se%':>5} {'before%':>8} {'after%':>7}"
        f" | {'mean sim':>8} {'se%':>5} {'before%':>8} {'after%':>7} | {'law ms':>6}"
    )
    worst: dict[float, list[float]] = {}
    for c in args.servers:
        for load in args.loads:
            for cv in args.cvs:
                lam = load * c * MU
                resp = simulate(lam, c, cv, args.reps, args.length, args.seed)
                truth = np.quantile(resp, PROBS)
                groups = np.array_split(resp, GROUPS, axis=1)
                se = np.std([np.quantile(g, PROBS) for g in groups], axis=0, ddof=1)
                se = se / np.sqrt(GROUPS) / truth * 100
                t = time.perf_counter()
                after = queueing.mgc_response_quantile(PROBS, lam, MU, c, cv)
                ms = (time.perf_counter() - t) * 1e3
                err_b = (before(lam, c, cv) / truth - 1) * 100
                err_a = (after / truth - 1) * 100
                mean = resp.mean()
                se_mean = np.std(resp.reshape(len(resp), GROUPS, -1).mean(axis=(0, 2)), ddof=1)
                se_mean = se_mean / np.sqrt(GROUPS) / mean * 100
                ac = queueing.mgc_allen_cunneen(lam, MU, c, cv)["response_mean_s"].iloc[0]
                fit = 1 / MU + queueing._mgc_wait_mean(np.array(lam), MU, c, cv)
                mean_b, mean_a = (ac / mean - 1) * 100, (float(fit) / mean - 1) * 100
                worst.setdefault(cv, []).append(float(np.abs(err_a).max() - np.abs(err_b).max()))
                print(
                    f"{c:>3} {load:>5.2f} {cv:>5.2f} | {truth[0]:>8.4f} {se[0]:>5.2f} "
                    f"{err_b[0]:>+8.2f} {err_a[0]:>+7.2f} | {truth[1]:>8.4f} {se[1]:>5.2f} "
                    f"{err_b[1]:>+8.2f} {err_a[1]:>+7.2f} | {mean:>8.4f} {se_mean:>5.2f} "
                    f"{mean_b:>+8.2f} {mean_a:>+7.2f} | {ms:>6.1f}",
                    flush=True,
                )
    for cv, d in worst.items():
        print(f"cv {cv:g}: largest |after| - |before| over the grid {max(d):+.2f} points")


if __name__ == "__main__":
    main()
