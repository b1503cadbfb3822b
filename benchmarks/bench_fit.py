"""Time to fit each queueing model on 10,000 and 1,000,000 request rows; Erlang C throughput.

Data are exact M/M/c queues from the seeded event simulation in ``llmlat._synth`` (not timed):
a closed-loop sweep (5 concurrency levels, no think time) for ``mm1``, ``mmc``, ``closed`` and
``batch``, and an open-loop sweep (4 rates) for ``mgc``; and the InferenceX minimax table
(``datasets/``) for the batch fit and ``auto``. Each fit is timed once after a warm-up
fit on small data (imports and caches excluded), with no estimate remembered from an earlier
fit of the same data (``llmlat.fitting._estimate._MEMO``: a refit is a lookup) nor any state
solved for it (:data:`_DATA_CACHES`). Target: a million rows in under 5 s.

    .venv/bin/python benchmarks/bench_fit.py [--rows 10000 1000000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

import llmlat
from llmlat import _models, queueing
from llmlat._loadshapes import default_length
from llmlat._summary import summarize
from llmlat._synth import batch_closed_requests, mgc_sweep, mmc_closed_requests, mmc_open_requests
from llmlat.fitting import _estimate

C, MU = 4, 2.0
CLOSED_LEVELS = [1, 2, 4, 8, 16]
OPEN_RATES = [f * C * MU for f in (0.3, 0.6, 0.8, 0.9)]


#: what a fit remembers of the data it saw: a user's next fit is of new data, so each fit is
#: timed with all of it forgotten
_DATA_CACHES = (
    _models._mdck_cached,
    _models._fast_server_cached,
    queueing._mdc_queue,
    queueing._log_falling,
)


def timed(fn) -> tuple[float, object]:
    _estimate._MEMO.clear()
    for cache in _DATA_CACHES:
        cache.cache_clear()
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def bench_fits(rows: int) -> None:
    closed = mmc_closed_requests(CLOSED_LEVELS, MU, C, n=rows // len(CLOSED_LEVELS), seed=1)
    open_ = mmc_open_requests(OPEN_RATES, MU, C, n=rows // len(OPEN_RATES), seed=2)
    cases = [
        ("mm1", closed),
        ("mmc", closed),
        ("closed", closed),
        ("batch", closed),
        ("mmc", open_),
        ("mgc", open_),
    ]
    for model, data in cases:
        kind = data["level_kind"].iloc[0]
        secs, res = timed(lambda m=model, d=data: llmlat.fit(d, model=m))
        params = ", ".join(f"{k}={v:.4g}" for k, v in res.params.items())
        print(
            f"  {model:7s} {kind:12s} {len(data):>9,d} rows  {secs:7.3f} s  [{res.method}] {params}"
        )


def bench_typical() -> None:
    """Typical %llmfit sweeps at llmlat's default lengths (targets 1 s, 3 s): 10 closed levels,
    5 open rates behind a queue cap (M/M/c/K, c = 16, 32 waiting places) with exponential and
    with near-constant service (CV 0.05, a llama.cpp server's), the same rates without a
    cap on near-constant servers (M/G/c), and near-constant service on 64 servers behind 128
    places (the dearest capped law: M/D/c/K chains of up to K + 16 states); and each mmc
    fit's ``plan(p95=0.6)`` (services of 0.5 s). And a streamed closed sweep of a batching
    server (32 slots, 9 levels up to N = 64 at the default lengths, max(100, 10 N) requests),
    fitted with ``model="batch"`` (target 1 s) and auto."""
    rates = [f * 16 * MU for f in (0.3, 0.6, 0.8, 0.9, 1.2)]
    sweeps = [
        ("closed", mgc_sweep("concurrency", [1, 2, 4, 8, 12, 16, 24, 32, 48, 64], MU, 16, seed=3)),
        *(
            (name, mgc_sweep("rate", rates, MU, 16, cv_s=cv, queue_cap=32, seed=5))
            for name, cv in (("opencap", 1.0), ("capcv.05", 0.05))
        ),
        ("open", mgc_sweep("rate", rates, MU, 16, cv_s=0.05)),
        (
            "c64cv.05",
            mgc_sweep("rate", [4 * r for r in rates], MU, 64, cv_s=0.05, queue_cap=128, seed=5),
        ),
    ]
    batch = [
        batch_closed_requests(
            [n], 32, 0.02, 0.001, 40, n=default_length("concurrency", n)[0], seed=n, warmup=0
        )
        for n in (1, 2, 4, 8, 16, 24, 32, 48, 64)
    ]
    sweeps.append(("batch", pd.concat(batch, ignore_index=True)))
    for name, data in sweeps:
        base, _ = timed(lambda d=data: summarize(d))
        levels = data["level"].nunique()
        first = "batch" if name == "batch" else "mmc"
        for model, target in ((first, 1.0), ("auto", 3.0)):
            secs, res = timed(lambda m=model, d=data: llmlat.fit(d, model=m))
            plan = ""
            if model == "mmc":
                plan_s, _ = timed(lambda r=res: r.plan(p95=0.6))
                plan = f"; plan(p95=0.6) {plan_s:.2f} s"
            print(
                f"  {name:8s} {model:5s} {len(data):>6,d} rows, {levels} levels  {secs:6.2f} s "
                f"(target <= {target:g} s; {secs / base:.0f}x the summary's {base * 1e3:.0f} ms)"
                f"  -> {res.model} {res._model.integer}="
                f"{res.params.get(res._model.integer, float('nan')):g}{plan}"
            )


def bench_public() -> None:
    """The InferenceX minimax table (8 closed levels up to N = 512, streamed): the batch fit
    profiles the slot cap over 1..512 with two step-time forms (targets 1 s, auto 3 s)."""
    table = llmlat.datasets.load("inferencex-closedloop/minimax-m2.5")
    for model, target in (("batch", 1.0), ("auto", 3.0)):
        cpu = time.process_time()
        secs, res = timed(lambda m=model: llmlat.fit(table, model=m))
        cpu = time.process_time() - cpu
        print(
            f"  minimax {model:5s} {len(table)} levels  {secs:6.2f} s ({cpu:.2f} s CPU; target "
            f"<= {target:g} s), {len(res.profile)} slot caps profiled  -> {res._params_text()}"
        )


def bench_erlang() -> None:
    a = np.linspace(1.0, 999.0, 10_000)
    queueing.erlang_c(1000, a[:10])  # warm-up
    secs, _ = timed(lambda: queueing.erlang_c(1000, a))
    print(f"  erlang_c: 10,000 evaluations at c = 1,000 (vectorised)  {secs * 1e3:.1f} ms")
    secs, _ = timed(lambda: [queueing.erlang_c(1000, x) for x in a[:1000]])
    print(f"  erlang_c: 1,000 scalar calls at c = 1,000               {secs * 1e3:.1f} ms")
    secs, _ = timed(lambda: queueing.erlang_c(10_000, np.linspace(1, 9999, 10_000)))
    print(f"  erlang_c: 10,000 evaluations at c = 10,000 (vectorised) {secs * 1e3:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--typical", action="store_true", help="the typical sweeps only")
    args = parser.parse_args()
    warm = mmc_closed_requests(CLOSED_LEVELS, MU, C, n=200, seed=0)
    for model in ("mm1", "mmc", "closed", "batch"):
        llmlat.fit(warm, model=model)
    llmlat.fit(mgc_sweep("rate", [1.0, 2.0, 3.0], MU, 2, queue_cap=4, seed=1), model="mmc")
    print("typical sweep")
    bench_typical()
    if args.typical:
        return
    print("public table")
    bench_public()
    for rows in args.rows:
        print(f"fit ({rows:,} request rows)")
        bench_fits(rows)
    print("Erlang C")
    bench_erlang()


if __name__ == "__main__":
    main()
