"""Provider limits as data (issue 14, item 3): rate-limit headers of every attempt, tidy.

The simulator declares its RPM/TPM buckets the way OpenAI (``x-ratelimit-*``, resets as
durations) and Anthropic (``anthropic-ratelimit-*``, resets as RFC 3339 times) do; the client
records them on every answered attempt; ``plan(rpm="auto")`` plans against them and
``plot.limits`` draws the budget left.
"""

from __future__ import annotations

import argparse
import math
import re
from datetime import UTC, datetime

import numpy as np
import pytest

import llmlat
from llmlat._ratelimit import parse_count, parse_reset_s, read_limits
from llmlat._redact import forget, remember
from llmlat.fitting._plan import declared_limit
from llmlat.schema import Attempt

pytestmark = pytest.mark.timeout(120)

RPM, TPM = 1200, 60_000
SIM = {
    "t0_s": 0.002,
    "t1_s": 0.0005,
    "prefill_per_token_s": 0.0,
    "output_tokens": 4,
    "output_dist": "fixed",
    "rpm": RPM,
    "tpm": TPM,
    "limit_burst_s": 60,  # a minute's allowance: the budget runs down over the whole sweep
}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("6m0s", 360.0),
        ("1s", 1.0),
        ("20ms", 0.02),
        ("1.5s", 1.5),
        ("1h2m3s", 3723.0),
        ("2m30.5s", 150.5),
        ("0.25", 0.25),  # a gateway's plain seconds
        ("2026-11-30T20:00:10Z", 10.0),
        ("2026-11-30T20:00:02.5+00:00", 2.5),
        ("2026-11-30T19:59:00Z", 0.0),  # already past
    ],
)
def test_reset_values_become_seconds(text, seconds):
    now = datetime(2026, 11, 30, 20, 0, 0, tzinfo=UTC).timestamp()
    assert parse_reset_s(text, now) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["soon", "6x", "1s2", "", "2026-11-30T20:00:10", "-1s", "nan"])
def test_a_reset_that_is_no_duration_or_time_is_nan(text):
    assert math.isnan(parse_reset_s(text, 0.0))


def test_counts_and_the_redactor():
    assert parse_count("1000") == 1000 and parse_count("12.0") == 12
    assert parse_count("-3") is None and parse_count("many") is None
    secret = "sk-live-abcdefghijklmnop"
    held = remember([secret])
    try:
        att = Attempt("r", 1.0, 0, 1)
        headers = {
            "x-ratelimit-limit-requests": "500",
            "x-ratelimit-remaining-requests": secret,  # a server echoing the key: masked, NA
            "x-ratelimit-reset-tokens": "6m0s",
            "content-type": "application/json",
        }
        read_limits(headers, att)
    finally:
        forget(held)
    assert att.ratelimit_limit_requests == 500
    assert att.ratelimit_remaining_requests is None
    assert att.ratelimit_reset_tokens_s == 360.0
    assert att.ratelimit_limit_tokens is None and math.isnan(att.ratelimit_reset_requests_s)
    anthropic = Attempt("r", 1.0, 0, 1)
    read_limits(
        {
            "anthropic-ratelimit-input-tokens-limit": "40000",
            "anthropic-ratelimit-input-tokens-remaining": "39000",
            "anthropic-ratelimit-output-tokens-reset": "2026-11-30T20:00:10Z",
        },
        anthropic,
    )
    assert anthropic.ratelimit_limit_input_tokens == 40000
    assert anthropic.ratelimit_remaining_input_tokens == 39000
    assert anthropic.ratelimit_reset_output_tokens_s >= 0  # a time already past is 0
    assert anthropic.ratelimit_limit_tokens is None


@pytest.fixture(scope="module", params=["openai-chat", "anthropic-messages"])
def limited(request):
    return llmlat.sweep(
        concurrency=[1, 2, 4, 8],
        requests=20,
        api=request.param,
        simulator=SIM,
        simulator_process=False,
        max_tokens=4,
        progress=False,
    )


@pytest.fixture(scope="module")
def fitted(limited):
    return llmlat.fit(limited)


