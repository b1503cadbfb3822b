"""SweepResult, summarize(), the saved dataset and the crash-safe writer: pure data tests."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import llmlat
from llmlat import stats
from llmlat._summary import SUMMARY_COLUMNS, summarize
from llmlat.results import DatasetWriter, SweepResult, read
from llmlat.schema import (
    ATTEMPT_COLUMNS,
    LEVEL_COLUMNS,
    REQUEST_COLUMNS,
    Attempt,
    LevelStats,
    Record,
    attempts_frame,
    levels_frame,
    requests_frame,
)

RUN = "run-1"


def rec(level, i, start, latency, kind="concurrency", **kw):
    """A finished request that started at ``start`` and took ``latency`` seconds."""
    kw.setdefault("ok", True)
    kw.setdefault("status", 200 if kw["ok"] else None)
    kw.setdefault("attempts", 1)
    return Record(
        RUN,
        float(level),
        kind,
        i,
        t_scheduled=start,
        t_sent=start,
        t_end=start + latency,
        latency_s=latency,
        **kw,
    )


def one(summary: pd.DataFrame, level: float) -> pd.Series:
    rows = summary[summary["level"] == level]
    assert len(rows) == 1
    return rows.iloc[0]


# ---------------------------------------------------------------- summary values


def test_percentiles_and_means_match_hand_computed_values():
    rng = np.random.default_rng(7)
    latencies = rng.permutation(np.arange(1, 102, dtype=float))  # 1..101, shuffled
    starts = np.concatenate([[0.0], np.cumsum(latencies)[:-1]])  # one in flight, back to back
    records = [
        rec(1, i, s, lat, ttft_s=lat / 10, itl_mean_s=lat / 100)
        for i, (s, lat) in enumerate(zip(starts, latencies, strict=True))
    ]
    row = one(SweepResult(requests_frame(records)).summary(), 1.0)
    # numpy's linear interpolation on 1..101: p-th percentile = 1 + p/100 * 100
    for name, scale in (("latency", 1.0), ("ttft", 0.1), ("itl", 0.01)):
        expected = {"mean": 51, "p50": 51, "p90": 91, "p95": 96, "p99": 100}
        for stat, value in expected.items():
            assert row[f"{name}_{stat}_s"] == pytest.approx(value * scale, rel=1e-12)
    assert row["span_s"] == pytest.approx(5151.0)  # 1 + 2 + ... + 101
    # Little's law with one client: the 100 requests before the last send over their latencies
    # (one in flight throughout), less the ratio's bias: their mean's relative variance
    mean, se, _ = stats.batch_means(latencies[:100])
    assert row["throughput_rps"] == pytest.approx(
        100 / (5151 - latencies[100]) * (1 - (se / mean) ** 2)
    )
    assert row["mean_in_flight"] == pytest.approx(1.0)


def open_loop_level():
    """Ten sends at 1/s (rate level 1.0), each 1 s long, with a mix of outcomes.

    0-4 ok; 5 ok after one 429; 6-8 refused (429 twice); 9 timed out.
    """
    records, attempts = [], []
    for i in range(10):
        kw: dict = {"lag_s": 0.01 * i}
        if i <= 5:
            kw.update(ok=True, completion_tokens=10, attempts=2 if i == 5 else 1)
            statuses = [429, 200] if i == 5 else [200]
        elif i <= 8:
            kw.update(ok=False, status=429, error_kind="rate_limited", attempts=2)
            statuses = [429, 429]
        else:
            kw.update(ok=False, error_kind="timeout", error="read timed out")
            statuses = [None]
        records.append(rec(1.0, i, float(i), 1.0, kind="rate", **kw))
        attempts += [Attempt(RUN, 1.0, i, k + 1, status=s) for k, s in enumerate(statuses)]
    return records, attempts


def test_rates_throughput_and_littles_law_by_hand():
    records, attempts = open_loop_level()
    row = one(summarize(requests_frame(records), attempts_frame(attempts)), 1.0)
    assert row["level_kind"] == "rate"
    assert (row["n"], row["ok"]) == (10, 6)
    assert row["ok_rate"] == pytest.approx(0.6)
    assert row["error_rate"] == pytest.approx(0.4)
    assert row["rate_limited_rate"] == pytest.approx(0.3)
    assert row["http_429"] == 7  # 1 before request 5's success + 2 for each of 6, 7, 8
    assert row["retries"] == 4
    assert row["span_s"] == pytest.approx(10.0)  # first send at 0, last end at 10
    # steady window (first end 1, last start 9]: ok ends 2..6
    assert row["throughput_rps"] == pytest.approx(5 / 8)
    assert row["output_tokens_per_s"] == pytest.approx(50 / 8)  # 5 x 10 tokens over 8 s
    assert row["target_rate_rps"] == 1.0
    assert row["achieved_rate_rps"] == pytest.approx(1.0)  # 9 gaps over 9 s
    assert row["mean_in_flight"] == pytest.approx(1.0)
    assert row["lag_p99_s"] == pytest.approx(0.01 * 0.99 * 9)
    # window [2.5, 7.5): starts 3..7, each 1 s; exactly one in flight at every instant
    assert row["littles_law_rel_err"] == pytest.approx(0.0, abs=1e-12)
    assert pd.isna(row["client_bound"])  # no levels table


def flag(row: pd.Series, column: str) -> bool | None:
    """A boolean summary cell as True / False / None (for <NA>)."""
    return None if pd.isna(row[column]) else bool(row[column])


def test_littles_law_on_a_trimmed_window_and_steady_state():
    # a send every second, each 2 s long: two in flight once started
    steady = [rec(1.0, i, float(i), 2.0, kind="rate") for i in range(40)]
    row = one(summarize(requests_frame(steady)), 1.0)
    # span 41 s, window [10.25, 30.75): 20 starts x 2 s over 20.5 s, against L = 2
    assert row["littles_law_rel_err"] == pytest.approx(40 / 41 - 1, rel=1e-12)
    assert row["mean_in_flight"] == pytest.approx(80 / 41)
    assert flag(row, "steady") is True

    # too short to hold: 10 workers, a round of 1 s then one of 3 s; span 4 s, window [1, 3):
    # 10 starts x 3 s over 2 s = 15 against 10 in flight
    short = [rec(10, i, 0.0, 1.0) for i in range(10)]
    short += [rec(10, 10 + i, 1.0, 3.0) for i in range(10)]
    row = one(summarize(requests_frame(short)), 10.0)
    assert row["littles_law_rel_err"] == pytest.approx(0.5)
    assert flag(row, "steady") is False
    # one round only: nobody starts inside the window while 10 are in flight
    row = one(summarize(requests_frame(short[:10])), 10.0)
    assert row["littles_law_rel_err"] == -1.0

    # overload: sends at 1/s, the server finishes one per 2 s, so the latency keeps growing
    growing = [rec(1.0, i, float(i), 2.0 * (i + 1) - i, kind="rate") for i in range(40)]
    assert flag(one(summarize(requests_frame(growing)), 1.0), "steady") is False


def test_steady_needs_enough_requests_and_a_constant_completion_rate():
    # counted past the first round (the start-up transient): 30 - 10 < 3 x 10 in flight
    few = one(summarize(requests_frame([rec(10, i, 0.1 * i, 1.0) for i in range(30)])), 10.0)
    assert (few["n"], few["n_transient"]) == (30, 10)
    assert flag(few, "steady") is False
    enough = [rec(10, i, 0.1 * i, 1.0) for i in range(40)]
    assert flag(one(summarize(requests_frame(enough)), 10.0), "steady") is True
    # same latency throughout, but 30 sends in the first 10 s and 10 in the next 30 s
    starts = np.concatenate([np.linspace(0, 10, 30), np.linspace(11, 40, 10)])
    bunched = [rec(1.0, i, s, 1.0, kind="rate") for i, s in enumerate(starts)]
    assert flag(one(summarize(requests_frame(bunched)), 1.0), "steady") is False


def test_client_bound_from_the_levels_table():
    records = [rec(c, 10 * c + i, float(i), 1.0) for c in (1, 2, 3, 4) for i in range(5)]
    levels = levels_frame(
        [
            LevelStats(RUN, 1.0, "concurrency", cpu_util=0.9, loop_lag_p99_s=0.001),
            LevelStats(RUN, 2.0, "concurrency", cpu_util=0.1, loop_lag_p99_s=0.5),
            LevelStats(RUN, 3.0, "concurrency", cpu_util=0.1, loop_lag_p99_s=0.01),
        ]
    )
    table = summarize(requests_frame(records), None, levels)
    assert list(table["client_bound"].astype(object)) == [True, True, False, pd.NA]
    assert table["loop_lag_p99_s"].tolist()[:3] == [0.001, 0.5, 0.01]
    assert table["inflation"].tolist()[:3] == pytest.approx([0.001, 0.5, 0.01])  # of 1 s
    assert math.isnan(table["inflation"].iloc[3])
    # every request failed fast: the lag is compared with the failures' latency
    failed = [rec(3, i, float(i), 0.05, ok=False, status=400) for i in range(5)]
    assert bool(summarize(requests_frame(failed), None, levels)["client_bound"].iloc[0])
    assert list(table["stopped_by"].astype(object)) == ["requests"] * 3 + [pd.NA]


def test_client_bound_judges_the_lag_against_the_smallest_latency():
    # the issue's 2,000 req/s: 20 ms of lag on a 20 ms TTFT inside a 1 s latency
    levels = levels_frame([LevelStats(RUN, 1.0, "concurrency", cpu_util=0.1, loop_lag_p99_s=0.02)])

    def row(ttft_s, itl_s):
        records = [rec(1, i, float(i), 1.0, ttft_s=ttft_s, itl_mean_s=itl_s) for i in range(20)]
        return one(summarize(requests_frame(records), None, levels), 1.0)

    by_ttft = row(0.02, 0.05)
    assert bool(by_ttft["client_bound"]) and by_ttft["inflation"] == pytest.approx(1.0)
    by_itl = row(0.5, 0.04)  # ITL is then the smallest figure
    assert bool(by_itl["client_bound"]) and by_itl["inflation"] == pytest.approx(0.5)
    # tokens read together (ITL ~ 0) are not an interval a lag inflates; TTFT decides
    together = row(0.5, 1e-5)
    assert not together["client_bound"] and together["inflation"] == pytest.approx(0.04)
    # without streamed figures the whole latency is the reference, as before
    whole = row(math.nan, math.nan)
    assert not whole["client_bound"] and whole["inflation"] == pytest.approx(0.02)


def test_warmup_rows_and_their_attempts_are_excluded():
    records, attempts = open_loop_level()
    base = SweepResult(requests_frame(records), attempts_frame(attempts)).summary()
    warm = [
        rec(1.0, 100 + i, -50.0 + i, 30.0, kind="rate", phase="warmup", ok=False, status=429)
        for i in range(5)
    ]
    warm_attempts = [Attempt(RUN, 1.0, 100 + i, 1, status=429) for i in range(5)]
    result = SweepResult(requests_frame(records + warm), attempts_frame(attempts + warm_attempts))
    pd.testing.assert_frame_equal(result.summary(), base)
    warm_row = one(result.summary(phase="warmup"), 1.0)
    assert (warm_row["n"], warm_row["http_429"]) == (5, 5)
    assert one(result.summary(phase=None), 1.0)["n"] == 15
    with pytest.raises(ValueError, match="phase"):
        result.summary(phase="cooldown")


def test_summarize_tolerates_a_minimal_public_table():
    table = pd.DataFrame({"level": [1, 1, 1, 2], "latency_s": [1.0, 2.0, 3.0, 5.0]})
    out = summarize(table)
    assert list(out["level"]) == [1.0, 2.0]
    first = one(out, 1.0)
    assert (first["n"], first["ok"]) == (3, 3)  # no ok/status column: every row counts as ok
    assert first["latency_p50_s"] == 2.0
    for column in ("throughput_rps", "ttft_p50_s", "rate_limited_rate", "output_tokens_per_s"):
        assert math.isnan(first[column]), column
    for column in ("http_429", "retries", "steady", "client_bound", "level_kind"):
        assert pd.isna(first[column]), column
    # times without t_scheduled or ttft: the span comes from t_sent
    timed = table.assign(t_sent=[0.0, 1.0, 2.0, 0.0], status=[200, 200, 500, 200])
    timed["t_end"] = timed["t_sent"] + timed["latency_s"]
    first = one(summarize(timed), 1.0)
    assert first["ok"] == 2
    assert first["span_s"] == pytest.approx(5.0)  # sends at 0, last end at 2 + 3
    assert first["throughput_rps"] == pytest.approx(2 / 5)
    with pytest.raises(ValueError, match="level"):
        summarize(pd.DataFrame({"latency_s": [1.0]}))


def test_empty_and_partial_results():
    empty = SweepResult()
    table = empty.summary()
    assert table.empty
    assert dict(table.dtypes.astype(str)) == SUMMARY_COLUMNS
    assert "0 requests" in repr(empty)
    assert "<table" in empty._repr_html_()
    assert empty.run_id is None
    # a level that started but finished nothing still has its row
    levels = levels_frame([LevelStats(RUN, 5.0, "concurrency", stopped_by="interrupted")])
    row = one(SweepResult(levels=levels).summary(), 5.0)
    assert row["n"] == 0
    assert row["stopped_by"] == "interrupted"
    assert math.isnan(row["latency_p50_s"])


# ---------------------------------------------------------------- saving and reading


def varied_result() -> SweepResult:
    """Rows exercising every kind of missing value, warmup, unicode and large numbers."""
    records = [
        rec(2, 0, 0.0, 1.5, ttft_s=0.25, prompt_tokens=12, completion_tokens=2**40, worker=0),
        rec(2, 1, 0.5, 0.75, phase="warmup", in_flight=2, cached_tokens=0),
        Record(
            RUN,
            2.0,
            "concurrency",
            2,
            t_scheduled=1.0,
            ok=False,
            error_kind="cancelled",
            error='annulé ☃ "quoted"\nnewline',
            attempts=1,
        ),
        rec(
            10,
            3,
            2.0,
            1e-9,
            ok=False,
            status=503,
            error_kind="server_error",
            attempts=4,
            retry_wait_s=3.25,
            retry_after_s=float("inf"),
        ),
    ]
    attempts = [
        Attempt(RUN, 2.0, 0, 1, t_sent=0.0, t_end=1.5, status=200),
        Attempt(RUN, 10.0, 3, 1, status=503, error="busy", retry_after_s=1.0),
    ]
    levels = [
        LevelStats(RUN, 2.0, "concurrency", 0.0, 3.0, 3, "requests", 1e-4, 2e-3, 0.01, 0.5, 0.2),
        LevelStats(RUN, 10.0, "concurrency", 3.0, stopped_by="interrupted"),
    ]
    meta = {
        "run_id": RUN,
        "api": "openai-chat",
        "model": "sim-1",
        "url": "http://127.0.0.1:8000",
        "levels": (2, 10),
        "load": {"concurrency": [2, 10], "think_time_s": 0.0, "max_in_flight": None},
        "seed": np.int64(3),
        "t0_perf_s": 12345.678901234567,
        "note": "ünïcode",
        "interrupted": False,
    }
    return SweepResult(
        requests_frame(records), attempts_frame(attempts), levels_frame(levels), meta
    )


def assert_same(a: SweepResult, b: SweepResult) -> None:
    for name in ("requests", "attempts", "levels"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert a.meta == b.meta


def test_round_trip_is_exact(tmp_path):
    result = varied_result()
    assert result.meta["levels"] == [2, 10] and result.meta["seed"] == 3  # JSON-normal already
    path = result.save(tmp_path / "sub" / "run.parquet")
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "run.attempts.parquet",
        "run.parquet",
        "run.parquet.json",
    ]
    back = read(path)
    assert_same(result, back)
    assert dict(back.requests.dtypes.astype(str)) == REQUEST_COLUMNS
    assert dict(back.attempts.dtypes.astype(str)) == ATTEMPT_COLUMNS
    assert dict(back.levels.dtypes.astype(str)) == LEVEL_COLUMNS
    assert pd.isna(back.requests.loc[2, "status"]) and pd.isna(back.requests.loc[0, "error"])
    assert math.isinf(back.requests.loc[3, "retry_after_s"])
    assert back.requests.loc[0, "completion_tokens"] == 2**40
    assert llmlat.read is read
    # the empty result and a path without the .parquet suffix
    read(SweepResult().save(tmp_path / "empty"))
    assert (tmp_path / "empty.attempts.parquet").exists()
    assert_same(read(tmp_path / "empty"), SweepResult())


def test_read_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope.parquet"
    with pytest.raises(FileNotFoundError, match=r"nope\.parquet"):
        read(missing)
    garbage = tmp_path / "garbage.parquet"
    garbage.write_text("not parquet")
    with pytest.raises(ValueError, match=r"garbage\.parquet"):
        read(garbage)
    path = varied_result().save(tmp_path / "run.parquet")
    sidecar = tmp_path / "run.parquet.json"
    sidecar.write_text("{broken")
    with pytest.raises(ValueError, match=r"run\.parquet\.json"):
        read(path)
    sidecar.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="format"):
        read(path)
    # a parquet of the schema without a sidecar opens with empty meta
    sidecar.unlink()
    alone = read(path)
    assert alone.meta == {} and alone.attempts.empty
    pd.testing.assert_frame_equal(alone.requests, varied_result().requests)


def test_bad_tables_and_meta_raise_one_line_errors_naming_the_field():
    with pytest.raises(ValueError, match=r"requests: missing column.*request_id"):
        SweepResult(pd.DataFrame({"run_id": ["a"], "level": [1.0], "level_kind": ["rate"]}))
    frame = requests_frame([rec(1, 0, 0.0, 1.0)]).astype({"latency_s": object})
    frame.loc[0, "latency_s"] = "slow"
    with pytest.raises(ValueError, match=r"requests\.latency_s") as info:
        SweepResult(frame)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"meta\['load'\]\['payload'\]"):
        SweepResult(meta={"load": {"payload": object()}})
    with pytest.raises(ValueError, match="meta"):
        SweepResult(meta=["not", "a", "dict"])


def test_missing_optional_columns_get_record_defaults():
    frame = pd.DataFrame(
        {"run_id": ["a", "a"], "level": [1, 2], "level_kind": "rate", "request_id": [0, 1]}
    )
    result = SweepResult(frame.assign(latency_s=[0.5, 0.7], ok=True))
    assert list(result.requests.columns) == list(REQUEST_COLUMNS)
    assert list(result.requests["phase"]) == ["measure"] * 2
    assert result.requests["status"].isna().all() and result.requests["t_end"].isna().all()
    assert list(result.summary()["latency_p50_s"]) == [0.5, 0.7]
    # a filtered frame (index not 0..n-1) keeps its values
    subset = SweepResult(result.requests[result.requests["level"] == 2.0])
    assert list(subset.requests["latency_s"]) == [0.7] and list(subset.requests["request_id"]) == [
        1
    ]


# ---------------------------------------------------------------- the crash-safe writer


def batches():
    records = [rec(1 + i % 3, i, 0.1 * i, 0.5 + 0.01 * i, ttft_s=0.1) for i in range(30)]
    attempts = [Attempt(RUN, r.level, r.request_id, 1, status=200) for r in records]
    return records, attempts


def test_writer_journal_recovers_every_appended_row_then_closes(tmp_path):
    path = tmp_path / "live.parquet"
    records, attempts = batches()
    meta = varied_result().meta
    writer = DatasetWriter(path, meta)
    writer.append(records[:10], attempts[:10])
    writer.append(records[10:20], attempts[10:20])
    # the sweep is still running (or has crashed): what was appended is readable
    partial = read(path)
    assert partial.meta["complete"] is False
    assert_same(
        partial,
        SweepResult(
            requests_frame(records[:20]),
            attempts_frame(attempts[:20]),
            None,
            {**meta, "complete": False},
        ),
    )
    writer.append(records[20:], attempts[20:])
    level = LevelStats(RUN, 1.0, "concurrency", 0.0, 3.0, 30, "requests", 1e-4, 1e-3, 2e-3)
    writer.add_level(level)
    writer.close({"interrupted": True})
    writer.close()  # idempotent
    assert not (tmp_path / "live.parquet.journal").exists()
    done = read(path)
    expected = SweepResult(
        requests_frame(records),
        attempts_frame(attempts),
        levels_frame([level]),
        {**meta, "interrupted": True, "complete": True},
    )
    assert_same(done, expected)
    with pytest.raises(ValueError, match="closed"):
        writer.append(records[:1])


def test_writer_context_manager_keeps_the_journal_on_error(tmp_path):
    path = tmp_path / "boom.parquet"
    records, attempts = batches()
    with pytest.raises(KeyboardInterrupt), DatasetWriter(path, {"run_id": RUN}) as writer:
        writer.append(records[:5], attempts[:5])
        raise KeyboardInterrupt
    result = read(path)
    assert len(result.requests) == 5 and result.meta["complete"] is False
    assert not path.exists()
    # saving the recovered result supersedes the journal
    result.save(path)
    assert not (tmp_path / "boom.parquet.journal").exists()
    assert read(path).meta["complete"] is False and len(read(path).requests) == 5


def test_truncated_and_corrupt_journal_lines(tmp_path):
    path = tmp_path / "cut.parquet"
    records, attempts = batches()
    writer = DatasetWriter(path, {"run_id": RUN})
    for i in range(7):  # one line per batch
        writer.append(records[i : i + 1], attempts[i : i + 1])
    writer.abort()
    journal = tmp_path / "cut.parquet.journal"
    whole = journal.read_text()
    journal.write_text(whole + '{"r": [["run-1", 1.0, "concurr')  # the crash cut this line
    assert len(read(path).requests) == 7
    lines = whole.splitlines()
    journal.write_text("\n".join([*lines[:3], "{oops", *lines[3:]]) + "\n")
    with pytest.raises(ValueError, match=r"cut\.parquet\.journal: line 4"):
        read(path)
    journal.write_text("not json\n")
    with pytest.raises(ValueError, match="journal"):
        read(path)


def test_writer_accepts_numpy_scalars(tmp_path):
    record = Record(RUN, np.float64(5), "rate", np.int64(3), worker=np.int32(2), ok=np.bool_(True))
    record.latency_s, record.completion_tokens = np.float32(0.5), np.int64(7)
    writer = DatasetWriter(tmp_path / "np.parquet", {"seed": np.int64(1)})
    writer.append([record])
    writer.close()
    row = read(tmp_path / "np.parquet").requests.iloc[0]
    assert (row["request_id"], row["worker"], row["completion_tokens"]) == (3, 2, 7)
    assert row["latency_s"] == 0.5 and row["ok"] and row["level"] == 5.0


CHILD = textwrap.dedent(
    """
    import sys, time
    from llmlat.results import DatasetWriter
    from llmlat.schema import Attempt, Record
    writer = DatasetWriter(sys.argv[1], {"run_id": "child"})
    for b in range(5):
        recs = [Record("child", 4.0, "concurrency", 100 * b + i, t_end=1.0 * i, ok=True)
                for i in range(100)]
        writer.append(recs, [Attempt("child", 4.0, r.request_id, 1, status=200) for r in recs])
    print("ready", flush=True)
    time.sleep(120)
    """
)


def test_rows_survive_a_killed_writer_process(tmp_path):
    path = tmp_path / "killed.parquet"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "ready"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
        child.stdout.close()
    result = read(path)
    assert result.meta == {"run_id": "child", "complete": False}
    assert len(result.requests) == 500 and len(result.attempts) == 500
    assert sorted(result.requests["request_id"]) == [
        100 * b + i for b in range(5) for i in range(100)
    ]
    assert result.requests["ok"].all()


finite = st.floats(allow_nan=True, allow_infinity=True, width=64)
maybe_int = st.one_of(st.none(), st.integers(0, 2**53))
text = st.one_of(st.none(), st.text(max_size=20))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.tuples(
            finite, finite, maybe_int, text, st.booleans(), st.sampled_from(["warmup", "measure"])
        ),
        max_size=8,
    )
)
def test_journal_round_trip_is_exact_for_any_values(tmp_path, rows):
    records = [
        Record(
            RUN,
            lat if math.isfinite(lat) else 1.0,
            "rate",
            i,
            phase=phase,
            t_end=t,
            latency_s=lat,
            status=status,
            error=err,
            ok=ok,
        )
        for i, (t, lat, status, err, ok, phase) in enumerate(rows)
    ]
    path = tmp_path / "prop.parquet"  # shared by the examples: each replaces the last
    writer = DatasetWriter(path, {}, overwrite=True)
    writer.append(records)
    writer.abort()
    pd.testing.assert_frame_equal(read(path).requests, requests_frame(records), check_exact=True)
    writer = DatasetWriter(path, {}, overwrite=True)
    writer.append(records)
    writer.close()
    pd.testing.assert_frame_equal(read(path).requests, requests_frame(records), check_exact=True)


# ---------------------------------------------------------------- secrets


def test_no_secret_reaches_meta_reprs_or_saved_files(tmp_path, monkeypatch):
    sentinel = "sk-SENTINEL-7f3a9c"
    monkeypatch.setenv("LLMLAT_TEST_KEY", sentinel)
    meta = {
        "run_id": RUN,
        "api_key_env": "LLMLAT_TEST_KEY",
        "url": "http://user:hunter2pw@127.0.0.1:9/v1?api_key=qzx-secret-param&x=1",
        "headers": {"Authorization": f"Bearer {sentinel}", "x-api-key": "other-secret-val"},
        "load": {"note": f"key was {sentinel}", "max_tokens": 64},
        "payload_summary": "a basic prompt about bearer bonds",
        "curl": "curl -H 'Authorization: Bearer tok-XYZ-98765' http://127.0.0.1:9",
    }
    records = [rec(1, 0, 0.0, 1.0, ok=False, error=f"401: bad key {sentinel}")]
    result = SweepResult(requests_frame(records), meta=meta)
    leaks = (sentinel, "hunter2pw", "qzx-secret-param", "other-secret-val", "tok-XYZ-98765")
    assert result.meta["api_key_env"] == "LLMLAT_TEST_KEY"  # the name is not the secret
    assert result.meta["load"]["max_tokens"] == 64
    assert result.meta["payload_summary"] == meta["payload_summary"]  # ordinary text untouched
    assert "127.0.0.1:9" in result.meta["url"]
    shown = [repr(result), result._repr_html_(), json.dumps(result.meta)]
    shown += list(result.requests["error"].dropna())
    for leak in leaks:
        assert all(leak not in s for s in shown), leak
    result.save(tmp_path / "s.parquet")
    writer = DatasetWriter(tmp_path / "w.parquet", meta)
    writer.append(records)
    journal_bytes = (tmp_path / "w.parquet.journal").read_bytes()
    writer.close()
    files = [journal_bytes] + [p.read_bytes() for p in tmp_path.iterdir()]
    assert len(files) == 7
    for blob in files:
        for leak in leaks:
            assert leak.encode() not in blob, leak


# ---------------------------------------------------------------- display, plot, combine


def test_repr_and_html():
    records, attempts = open_loop_level()
    meta = {
        "run_id": "abc123",
        "api": "openai-chat",
        "model": "<m&1>",
        "url": "http://127.0.0.1:7",
        "levels": [1.0],
        "interrupted": True,
    }
    result = SweepResult(requests_frame(records), attempts_frame(attempts), None, meta)
    text = repr(result)
    for part in (
        "abc123",
        "openai-chat",
        "<m&1>",
        "http://127.0.0.1:7",
        "rate [1]",
        "10 requests",
        "60.0% ok",
        "interrupted",
    ):
        assert part in text, part
    head, *table = text.splitlines()  # a headline, then the compact per-level table
    assert len(head) < 200 and table[0].split()[:2] == ["level", "n"] and len(table) == 2
    page = result._repr_html_()
    assert "&lt;m&amp;1&gt;" in page and "<m&1>" not in page
    assert page.count("<table") == 1 and "p95 s" in page and "0.6" in page
    many = SweepResult(meta={"level_kind": "rate", "levels": list(range(1, 21))})
    assert "rate [1, 2, 3, ..., 19, 20]" in repr(many)


def test_plot_delegates_to_llmlat_plot(monkeypatch):
    calls = []
    fake = types.ModuleType("llmlat.plot")
    fake.__all__ = ["latency", "ecdf"]
    fake.latency = lambda data, **kw: calls.append(("latency", data, kw)) or "figure"
    fake.ecdf = lambda data, **kw: calls.append(("ecdf", data, kw)) or "ecdf-figure"
    monkeypatch.setitem(sys.modules, "llmlat.plot", fake)
    result = SweepResult()
    assert result.plot() == "figure"
    assert result.plot("ecdf", metric="ttft_s") == "ecdf-figure"
    assert calls == [("latency", result, {}), ("ecdf", result, {"metric": "ttft_s"})]
    with pytest.raises(ValueError, match="kind"):
        result.plot("pie")


def test_concat_combines_runs_of_the_same_kind():
    a = SweepResult(
        requests_frame([rec(1, i, float(i), 1.0) for i in range(3)]).assign(run_id="a"),
        meta={"run_id": "a", "api": "openai-chat", "seed": 1},
    )
    other = [
        Record("b", 1.0, "concurrency", i, t_scheduled=i, t_end=i + 2.0, latency_s=2.0, ok=True)
        for i in range(4)
    ]
    b = SweepResult(requests_frame(other), meta={"run_id": "b", "api": "openai-chat", "seed": 2})
    both = a + b
    assert len(both.requests) == 7
    assert both.meta["api"] == "openai-chat" and "seed" not in both.meta
    assert [m["run_id"] for m in both.meta["runs"]] == ["a", "b"]
    table = both.summary()
    assert list(table["run_id"]) == ["a", "b"]  # clocks differ: one row per run and level
    assert list(table["latency_p50_s"]) == [1.0, 2.0]
    assert_same(SweepResult.concat([a]), a)
    assert [m["run_id"] for m in SweepResult.concat([both, a]).meta["runs"]] == ["a", "b", "a"]
    rate = SweepResult(requests_frame([rec(1, 0, 0.0, 1.0, kind="rate")]))
    with pytest.raises(ValueError, match="level_kind"):
        a + rate
    assert SweepResult.concat([]).requests.empty


def test_meta_is_plain_json():
    @__import__("dataclasses").dataclass
    class Opts:
        slots: int = 4
        path: Path = Path("/tmp/x")

    meta = {"sim": Opts(), "nan": float("nan"), "tags": {"b"}, 3: np.float32(0.5), "na": pd.NA}
    result = SweepResult(meta=meta)
    assert result.meta == {
        "sim": {"slots": 4, "path": "/tmp/x"},
        "nan": None,
        "tags": ["b"],
        "3": 0.5,
        "na": None,
    }
    json.dumps(result.meta, allow_nan=False)
