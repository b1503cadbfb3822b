"""The one FCFS engine of the seeded simulations against closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from llmlat import queueing
from llmlat._synth import FCFS, fcfs_responses

MU = 2.0


def _mean_and_se(per_replica: np.ndarray) -> tuple[float, float]:
    """Mean over independent replications and its standard error."""
    return float(per_replica.mean()), float(per_replica.std(ddof=1) / np.sqrt(len(per_replica)))


def test_open_mean_wait_is_erlang_cs():
    """M/M/4 at 80% load: the mean response is 1/mu plus Erlang C over (c mu - lambda)."""
    c, lam = 4, 0.8 * 4 * MU
    resp = fcfs_responses(c, MU, 1.0, 100, 2000, seed=1, rate=lam)
    mean, se = _mean_and_se(resp.mean(axis=0))
    exact = 1 / MU + float(queueing.erlang_c(c, lam / MU)) / (c * MU - lam)
    assert abs(mean - exact) < 4 * se
    assert se < 0.02 * exact  # the check has teeth


@pytest.mark.parametrize(("c", "cap", "load"), [(1, 3, 0.9), (3, 2, 1.2)])
def test_capped_refusals_are_mmck_blocking(c, cap, load):
    """M/M/1/4 and M/M/3/5: the refused share is the blocking probability (PASTA), and the
    admitted mean response is Little's law over the admitted rate."""
    lam, k = load * c * MU, c + cap
    resp = fcfs_responses(c, MU, 1.0, 100, 2000, seed=2, rate=lam, cap=cap)
    states = queueing._mmck_states(np.array([lam]), MU, c, k)[0]
    refused, se = _mean_and_se(np.isnan(resp).mean(axis=0))
    assert abs(refused - states[-1]) < 4 * se
    if c == 1:  # and the textbook form
        rho = lam / MU
        assert states[-1] == pytest.approx((1 - rho) * rho**k / (1 - rho ** (k + 1)))
    mean, se = _mean_and_se(np.nanmean(resp, axis=0))
    assert abs(mean - states @ np.arange(k + 1) / (lam * (1 - states[-1]))) < 4 * se
    # an admitted request waits when it finds all c servers busy (PASTA): the same draws
    again, waited = fcfs_responses(c, MU, 1.0, 100, 2000, seed=2, rate=lam, cap=cap, waited=True)
    np.testing.assert_array_equal(again, resp)
    assert not waited[np.isnan(resp)].any()
    share, se = _mean_and_se(waited.sum(axis=0) / np.isfinite(resp).sum(axis=0))
    assert abs(share - states[c:k].sum() / (1 - states[-1])) < 4 * se


def test_closed_clients_keep_every_server_busy():
    """N >= c clients sending again at once keep c servers busy: throughput c mu, so the mean
    response is N / (c mu) (Little); N <= c never wait (the response is the service)."""
    resp = fcfs_responses(4, MU, 0.5, 50, 2000, seed=3, clients=10)
    mean, se = _mean_and_se(resp.mean(axis=0))
    assert abs(mean - 10 / (4 * MU)) < 4 * se
    steps = FCFS(4, 2, clients=np.array([3, 4])).run(np.full((50, 2), 0.5))
    assert np.array_equal(steps.start, steps.sent)  # nobody waits
    assert (steps.worker[:4, 1] == np.arange(4)).all()  # sent at once: lowest client first


def test_closed_steady_service_is_recorded_once_its_phases_spread():
    # started at once, near-constant servers run in phase and a queued request waits a whole
    # round; recorded only after the phases spread, the first and last cycles read alike
    # (with ten cycles of warm-up the first ten read 720 ms against 652)
    n = 18
    resp = fcfs_responses(16, 2.0, 0.05, 50, 30 * n, 3, clients=n)
    first, last = (np.quantile(resp[sl], 0.95) for sl in (slice(0, 10 * n), slice(-10 * n, None)))
    assert first == pytest.approx(last, rel=0.02)


def test_closed_refusal_retries_after_its_delay():
    """A closed client refused by the cap sends again 1 ms (plus its think time) later."""
    engine = FCFS(1, 1, cap=0, clients=2)
    steps = engine.run(np.full((3, 1), 1.0), think=np.full((3, 1), 0.5))
    assert steps.ok[:, 0].tolist() == [True, False, False]
    assert steps.sent[1:, 0].tolist() == pytest.approx([0.0, 0.501])  # still busy: refused
    assert steps.end[1, 0] == pytest.approx(1e-3)


def test_one_seed_gives_every_system_the_same_draws():
    """Common random numbers: the draws do not depend on the system simulated (one client never
    waits, on one server or two: its responses are the same service draws)."""
    one, two = (fcfs_responses(c, MU, 0.3, 20, 500, seed=4, clients=1) for c in (1, 2))
    assert np.array_equal(one, two)
    low, high = (fcfs_responses(2, MU, 0.3, 20, 500, seed=4, rate=r) for r in (2.0, 2.4))
    assert np.quantile(high, 0.95) > np.quantile(low, 0.95)
    with pytest.raises(ValueError, match="steady state"):
        fcfs_responses(2, MU, 0.3, 2, 10, seed=4, rate=4.0)
