"""A hostile server against the whole engine: every request is a row, every fault its kind.

One raw asyncio server on 127.0.0.1 (``tests/hostile.py``), a mode per fault, drives a matrix of
faults x stream on/off x retries 0/3 through ``asweep``: rows always equal requests issued, the
attempts table holds every attempt, and the error kind is the right one.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hostile import IDLE_CLOSE_S, HostileServer, serving_in_a_thread

from llmlat._client import Client, RetryPolicy, Target
from llmlat._engine import asweep
from llmlat.schema import Record

# fault -> error kind of every request (None: all succeed)
FAULTS = {
    "ok": None,
    "close_after_answer": None,  # stale keep-alive reuse must not fail a request
    "gzip": None,
    "done_stays_open": None,  # [DONE] ends the read: not a timeout
    "drop_before_head": "connection",
    "drop_mid_body": "connection",
    "stall": "timeout",
    "malformed_head": "protocol",
    "empty": "protocol",  # a 200 answer without a generated token is no success
    "bad_json_after_content": "protocol",
    "brotli": "protocol",
    "status_500": "server_error",
    "status_429": "rate_limited",
    "status_401": "client_error",
    "refused": "connection",
}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def run_sweep(server: HostileServer, fault: str, *, stream: bool, retries: int, **extra):
    url = f"http://127.0.0.1:{closed_port()}/v1" if fault == "refused" else server.url(fault)
    return await asweep(
        "hi",
        url=url,
        model="m",
        stream=stream,
        retries=retries,
        backoff_base_s=0.001,
        backoff_max_s=0.002,
        timeout_s=0.5,
        concurrency=3,
        requests=6,
        progress=False,
        **extra,
    )


@pytest.mark.parametrize(("transport", "retries"), [("http11", 0), ("http11", 3), ("aiohttp", 0)])
@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_every_request_is_a_row_with_the_right_error_kind(fault, stream, transport, retries):
    async def go():
        async with HostileServer() as server:
            return await run_sweep(
                server, fault, stream=stream, retries=retries, transport=transport
            )

    result = asyncio.run(go())
    req, att = result.requests, result.attempts
    assert len(req) == int(result.levels["issued"].sum()) > 0  # rows == requests issued
    assert req["request_id"].tolist() == list(range(len(req)))
    assert att.groupby("request_id").size().tolist() == req["attempts"].tolist()
    expected = FAULTS[fault]
    kinds = set(req["error_kind"].dropna())
    assert kinds == (set() if expected is None else {expected}), req["error"].unique()
    assert req["ok"].all() == (expected is None)
    retried = expected in ("connection", "server_error", "rate_limited")
    policy = req["attempts"] - (
        att["error"].str.contains("idle keep-alive").groupby(att["request_id"]).sum()
    )
    assert policy.max() == (retries + 1 if retried else 1)
    if expected is None:
        assert req["completion_tokens"].eq(2).all()
        assert (req["chunks"] == 2).all() if stream else (req["chunks"] == 0).all()


@pytest.mark.parametrize("stream", [True, False])
def test_a_200_answer_without_a_token_is_a_failed_row_the_summary_counts(stream):
    async def go():
        async with HostileServer() as server:
            return await run_sweep(server, "empty", stream=stream, retries=3)

    result = asyncio.run(go())
    req = result.requests
    assert len(req) == 6 and not req["ok"].any()
    assert (req["status"] == 200).all() and (req["attempts"] == 1).all()  # not retried
    assert (
        req["error"]
        .eq(
            "HTTP 200 without a generated token (finish reason content_filter, 0 completion tokens)"
        )
        .all()
    )
    assert req["completion_tokens"].eq(0).all()  # what the server reported stays
    assert req["t_first_token"].isna().all() and req["ttft_s"].isna().all()
    summary = result.summary()
    assert summary["ok"].tolist() == [0] and summary["error_rate"].tolist() == [1.0]


def test_a_server_that_closes_after_each_answer_fails_nothing_without_retries():
    async def go():
        async with HostileServer() as server:
            result = await run_sweep(server, "close_after_answer", stream=True, retries=0)
            return result, server.connections

    result, connections = asyncio.run(go())
    assert result.requests["ok"].all()
    # any stale reuse shows as an attempt of its own, retried once on a new connection
    stale = result.attempts[result.attempts["error_kind"].notna()]
    assert stale["error"].str.contains("idle keep-alive").all()
    assert result.requests["attempts"].max() <= 2
    assert connections >= len(result.requests)


def test_done_with_the_connection_left_open_ends_the_read_and_the_connection_is_not_reused():
    async def go():
        async with HostileServer() as server:
            target = Target(server.url("done_stays_open"), timeout_s=5)
            async with Client(target, RetryPolicy(retries=0), run_id="r", t0_ns=0) as client:
                records = []
                for i in range(3):
                    record = Record("r", 1.0, "concurrency", i, t_scheduled=0.0)
                    await client.send(record, "hi")
                    records.append(record)
            return records, server.connections

    records, connections = asyncio.run(go())
    assert all(r.ok and r.completion_tokens == 2 for r in records)
    assert connections == 3  # the body never ended: its connection was closed, not reused


def test_the_first_requests_failing_alike_stop_the_sweep_with_the_reason(capsys):
    async def go():
        async with HostileServer() as server:
            return await asweep(
                "hi",
                url=server.url("status_401"),
                model="m",
                concurrency=1,
                requests=50,
                retries=0,
                progress=False,
            )

    result = asyncio.run(go())
    assert len(result.requests) < 50 and not result.requests["ok"].any()
    err = capsys.readouterr().err
    assert "stopping: the first 3 requests all failed the same way: HTTP 401" in err
    assert "status 401 from the hostile server" in result.meta["stopped_reason"]


def test_no_model_uses_the_first_listed_or_fails_in_one_line_before_any_request(capsys):
    from llmlat.sim import Simulator

    async def go():
        async with Simulator() as sim:
            result = await asweep("hi", url=sim.url, concurrency=1, requests=2, progress=False)
        async with HostileServer() as server:
            with pytest.raises(ValueError, match=r"^model: not given, and .*/v1/models") as info:
                await asweep("hi", url=server.url("status_500"), concurrency=1, requests=2)
            return result, info.value, server.requests

    result, error, requests = asyncio.run(go())
    assert result.requests["ok"].all() and result.meta["model"]
    assert f"using {result.meta['model']!r}, the first of the" in capsys.readouterr().err
    assert "\n" not in str(error) and requests == 1  # the GET only: no request was measured


EMFILE_SCRIPT = """
import asyncio, os, resource, sys
from llmlat._client import Client, RetryPolicy, Target
from llmlat.schema import Record

