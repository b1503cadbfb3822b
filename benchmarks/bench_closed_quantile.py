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

``--plans``: do the plans made on this law keep their targets? Each seed is a closed sweep
with think time Z = S (levels 1, 2 and 0.25-2 knees, ``--length`` times the default lengths,
``llmlat._synth.mgc_sweep``), fitted (``model="mmc"``: the service CV and the think CV
measured) and planned for p95 targets: the exact simulation's p95 at N = 0.8, 1 and 1.25
knees (``--requests`` a level, seed 7). A plan breaks its target when it advises more
clients than that N and the simulated p95 at its N is above the target (``sure``: beyond two
standard errors of the two simulations). ``given up``: the clients a plan keeps below the
target's N, as a share of it.

    flock /tmp/llmlat-bench.lock nice -n 5 .venv/bin/python benchmarks/bench_closed_quantile.py \
        --plans --cv 0.05 0.5 1 2 --think-cv 0 0.5 1 --requests 100000 --jobs 2
"""

from __future__ import annotations

import argparse
import functools
import itertools
import pickle
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from llmlat import fit
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


#: --plans: think time over the mean service time; targets at these shares of the knee
PLAN_THINK = 1.0
TARGET_AT = (0.8, 1.0, 1.25)
TRUTH_SEED = 7


def sweep_levels(c: int, z: float) -> list[int]:
    """A closed sweep's levels: 1, 2 and 0.25 to 2 knees."""
    knee = c * (1.0 + z)
    return sorted({1, 2, *(max(1, round(f * knee)) for f in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0))})


@functools.cache
def true_p95(n: int, c: int, z: float, cv: float, law: float, requests: int) -> tuple:
    """The exact simulation's p95 at N clients and its standard error (20 batch means)."""
    t = simulate(n, c, z, cv, law, requests, seed=TRUTH_SEED)
    batches = [np.quantile(b, 0.95) for b in np.array_split(t, 20)]
    return float(np.quantile(t, 0.95)), float(np.std(batches, ddof=1) / np.sqrt(20))


def target_n(c: int, f: float) -> int:
    """The clients whose simulated p95 is the target: ``f`` knees."""
    return max(2, round(f * c * (1.0 + PLAN_THINK)))


def plan_seed(
    c: int, cv: float, law: float, length: float, targets: dict, seed: int, cache: str | None
) -> list:
    """Fit one seeded sweep and plan it for each target (``f -> (p95, se)``): a row each.

    With ``cache`` (a folder) the fit is pickled there, and read back when it is there: two
    versions of the plan can be judged on the same fits.
    """
    z = PLAN_THINK
    path = Path(cache or ".") / f"fit-c{c}-cv{cv:g}-tcv{law:g}-x{length:g}-s{seed}.pkl"
    if cache and path.exists():
        res = pickle.loads(path.read_bytes())
    else:
        req = mgc_sweep("concurrency", sweep_levels(c, z), 1.0, c, cv_s=cv, seed=seed,
                        length=length, think_s=z, think_cv=law)  # fmt: skip
        res = fit(req, model="mmc")
        if cache:
            path.write_bytes(pickle.dumps(res))
    rows = []
    for f, (target, se) in targets.items():
        n_t = target_n(c, f)
        plan = res.plan(p95=target)
        rows.append({
            "c": c, "cv": cv, "think_cv": law, "at": f, "seed": seed, "n_target": n_t,
            "target_s": target, "target_se_s": se, "feasible": plan.feasible,
            "n_plan": plan.max_concurrency, "think_cv_fit": res.fixed.get("think_cv", np.nan),
            "cv_fit": res.fixed.get("cv_s", np.nan),
        })  # fmt: skip
    return rows


def _truth_of(key: tuple) -> tuple[float, float]:
    return true_p95(*key)


def _truths(pool: ProcessPoolExecutor, keys: list, cache: str | None) -> dict:
    """The simulated p95 at each key of :func:`true_p95` (read from and kept in ``cache``)."""
    path = Path(cache or ".") / "truths.pkl"
    known = pickle.loads(path.read_bytes()) if cache and path.exists() else {}
    todo = sorted(set(keys) - set(known))
    known |= dict(zip(todo, pool.map(_truth_of, todo), strict=True))
    if cache:
        path.write_bytes(pickle.dumps(known))
    return known