def test_every_answered_attempt_records_the_declared_limits(limited):
    att = limited.attempts
    assert len(att) >= 60 and (att["status"] == 200).all()
    assert (att["ratelimit_limit_requests"] == RPM).all()
    assert (att["ratelimit_limit_tokens"] == TPM).all()
    left = att.sort_values("t_end")["ratelimit_remaining_requests"].to_numpy(float)
    assert (left <= RPM - 1).all()  # what is left after this request was admitted
    # the budget runs down: far faster sent than refilled (80 requests in ~1 s, 20/s refill)
    assert left[-1] < left[0] - 30
    # the reset is when the bucket is full again: what is missing over the refill rate, seconds
    # (Anthropic's RFC 3339 time to the millisecond, OpenAI's duration to 3 digits)
    # Anthropic's is an instant, read against this clock when the headers came: short by the
    # time from the server's admission (after the send) to then, which each attempt measured
    # (on a busy machine, tens of ms; counted from the answer's end instead, it was short by
    # the whole answer too, which the tokens' 1 ms unit shows)
    came = (att["t_first_byte"] - att["t_sent"]).to_numpy(float)
    for kind, limit in (("requests", RPM), ("tokens", TPM)):
        missing = limit - att[f"ratelimit_remaining_{kind}"].to_numpy(float)
        expected = missing / (limit / 60.0)
        reset = att[f"ratelimit_reset_{kind}_s"].to_numpy(float)
        assert np.isfinite(reset).all()
        # a bucket's remaining is floored to whole units: its reset is up to one unit's refill
        # before the expected one, never after it (up to the rounding of the header)
        rounding = 0.01 * expected + 0.001
        short = expected - reset
        late = 60.0 / limit + (came if "anthropic" in limited.meta["api"] else 0.0)
        assert (short >= -rounding).all(), short.min()
        assert (short <= late + rounding).all(), (short - late).max()


def test_plan_auto_uses_the_declared_limits_and_says_so(limited, fitted):
    fit = fitted
    plan = fit.plan(rpm="auto", tpm="auto")
    assert plan.limit_rate_rps == pytest.approx(
        min(RPM / 60.0, TPM / 60.0 / float(np.nanmean(_tokens(limited))))
    )
    assert "as the provider declared" in plan.note
    assert fit.plan(rpm="auto").limit_rate_rps == pytest.approx(RPM / 60.0)


def _tokens(result):
    ok = result.requests[result.requests["ok"]]
    return (ok["prompt_tokens"] + ok["completion_tokens"]).to_numpy(float)


def test_limits_plot_and_the_errors_without_headers(limited):
    fig = llmlat.plot.limits(limited)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == [f"requests left (limit {RPM}/min)", f"tokens left (limit {TPM}/min)"]
    plain = llmlat.SweepResult(limited.requests, limited.attempts.iloc[:, :13], limited.levels)
    said = [t.get_text() for t in llmlat.plot.limits(plain).axes[0].texts]
    assert said == ["no rate-limit headers recorded:\nthe provider declared no limits"]
    with pytest.raises(ValueError, match=r"^rpm: 'auto' needs the limit the provider declares"):
        declared_limit("rpm", plain)  # what plan(rpm="auto") asks


def test_refusals_carry_retry_after_and_an_empty_budget():
    result = llmlat.sweep(
        concurrency=4,
        requests=20,
        simulator={**SIM, "rpm": 6},  # 6 in the minute's bucket, one more every 10 s
        simulator_process=False,
        retries=0,
        progress=False,
    )
    att = result.attempts
    refused = att[att["status"] == 429]
    assert len(refused) >= 10
    assert (refused["retry_after_s"] > 0).all()
    assert (refused["ratelimit_remaining_requests"] == 0).all()
    assert (refused["ratelimit_reset_requests_s"] > 50).all()  # ~6 requests' refill: 60 s
    assert att.loc[att["status"] == 200, "retry_after_s"].isna().all()


def test_report_and_llmfit_flags_take_auto(fitted):
    from llmlat._ipython import _fit_parser
    from llmlat.cli import build_parser
    from llmlat.cli.options import per_minute

    args = build_parser().parse_args(["report", "x.parquet", "--rpm", "auto", "--tpm", "9e4"])
    assert (args.rpm, args.tpm) == ("auto", 90000.0)
    assert _fit_parser().parse_args(["res", "--rpm", "AUTO"]).rpm == "auto"
    with pytest.raises(argparse.ArgumentTypeError, match="a positive number per minute, or auto"):
        per_minute("-5")
    plan = fitted.plan(rpm=args.rpm)  # what llmlat report and %llmfit then do
    assert plan.limit_rate_rps == pytest.approx(RPM / 60.0)
    assert f"rpm {RPM} as the provider declared" in plan.note


