"""A closed level on near-constant servers starts out of phase and reads its steady state.

Started at once, c servers of near-constant service stay in phase for tens of cycles, and past c
clients a request then waits a whole round: a default level read a p95 28-35% above the steady
one (18 clients on 16 servers, service CV 0.05). The engine starts client 0 alone and the others
spread over its first cycle (``Sweeper._stagger``); the exact simulation of a sweep does the same.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from llmlat import stats, sweep
from llmlat._synth import fcfs_responses, mgc_sweep
from llmlat.sim import SimConfig

C, N, CV = 16, 18, 0.05
TOKENS, STEP_S = 40, 0.00625  # a 0.25 s service: one token a step, whatever the batch
MU = 1.0 / (TOKENS * STEP_S)


@pytest.fixture(scope="module")
def level() -> pd.DataFrame:
    """One default closed level over HTTP: N clients on C slots, service CV 0.05."""
    rng = np.random.default_rng(7)
    tokens = np.maximum(1, np.round(rng.normal(TOKENS, CV * TOKENS, 10 * N + N))).astype(int)
    sim = SimConfig(
        mode="batch",
        slots=C,
        t0_s=STEP_S,
        t1_s=0.0,
        prefill_per_token_s=0.0,
        output_dist="fixed",
        output_tokens=TOKENS,
        seed=7,
    )
    result = sweep(
        lambda i: {"messages": [{"role": "user", "content": "hi"}], "max_tokens": int(tokens[i])},
        concurrency=N,
        simulator=sim,
        stream=False,
        progress=False,
    )
    return result.requests


@pytest.fixture(scope="module")
def truth_p95() -> float:
    """The steady p95 of N clients on C servers at service CV 0.05 (exact, long runs)."""
    return float(np.quantile(fcfs_responses(C, MU, CV, 10, 2000, 5, clients=N), 0.95))


def test_closed_clients_start_spread_over_client_0s_first_cycle(level: pd.DataFrame) -> None:
    first = level.sort_values("t_sent").groupby("worker").first()
    zero = first.loc[0]
    cycle = float(zero["t_end"] - zero["t_sent"])
    # the others wait for client 0's answer, then start w / N of its cycle after it
    offsets = (first["t_sent"].drop(0) - float(zero["t_end"])) / cycle
    expected = first.index.drop(0).to_numpy() / N
    assert offsets.is_monotonic_increasing
    assert offsets.to_numpy() == pytest.approx(expected, abs=0.1)


def test_closed_level_on_near_constant_servers_reads_the_steady_p95(
    level: pd.DataFrame, truth_p95: float
) -> None:
    keep = (stats.phases(level) == "measure") & stats.ok_mask(level)
    p95 = float(np.quantile(level["latency_s"][keep], 0.95))
    # the join to a step boundary and the client's own time add a few ms to the truth's
    assert p95 == pytest.approx(truth_p95, rel=0.1)


def test_exact_sweep_reads_the_steady_p95_at_the_default_length(truth_p95: float) -> None:
    p95 = []
    for seed in range(10):
        req = mgc_sweep("concurrency", [N], MU, C, cv_s=CV, seed=seed)
        keep = stats.phases(req) == "measure"
        p95.append(np.quantile(req["latency_s"][keep], 0.95))
    # started at once the level read 27% high on average
    assert np.mean(p95) == pytest.approx(truth_p95, rel=0.04)
