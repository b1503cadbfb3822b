"""Acceptance, end to end: sweep the simulator (mmc mode) over loopback HTTP, fit, recover c, mu.

Latency seen by the client includes the loopback HTTP round trip (well under a millisecond),
so service times are kept at 20 ms or more and mu is checked to 5%.
"""

from __future__ import annotations

import pytest

import llmlat
from llmlat.sim import Simulator

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

CASES = [
    # c, mu (req/s per server), concurrency levels straddling c
    (1, 50.0, [1, 2, 4]),
    (4, 25.0, [1, 2, 4, 8, 16]),
    (16, 6.25, [4, 8, 16, 32, 64]),
]


@pytest.mark.parametrize(("c", "mu", "levels"), CASES, ids=[f"c={c}" for c, _, _ in CASES])
def test_sweep_then_fit_recovers_c_and_mu(c, mu, levels):
    with Simulator(mode="mmc", slots=c, mu=mu, output_tokens=4, seed=c) as sim:
        result = llmlat.sweep(
            "hello",
            url=sim.url,
            model="llmlat-sim",
            concurrency=levels,
            requests=250,
            warmup=2 * max(levels),
            progress=False,
            seed=c,
        )
    res = llmlat.fit(result, model="mmc")
    assert res.kind == "concurrency" and res.method == "ml"
    assert res.params["c"] == c
    assert res.params["mu"] == pytest.approx(mu, rel=0.05)
    # measured throughput agrees with the fitted closed model at every level
    lv = res.levels
    assert lv["throughput_rps"].to_numpy() == pytest.approx(
        lv["throughput_pred_rps"].to_numpy(), rel=0.10
    )
