"""Set-up shared by the test modules: whatever is expensive is made once per session here.

- ``sim_process``: one simulated provider in its own process (client and server never share a
  GIL), for tests that need a target and read its truth by their own request ids.
- ``kernel_manager`` / ``run_notebook``: kernels of this interpreter (a kernelspec written to a
  temporary folder: no dependence on the machine's kernels), notebooks executed by them.
- ``demo_run``: ``llmlat demo --quick``, the article sweep with its saved dataset and report,
  shared by the demo and report tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

KERNEL = "llmlat-test"


def _run_llmlat(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmlat", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def run_llmlat() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Return ``run(*args, cwd, timeout=300)``: ``python -m llmlat ARGS`` run as a user would,
    from ``cwd``, its output captured as text."""
    return _run_llmlat


@pytest.fixture(scope="session")
def sim_process() -> Iterator[tuple[str, Callable[[], pd.DataFrame]]]:
    """A simulator in its own process (as in the benchmark: client and server don't share a
    GIL); yields its URL and a function that fetches its truth table over HTTP.

    It serves the whole session: a test finds its own rows by ``client_request_id``.
    """
    args = ["--t0-s", "0.01", "--t1-s", "0.0001", "--output-tokens", "32", "--slots", "64"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmlat", "sim", *args], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        found = re.search(r"http://\S+", proc.stdout.readline())
        assert found, "the simulator did not print its URL"
        url = found.group(0)

        def truth() -> pd.DataFrame:
            with urllib.request.urlopen(url + "/llmlat/truth") as resp:
                return pd.DataFrame(json.load(resp))

        yield url, truth
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="session")
def kernel_manager(tmp_path_factory: pytest.TempPathFactory) -> Callable[[], Any]:
    """Return ``new()``: a KernelManager (not started) of this interpreter's ipykernel, through
    a kernelspec written to a temporary folder (no dependence on the machine's kernels)."""
    from ipykernel.kernelspec import write_kernel_spec
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    root = tmp_path_factory.mktemp("kernels")
    write_kernel_spec(root / KERNEL)  # argv runs sys.executable -m ipykernel_launcher
    specs = KernelSpecManager(kernel_dirs=[str(root)])
    return lambda: KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)


@pytest.fixture(scope="session")
def run_notebook(kernel_manager: Callable[[], Any]) -> Callable[..., Any]:
    """Return ``run(nb, cwd, env=None, timeout=300)``: execute a notebook in place, top to
    bottom, in a fresh kernel started in ``cwd`` (with ``env`` added to this process's
    environment); raises ``CellExecutionError`` at the first failing cell.

    Safe to call from several threads at once: each call has its own kernel and event loop.
    """
    from nbclient import NotebookClient

    def run(nb: Any, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> Any:
        client = NotebookClient(
            nb, km=kernel_manager(), timeout=timeout, allow_errors=False, resources={}
        )
        # cleanup_kc: shut the kernel down although we, not nbclient, made its manager
        client.execute(cleanup_kc=True, cwd=str(cwd), env={**os.environ, **(env or {})})
        return nb

    return run


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``llmlat demo --quick``: the article sweep, fitted, saved and reported; yields the report
    folder (``index.html``, ``sweep.parquet``...) and what the command printed."""
    out = tmp_path_factory.mktemp("demo") / "report"
    proc = _run_llmlat("demo", "--quick", "--no-progress", "--out", str(out), cwd=out.parent)
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout
