"""The IPython extension in a real InteractiveShell, against the simulator on 127.0.0.1.

Cases that re-enter a running asyncio loop (nest-asyncio patches asyncio process-wide) or send
SIGINT run in a subprocess, so this test process stays unpatched and uninterrupted.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pandas as pd
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import llmlat
from llmlat._ipython import LLMMagics, LLMSweep

# a fast replica: a request alone takes about 8 steps of 2.5 ms
FAST_SIM = "--preset article --t0-s 0.002 --t1-s 0.0005 --output-tokens 8 --seed 3"
SENTINEL_KEY = "sk-llmlat-sentinel-3f9a1c77d2"


def _magics(ip: InteractiveShell) -> LLMMagics:
    return ip.magics_manager.registry["LLMMagics"]


@pytest.fixture(scope="module")
def ip() -> Iterator[InteractiveShell]:
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "llmlat")
    yield shell
    shell.run_line_magic("unload_ext", "llmlat")
    # %config values live in the shared shell's config: the next module starts without them
    shell.config.pop("LLMSweep", None)


@pytest.fixture
def sim(ip: InteractiveShell) -> Iterator[str]:
    """Start ``%llmsim`` with the fast replica; yield its URL."""
    ip.run_line_magic("llmsim", f"start {FAST_SIM}")
    yield _magics(ip).simulator.url
    ip.run_line_magic("llmsim", "stop")


@pytest.fixture
def config_reset(ip: InteractiveShell) -> Iterator[LLMSweep]:
    defaults = _magics(ip).defaults
    yield defaults
    for name in defaults.trait_names(config=True):
        setattr(defaults, name, None)
    ip.config.pop("LLMSweep", None)  # %config also wrote the shell's config: a reload reads it


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _captured(fn, *args):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        value = fn(*args)
    return value, out.getvalue(), err.getvalue()


# ---------------------------------------------------------------- loading


@pytest.mark.py313
def test_load_unload_reload() -> None:
    ip = InteractiveShell.instance()
    was_loaded = "llmlat" in ip.extension_manager.loaded
    if was_loaded:
        ip.run_line_magic("unload_ext", "llmlat")
    try:
        assert "llmsweep" not in ip.magics_manager.magics["cell"]
        ip.run_line_magic("load_ext", "llmlat")
        assert "llmsweep" in ip.magics_manager.magics["cell"]
        assert {"llmsweep", "llmsim", "llmfit"} <= set(ip.magics_manager.magics["line"])
        assert sum(isinstance(c, LLMSweep) for c in ip.configurables) == 1
        ip.run_line_magic("llmsim", f"start {FAST_SIM}")
        sim = _magics(ip).simulator
        ip.run_line_magic("reload_ext", "llmlat")
        assert sim.url is None  # the old simulator was stopped on unload
        assert _magics(ip).simulator is None
        assert sum(isinstance(c, LLMSweep) for c in ip.configurables) == 1
        assert "llmsweep" in ip.magics_manager.magics["cell"]
        ip.run_line_magic("unload_ext", "llmlat")
        assert "llmsweep" not in ip.magics_manager.magics["cell"]
        for name in ("llmsweep", "llmsim", "llmfit"):
            assert name not in ip.magics_manager.magics["line"]
        assert not any(isinstance(c, LLMSweep) for c in ip.configurables)
    finally:
        if was_loaded:
            ip.run_line_magic("load_ext", "llmlat")


# ---------------------------------------------------------------- %llmsim


def test_llmsim_start_status_stop(ip: InteractiveShell) -> None:
    _, out, _ = _captured(ip.run_line_magic, "llmsim", f"start {FAST_SIM} --slots 4")
    sim = _magics(ip).simulator
    assert sim.config.slots == 4 and sim.config.t0_s == 0.002 and sim.config.queue_limit == 32
    assert sim.url in out
    _, out, _ = _captured(ip.run_line_magic, "llmsim", "start --preset mmc")
    assert "restarted" in out
    assert sim.url is None and _magics(ip).simulator.config.mode == "mmc"
    _, out, _ = _captured(ip.run_line_magic, "llmsim", "status")
    assert "0 requests received" in out and "mmc" in out
    _, out, _ = _captured(ip.run_line_magic, "llmsim", "stop")
    assert "stopped" in out and _magics(ip).simulator is None
    _, out, _ = _captured(ip.run_line_magic, "llmsim", "")
    assert "no simulator running" in out


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("start --preset nope", r"--preset: 'nope' is not allowed \(one of article"),
        ("start --slots many", "--slots: "),
        ("start --p-500 2", "--p-500: "),
        ("start --bogus 1", "--bogus: unknown option"),
        ("launch", "action: 'launch' is not allowed"),
        ("stop --slots 3", "takes no options"),
    ],
)
def test_llmsim_bad_input(ip: InteractiveShell, line: str, needle: str) -> None:
    with pytest.raises(UsageError, match=needle) as info:
        ip.run_line_magic("llmsim", line)
    assert "\n" not in str(info.value)
    assert _magics(ip).simulator is None


def test_llmsim_on_a_taken_port(ip: InteractiveShell) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=rf"^--port: cannot listen on {port} \(address"):
            ip.run_line_magic("llmsim", f"start --preset instant --port {port}")
    assert _magics(ip).simulator is None


# ---------------------------------------------------------------- %%llmsweep


@pytest.mark.py313
def test_sweep_returns_the_result_shown_as_the_compact_table(
    ip: InteractiveShell, sim: str
) -> None:
    shown, _, _ = _captured(
        ip.run_cell_magic, "llmsweep", "-c 1,4 -n 8 -o res --no-progress", "Hello"
    )
    res = ip.user_ns["res"]
    assert shown is res and isinstance(res, llmlat.SweepResult)
    headings = ["level", "n", "ok %", "429 %", "throughput /s", "p50 s", "p95 s", "p99 s"]
    text, html = repr(res), res._repr_html_()
    assert all(h in text and h in html for h in [*headings, "TTFT p95 s"])
    assert "latency_p95_s" not in text + html  # the full table is one call away
    assert [line.split()[:2] for line in text.splitlines()[2:]] == [["1", "8"], ["4", "8"]]
    summary = res.summary()  # the shown numbers are the summary's, selected: none computed
    assert f"{summary['latency_p95_s'].iloc[0]:.4g}" in text.splitlines()[2]
    assert len(res.requests) == 16 and res.requests["ok"].all()
    assert res.meta["url"] == sim and res.meta["model"] == "llmlat-sim"  # model of %llmsim
    assert res.meta["interrupted"] is False
    assert res.meta["payload_summary"]  # what was sent is described, not dropped
    full = ip.run_cell_magic("llmsweep", "-c 2 -n 4 -o res2 --no-progress --full", "Hello")
    pd.testing.assert_frame_equal(full, ip.user_ns["res2"].summary())


@pytest.mark.parametrize(
    ("line", "body"),
    [
        ("-c 1 -n 2 -o quiet_res --no-progress;", "hi"),
        ("-c 1 -n 2 -o quiet_res --no-progress", "hi;"),
    ],
)
def test_trailing_semicolon_silences(ip: InteractiveShell, sim: str, line: str, body: str) -> None:
    assert ip.run_cell_magic("llmsweep", line, body) is None
    assert len(ip.user_ns["quiet_res"].requests) == 2


@pytest.mark.py313
def test_progress_bar(ip: InteractiveShell, sim: str) -> None:
    _, _, err = _captured(ip.run_cell_magic, "llmsweep", "-c 2 -n 6", "hi")
    assert "N=2" in err and "6/6" in err and "ok 100%" in err  # level, done/total, ok rate
    _, _, err = _captured(ip.run_cell_magic, "llmsweep", "-c 2 -n 6 --no-progress", "hi")
    assert "6/6" not in err


def test_json_bodies(ip: InteractiveShell, sim: str) -> None:
    one = {"messages": [{"role": "user", "content": "one"}], "max_tokens": 3}
    ip.run_cell_magic("llmsweep", "-c 1 -n 2 -o r1 --no-progress", json.dumps(one, indent=2))
    r1 = ip.user_ns["r1"]
    assert r1.requests["ok"].all()
    assert (r1.requests["completion_tokens"] == 3).all()
    many = [
        {"messages": [{"role": "user", "content": "a"}], "max_tokens": 2},
        {"messages": [{"role": "user", "content": "b"}], "max_tokens": 5},
    ]
    ip.run_cell_magic("llmsweep", "-c 1 -n 4 -o r2 --no-progress", json.dumps(many))
    tokens = ip.user_ns["r2"].requests.sort_values("request_id")["completion_tokens"]
    assert list(tokens) == [2, 5, 2, 5]  # the list is cycled through


def test_every_option_reaches_the_sweep(
    ip: InteractiveShell, sim: str, tmp_path: Path, config_reset: LLMSweep
) -> None:
    save = tmp_path / "closed.parquet"
    line = (
        f"--concurrency 1,2 --requests 4 --url {sim} --api openai-chat --model m1 --timeout-s 30 "
        "--no-stream --max-tokens 4 --think-time-s 0.001 --warmup 1 --pause-s 0.01 --retries 1 "
        "--backoff-base-s 0.01 --backoff-max-s 0.02 "
        f"--max-retry-wait-s 5 --seed 7 --run-id closed1 --save {save} --no-progress "
        "--headers 'X-Llmlat-Test: 1' --prices 'input: 2' --prices 'output: 8' --output closed"
    )
    ip.run_line_magic("llmsweep", line)
    res = ip.user_ns["closed"]
    assert res.meta["load"]["prices"] == {"input": 2.0, "output": 8.0}
    assert "$ / 1k req" in repr(res) and "$ / 1k req" in res._repr_html_()
    assert res.summary()["cost_per_1k_requests_usd"].notna().all()
    meta, load = res.meta, res.meta["load"]
    assert (meta["url"], meta["api"], meta["model"], meta["seed"]) == (sim, "openai-chat", "m1", 7)
    assert meta["run_id"] == "closed1" and meta["levels"] == [1, 2]
    assert load["timeout_s"] == 30 and load["stream"] is False and load["max_tokens"] == 4
    assert load["think_time_s"] == 0.001 and load["warmup"] == 1 and load["pause_s"] == 0.01
    assert load["retries"] == 1 and load["max_retry_wait_s"] == 5 and load["requests"] == 4
    assert (load["backoff_base_s"], load["backoff_max_s"]) == (0.01, 0.02)
    assert (res.requests["phase"] == "warmup").sum() == 2  # one per level
    assert (res.requests["completion_tokens"] == 4).all()
    saved = llmlat.read(save)
    assert len(saved.requests) == len(res.requests) == 10

    trace = tmp_path / "trace.csv"
    pd.DataFrame({"t_s": [0.0, 0.01, 0.02, 0.05]}).to_csv(trace, index=False)
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"prompt": "x", "max_tokens": 2}))
    ip.run_line_magic(
        "llmsweep",
        f"--trace {trace} --api openai-completions --payload {payload} --stream -o traced "
        "--no-progress",
    )
    traced = ip.user_ns["traced"]
    assert traced.meta["level_kind"] == "trace" and traced.meta["api"] == "openai-completions"
    assert len(traced.requests) == 4 and traced.requests["ok"].all()
    assert traced.meta["load"]["stream"] is True

    ip.run_line_magic(
        "llmsweep",
        "-r 40,80 --duration-s 0.25 --arrival gamma --burstiness 2 --max-in-flight 3 "
        "--warmup-s 0.05 --api anthropic-messages --max-tokens 4 --prompt 'hi there' -o opened "
        "--no-progress",
    )
    opened = ip.user_ns["opened"]
    assert opened.meta["level_kind"] == "rate" and opened.meta["levels"] == [40, 80]
    load = opened.meta["load"]
    assert (load["arrival"], load["burstiness"], load["max_in_flight"]) == ("gamma", 2, 3)
    assert load["duration_s"] == 0.25 and load["warmup_s"] == 0.05
    assert opened.requests["in_flight"].max() <= 3
    assert opened.meta["api"] == "anthropic-messages" and opened.requests["ok"].any()


def test_preset_starts_a_simulator_for_the_run(ip: InteractiveShell) -> None:
    assert _magics(ip).simulator is None
    _, _, err = _captured(
        ip.run_line_magic,
        "llmsweep",
        "-c 2 -n 3 --simulator instant --model llmlat-sim -o inst --no-progress",
    )
    inst = ip.user_ns["inst"]
    assert inst.meta["simulator"]["t0_s"] == 0.0 and inst.meta["simulator"]["output_tokens"] == 16
    assert "built-in simulator" in err  # said so
    assert inst.requests["ok"].all()


def test_variable_expansion(ip: InteractiveShell, sim: str) -> None:
    ip.run_cell("levels = '1,3'\nn_req = 2\nname = 'expanded'")
    cell = "%%llmsweep -c $levels -n {n_req + 1} -o $name --no-progress\nHi"
    outcome = ip.run_cell(cell)
    assert outcome.success, outcome.error_in_exec or outcome.error_before_exec
    res = ip.user_ns["expanded"]
    assert res.meta["levels"] == [1, 3]
    assert res.requests.groupby("level").size().tolist() == [3, 3]


def test_config_defaults_and_precedence(
    ip: InteractiveShell, sim: str, config_reset: LLMSweep
) -> None:
    ip.run_line_magic("llmsim", "stop")  # the URL must come from %config, not %llmsim
    ip.run_line_magic("llmsim", f"start {FAST_SIM}")
    url = _magics(ip).simulator.url
    ip.run_line_magic("config", f"LLMSweep.url = {url!r}")
    ip.run_line_magic("config", "LLMSweep.model = 'cfg-model'")
    ip.run_line_magic("config", "LLMSweep.seed = 11")
    ip.run_line_magic("config", "LLMSweep.stream = False")
    ip.run_line_magic("config", "LLMSweep.progress = False")
    assert config_reset.url == url
    ip.run_line_magic("llmsweep", "-c 1 -n 1 -o c1")
    c1 = ip.user_ns["c1"]
    assert (c1.meta["model"], c1.meta["seed"]) == ("cfg-model", 11)
    assert c1.meta["load"]["stream"] is False
    ip.run_line_magic("llmsweep", "-c 1 -n 1 -o c2 --model line-model --seed 12 --stream")
    c2 = ip.user_ns["c2"]
    assert (c2.meta["model"], c2.meta["seed"]) == ("line-model", 12)
    assert c2.meta["load"]["stream"] is True
    ip.run_line_magic("config", "LLMSweep.api = 'grpc'")  # IPython logs the refusal
    assert config_reset.api is None
    ip.run_line_magic("config", "LLMSweep.api = 'openai-completions'")
    assert config_reset.api == "openai-completions"


def test_config_lists_the_options(ip: InteractiveShell) -> None:
    _, out, _ = _captured(ip.run_line_magic, "config", "LLMSweep")
    for name in ("url", "model", "api", "api_key_env", "timeout_s", "retries", "seed"):
        assert f"LLMSweep.{name}" in out


@pytest.mark.parametrize(
    ("line", "body", "needle"),
    [
        ("-n 3", "hi", "--concurrency: give exactly one of --concurrency, --rate and --trace"),
        ("-c 1 --concurency 2", "hi", r"--concurency: unknown option \(did you mean --concurr"),
        ("-c abc", "hi", "--concurrency: 'abc' is not allowed"),
        ("-c 1 --wat", "hi", "--wat: unknown option"),
        ("-c 1 -r 2", "hi", "--concurrency: give exactly one of"),
        ("-c 1 -o 9lives", "hi", "not a valid variable name"),
        ("-c 1 -o class", "hi", "not a valid variable name"),
        ("-c 1 --model 'unclosed", "hi", "cannot split the options"),
        ("-c 1", '{"messages": [', "cell body: not valid JSON"),
        ("-c 1 --prompt hey", "body too", "in the cell body or with --prompt"),
        ("-c 1 --payload /nonexistent/p.json", None, "payload: cannot read"),
        ("-c 1 --api grpc", "hi", r"--api: 'grpc' is not allowed \(one of openai-chat"),
        ("-c 1 --simulator nope", "hi", "--simulator: unknown 'nope'"),
        ("-c 0", "hi", "--concurrency: "),
        ("-c 1 -n 2,3", "hi", "--requests: give one value or one per level"),
        ("-c 1 --timeout-s -1", "hi", "--timeout-s: "),
        ("-c 1 --url ftp://127.0.0.1:21", "hi", "--url: expected an http"),
        ("-c 1 --url http://127.0.0.1:{closed},ftp://x", "hi", "--url: expected an http"),
        ("-c 1 --url http://127.0.0.1:{closed}", "hi", "cannot reach http://127.0.0.1"),
        ("-c 1 --headers nocolon", "hi", "--headers: 'nocolon' is not allowed"),
        ("-c 1 --api-key-env LLMLAT_TEST_UNSET_VAR", "hi", "LLMLAT_TEST_UNSET_VAR"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(
    ip: InteractiveShell, line: str, body: str | None, needle: str
) -> None:
    line = line.replace("{closed}", str(_closed_port()))
    with pytest.raises(UsageError, match=needle) as info:
        if body is None:
            ip.run_line_magic("llmsweep", line)
        else:
            ip.run_cell_magic("llmsweep", line, body)
    assert "\n" not in str(info.value).strip()


def test_usage_error_shows_as_one_line_in_a_cell(ip: InteractiveShell) -> None:
    _, out, err = _captured(ip.run_cell, "%%llmsweep -c nope\nhi")
    lines = [ln for ln in (out + err).splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("UsageError:"), lines


def test_help(ip: InteractiveShell) -> None:
    from llmlat.config import option_specs

    assert ip.run_line_magic("llmsweep", "--help") is None
    _, out, _ = _captured(ip.run_line_magic, "llmsweep", "-h")
    # "-c N, --concurrency N" up to Python 3.12, "-c, --concurrency N" from 3.13
    for short in ("-c", "-r", "-n"):
        assert re.search(rf"^\s+{short}[ ,]", out, re.M), short
    for flag in ["--output", *(o.flag for o in option_specs())]:
        assert flag in out, flag
    assert "%%llmsweep [options]" in out and "::" not in out
    _, out, _ = _captured(ip.run_line_magic, "llmsim", "--help")
    assert "--queue-limit" in out and "--preset" in out and "usage: %llmsim" in out
    _, out, _ = _captured(ip.run_line_magic, "llmfit", "--help")
    assert "usage: %llmfit" in out and "%%llmfit" not in out


def test_every_option_has_help(ip: InteractiveShell) -> None:
    from llmlat._ipython import _fit_parser, _sim_parser, _sweep_parser

    for parser in (_sweep_parser(), _sim_parser(), _fit_parser()):
        for action in parser._actions:
            assert action.help, (parser.prog, action.dest)


def test_help_alone_in_a_cell(ip: InteractiveShell) -> None:
    outcome, out, err = _captured(ip.run_cell, "%%llmsweep --help")
    assert outcome.success and "--concurrency" in out and "UsageError" not in out + err
    outcome, out, err = _captured(ip.run_cell, "%%llmsweep -h\n\n")
    assert outcome.success and "--concurrency" in out


def test_config_traits_are_the_options(ip: InteractiveShell, config_reset: LLMSweep) -> None:
    from llmlat.config import option_specs

    assert set(config_reset.trait_names(config=True)) == {o.name for o in option_specs()}
    for spec in option_specs():
        assert config_reset.traits()[spec.name].help == spec.help
    ip.run_line_magic("config", "LLMSweep.requests = [2, 3]")
    ip.run_line_magic("config", "LLMSweep.concurrency = [1, 2]")
    ip.run_line_magic("config", "LLMSweep.simulator = 'instant'")
    ip.run_line_magic("config", "LLMSweep.progress = False")
    res = ip.run_line_magic("llmsweep", "-o per_level")
    assert list(res.summary()["n"]) == [2, 3]
    # the line's target replaces the configured one (url and simulator exclude each other)
    ip.run_line_magic("config", "LLMSweep.simulator = None")
    ip.run_line_magic("config", f"LLMSweep.url = 'http://127.0.0.1:{_closed_port()}'")
    ip.run_line_magic("llmsweep", "--simulator mmc -o other_sim")
    assert ip.user_ns["other_sim"].meta["simulator"]["mode"] == "mmc"


def test_api_key_never_shown(
    ip: InteractiveShell, sim: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMLAT_TEST_KEY", SENTINEL_KEY)
    save = tmp_path / "keyed.parquet"
    summary, out, err = _captured(
        ip.run_cell_magic,
        "llmsweep",
        f"-c 1,2 -n 2 --api-key-env LLMLAT_TEST_KEY --save {save} -o keyed --no-progress",
        "hi",
    )
    keyed = ip.user_ns["keyed"]
    shown = [out, err, repr(summary), repr(keyed), keyed._repr_html_()]
    shown += [keyed.requests.to_string(), json.dumps(keyed.meta, default=str)]
    shown += [p.read_bytes().decode("latin-1") for p in tmp_path.rglob("*") if p.is_file()]
    assert keyed.requests["ok"].all()
    assert keyed.meta["api_key_env"] == "LLMLAT_TEST_KEY"
    assert not [s for s in shown if SENTINEL_KEY in s]
    with pytest.raises(UsageError) as info:  # an error message does not leak it either
        ip.run_cell_magic("llmsweep", "-c 1 --api-key-env LLMLAT_TEST_KEY --timeout-s -1", "hi")
    assert SENTINEL_KEY not in str(info.value)


@pytest.mark.parametrize("primary", ["refusing", "down"])
def test_a_failover_url_list_measures_through_the_fallback(
    ip: InteractiveShell, sim: str, primary: str
) -> None:
    # a gateway's view: the primary answers 503 to everything, or accepts no connection; the
    # %llmsim replica behind it as the fallback serves every request
    from llmlat.sim import Simulator

    with contextlib.ExitStack() as stack:
        if primary == "refusing":
            first = stack.enter_context(Simulator(preset="instant", p_503=1.0)).url
        else:
            first = f"http://127.0.0.1:{_closed_port()}"
        line = f"--url {first},{sim} -c 2 -n 6 -o failed_over --no-progress"
        ip.run_cell_magic("llmsweep", line, "hi")
    res = ip.user_ns["failed_over"]
    req, att = res.requests, res.attempts
    assert res.meta["targets"] == [first, sim] and res.meta["model"] == "llmlat-sim"
    assert len(req) == 6 and req["ok"].all() and (req["served_by"] == 1).all()
    assert (req["attempts"] == 2).all()  # one at the primary, then at once the fallback
    kind = "server_error" if primary == "refusing" else "connection"
    assert (att.loc[att["target"] == 0, "error_kind"] == kind).all()
    assert att.loc[att["target"] == 1, "error_kind"].isna().all()


def test_a_url_list_with_nothing_listening_is_a_usage_error(ip: InteractiveShell) -> None:
    down = [f"http://127.0.0.1:{_closed_port()}" for _ in range(2)]
    with pytest.raises(UsageError, match=r"^--url: cannot reach any of") as info:
        ip.run_cell_magic("llmsweep", f"--url {','.join(down)} -c 1 -n 1", "hi")
    assert all(url.removeprefix("http://") in str(info.value) for url in down)


@pytest.mark.py313
def test_magic_from_a_plain_thread(ip: InteractiveShell, sim: str) -> None:
    box: dict[str, object] = {}

    def target() -> None:
        try:
            line = "-c 2 -n 4 -o threaded --no-progress"
            box["result"] = ip.run_cell_magic("llmsweep", line, "hi")
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    assert "error" not in box, box.get("error")
    assert list(box["result"].summary()["n"]) == [4]
    assert ip.user_ns["threaded"].requests["ok"].all()


# ---------------------------------------------------------------- in subprocesses

_IN_LOOP = """
import asyncio, sys, threading
from IPython.core.interactiveshell import InteractiveShell

ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "llmlat")
ip.run_line_magic("llmsim", "start {sim}")