async def main():
    target = Target(sys.argv[1], timeout_s=0.5)
    async with Client(target, RetryPolicy(retries=3), run_id="r", t0_ns=0) as client:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 4, hard))
        records = [Record("r", 1.0, "concurrency", i, t_scheduled=0.0) for i in range(12)]
        await asyncio.gather(*(client.send(r, "hi") for r in records))
    for r in records:
        print(r.error_kind, r.attempts, r.error, sep="|")

asyncio.run(main())
"""


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
def test_running_out_of_open_files_is_a_client_error_not_a_server_one():
    with serving_in_a_thread() as server:
        out = subprocess.run(
            [sys.executable, "-c", EMFILE_SCRIPT, server.url("stall")],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    rows = [line.split("|") for line in out.splitlines()]
    kinds = {kind for kind, _, _ in rows}
    assert len(rows) == 12 and kinds == {"timeout", "client_error"}, rows
    starved = [r for r in rows if r[0] == "client_error"]
    assert all("open files" in error and attempts == "1" for _, attempts, error in starved)


def test_the_aiohttp_transport_honours_http_proxy_and_no_proxy(monkeypatch):
    async def go():
        async with HostileServer() as proxy:
            # the target is a closed port: only the proxy (the hostile server) can answer
            target = f"http://127.0.0.1:{closed_port()}/ok/v1"
            monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
            via_proxy = await asweep(
                "hi", url=target, model="m", transport="aiohttp", concurrency=1, requests=2,
                progress=False, retries=0,
            )  # fmt: skip
            monkeypatch.setenv("NO_PROXY", "127.0.0.1")
            direct = await asweep(
                "hi", url=target, model="m", transport="aiohttp", concurrency=1, requests=2,
                progress=False, retries=0,
            )  # fmt: skip
            return via_proxy, direct, proxy.proxied

    via_proxy, direct, proxied = asyncio.run(go())
    assert via_proxy.requests["ok"].all() and proxied == 2
    assert direct.requests["error_kind"].eq("connection").all()


@pytest.mark.parametrize("preconnect", [True, False])
def test_preconnect_keeps_the_connect_out_of_the_measured_requests(preconnect):
    async def go():
        async with HostileServer() as server:
            return await asweep(
                "hi", url=server.url("ok"), model="m", concurrency=[4, 8], requests=16,
                progress=False, preconnect=preconnect,
            )  # fmt: skip

    req = asyncio.run(go()).requests
    fresh = req.groupby("level")["connect_s"].count()
    # with preconnect every request finds a warm connection; without, each new worker connects
    assert fresh.tolist() == ([0, 0] if preconnect else [4, 4])
    assert (req["connect_s"].dropna() > 0).all()


@pytest.mark.parametrize("fault", ["refused", "status_401"])
def test_the_cli_exits_3_with_the_reason_when_nothing_succeeded(fault):
    with serving_in_a_thread() as server:
        url = f"http://127.0.0.1:{closed_port()}/v1" if fault == "refused" else server.url(fault)
        run = subprocess.run(
            [sys.executable, "-m", "llmlat", "sweep", "--url", url, "--model", "m",
             "--concurrency", "2", "--requests", "8", "--retries", "0", "--no-progress"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert run.returncode == 3, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    reason = "cannot connect" if fault == "refused" else "status 401 from the hostile server"
    assert last.startswith("error: no request succeeded: ") and reason in last
    assert "stopping: the first 3 requests all failed the same way" in run.stderr
    assert "client itself was busy" not in run.stderr


def test_a_server_closing_idle_connections_races_no_request_into_failure():
    # think time around the server's idle limit: some sends meet a connection as it closes
    async def go():
        async with HostileServer() as server:
            result = await asweep(
                "hi", url=server.url("idle_close"), model="m", concurrency=3, requests=30,
                think_time_s=IDLE_CLOSE_S, retries=0, progress=False,
            )  # fmt: skip
            return result, server.connections

    result, connections = asyncio.run(go())
    assert result.requests["ok"].all(), result.requests["error"].dropna().unique()
    assert connections > 3  # the server did close idle connections along the way
