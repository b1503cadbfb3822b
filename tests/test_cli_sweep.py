"""``llmlat sweep`` as a user runs it: a real subprocess against the simulator on 127.0.0.1."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from fresh_python import modules_loaded

import llmlat
from llmlat.cli.sweep import warn_client_bound
from llmlat.sim import Simulator

FAST = {"t0_s": 0.004, "t1_s": 0.0001, "output_tokens": 16, "output_dist": "fixed", "seed": 1}

pytestmark = pytest.mark.timeout(120)


def llmlat_sweep(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llmlat", "sweep", *args],
        capture_output=True,
        text=True,
        timeout=90,
        **kwargs,
    )


def test_sweep_prints_the_summary_and_saves(tmp_path):
    out = tmp_path / "run.parquet"
    with Simulator(**FAST) as sim:
        proc = llmlat_sweep(
            "--url", sim.url, "--model", "llmlat-sim", "--concurrency", "1,4", "--requests", "8",
            "--warmup", "1", "--prompt", "hello there", "--save", str(out), "--no-progress",
            "--seed", "2", "--prices", "input: 3", "--prices", "output: 15000",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].split()[:2] == ["level", "n"] and "$ / 1k req" in lines[0]
    assert [line.split()[:2] for line in lines[1:]] == [["1", "8"], ["4", "8"]]
    result = llmlat.read(out)
    assert len(result.requests) == 2 * 9 and result.requests["ok"].all()
    assert result.meta["seed"] == 2 and result.meta["interrupted"] is False
    assert "saved 18 requests" in proc.stderr
    # the prices are an option of the run: the table shows what 1,000 requests cost, and the
    # saved dataset's summary prices it again from the server-reported tokens
    assert result.meta["load"]["prices"] == {"input": 3.0, "output": 15000.0}
    measured = result.requests[result.requests["phase"] == "measure"]
    by_level = (measured["prompt_tokens"] * 3 + measured["completion_tokens"] * 15000).groupby(
        measured["level"]
    )
    expected = (by_level.mean() / 1e3).tolist()  # per million tokens, times 1,000 requests
    assert result.summary()["cost_per_1k_requests_usd"].tolist() == pytest.approx(expected)
    for line, cost in zip(lines[1:], expected, strict=True):
        assert f"{cost:.4g}" in line.split()  # shown to 4 significant digits


def test_sweep_without_url_runs_the_builtin_simulator(tmp_path):
    proc = llmlat_sweep(
        "--simulator", "article", "--rate", "4", "--requests", "4", "--arrival", "constant",
        "--no-progress",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "simulator" in proc.stderr
    assert proc.stdout.strip().splitlines()[1].split()[:2] == ["4", "4"]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--concurrency", "1,x"],
            "--concurrency: '1,x' is not allowed (an integer, or a comma-separated list of them)",
        ),
        (["--concurrency", "1", "--rate", "2"], "--concurrency: give exactly one of"),
        ([], "--concurrency: give exactly one of --concurrency, --rate and --trace"),
        (["--concurency", "1,10"], "--concurency: unknown option (did you mean --concurrency?)"),
        (["-c", "1", "--api", "opena-chat"], "--api: 'opena-chat' is not allowed (one of "),
        (["--concurrency", "1", "--timeout", "3"], "--timeout: unknown option (did you mean"),
        (["--rate", "-1"], "--rate: -1.0 is not allowed (a finite number > 0)"),
        (["--concurrency", "2", "--api", "grpc"], "--api: 'grpc' is not allowed (one of openai"),
        (["--concurrency", "2", "--payload", "/nonexistent/p.json"], "--payload: cannot read"),
        (
            ["--concurrency", "2", "--url", "http://127.0.0.1:9", "--simulator", "article"],
            "--simulator: only used without --url",
        ),
        (["--concurrency", "2", "--api-key-env", "LLMLAT_TEST_UNSET_VAR"], "--api-key-env: "),
        (["--trace", "/nonexistent/trace.csv"], "--trace: cannot read"),
        (["--concurrency", "2", "--requests", "5,6"], "--requests: give one value or one per"),
        (["--concurrency", "2", "--timeout-s", "-1"], "--timeout-s: "),
    ],
)
def test_bad_options_exit_2_with_one_line(args, line, capsys, monkeypatch):
    monkeypatch.delenv("LLMLAT_TEST_UNSET_VAR", raising=False)
    err = _refused(["sweep", *args], capsys)
    assert err.startswith("llmlat: " + line), err


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the command line in this process (each refusal as a subprocess cost a Python start
    and its imports; test_a_refusal_is_the_process_exit_status runs two as a user does); return
    its one line of standard error, after checking exit status 2 and nothing on stdout."""
    from llmlat.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return _one_line_refusal(code, *capsys.readouterr())


