"""The client policy lab: retry designs (RetryPolicy), the client-side token bucket, and
llmlat.policy_lab against a simulated provider that refuses (429 + Retry-After) past its queue.
"""

from __future__ import annotations

import asyncio
import random
import time

import numpy as np
import pytest

import llmlat
from llmlat._client import RetryPolicy, TokenBucket
from llmlat.policy import LAB_COLUMNS, designs

# 4 slots of fixed 80 ms answers (capacity 50/s), 429 past 4 waiting
PROVIDER = {
    "mode": "batch",
    "t0_s": 0.01,
    "t1_s": 0.0,
    "output_tokens": 8,
    "output_dist": "fixed",
    "prefill_per_token_s": 0.0,
    "slots": 4,
    "queue_limit": 4,
    "seed": 1,
}

pytestmark = pytest.mark.timeout(60)


def test_retry_policy_designs():
    rng = random.Random(1)
    plain = RetryPolicy(backoff_base_s=0.1, backoff_jitter=False, honour_retry_after=False)
    assert [plain.wait_s(k, 5.0, rng) for k in (1, 2, 3)] == [0.1, 0.2, 0.4]  # hint ignored
    jitter = RetryPolicy(backoff_base_s=0.1, honour_retry_after=False)
    draws = [jitter.wait_s(3, float("nan"), rng) for _ in range(200)]
    assert 0 <= min(draws) < 0.05 and 0.35 < max(draws) <= 0.4
    assert RetryPolicy(backoff_base_s=0.1).wait_s(1, 2.0, rng) == 2.0  # hint honoured
    at_once = RetryPolicy(backoff_base_s=0.0, honour_retry_after=False)
    assert at_once.wait_s(2, 3.0, rng) == 0.0
    with pytest.raises(ValueError, match=r"^backoff_jitter:"):
        llmlat.SweepConfig(backoff_jitter="no")
    with pytest.raises(ValueError, match=r"^client_rpm:"):
        llmlat.SweepConfig(client_rpm=0)


def test_token_bucket_spaces_attempts_evenly():
    async def take(n: int, bucket: TokenBucket) -> list[float]:
        times = []
        for _ in range(n):
            await bucket.take()
            times.append(time.perf_counter())
        return times

    times = np.asarray(asyncio.run(take(6, TokenBucket(rpm=1200))))  # one per 50 ms
    # the k-th goes no earlier than k intervals after the first (a sleep's lower bound; one
    # late wake-up does not delay the ones after it)
    assert (times[1:] - times[0] >= 0.05 * np.arange(1, 6) - 0.002).all()


@pytest.fixture(scope="module")
def lab():
    chosen = designs(cap=4, rpm=40 * 60)
    chosen = {k: chosen[k] for k in ("no retries", "immediate retries", "semaphore 4")}
    chosen["token bucket"] = {"retries": 0, "client_rpm": 40 * 60}
    return llmlat.policy_lab(
        "hi",
        chosen,
        simulator=PROVIDER,
        simulator_process=False,
        rate=80,
        duration_s=0.8,
        seed=1,
        backoff_base_s=0.05,
    ).set_index("design")


def test_policy_lab_shows_amplification_refusals_and_where_the_queue_went(lab):
    assert list(lab.reset_index().columns) == list(LAB_COLUMNS)
    none, eager = lab.loc["no retries"], lab.loc["immediate retries"]
    sem, bucket = lab.loc["semaphore 4"], lab.loc["token bucket"]
    assert none["amplification"] == 1 and none["rate_limited_rate"] > 0.1  # overloaded: refused
    # retrying at once multiplies the attempts and the provider's 429s
    assert eager["amplification"] > 1.3
    assert eager["attempts_per_s"] > 1.3 * none["attempts_per_s"]
    assert eager["attempt_429_rate"] > none["attempt_429_rate"]
    # a semaphore at the provider's slots, or a bucket under its capacity: nothing refused,
    # one attempt per request, and the queue shows up as the client's own latency instead
    for capped in (sem, bucket):
        assert capped["rate_limited_rate"] == 0 and capped["amplification"] == 1
        assert capped["latency_p95_s"] > 1.5 * none["latency_p95_s"]
        assert capped["latency_p95_low_s"] <= capped["latency_p95_s"]
    assert "client_rpm=2400" in bucket["options"]
    fig = llmlat.plot.policies(lab.reset_index())
    assert len(fig.axes) == 3 and "amplification" in fig.axes[0].get_title()