def plans(args: argparse.Namespace) -> None:
    """``--plans``: the share of seeded plans whose advised load breaks its target."""
    cells = list(itertools.product(args.servers, args.cv, args.think_cv))
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    with ProcessPoolExecutor(args.jobs) as pool:
        wanted = [  # each target's N, and the next (the law's error there is shown)
            (target_n(c, f) + more, c, PLAN_THINK, cv, law, args.requests)
            for c, cv, law in cells
            for f in TARGET_AT
            for more in (0, 1)
        ]
        known = _truths(pool, wanted, args.cache)
        jobs = [
            pool.submit(
                plan_seed,
                c,
                cv,
                law,
                args.length,
                {
                    f: known[target_n(c, f), c, PLAN_THINK, cv, law, args.requests]
                    for f in TARGET_AT
                },
                seed,
                args.cache,
            )
            for c, cv, law in cells
            for seed in seeds
        ]
        frame = pd.DataFrame([row for job in jobs for row in job.result()])
        # the truth past the target's N, where a plan advised more clients
        past = frame[frame["feasible"] & (frame["n_plan"].fillna(np.inf) > frame["n_target"])]
        keys = sorted(
            {(int(r.n_plan), r.c, PLAN_THINK, r.cv, r.think_cv, args.requests)
             for r in past.itertuples() if np.isfinite(r.n_plan)}
        )  # fmt: skip
        truth = known | _truths(pool, keys, args.cache)
    p95, se = [], []
    for r in frame.itertuples():
        key = (int(r.n_plan) if r.feasible and np.isfinite(r.n_plan) else -1, r.c, PLAN_THINK,
               r.cv, r.think_cv, args.requests)  # fmt: skip
        value = truth.get(key, (np.nan, np.nan))
        p95.append(value[0])
        se.append(value[1])
    frame["p95_plan_s"], frame["p95_plan_se_s"] = p95, se
    over = frame["n_plan"].isna() & frame["feasible"]  # no bound: always a break
    frame["break"] = over | (frame["p95_plan_s"] > frame["target_s"])
    frame["sure"] = over | (
        frame["p95_plan_s"] - frame["target_s"]
        > 2.0 * np.hypot(frame["p95_plan_se_s"], frame["target_se_s"])
    )
    short = np.clip(frame["n_target"] - frame["n_plan"], 0, None) / frame["n_target"]
    frame["given_up"] = np.where(frame["feasible"], short, 1.0)
    if args.out:
        frame.to_csv(args.out, index=False)
    print(f"plans on closed sweeps with think time Z = S (length x{args.length:g}), "
          f"{args.seeds} seeds a cell; target at N (knee share): breaks (sure), infeasible, "
          "given up, the law's p95 error at N and N + 1 at the true parameters")  # fmt: skip
    for (c, cv, law, f), g in frame.groupby(["c", "cv", "think_cv", "at"]):
        n_t = int(g["n_target"].iloc[0])
        errs = []
        for n in (n_t, n_t + 1):
            model = q.closed_mgc_response_quantile(0.95, [n], 1.0, c, PLAN_THINK, cv, law)[0]
            key = (n, c, PLAN_THINK, cv, law, args.requests)
            errs.append(model / (truth.get(key) or true_p95(*key))[0] - 1)
        print(
            f"c{c:<3d} cv{cv:<5g} tcv{law:<5g} N{n_t:<3d} ({f:g})  break {g['break'].sum():2d}"
            f"/{len(g)} ({g['sure'].sum():2d})  infeasible {(~g['feasible']).sum():2d}  "
            f"given up {g['given_up'].mean():5.1%}  law {errs[0]:+6.1%} {errs[1]:+6.1%}",
            flush=True,
        )
    total = frame["break"].mean()
    print(f"\nall: break {frame['break'].sum()}/{len(frame)} ({total:.1%}), sure "
          f"{frame['sure'].sum()}, infeasible {(~frame['feasible']).sum()}, given up "
          f"{frame['given_up'].mean():.1%}")  # fmt: skip
    for col in ("cv", "think_cv", "c", "at"):
        by = frame.groupby(col)
        shown = "  ".join(
            f"{k:g}: {v['break'].sum()}/{len(v)} (given up {v['given_up'].mean():.0%})"
            for k, v in by
        )
        print(f"by {col}: {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40_000)
    parser.add_argument(
        "--think-cv", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0],
        help="think-time CVs: 0 constant, 1 exponential, else gamma",
    )  # fmt: skip
    parser.add_argument("--servers", type=int, nargs="+", default=list(SERVERS))
    parser.add_argument("--cv", type=float, nargs="+", default=list(CVS), help="service CVs")
    parser.add_argument("--plans", action="store_true", help="fit, plan, judge the plans")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--length", type=float, default=10.0, help="--plans: sweep length")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", help="--plans: write every plan's row to this CSV")
    parser.add_argument("--cache", help="--plans: a folder keeping the fits and the truths")
    args = parser.parse_args()
    if args.plans:
        plans(args)
        return
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
