"""Real kernels: every notebook in notebooks/ runs top to bottom, and the stop button works.

The kernel is this interpreter's ipykernel, through a kernelspec written to a temporary
directory (``kernel_manager``, ``kernel`` and ``run_notebook`` in conftest.py), so the test never
depends on what kernels the machine has registered.
"""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
# the quickstart exercises the extension; the analysis notebooks (minutes of sweeps) add no
# IPython coverage, so the Python 3.13 rerun (-m py313) skips them
QUICKSTART = [p for p in NOTEBOOKS if p.stem.startswith("01-")]


def test_the_quickstart_exists() -> None:
    assert "01-quickstart.ipynb" in [p.name for p in NOTEBOOKS]


_NOTEBOOK_PARAMS = [
    pytest.param(p, marks=pytest.mark.py313 if p in QUICKSTART else (), id=p.stem)
    for p in NOTEBOOKS
]


@pytest.mark.parametrize("notebook", _NOTEBOOK_PARAMS)
def test_notebook_runs_clean(notebook: Path, end_to_end: dict[str, Future]) -> None:
    # run side by side with the other notebooks and the demo (conftest.py's end_to_end); a
    # failing cell raised CellExecutionError there, and nothing printed a traceback either
    nb = end_to_end[notebook.stem].result()
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error"
            text = out.get("text", "")
            assert "Traceback" not in text and "was destroyed but it is pending" not in text


def _run(client: Any, code: str, timeout: float = 120) -> tuple[dict, list[dict]]:
    """Execute ``code``; return the reply and the iopub messages it produced."""
    msg_id = client.execute(code)
    reply = client.get_shell_msg(timeout=timeout)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = client.get_shell_msg(timeout=timeout)
    return reply, _drain(client, msg_id, timeout)


def _run_ok(client: Any, code: str) -> list[dict]:
    """Execute ``code``, check it succeeded; return the iopub messages it produced."""
    reply, messages = _run(client, code)
    assert reply["content"]["status"] == "ok", reply["content"]
    return messages


def _drain(client: Any, msg_id: str, timeout: float) -> list[dict]:
    messages = []
    while True:
        msg = client.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        messages.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return messages


def _stream(messages: list[dict], name: str) -> str:
    return "".join(
        m["content"]["text"]
        for m in messages
        if m["msg_type"] == "stream" and m["content"]["name"] == name
    )


def _received(url: str) -> int:
    with urllib.request.urlopen(f"{url}/llmlat/truth", timeout=10) as response:
        return len(json.load(response))


@pytest.mark.py313
def test_kernel_interrupt_keeps_and_saves_the_partial_result(kernel: Any, tmp_path: Path) -> None:
    km, client = kernel
    reply, _ = _run(
        client,
        "%load_ext llmlat\n"
        "%llmsim start --preset article --t0-s 0.02 --t1-s 0.001 --output-tokens 8\n"
        "url = get_ipython().magics_manager.registry['LLMMagics'].simulator.url",
    )
    assert reply["content"]["status"] == "ok"
    reply, messages = _run(client, "print(url)")
    url = _stream(messages, "stdout").strip()
    assert url.startswith("http://127.0.0.1:")
    save = tmp_path / "partial.parquet"
    msg_id = client.execute(f"%%llmsweep -c 4 -n 200 -o res --save {save} --no-progress\nhi")
    while _received(url) < 12:  # mid-sweep: some finished, more to come
        time.sleep(0.05)
    km.interrupt_kernel()  # what the stop button does
    reply = client.get_shell_msg(timeout=120)
    assert reply["parent_header"]["msg_id"] == msg_id
    assert reply["content"]["status"] == "ok"  # handled, not a KeyboardInterrupt traceback
    messages = _drain(client, msg_id, 60)
    # notices go to stdout in a kernel: that it stopped, then where the partial result went
    out, err = _stream(messages, "stdout"), _stream(messages, "stderr")
    assert f"llmlat: partial result stored in res and saved to {save}" in out
    assert "Traceback" not in err
    reply, messages = _run(
        client,
        "import llmlat\n"
        f"saved = llmlat.read({str(save)!r})\n"
        "print(len(res.requests), len(saved.requests), res.meta['interrupted'],"
        " res.requests['ok'].sum())",
    )
    rows, saved_rows, interrupted, ok = _stream(messages, "stdout").split()
    assert int(rows) == int(saved_rows) and interrupted == "True"
    assert 8 <= int(ok) < 200
    assert f"llmlat: interrupted; returning the {rows} requests measured so far" in out
    # the kernel still works, the loop too: a top-level await and another sweep
    reply, messages = _run(
        client,
        "import asyncio\nawait asyncio.sleep(0.01)\n"
        "%llmsweep -c 2 -n 4 --no-progress -o again\nprint(list(again.summary()['n']))",
    )
    assert reply["content"]["status"] == "ok", reply["content"]
    # (notices, such as a busy client's, go to stdout in a kernel: the answer is the last line)
    assert _stream(messages, "stdout").strip().splitlines()[-1] == "[4]"


@pytest.mark.py313
def test_top_level_await_needs_no_patching(kernel: Any) -> None:
    _, client = kernel
    messages = _run_ok(
        client,
        "import asyncio, llmlat\n"
        "async with llmlat.Simulator(preset='instant') as sim:\n"
        "    r = await llmlat.asweep('hi', url=sim.url, model=sim.config.model,"
        " concurrency=[2], requests=4, progress=False)\n"
        "print(len(r.requests), r.requests['ok'].all(), hasattr(asyncio, '_nest_patched'))",
    )
    assert _stream(messages, "stdout").split() == ["4", "True", "False"]


@pytest.mark.py313
def test_progress_bar_in_a_kernel_without_ipywidgets_warns_nothing(kernel: Any) -> None:
    _, client = kernel
    messages = _run_ok(
        client,
        "%load_ext llmlat\n"
        "%llmsim start --preset instant\n"
        "import importlib.util\n"
        "print(importlib.util.find_spec('ipywidgets') is not None)",
    )
    has_widgets = _stream(messages, "stdout").strip() == "True"
    err = _stream(_run_ok(client, "%%llmsweep -c 2 -n 6 -o res\nhi"), "stderr")
    assert "IProgress" not in err and "TqdmWarning" not in err, err
    if not has_widgets:  # the text bar, on stderr
        assert "6/6" in err and "req" in err, err