# Anthropic's tier 2 ratio: input 80,000 and output 16,000 tokens a minute, a combined 96,000
ITPM, OTPM = 80_000, 16_000
APART = {
    **{k: v for k, v in SIM.items() if k not in ("rpm", "tpm")},
    "output_tokens": 40,
    # one slot: a single server, saturated from the first level, so the fit's capacity is
    # bounded (two slots' batching is no M/M/c; its 20-request levels left c unbounded)
    "slots": 1,
    "tpm": ITPM + OTPM,
    "itpm": ITPM,
    "otpm": OTPM,
}


@pytest.fixture(scope="module")
def apart():
    """A sweep of an Anthropic API declaring its input and output token limits apart."""
    return llmlat.sweep(
        concurrency=[1, 2, 4, 8],
        requests=20,
        api="anthropic-messages",
        simulator=APART,
        simulator_process=False,
        max_tokens=40,
        progress=False,
    )


def test_plan_auto_plans_with_anthropics_input_and_output_limits(apart):
    att = apart.attempts
    assert (att["ratelimit_limit_input_tokens"] == ITPM).all()
    assert (att["ratelimit_limit_output_tokens"] == OTPM).all()
    assert (att["ratelimit_limit_tokens"] == ITPM + OTPM).all()
    ok = apart.requests[apart.requests["ok"]]
    out, prompt = (ok[c].mean() for c in ("completion_tokens", "prompt_tokens"))
    assert out == 40 and out > prompt  # output-heavy: the output limit binds, not the combined
    fit = llmlat.fit(apart, model="mmc")
    plan = fit.plan(tpm="auto")
    assert plan.binding == "output tpm limit"
    assert plan.limit_rate_rps == pytest.approx(OTPM / 60.0 / out)
    assert plan.limit_rate_rps < (ITPM + OTPM) / 60.0 / (out + prompt)  # what tpm alone allows
    assert f"tpm {ITPM + OTPM}, itpm {ITPM} and otpm {OTPM} as the provider declared" in plan.note
    # one client alone (10 requests/s) is past the output limit: no closed loop, and the pause
    # that would bring one client down to the planned rate
    assert plan.concurrency == plan.limit_concurrency == 0
    assert plan.to_frame(text=True).loc["concurrency", "value"] == "none (see note)"
    assert "no closed loop" in plan.describe()
    x1, pause = map(float, re.search(r"sends (\S+) requests/s.* least (\S+) s", plan.note).groups())
    assert x1 > plan.limit_rate_rps
    assert 1 / (1 / x1 + pause) == pytest.approx(plan.limit_rate_rps, rel=5e-3)
    # a number given replaces the declared one; the others stay as declared
    wider = fit.plan(tpm="auto", otpm=10 * OTPM)
    assert wider.limit_rate_rps == pytest.approx((ITPM + OTPM) / 60.0 / (out + prompt))
    assert fit.plan(itpm="auto").limit_rate_rps == pytest.approx(ITPM / 60.0 / prompt)
    with pytest.raises(ValueError, match=r"^otpm: must be positive"):
        fit.plan(otpm=0)
    # the flags of llmlat report and %llmfit, read back as the plan's keywords
    from llmlat._ipython import _fit_parser
    from llmlat.cli import build_parser
    from llmlat.cli.options import plan_limits

    args = build_parser().parse_args(["report", "x.parquet", "--otpm", "auto", "--itpm", "9e4"])
    assert plan_limits(args) == {"itpm": 90000.0, "otpm": "auto"}
    assert plan_limits(_fit_parser().parse_args(["res", "--tpm", "auto"])) == {"tpm": "auto"}
    assert fit.plan(**plan_limits(args)).binding == "output tpm limit"


def test_the_planned_output_rate_passes_and_one_above_it_is_refused(apart):
    """The bound is the server's: below the planned rate no 429, above it the output limit's."""
    rate = llmlat.fit(apart, model="mmc").plan(tpm="auto").limit_rate_rps
    per_second = {**APART, "limit_burst_s": 1}  # the limit enforced per second, not a minute
    for share, refused in ((0.7, False), (1.6, True)):
        result = llmlat.sweep(
            rate=[share * rate],
            duration_s=4,
            api="anthropic-messages",
            simulator=per_second,
            simulator_process=False,
            max_tokens=40,
            retries=0,
            seed=3,
            progress=False,
        )
        att = result.attempts
        no = att[att["status"] == 429]
        assert (len(no) > 0.1 * len(att)) is refused, (share, len(no), len(att))
        assert no["error"].str.contains("output tokens per minute").all()
