"""Live batch fits: how often do the 95% intervals of slots, t0 and t1 hold the simulator's truth?

Each seed sweeps the embedded simulator in ``batch`` mode over HTTP on 127.0.0.1 (streamed,
default level lengths, closed loop at powers of two up to twice the slots) and fits
``model="batch"``. The simulator's step lasts ``t0 + t1 * batch`` plus the prefill of the
sequences joining it, so the step time a streamed request sees grows by ``t1 + P / L`` per
sequence (P: one request's prefill, L: its output tokens): the prefill of the sequences that
join as others end, which the client cannot tell apart from ``t1`` (every request has the same
prompt). The script prints coverage of the configured ``t1`` and of that effective one.

    nice -n 5 .venv/bin/python benchmarks/bench_batch_live.py --seeds 3
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


def run(seed: int) -> dict[str, bool]:
    levels = [2**i for i in range(int(np.log2(SLOTS)) + 2)]
    with Simulator(
        mode="batch",
        slots=SLOTS,
        t0_s=T0,
        t1_s=T1,
        prefill_per_token_s=PREFILL,
        output_tokens=TOKENS,
        queue_limit=None,
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
    t1_eff = T1 + PREFILL * prompt / tokens
    truth = {"slots": SLOTS, "t0_s": T0, "t1_s": T1, "t1_eff": t1_eff}
    held = {}
    for name, value in truth.items():
        row = ci.loc["t1_s" if name == "t1_eff" else name]
        held[name] = bool(row["lower"] <= value <= row["upper"])
    print(
        f"  seed {seed}: slots {fit.params['slots']:g} [{ci.loc['slots', 'lower']:g}, "
        f"{ci.loc['slots', 'upper']:g}]  t0 {fit.params['t0_s']:.6f} "
        f"[{ci.loc['t0_s', 'lower']:.6f}, {ci.loc['t0_s', 'upper']:.6f}]  t1 "
        f"{fit.params['t1_s']:.6f} [{ci.loc['t1_s', 'lower']:.6f}, {ci.loc['t1_s', 'upper']:.6f}]"
        f"  (truth {SLOTS}, {T0}, {T1}; t1 + P/L = {t1_eff:.6f}; sweep {secs:.0f} s)",
        flush=True,
    )
    return held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    rows = [run(seed) for seed in range(args.seeds)]
    cover = {k: np.mean([r[k] for r in rows]) for k in rows[0]}
    print("  cover: " + "  ".join(f"{k}={v:.2f}" for k, v in cover.items()), flush=True)


if __name__ == "__main__":
    main()
