"""Set-up shared by the test modules: whatever is expensive is made once per session here.

- ``sim_process``: one simulated provider in its own process (client and server never share a
  GIL), for tests that need a target and read its truth by their own request ids.
- ``kernel_manager`` / ``kernel`` / ``run_notebook``: kernels of this interpreter (a kernelspec
  written to a temporary folder: no dependence on the machine's kernels), one started for a
  test, notebooks executed by them.
- ``end_to_end``: the slow end-to-end runs (``llmlat demo --quick`` and the notebooks), started
  side by side; ``demo_run``: the demo's article sweep, saved and reported, shared by the demo
  and report tests.

``make test`` runs the suite on two pytest-xdist workers (``--dist loadfile``): each test file
stays on one worker (its module fixtures are made once), and the files whose tests use
``end_to_end`` share one worker, so each expensive session fixture is made once per run.
"""

from __future__ import annotations

import functools
import itertools
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import pandas as pd

KERNEL = "llmlat-test"
# how long a new kernel may take to answer: the notebooks' kernels start together beside the demo,
# the other xdist worker and the Python 3.13 install, and each compiles the stack it imports on a
# fresh clone (one did not answer within nbclient's default 60 s in CI). Only a hung kernel waits it
KERNEL_STARTUP_S = 300


# the files whose tests wait on ``end_to_end``: one xdist worker runs them all (see below)
END_TO_END_FILES = ("test_demo.py", "test_notebooks.py")


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with the end-to-end files as one unit: each expensive session fixture
    (``end_to_end``, ``ray_local``) and each module fixture is made on one worker only."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class _Scheduler(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = super()._split_scope(nodeid)
            return "end_to_end" if Path(file).name in END_TO_END_FILES else file

    return _Scheduler(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that waits on ``end_to_end`` lives in one of ``END_TO_END_FILES``: elsewhere, a
    second xdist worker would run the demo and every notebook again."""
    for item in items:
        uses = "end_to_end" in getattr(item, "fixturenames", ())
        if uses and item.path.name not in END_TO_END_FILES:
            raise pytest.UsageError(
                f"{item.nodeid} uses end_to_end: list its file in END_TO_END_FILES"
            )


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
    from llmlat.sim.process import SimulatorProcess

    config = {"t0_s": 0.01, "t1_s": 0.0001, "output_tokens": 32, "slots": 64}
    with SimulatorProcess(config) as sim:
        assert sim.url is not None
        yield sim.url, sim.truth


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
    made = itertools.count()

    def new() -> Any:
        # Unix sockets named per kernel, not TCP ports: a port is picked free, released, and
        # bound by the kernel a moment later, so kernels started together (the notebooks, the
        # other worker's) can race for one; the loser died at start-up and its client waited
        # forever on a send (seen at load 8)
        ip = str(root / f"k{next(made)}")
        return KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs, transport="ipc", ip=ip)

    return new


@pytest.fixture
def kernel(kernel_manager: Callable[[], Any], tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """A kernel started in ``tmp_path`` and its client, channels open; shut down after the test."""
    km = kernel_manager()
    km.start_kernel(cwd=str(tmp_path))
    client = km.client()
    client.start_channels()
    client.wait_for_ready(timeout=KERNEL_STARTUP_S)
    yield km, client
    client.stop_channels()
    km.shutdown_kernel(now=True)


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
            nb,
            km=kernel_manager(),
            timeout=timeout,
            startup_timeout=KERNEL_STARTUP_S,
            allow_errors=False,
            resources={},
        )
        # cleanup_kc: shut the kernel down although we, not nbclient, made its manager
        client.execute(cleanup_kc=True, cwd=str(cwd), env={**os.environ, **(env or {})})
        return nb

    return run


def _demo(out: Path) -> tuple[Path, str]:
    proc = _run_llmlat("demo", "--quick", "--no-progress", "--out", str(out), cwd=out.parent)
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


def _notebook(run_notebook: Callable[..., Any], path: Path, datasets: Path) -> Any:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    # the notebooks save what they measure; a test run must not rewrite the committed datasets
    return run_notebook(nb, cwd=path.parent, env={"LLMLAT_DATASETS_DIR": str(datasets)})


@pytest.fixture(scope="session")
def end_to_end(
    request: pytest.FixtureRequest,
    run_notebook: Callable[..., Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Future]]:
    """The slow end-to-end runs that this session selected, all done: ``"demo"`` (the tests
    that use ``demo_run``) and each notebook the ``notebook`` parameter of a test names (key:
    the notebook's stem); each a finished Future (``.result()`` re-raises a run's error).

    They start together, the demo a process and each notebook its own kernel: they wait on
    simulated replicas rather than compute, so side by side they take about as long as the
    longest alone. The fixture returns only when every one has finished, so they never overlap
    a timing-sensitive test of their worker (the other xdist worker goes on with its files).
    """
    jobs: dict[str, Callable[[], Any]] = {}
    for item in request.session.items:
        if "demo_run" in getattr(item, "fixturenames", ()):
            out = tmp_path_factory.mktemp("demo") / "report"
            jobs.setdefault("demo", functools.partial(_demo, out))
        callspec = getattr(item, "callspec", None)
        path = callspec.params.get("notebook") if callspec else None
        if isinstance(path, Path) and path.stem not in jobs:
            datasets = tmp_path_factory.mktemp(path.stem)
            jobs[path.stem] = functools.partial(_notebook, run_notebook, path, datasets)
    runs: dict[str, Future] = {name: Future() for name in jobs}

    def work(name: str) -> None:
        try:
            runs[name].set_result(jobs[name]())
        except BaseException as exc:  # re-raised by the test that asks for this run
            runs[name].set_exception(exc)

    # daemon threads: a run that hangs fails its tests at pytest's timeout, and the worker
    # still exits (a pool's threads are joined, so one hung kernel hung the whole session)
    for name in jobs:
        threading.Thread(target=work, args=(name,), name=f"end-to-end {name}", daemon=True).start()
    wait(runs.values())
    yield runs


@pytest.fixture(scope="session")
def demo_run(end_to_end: dict[str, Future]) -> tuple[Path, str]:
    """``llmlat demo --quick``: the article sweep, fitted, saved and reported; yields the report
    folder (``index.html``, ``sweep.parquet``...) and what the command printed."""
    return end_to_end["demo"].result()


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    """A local Ray of two CPUs (``ray.init``), shut down at the end of the session.

    The two-node cluster test (last in tests/test_shard_ray.py) shuts it down before it
    starts its own cluster; tests that use this fixture come before it.
    """
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    yield ray
    ray.shutdown()
