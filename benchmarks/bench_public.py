"""Public data: the llm-d 70B 2-replica vs 1-replica capacity ratio, and InferenceX slots.

The llm-d LMBenchmark files (vLLM, Llama-70B, open loop at swept request rates) are read from a
folder given on the command line: their license is unclear, so they are not in the repository.
Each ``LMBench_sharegpt_output_<qps>.csv`` becomes one level of a requests table (``rate``
sweep, deterministic arrivals) and each deployment is fitted with ``mmc``; the printed figure is
the ratio of the fitted capacities (issue 10 target: 1.6 to 2.1; the saturation points of the
raw tables say about 1.7). InferenceX (``datasets/``): the batch fit's slot cap, which must read
"not identified" where no queue builds.

    .venv/bin/python benchmarks/bench_public.py /path/to/llmd-lmbench
"""

from __future__ import annotations

import argparse
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import llmlat

ONE = "k8s_llama31-70b_vllm_1replica"
TWO = "openshift_exp2_llama70b_vllm_2replicas"


def requests(folder: Path) -> pd.DataFrame:
    """One requests table (record schema columns) from a folder of sharegpt files."""
    parts = []
    for path in sorted(folder.glob("LMBench_sharegpt_output_*.csv")):
        qps = float(re.search(r"_([0-9.]+)\.csv$", path.name).group(1))
        raw = pd.read_csv(path)
        t0 = float(raw["launch_time"].min())
        sent = raw["launch_time"].to_numpy() - t0
        end = raw["finish_time"].to_numpy() - t0
        tokens = raw["generation_tokens"].to_numpy()
        parts.append(
            pd.DataFrame(
                {
                    "level": qps,
                    "level_kind": "rate",
                    "request_id": np.arange(len(raw)),
                    "phase": "measure",
                    "t_scheduled": sent,
                    "t_sent": sent,
                    "t_end": end,
                    "latency_s": end - sent,
                    "ttft_s": raw["ttft"].to_numpy(),
                    "itl_mean_s": raw["generation_time"].to_numpy() / np.fmax(tokens - 1, 1),
                    "prompt_tokens": raw["prompt_tokens"].to_numpy(),
                    "completion_tokens": tokens,
                    "ok": True,
                }
            )
        )
    if not parts:
        raise SystemExit(f"no LMBench_sharegpt_output_*.csv in {folder}")
    return pd.concat(parts, ignore_index=True)


def llmd(root: Path) -> None:
    caps = {}
    for name in (ONE, TWO):
        res = llmlat.fit(requests(root / name), model="mmc")
        lv = res.levels
        over = [f"{v:g}" for v in lv.index[lv["overloaded"]]] if "overloaded" in lv else []
        caps[name] = res.capacity_rps
        print(
            f"{name}: c={res.params['c']:g} mu={res.params['mu']:.4g} "
            f"capacity {res.capacity_rps:.3f} req/s; overloaded levels: {', '.join(over) or '-'}"
        )
    ratio = caps[TWO] / caps[ONE]
    verdict = "meets" if 1.6 <= ratio <= 2.1 else "MISSES"
    print(f"llm-d 70B capacity ratio 2 replicas / 1 replica: {ratio:.2f} ({verdict} [1.6, 2.1])")


def inferencex() -> None:
    for name in ("inferencex-closedloop/minimax-m2.5", "inferencex-closedloop/gpt-oss-120b"):
        res = llmlat.fit(llmlat.datasets.load(name), model="batch")
        slots = res.unidentified.get("slots", f"slots = {res.params['slots']:g} (identified)")
        print(f"{name}: {slots}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("llmd", type=Path, help="the llmd-lmbench folder (holds the two 70B folders)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    llmd(args.llmd)
    inferencex()


if __name__ == "__main__":
    main()