async def cell():
    # a kernel runs cells inside its running loop: the magic is called synchronously there
    loop, me = asyncio.get_running_loop(), threading.get_ident()
    summary = ip.run_cell_magic("llmsweep", "-c 1,3 -n 3 -o res --no-progress", "hi")
    assert asyncio.get_running_loop() is loop and threading.get_ident() == me
    # the magic twice, and an await in between, in the same loop
    await asyncio.sleep(0.01)
    ip.run_cell_magic("llmsweep", "-c 2 -n 2 -o res2 --no-progress", "hi")
    return summary

if {uvloop!r}:
    import uvloop
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        summary = runner.run(cell())
else:
    summary = asyncio.run(cell())
res = ip.user_ns["res"]
assert list(summary.summary()["n"]) == [3, 3], summary
assert res.requests["ok"].all() and len(ip.user_ns["res2"].requests) == 2
print("RESULT", "patched" if hasattr(asyncio, "_nest_patched") else "unpatched")
ip.run_line_magic("llmsim", "stop")
"""


def _result(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """Return the fields of the subprocess's ``RESULT ...`` line."""
    lines = [ln.split()[1:] for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, proc.stdout
    return lines[0]


def _run_python(code: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.py313
@pytest.mark.parametrize("uvloop", [False, True], ids=["asyncio-loop", "uvloop"])
def test_magic_inside_a_running_loop(uvloop: bool) -> None:
    proc = _run_python(_IN_LOOP.format(sim=FAST_SIM, uvloop=uvloop))
    assert proc.returncode == 0, proc.stderr
    if uvloop:  # cannot be re-entered: a worker thread, said once for two sweeps
        assert _result(proc) == ["unpatched"]
        assert proc.stderr.count("worker thread") == 1
    else:
        assert _result(proc) == ["patched"]
        assert "worker thread" not in proc.stderr


_INTERRUPT = """
import asyncio, os, signal, sys, threading, time
from IPython.core.interactiveshell import InteractiveShell
import llmlat

# Ctrl-C as in a terminal, though this test's parent may ignore SIGINT (a job started with `&`
# from a script does, and its children inherit that)
signal.signal(signal.SIGINT, signal.default_int_handler)
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "llmlat")
# slow enough that 4 workers x 200 requests cannot finish before the interrupt
ip.run_line_magic("llmsim", "start --preset article --t0-s 0.02 --t1-s 0.001 --output-tokens 8")
sim = ip.magics_manager.registry["LLMMagics"].simulator
SAVE = {save!r}

def interrupt_after(n):
    while len(sim.truth()) < n:
        time.sleep(0.02)
    os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=interrupt_after, args=(12,), daemon=True).start()
line = f"-c 4 -n 200 -o res --save {{SAVE}} --no-progress"
if {nested!r}:
    async def cell():
        return ip.run_cell_magic("llmsweep", line, "hi")
    summary = asyncio.run(cell())
else:
    summary = ip.run_cell_magic("llmsweep", line, "hi")
res = ip.user_ns["res"]
saved = llmlat.read(SAVE)
kinds = res.requests["error_kind"].fillna("ok").value_counts().to_dict()
print("RESULT", len(res.requests), len(saved.requests), res.meta["interrupted"],
      saved.meta["interrupted"], kinds.get("ok", 0), kinds.get("cancelled", 0),
      len(sim.truth()))
ip.run_line_magic("llmsim", "stop")
"""


@pytest.mark.py313
@pytest.mark.parametrize("nested", [False, True], ids=["no-loop", "in-running-loop"])
def test_sigint_mid_sweep_keeps_and_saves_the_partial_result(nested: bool, tmp_path: Path) -> None:
    save = tmp_path / "partial.parquet"
    proc = _run_python(_INTERRUPT.format(save=str(save), nested=nested))
    assert proc.returncode == 0, proc.stderr
    rows, saved_rows, interrupted, saved_interrupted, ok, cancelled, received = _result(proc)
    assert interrupted == saved_interrupted == "True"
    assert int(rows) == int(saved_rows)  # what is stored is what was saved
    assert 8 <= int(ok) < 200  # stopped mid-sweep, after some finished
    assert int(cancelled) <= 4  # at most the requests in flight
    assert int(rows) == int(ok) + int(cancelled) <= int(received) + 4
    # said once, as a script's sweep says it, then where the partial result went
    lines = [ln for ln in proc.stderr.splitlines() if "interrupted" in ln or "partial" in ln]
    assert lines == [
        f"llmlat: interrupted; returning the {rows} requests measured so far",
        f"llmlat: partial result stored in res and saved to {save}",
    ]
    assert "Traceback" not in proc.stderr
    assert "was destroyed but it is pending" not in proc.stderr


# ---------------------------------------------------------------- %llmfit


@pytest.mark.py313
def test_llmfit_fits_stores_and_compares(ip: InteractiveShell) -> None:
    from llmlat._synth import mmc_closed_requests

    ip.user_ns["synth"] = mmc_closed_requests([1, 2, 4, 8, 16], mu=2.0, c=4, n=400, seed=5)
    shown = ip.run_line_magic("llmfit", "synth --model mmc -o fitted")
    assert shown is ip.user_ns["fitted"]
    assert shown.params["c"] == 4
    assert shown.params["mu"] == pytest.approx(2.0, rel=0.1)
    assert ip.run_line_magic("llmfit", "synth --model mmc;") is None
    table = ip.run_line_magic("llmfit", "synth --compare")
    assert {"mmc", "mm1"} <= set(table.index)
    plan = ip.run_line_magic("llmfit", "synth --model mmc --p95-s 2 --rpm 600 -o planned")
    assert plan is ip.user_ns["planned"]
    assert plan == ip.user_ns["fitted"].plan(p95=2, rpm=600)
    assert plan.binding in {"latency target", "rpm limit"}


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("nothing_here", "no variable named 'nothing_here'"),
        ("one_level", "%llmfit:"),
        ("one_level --metric bogus", "--metric"),
    ],
)
def test_llmfit_bad_input_is_a_usage_error(ip: InteractiveShell, line: str, needle: str) -> None:
    from llmlat._synth import mmc_closed_requests

    ip.user_ns["one_level"] = mmc_closed_requests([4], mu=2.0, c=4, n=50, seed=1)
    with pytest.raises(UsageError, match=re.escape(needle)):
        ip.run_line_magic("llmfit", line)


def test_notices_go_to_stdout_in_a_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    # a kernel shows stderr as a red box: "no url given: ..." is information, not an error
    from llmlat._notice import notice

    kernel_stream = type("OutStream", (io.StringIO,), {"__module__": "ipykernel.iostream"})
    err, out = kernel_stream(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", out)
    notice("no url given")
    assert (out.getvalue(), err.getvalue()) == ("llmlat: no url given\n", "")
    terminal = io.StringIO()
    monkeypatch.setattr(sys, "stderr", terminal)
    notice("no url given")
    assert terminal.getvalue() == "llmlat: no url given\n"
