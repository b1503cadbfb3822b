"""Rebuild the per-level CSVs from the raw vLLM ``benchmark_serving`` JSONs in ``raw/``.

Run from this folder: ``python convert.py``. One row per concurrency level; times in seconds.
"""

import json
from pathlib import Path

import pandas as pd

HERE = Path(__file__).parent
MS = 1e-3


def row(path: Path) -> dict:
    d = json.loads(path.read_text())
    n = d["completed"]
    out = {
        "level": float(d["max_concurrency"]),
        "level_kind": "concurrency",
        "n": n,
        "n_failed": d["num_prompts"] - n,
        "duration_s": d["duration"],
        "throughput_rps": d["request_throughput"],
        "output_tokens_per_s": d["output_throughput"],
        "prompt_tokens_mean": d["total_input_tokens"] / n,
        "completion_tokens_mean": d["total_output_tokens"] / n,
        "think_s": 0.0,
    }
    for ours, theirs in (("latency", "e2el"), ("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl")):
        out[f"{ours}_mean_s"] = d[f"mean_{theirs}_ms"] * MS
        out[f"{ours}_std_s"] = d[f"std_{theirs}_ms"] * MS
        out[f"{ours}_p50_s"] = d[f"median_{theirs}_ms"] * MS
        out[f"{ours}_p90_s"] = d[f"p90_{theirs}_ms"] * MS
        out[f"{ours}_p99_s"] = d[f"p99_{theirs}_ms"] * MS
    return out


for folder in sorted(p for p in (HERE / "raw").iterdir() if p.is_dir()):
    rows = [row(p) for p in folder.glob("concurrency_*.json")]
    table = pd.DataFrame(rows).sort_values("level")
    table.to_csv(HERE / f"{folder.name}.csv", index=False, float_format="%.6g")
