"""Public trace formats for ``trace=`` (llmlat._traces): Azure LLM inference and Mooncake.

The samples in tests/data/traces are synthetic rows written for these tests in the published
column layouts (see the README there), not real trace data.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import llmlat
from llmlat._loadshapes import plan_levels, trace_schedule
from llmlat._traces import MOONCAKE_BLOCK_TOKENS, prompt_text, read_trace, trace_columns
from llmlat.config import SweepConfig
from llmlat.sim.protocol import count_tokens

DATA = Path(__file__).parent / "data" / "traces"
AZURE = DATA / "azure_llm_synthetic.csv"
MOONCAKE = DATA / "mooncake_synthetic.jsonl"


def test_azure_layout_reads_date_times_and_tokens():
    frame = read_trace(AZURE)
    assert trace_columns(frame).format == "azure"
    sched = trace_schedule(frame)
    assert sched.offsets_s[0] == 0.0 and np.all(np.diff(sched.offsets_s) >= 0)
    # 18:15:46.6805900 -> 18:15:46.9142200 and -> 18:15:49.3300000
    assert sched.offsets_s[1] == pytest.approx(0.23363, abs=1e-6)
    assert sched.offsets_s[-1] == pytest.approx(2.64941, abs=1e-6)
    assert sched.prompt_tokens.tolist()[:3] == [374, 396, 879]
    assert sched.completion_tokens.tolist()[:3] == [44, 109, 31]
    assert sched.blocks is None


def test_mooncake_layout_reads_milliseconds_and_blocks():
    frame = read_trace(MOONCAKE)
    assert trace_columns(frame).format == "mooncake"
    sched = trace_schedule(frame)
    assert sched.offsets_s.tolist() == [0.0, 0.0, 0.25, 0.6, 1.1, 1.7]
    assert sched.prompt_tokens.tolist() == [1100, 700, 1400, 300, 900, 520]
    assert sched.blocks[:2] == ((0, 1, 2), (0, 3))
    # a timestamp column of seconds with llmlat's own token columns stays seconds
    own = frame.rename(columns={"input_length": "prompt_tokens"}).drop(columns="output_length")
    assert trace_schedule(own).offsets_s[-1] == 1700.0


def test_prompts_have_the_tokens_and_share_the_blocks_the_trace_shares():
    a = prompt_text(1100, (0, 1, 2), key=0)
    b = prompt_text(1400, (0, 1, 2), key=2)
    c = prompt_text(700, (0, 3), key=1)
    d = prompt_text(1100, (), key=3)
    assert [count_tokens(t) for t in (a, b, c, d)] == [1100, 1400, 700, 1100]
    assert [len(t.split()) for t in (a, b, c, d)] == [1100, 1400, 700, 1100]

    def shared(x: str, y: str) -> int:
        u, v = x.split(), y.split()
        return next((i for i, (p, q) in enumerate(zip(u, v, strict=False)) if p != q), len(u))

    assert b.startswith(a)  # the same three blocks
    assert MOONCAKE_BLOCK_TOKENS <= shared(a, c) < 2 * MOONCAKE_BLOCK_TOKENS  # block 0 only
    assert shared(a, d) < 10  # no blocks: a request's words are its own
    assert prompt_text(1100, (0, 1, 2), key=0) == a  # seeded


def test_trace_speed_scales_the_replay():
    (plan,) = plan_levels(trace=read_trace(MOONCAKE), trace_speed=4.0)
    assert plan.value == 4.0 and plan.schedule.offsets_s[-1] == pytest.approx(1.7 / 4)
    (plan,) = plan_levels(trace=read_trace(MOONCAKE), trace_speed=0.5, duration_s=1.5)
    assert plan.schedule.offsets_s.tolist() == [0.0, 0.0, 0.5, 1.2]  # cut after the scaling
    with pytest.raises(ValueError, match=r"^trace_speed: "):
        SweepConfig(trace=str(MOONCAKE), trace_speed=0)
    with pytest.raises(ValueError, match=r"^trace_speed: "):
        SweepConfig(concurrency=2, trace_speed=2)


def test_mooncake_trace_replayed_against_the_simulator():
    result = llmlat.sweep(
        trace=MOONCAKE,
        trace_speed=4.0,
        simulator={"t0_s": 0.002, "t1_s": 0.0001, "prefill_per_token_s": 1e-6},
        progress=False,
    )
    req = result.requests.sort_values("request_id")
    assert req["ok"].all() and (req["level"] == 4.0).all()
    # the simulator's own counts: prompts sized to input_length, answers to output_length
    assert req["prompt_tokens"].tolist() == [1100, 700, 1400, 300, 900, 520]
    assert req["completion_tokens"].tolist() == [20, 12, 30, 8, 16, 10]
    sent = req["t_scheduled"].to_numpy()
    assert np.allclose(sent - sent[0], np.array([0, 0, 250, 600, 1100, 1700]) / 1000 / 4)
    assert math.isclose(result.meta["load"]["trace_speed"], 4.0)
