"""Calibration of fit -> plan on seeded truths: does the method find what it should, how often?

Every cell is a known station run through an exact discrete-event simulation of the same sweep
design llmlat uses (``llmlat._synth``: each level starts empty, default level lengths, no warmup,
so the start-up transient is in the data; no HTTP; batching cells stream, with the simulator's
token timing, so the fit sees each request's inter-token latency, except the ``-plain`` cell,
which has latency only). Each seed is fitted with the station's model
(``mmc`` or ``batch``) and with ``model="auto"``, then planned for a p95 target. Per cell:

- ``c_exact``: share of fits whose integer (c, or slots) is the truth
- ``c_cover``: share whose 95% interval of the integer holds the truth
- ``err_<p>``: median relative error of each continuous parameter (mu; t0_s, t1_s)
- ``cover``: share of 95% intervals (all continuous parameters) that hold the truth
- ``auto``: share of ``model="auto"`` fits that pick the right family, or say the candidates
  are indistinguishable (``FitResult.indistinguishable`` names a model of the other family);
  ``unsure``: share that say so
- ``break``: share of plans whose recommended load breaks the target under the true model
  (exact M/M/c quantiles for CV 1; the M/G/c approximations of ``llmlat.queueing`` otherwise);
  the target is the true p95 at 70% of capacity

Targets (issue 10): c_exact >= 0.9, err <= 5%, cover in [0.90, 0.98], auto >= 0.9, break <= 5%.

    nice -n 10 .venv/bin/python benchmarks/bench_calibration.py --quick
    nice -n 10 .venv/bin/python benchmarks/bench_calibration.py --cells mmc-closed-c4-cv1

``--live`` adds a small set over HTTP against the embedded simulator (mmc mode).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

import llmlat
from llmlat import queueing
from llmlat._loadshapes import default_length
from llmlat._models import _mmck_quantile
from llmlat._synth import batch_closed_requests, mgc_sweep

MU = 2.0
_MMC_FAMILY = {"mm1", "mmc", "closed", "mgc"}


@dataclass(frozen=True)
class Cell:
    """One truth and sweep design."""

    name: str
    family: str  # "mmc" or "batch"
    kind: str  # "concurrency" or "rate"
    c: int  # servers, or slots for batch
    cv: float = 1.0
    queue_cap: int | None = None
    streamed: bool = True  # batch: the requests carry their inter-token latency

    def levels(self) -> list[float]:
        if self.family == "batch":  # powers of two up to twice the slots
            return [2**i for i in range(int(np.log2(self.c)) + 2)]
        if self.kind == "concurrency":
            grid = np.round(self.c * np.array([0.25, 0.5, 1.0, 1.5, 2.0, 3.0]))
            return sorted({1, 2, 4, *(int(v) for v in grid if v >= 1)})
        return [f * self.c * MU for f in (0.3, 0.6, 0.8, 0.9, 1.2)]

    def simulate(self, seed: int):
        if self.family == "batch":  # each level at llmlat's default length, no warmup
            parts = [
                batch_closed_requests(
                    [n],
                    self.c,
                    0.02,
                    0.002,
                    40,
                    n=default_length("concurrency", n)[0] or 0,
                    seed=seed * 1000 + n,
                    warmup=0,
                )
                for n in self.levels()
            ]
            data = pd.concat(parts, ignore_index=True)
            return data if self.streamed else data.drop(columns=["itl_mean_s"])
        return mgc_sweep(
            self.kind,
            self.levels(),
            MU,
            self.c,
            cv_s=self.cv,
            queue_cap=self.queue_cap,
            seed=seed,
        )

    def truth(self) -> dict[str, float]:
        if self.family == "batch":
            return {"slots": self.c, "t0_s": 0.02, "t1_s": 0.002}
        return {"c": self.c, "mu": MU}


def _cells() -> list[Cell]:
    cells = []
    for c in (1, 4, 16, 64):
        for cv in (1.0, 0.05):
            tag = f"c{c}-cv{cv:g}"
            cells.append(Cell(f"mmc-closed-{tag}", "mmc", "concurrency", c, cv))
            cells.append(Cell(f"mmc-open-{tag}", "mmc", "rate", c, cv))
            cells.append(Cell(f"mmc-opencap-{tag}", "mmc", "rate", c, cv, queue_cap=2 * c))
    cells += [Cell(f"batch-closed-s{s}", "batch", "concurrency", s) for s in (8, 32, 128)]
    cells.append(Cell("batch-closed-s32-plain", "batch", "concurrency", 32, streamed=False))
    return cells


QUICK = (
    "mmc-closed-c1-cv1",
    "mmc-closed-c4-cv1",
    "mmc-closed-c16-cv1",
    "mmc-closed-c4-cv0.05",
    "mmc-open-c4-cv1",
    "mmc-opencap-c4-cv1",
    "batch-closed-s8",
)


def _family(model: str) -> str:
    return "batch" if model == "batch" else ("mmc" if model in _MMC_FAMILY else "")


def _true_p95(cell: Cell, load: float, kind: str) -> float:
    n = np.array([int(load)])
    if cell.queue_cap is not None:  # admitted requests behind the cap: M/M/c/K
        p = {"mu": MU, "c": cell.c, "k_sys": cell.c + cell.queue_cap}
        if cell.cv != 1.0:
            p["cv_s"] = cell.cv
        return float(_mmck_quantile(0.95, np.array([load]), p)[0])
    if cell.cv == 1.0 and kind == "rate":
        out = queueing.mmc_response_quantile(0.95, load, MU, cell.c)
    elif cell.cv == 1.0:
        out = queueing.closed_mmc_response_quantile(0.95, n, MU, cell.c, 0.0)
    elif kind == "rate":
        out = queueing.mgc_response_quantile(0.95, load, MU, cell.c, cell.cv)
    else:
        out = queueing.closed_mgc_response_quantile(0.95, n, MU, cell.c, 0.0, cell.cv)
    return float(np.ravel(out)[0])


def _plan_breaks(cell: Cell, res) -> bool | None:
    if cell.family != "mmc":
        return None
    target = _true_p95(cell, 0.7 * cell.c * MU, "rate")
    plan = res.plan(p95=target)
    if not plan.feasible:
        return False  # says so instead of recommending a load
    if cell.kind == "rate":
        return bool(plan.rate_rps >= cell.c * MU or _true_p95(cell, plan.rate_rps, "rate") > target)
    if plan.concurrency is None:
        return True
    return _true_p95(cell, plan.concurrency, "concurrency") > target


def run_seed(cell: Cell, seed: int) -> dict:
    """Fit, compare and plan one seeded sweep of ``cell``: one row of the cell's figures."""
    warnings.simplefilter("ignore")
    truth = cell.truth()
    data = cell.simulate(1000 + seed)
    try:
        res = llmlat.fit(data, model=cell.family)
    except ValueError as exc:
        return {"failed": 1.0, "error": str(exc)[:80]}
    ci = res.conf_int()
    integer = "slots" if cell.family == "batch" else "c"
    row = {
        "failed": 0.0,
        "c_exact": float(res.params[integer] == truth[integer]),
        "c_cover": float(ci.loc[integer, "lower"] <= truth[integer] <= ci.loc[integer, "upper"]),
    }
    covers = []
    for name, value in truth.items():
        if name == integer:
            continue
        row[f"err_{name}"] = abs(res.params[name] / value - 1)
        covers.append(ci.loc[name, "lower"] <= value <= ci.loc[name, "upper"])
    row["cover"] = float(np.mean(covers))
    try:
        auto = llmlat.fit(data)
        fam = _family(auto.model)
        # unsure of the family: mmc against mgc (the same family) is no doubt about it
        unsure = any(_family(m) != fam for m in auto.indistinguishable)
        row["auto"] = float(fam == cell.family or unsure)
        row["unsure"] = float(unsure)
    except ValueError:
        row["auto"] = 0.0
    brk = _plan_breaks(cell, res)
    if brk is not None:
        row["break"] = float(brk)
    return row


