"""Live batch fits: how often do the 95% intervals of slots, t0 and t1 hold the simulator's truth?

Each seed sweeps the embedded simulator in ``batch`` mode over HTTP on 127.0.0.1 (streamed,
default level lengths, closed loop at powers of two up to twice the slots) and fits
``model="batch"``. The simulator's step lasts ``t0 + t1 * batch`` plus the prefill of the
sequences joining it, so the step time a streamed request sees grows by ``t1 + P / L`` per
sequence (P: one request's prefill, L: its output tokens): the prefill of the sequences that
join as others end, which the client cannot tell apart from ``t1`` (every request has the same
prompt). A request's own prefill is its first step, which its inter-token latency does not
time, so the step it sees holds the prefill of the b - 1 others joining: the intercept is
``t0 - P / L``. The script prints coverage of the configured ``t0`` and ``t1``, of those
effective ones, and how often the fit warns that the model does not fit. ``--fixed``: every
answer as long (``max_tokens`` with ``ignore_eos``, as vLLM's benchmarks), which keeps the
phases the sweep's start gave a level's clients.

    nice -n 5 .venv/bin/python benchmarks/bench_batch_live.py --seeds 3 [--fixed]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import llmlat
from llmlat._loadshapes import default_length
from llmlat.sim import Simulator

SLOTS, T0, T1, TOKENS, PREFILL = 8, 0.02, 0.005, 16, 5e-5


def run(seed: int, fixed: bool = False) -> dict[str, bool]:
    levels = [2**i for i in range(int(np.log2(SLOTS)) + 2)]
    with Simulator(
        mode="batch",
        slots=SLOTS,
        t0_s=T0,
        t1_s=T1,
        prefill_per_token_s=PREFILL,
        output_tokens=TOKENS,
        queue_limit=None,
        output_dist="fixed" if fixed else "uniform",
        seed=seed,
    ) as sim:
        started = time.perf_counter()
        res = llmlat.sweep(
            "Name three queueing models.",
            url=sim.url,
            model=sim.config.model,
            concurrency=levels,
            requests=[default_length("concurrency", n)[0] for n in levels],
            stream=True,
            progress=False,
            seed=seed,
        )
        secs = time.perf_counter() - started
    fit = llmlat.fit(res, model="batch")
    ci = fit.conf_int()
    prompt = float(res.requests["prompt_tokens"].mean())
    tokens = float(res.requests["completion_tokens"].mean())
    joins = PREFILL * prompt / tokens
    t1_eff = T1 + joins
    truth = {"slots": SLOTS, "t0_s": T0, "t1_s": T1, "t0_eff": T0 - joins, "t1_eff": t1_eff}
    held = {}
    for name, value in truth.items():
        row = ci.loc[name.replace("_eff", "_s")]
        held[name] = bool(row["lower"] <= value <= row["upper"])
    held["misfit"] = any("does not fit" in n for n in fit.notes)
    print(
        f"  seed {seed}: slots {fit.params['slots']:g} [{ci.loc['slots', 'lower']:g}, "
        f"{ci.loc['slots', 'upper']:g}]  t0 {fit.params['t0_s']:.6f} "
        f"[{ci.loc['t0_s', 'lower']:.6f}, {ci.loc['t0_s', 'upper']:.6f}]  t1 "
        f"{fit.params['t1_s']:.6f} [{ci.loc['t1_s', 'lower']:.6f}, {ci.loc['t1_s', 'upper']:.6f}]"
        f"  (truth {SLOTS}, {T0}, {T1}; t0 - P/L = {T0 - joins:.6f}, t1 + P/L = {t1_eff:.6f}; "
        f"sweep {secs:.0f} s)",
        flush=True,
    )
    return held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--fixed", action="store_true", help="every answer of the same length")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    rows = [run(seed, args.fixed) for seed in range(args.seeds)]
    cover = {k: np.mean([r[k] for r in rows]) for k in rows[0]}
    print("  cover (misfit: share warned): " + "  ".join(f"{k}={v:.2f}" for k, v in cover.items()))


if __name__ == "__main__":
    main()