def _one_line_refusal(code: int | str | None, out: str, err: str) -> str:
    """Check a refusal: exit status 2, nothing on stdout, one line on stderr; return it."""
    assert code == 2 and out == "", (code, out)
    assert err.strip().splitlines() == [err.strip()], err  # no usage block
    return err


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["swep"], "llmlat: COMMAND: 'swep' is not allowed (one of sweep, sim, "),
        (["sweep", "--concurency", "1,10"], "llmlat: --concurency: unknown option (did you mean"),
    ],
)
def test_a_refusal_is_the_process_exit_status(args, line):
    proc = subprocess.run(
        [sys.executable, "-m", "llmlat", *args], capture_output=True, text=True, timeout=60
    )
    err = _one_line_refusal(proc.returncode, proc.stdout, proc.stderr)
    assert err.startswith(line), err


def test_per_level_requests_on_the_command_line(tmp_path):
    with Simulator(**FAST) as sim:
        proc = llmlat_sweep(
            "--url", sim.url, "-c", "1,2,3", "-n", "2,3,4", "--no-progress",
            "--timeout-s", "20",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [line.split()[:2] for line in proc.stdout.strip().splitlines()[1:]]
    assert rows == [["1", "2"], ["2", "3"], ["3", "4"]]


def test_help_lists_every_option_and_the_exit_codes():
    from llmlat.config import option_specs

    sweep_help = llmlat_sweep("--help").stdout
    for spec in option_specs():
        assert spec.flag in sweep_help, spec.flag
    top = subprocess.run(
        [sys.executable, "-m", "llmlat", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "exit codes:" in top and "130" in top


def interrupt_sweep(
    tmp_path, sim_options: dict, ready, sends=(signal.SIGINT,), *, job: bool = False, code=130
) -> tuple:
    """Start ``llmlat sweep`` on a simulator, wait for ``ready(sim, out)``, send ``sends``.

    ``job``: started as a shell without job control starts ``cmd &`` (SIGINT ignored), where
    the signals are first checked to be ignored or taken (``llmlat: stopping`` said each time).
    """
    out = tmp_path / "partial.parquet"
    # a shell may start background jobs with SIGINT ignored; the child inherits that
    sigint = signal.SIG_IGN if job else signal.SIG_DFL
    with Simulator(**{**FAST, **sim_options}) as sim, open(tmp_path / "err", "w+") as err_file:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "llmlat", "sweep", "--url", sim.url, "--model", "llmlat-sim",
                "--concurrency", "4", "--requests", "100000", "--save", str(out),
            ],
            stdout=subprocess.PIPE,
            stderr=err_file,  # a file: an unread pipe would fill up with the progress bar
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
        )  # fmt: skip
        try:
            poll(lambda: ready(sim, out), "the sweep never got going")
            for i, sig in enumerate(sends):
                said = _said(err_file)
                proc.send_signal(sig)
                if sig == signal.SIGINT and job:  # ignored: the sweep goes on sending
                    served = len(sim.truth())
                    poll(lambda s=served: len(sim.truth()) >= s + 8, "the sweep stopped")
                elif i == 0:  # taken once the grace handler says so, before the next one
                    poll(lambda s=said: s < _said(err_file), "the signal was not taken")
            stdout, _ = proc.communicate(timeout=30)
        finally:
            proc.kill()
        err_file.seek(0)
        stderr = err_file.read()
    assert proc.returncode == code, stderr
    assert stdout.strip().splitlines()[1].split()[0] == "4"  # the summary of level 4
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert "Task was destroyed" not in stderr
    result = llmlat.read(out)
    assert result.meta["interrupted"] is True
    return result, stderr


def _said(err_file) -> int:
    return _read(err_file).count("llmlat: stopping")


def poll(condition, failure: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(failure)
        time.sleep(0.05)


def ten_rows_saved(sim, out):
    journal = out.with_name(out.name + ".journal")
    return journal.exists() and len(llmlat.read(out).requests) >= 10


def test_ctrl_c_lets_requests_in_flight_finish_then_exits_130(tmp_path):
    result, stderr = interrupt_sweep(tmp_path, {"t0_s": 0.01}, ten_rows_saved)
    assert 10 <= len(result.requests) < 100000
    assert result.requests["ok"].all()  # the grace period let the 4 in flight finish
    assert "waiting up to" in stderr


def test_sigterm_stops_a_background_job_that_ignores_ctrl_c(tmp_path):
    # `llmlat sweep ... &` in a script: Ctrl-C is ignored (and stays so), `kill PID` stops it
    # as Ctrl-C would in a terminal: requests in flight finish, rows saved, exit code 143
    sends = (signal.SIGINT, signal.SIGTERM)
    result, stderr = interrupt_sweep(
        tmp_path, {"t0_s": 0.01}, ten_rows_saved, sends, job=True, code=143
    )
    assert 10 <= len(result.requests) < 100000
    assert result.requests["ok"].all()
    assert stderr.count("llmlat: stopping (SIGTERM)") == 1
    assert "SIGTERM again to cancel" in stderr


def test_sigterm_stops_the_demo_sweep_as_it_stops_llmlat_sweep(tmp_path):
    # every command's sweep takes SIGTERM through one switch (cli.main), the demo's included:
    # the requests in flight finish, the partial table is printed, no fit or report, exit 143
    out = tmp_path / "report"
    with open(tmp_path / "err", "w+") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llmlat", "demo", "--quick", "--out", str(out)],
            stdout=subprocess.PIPE, stderr=err_file, text=True,
        )  # fmt: skip
        try:  # the progress bar shows once the sweep runs, its stop handler in place
            poll(lambda: "N=1:" in _read(err_file), "the demo's sweep never got going")
            proc.send_signal(signal.SIGTERM)
            stdout, _ = proc.communicate(timeout=60)
        finally:
            proc.kill()
        stderr = _read(err_file)
    assert proc.returncode == 143, stderr
    assert stderr.count("llmlat: stopping (SIGTERM)") == 1 and "Traceback" not in stderr
    assert "interrupted: the table above is partial" in stdout
    assert "queueing fit" not in stdout and not out.exists()


def _read(err_file) -> str:
    err_file.seek(0)
    return err_file.read()


def test_second_ctrl_c_cancels_requests_in_flight(tmp_path):
    def in_flight(sim, out):
        return len(sim.truth()) >= 1

    # client 0's first request stalls, and the other clients wait for its answer to start
    sends = (signal.SIGINT, signal.SIGINT)
    result, _ = interrupt_sweep(tmp_path, {"p_stall": 1.0, "stall_s": 60.0}, in_flight, sends)
    req = result.requests
    assert len(req) == 1
    assert (req["error_kind"] == "cancelled").all() and req["t_end"].notna().all()


def test_client_bound_levels_get_a_warning(capsys):
    summary = pd.DataFrame(
        {"level": [1.0, 10.0, 100.0], "client_bound": pd.array([False, pd.NA, True], "boolean")}
    )
    warn_client_bound(summary)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmlat: warning: at level 100 ")
    # with the summary's figures it says by how much
    warn_client_bound(summary.assign(loop_lag_p99_s=0.021, inflation=1.05))
    line = capsys.readouterr().err.strip()
    assert "lag p99 21 ms" in line and "inflated by up to 105%" in line


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["swep"], "COMMAND: 'swep' is not allowed (one of sweep, sim, "),
        (["report"], "dataset: required"),
        (["report", "x.parquet", "--p95", "2"], "--p95: unknown option (did you mean --p95-s?)"),
        (["report", "x.parquet", "--prices", "input: 3"], "--prices: output: required"),
        (["demo", "--simulator", "nope"], "--simulator: unknown 'nope'"),
        (["demo", "--seed", "x"], "--seed: 'x' is not an integer"),
    ],
)
def test_every_command_reports_bad_usage_in_one_line(args, line, capsys):
    err = _refused(args, capsys)
    assert err.startswith("llmlat: " + line), err
    assert args != ["swep"] or err.endswith("; did you mean sweep?)\n")


def test_listing_the_options_loads_no_heavy_module():
    # `llmlat --help` and a bad flag answer at once: listing the options needs no pandas
    code = (
        "from llmlat.cli import build_parser; build_parser().parse_known_args(['sweep', '-c', '1'])"
    )
    assert modules_loaded(code, ("pandas", "aiohttp")) == []


def test_flag_names_are_not_rewritten_inside_paths():
    from llmlat.cli.options import flag_message

    line = flag_message(ValueError("save: runs/rate/x.parquet exists: set overwrite to replace it"))
    assert line == "--save: runs/rate/x.parquet exists: set --overwrite to replace it"