def run_cell(cell: Cell, seeds: int, pool: ProcessPoolExecutor) -> dict[str, float]:
    started = time.perf_counter()
    rows = list(pool.map(run_seed, [cell] * seeds, range(seeds)))
    keys = sorted({k for r in rows for k in r if k != "error"})
    out = {"cell": cell.name, "n": len(rows), "secs": time.perf_counter() - started}
    for k in keys:
        vals = [r[k] for r in rows if k in r]
        out[k] = float(np.median(vals)) if k.startswith("err_") else float(np.mean(vals))
    errors = [r["error"] for r in rows if "error" in r]
    if errors:
        out["first_error"] = errors[0]
    return out


def _print(row: dict) -> None:
    keys = ["c_exact", "c_cover", "cover", "auto", "unsure", "break", "failed"]
    errs = [k for k in row if k.startswith("err_")]
    parts = [f"{row['cell']:26s} n={row['n']:<3d}"]
    parts += [f"{k}={row[k]:.2f}" for k in keys if k in row]
    parts += [f"{k}={100 * row[k]:.1f}%" for k in errs]
    parts.append(f"({row['secs']:.0f} s)")
    print("  ".join(parts), flush=True)
    if "first_error" in row:
        print(f"    first error: {row['first_error']}", flush=True)


def live(seeds: int) -> None:
    """A small set over HTTP: the simulator in mmc mode (c = 4, mu = 20), default lengths."""
    from llmlat.sim import Simulator

    mu = 20.0
    for seed in range(seeds):
        with Simulator(mode="mmc", slots=4, mu=mu, output_tokens=4, seed=seed) as sim:
            res = llmlat.sweep(
                "hello",
                url=sim.url,
                model="llmlat-sim",
                concurrency=[1, 2, 4, 6, 8, 12],
                progress=False,
                seed=seed,
            )
        fit = llmlat.fit(res, model="mmc")
        ci = fit.conf_int()
        print(
            f"  live seed {seed}: c={fit.params['c']:g} [{ci.loc['c', 'lower']:g}, "
            f"{ci.loc['c', 'upper']:g}]  mu={fit.params['mu']:.3f} "
            f"[{ci.loc['mu', 'lower']:.3f}, {ci.loc['mu', 'upper']:.3f}] (truth c=4, mu=20)",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="7 cells, 8 seeds: a few minutes")
    ap.add_argument("--cells", nargs="*", help="cell names (default: the whole grid)")
    ap.add_argument("--live", type=int, default=0, help="seeds of the live HTTP set")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    cells = _cells()
    names = args.cells or (QUICK if args.quick else [c.name for c in cells])
    seeds = 8 if args.quick and args.seeds == 20 else args.seeds
    print(f"calibration: {len(names)} cells x {seeds} seeds (mu = {MU})", flush=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        for cell in cells:
            if cell.name in names:
                _print(run_cell(cell, seeds, pool))
    if args.live:
        live(args.live)


if __name__ == "__main__":
    main()
