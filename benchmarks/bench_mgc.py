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

``--capped N`` tabulates the capped law instead (M/G/c/K behind a queue of 2c: the admitted
requests' p95 and p99, :func:`llmlat._models._mmck_quantile`, the refused share,
``Model.blocking``, the admitted requests' probability of waiting and their mean, which the
fit matches, :func:`llmlat._models._mmck_wait`) against N-request exact simulations
(:func:`llmlat._synth.fcfs_responses` with the cap) at loads 50-120%: relative errors in
percent (the refused share's and P(wait)'s in points), each with the simulation's standard
error (20 groups of whole replications).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from llmlat import queueing
from llmlat._models import Model, _mmck_quantile, _mmck_wait
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


CAPPED_LOADS = (0.5, 0.7, 0.8, 0.9, 1.0, 1.2)


def _capped_point(args: tuple[int, float, float, int]) -> tuple[np.ndarray, np.ndarray, float]:
    """One point of :func:`capped`: errors and standard errors (the p95 and p99 and the
    admitted mean in percent, the refused share and P(wait) in points), the law's ms per
    quantile."""
    c, cv, load, n = args
    lam = load * c * MU
    reps = max(GROUPS, min(1000, n // 2000))
    length = -(-n // reps)
    resp, waited = fcfs_responses(c, MU, cv, reps, length, 1, rate=lam, cap=2 * c, waited=True)

    def measures(r: np.ndarray, w: np.ndarray) -> np.ndarray:
        """p95, p99, refused share, P(wait) of the admitted, admitted mean."""
        admitted = np.isfinite(r).sum()
        return np.array(
            [*np.nanquantile(r, PROBS), np.isnan(r).mean(), w.sum() / admitted, np.nanmean(r)]
        )

    truth = measures(resp, waited)
    # groups of whole replications: independent, so their spread is the error's
    parts = zip(*(np.array_split(x, GROUPS, axis=1) for x in (resp, waited)), strict=True)
    groups = [measures(r, w) for r, w in parts]
    se = np.std(groups, axis=0, ddof=1) / np.sqrt(GROUPS)
    p = {"mu": MU, "c": c, "k_sys": 3 * c, **({"cv_s": cv} if cv != 1.0 else {})}
    t = time.perf_counter()
    law = np.array([_mmck_quantile(float(pr), np.array([lam]), p)[0] for pr in PROBS])
    ms = (time.perf_counter() - t) * 1e3 / len(PROBS)
    refused = float(Model.blocking(p, np.array([lam]))[0])
    pwait, wait = (float(v[0]) for v in _mmck_wait(np.array([lam]), p))
    scale = truth / 100.0
    scale[2:4] = 0.01  # the refused share and P(wait) in points
    err = (np.array([*law, refused, pwait, wait + 1.0 / MU]) - truth) / scale
    return err, se / scale, ms


def capped(requests: int, servers: list[int], cvs: list[float], jobs: int) -> None:
    """Print the capped law's errors against exact simulations, one line per CV and c, one
    cell per load: ``p95 err (se) / p99 err (se) / refused err (se) / P(wait) err (se) / mean
    err (se)``, in percent (the refused share and P(wait) in points), and the largest of each
    over each CV."""
    from concurrent.futures import ProcessPoolExecutor

    grid = [(c, cv, f, requests) for cv in cvs for c in servers for f in CAPPED_LOADS]
    print(f"capped law, queue 2c, {requests:,d} simulated requests a point: p95 err % (se) / "
          "p99 err % (se) / refused share err points (se) / P(wait) err points (se) / admitted "
          "mean err % (se) at each load; law ms per quantile")  # fmt: skip
    with ProcessPoolExecutor(jobs) as pool:
        rows = list(pool.map(_capped_point, grid))
    span: dict[float, list[np.ndarray]] = {}
    for i in range(0, len(grid), len(CAPPED_LOADS)):
        c, cv = grid[i][:2]
        part = rows[i : i + len(CAPPED_LOADS)]
        cells = [
            f"{f:.1f}: " + " / ".join(f"{e[j]:+5.2f} ({s[j]:.2f})" for j in range(5))
            for (_, _, f, _), (e, s, _) in zip(grid[i : i + 6], part, strict=True)
        ]
        span.setdefault(cv, []).extend(e for e, _, _ in part)
        ms = max(r[2] for r in part)
        print(f"cv {cv:<4g} c {c:<3d} " + " | ".join(cells) + f" | {ms:.0f} ms", flush=True)
    for cv, errs in span.items():
        lo, hi = np.min(errs, axis=0), np.max(errs, axis=0)
        names = ("p95 %", "p99 %", "refused pt", "P(wait) pt", "mean %")
        spans = [f"{n} {a:+.2f} to {b:+.2f}" for n, a, b in zip(names, lo, hi, strict=True)]
        print(f"cv {cv:g}: " + ", ".join(spans))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--servers", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--loads", type=float, nargs="+", default=[0.5, 0.7, 0.8, 0.9, 0.95])
    ap.add_argument("--cvs", type=float, nargs="+", default=[0.05, 0.25, 0.5, 1.0])
    ap.add_argument("--reps", type=int, default=1000, help="replications per point")
    ap.add_argument("--length", type=int, default=10000, help="measured arrivals per replication")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--capped",
        type=int,
        default=0,
        metavar="N",
        help="tabulate the capped law against N-request simulations instead",
    )
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (--capped)")
    args = ap.parse_args()
    if args.capped:
        capped(args.capped, args.servers, args.cvs, args.jobs)
        return
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
