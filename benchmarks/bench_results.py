"""Cost of the dataset writer and the summary: what saving and summarizing add to a sweep.

Prints the CPU microseconds per appended request (one Record and one Attempt, in batches as the
engine writes them), the time to close (write the final parquet files) and to read back, and the
time to summarize, for 100,000 requests over 7 levels.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from llmlat.results import DatasetWriter, read
from llmlat.schema import Attempt, LevelStats, Record

N = 100_000
BATCH = 64
LEVELS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)


def records(rng: np.random.Generator) -> tuple[list[Record], list[Attempt]]:
    recs, atts = [], []
    for i in range(N):
        level = LEVELS[i * len(LEVELS) // N]
        start = i * 0.01
        latency = float(rng.gamma(4.0, 0.25))
        rec = Record(
            "bench", level, "concurrency", i, worker=i % 100, t_scheduled=start, t_sent=start,
            t_first_byte=start + 0.05, t_first_token=start + 0.1, t_end=start + latency,
            latency_s=latency, service_s=latency, ttft_s=0.1, lag_s=0.0, itl_mean_s=0.01,
            itl_p50_s=0.01, itl_max_s=0.05, tpot_s=0.01, chunks=32, in_flight=int(level),
            ok=True, status=200, attempts=1, prompt_tokens=100, completion_tokens=32,
        )  # fmt: skip
        recs.append(rec)
        atts.append(Attempt("bench", level, i, 1, t_sent=start, t_end=start + latency, status=200))
    return recs, atts


def main() -> None:
    recs, atts = records(np.random.default_rng(0))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.parquet"
        writer = DatasetWriter(path, {"run_id": "bench", "levels": list(LEVELS)})
        cpu = time.process_time()
        for i in range(0, N, BATCH):
            writer.append(recs[i : i + BATCH], atts[i : i + BATCH])
        append_us = (time.process_time() - cpu) / N * 1e6
        for level in LEVELS:
            writer.add_level(LevelStats("bench", level, "concurrency"))
        journal_mb = path.with_name(path.name + ".journal").stat().st_size / 1e6
        wall = time.perf_counter()
        partial = read(path)
        recover_s = time.perf_counter() - wall
        wall = time.perf_counter()
        writer.close()
        close_s = time.perf_counter() - wall
        files_mb = sum(p.stat().st_size for p in Path(tmp).iterdir()) / 1e6
        wall = time.perf_counter()
        result = read(path)
        read_s = time.perf_counter() - wall
        assert len(result.requests) == len(partial.requests) == N
        wall = time.perf_counter()
        table = result.summary()
        summary_s = time.perf_counter() - wall
        assert len(table) == len(LEVELS)
    print(f"append: {append_us:.1f} us CPU per request (+ its attempt), batches of {BATCH}")
    print(f"journal: {journal_mb:.1f} MB for {N:,} requests; recovering it: {recover_s:.2f} s")
    print(f"close (final parquet + sidecar): {close_s:.2f} s; files: {files_mb:.1f} MB")
    print(f"read: {read_s:.2f} s; summary over {len(LEVELS)} levels: {summary_s:.2f} s")


if __name__ == "__main__":
    main()
