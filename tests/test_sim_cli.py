"""``llmlat sim`` as a real process: prints its URL, serves, stops cleanly on SIGTERM and Ctrl-C
(SIGINT); bad options exit with code 2 and a message naming the option. The options come from
the SimConfig fields, so the command and the Python API share one list."""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import subprocess
import sys

import aiohttp
import pytest
from sim_http import body_for, call

from llmlat.cli.sim import add_config_arguments, config_from_args
from llmlat.sim import SimConfig
from llmlat.sim.config import option_fields

pytestmark = pytest.mark.timeout(60)

URL = re.compile(r"(http://127\.0\.0\.1:\d+)")


def start(*options: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmlat", "sim", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    match = URL.search(line)
    if match is None:
        proc.kill()
        raise AssertionError(f"no URL in {line!r}; stderr: {proc.stderr.read()}")
    return proc, match.group(1)


async def exchange(url: str):
    async with aiohttp.ClientSession() as session:
        reply = await call(session, url, "openai-chat", body_for("openai-chat", stream=True))
        async with session.get(url + "/v1/models") as r:
            models = await r.json()
        async with session.get(url + "/llmlat/truth") as r:
            truth = await r.json()
    return reply, models, truth


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serves_then_stops_cleanly(sig):
    proc, url = start("--preset", "instant", "--model", "cli-model", "--max-output-tokens", "64")
    try:
        reply, models, truth = asyncio.run(exchange(url))
        assert reply.status == 200 and len(reply.token_times) == 16
        assert models["data"][0]["id"] == "cli-model"
        assert len(truth) == 1 and truth[0]["outcome"] == "ok"
        proc.send_signal(sig)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
    err = proc.stderr.read()
    assert "stopped" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("options", "name"),
    [
        (["--slots", "0"], "--slots: "),
        (["--mode", "fifo"], "--mode: 'fifo' is not allowed (one of batch, mmc)"),
        (["--p-500", "2"], "--p-500: "),
        (["--rpm", "lots"], "--rpm: "),
        (["--preset", "nope"], "--preset: 'nope' is not allowed"),
    ],
)
def test_bad_options_exit_2_naming_the_option(options, name):
    proc = subprocess.run(
        [sys.executable, "-m", "llmlat", "sim", *options],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmlat: " + name), proc.stderr


def test_options_are_the_config_fields():
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    text = parser.format_help()
    for opt in option_fields():
        assert "--" + opt.name.replace("_", "-") in text
    args = parser.parse_args(["--preset", "mmc", "--slots", "3", "--queue-limit", "none"])
    assert config_from_args(args) == SimConfig.from_preset("mmc", slots=3, queue_limit=None)
    assert config_from_args(parser.parse_args([])) == SimConfig()
