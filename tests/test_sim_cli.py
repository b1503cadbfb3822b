"""``llmlat sim`` as a real process: prints its URL, serves, stops cleanly on SIGTERM and Ctrl-C
(SIGINT); bad options exit with code 2 and a message naming the option. The options come from
the SimConfig fields, so the command and the Python API share one list.

The built-in simulator of a sweep, ``%llmsim`` and the demo is a child process
(:class:`llmlat.sim.process.SimulatorProcess`): it serves, stops with its parent, and is never
left behind, even when the parent is killed."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from fresh_python import modules_loaded
from sim_http import body_for, call

from llmlat.cli.sim import add_config_arguments, config_from_args
from llmlat.sim import SimConfig
from llmlat.sim.config import option_fields
from llmlat.sim.process import SimulatorProcess

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


# ---------------------------------------------------------------- the simulator process


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped has stopped running)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _simulator_children(parent: int) -> set[int]:
    """Process ids of the simulator processes whose parent is ``parent``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and b"llmlat.sim.process" in cmdline and _alive(int(entry.name)):
            found.add(int(entry.name))
    return found


def _wait_until(check, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_simulator_process_serves_and_stops():
    others = _simulator_children(os.getpid())  # e.g. the session's shared simulator
    with SimulatorProcess("instant") as sim:
        pid = sim.pid
        assert pid != os.getpid() and _simulator_children(os.getpid()) - others == {pid}
        reply, models, truth = asyncio.run(exchange(sim.url))
        assert reply.status == 200 and models["data"][0]["id"] == sim.config.model
        assert len(sim.truth()) == len(truth) == 1
    assert sim.url is None and not _alive(pid)


def test_a_simulator_process_serves_without_pandas():
    # %llmsim, `llmlat sim` and every shard start one: pandas (about half a second of CPU to
    # import here) is loaded only when the truth table is asked for
    code = "import llmlat.sim.process, llmlat.sim.simulator, llmlat.sim.server"
    assert modules_loaded(code, ("pandas", "numpy")) == []


def test_simulator_process_port_in_use_is_an_os_error():
    others = _simulator_children(os.getpid())
    with SimulatorProcess("instant") as first:
        port = int(first.url.rsplit(":", 1)[1])
        with pytest.raises(OSError, match="address already in use"):
            SimulatorProcess("instant", port=port).start()
    assert _simulator_children(os.getpid()) == others


def test_no_simulator_outlives_a_killed_parent():
    code = (
        "import time; from llmlat.sim.process import SimulatorProcess; "
        "sim = SimulatorProcess('instant').start(); print(sim.pid, flush=True); time.sleep(120)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert _alive(child)
        parent.kill()  # no atexit, no finally: only the closed pipe tells the child
        parent.wait()
        assert _wait_until(lambda: not _alive(child)), "the simulator outlived its parent"
    finally:
        parent.kill()


def test_a_sweep_without_url_measures_a_simulator_in_another_process():
    import llmlat

    others = _simulator_children(os.getpid())
    seen: list[set[int]] = []

    def payload(request_id: int) -> str:
        seen.append(_simulator_children(os.getpid()) - others)  # while the sweep runs
        return "hi"

    result = llmlat.sweep(payload, simulator="instant", concurrency=2, requests=4, progress=False)
    assert result.requests["ok"].all() and result.meta["simulator"]["t0_s"] == 0.0
    assert len(seen) == 4 and all(len(pids) == 1 for pids in seen)
    assert not _alive(seen[0].pop()) and _simulator_children(os.getpid()) == others
    inside = llmlat.sweep(
        payload, simulator="instant", simulator_process=False, concurrency=1, requests=1,
        progress=False,
    )  # fmt: skip
    assert inside.requests["ok"].all() and seen[-1] == set()


def test_ctrl_c_on_a_sweep_leaves_no_simulator_behind():
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "llmlat", "sweep", "--simulator", "article", "--concurrency",
            "4", "--requests", "100000", "--no-progress",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        assert _wait_until(lambda: _simulator_children(proc.pid), 30), "no simulator started"
        (child,) = _simulator_children(proc.pid)  # the sweep's only one
        time.sleep(0.5)  # requests in flight
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        assert _wait_until(lambda: not _alive(child))
    finally:
        proc.kill()
