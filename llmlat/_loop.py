"""Run a coroutine to completion from synchronous code, whatever loop is (or is not) running.

Three cases, chosen per call:

- no running loop (plain Python, terminal IPython): a fresh loop, uvloop's when installed;
- a running, patchable asyncio loop in this thread (ipykernel): re-enter it with nest-asyncio
  (``nest_asyncio2`` preferred, ``nest_asyncio`` else), patched lazily on the first such call and
  never at import, because patching swaps asyncio's C tasks for Python ones process-wide;
- anything else (uvloop, a loop that is not a ``BaseEventLoop``, no patch library, a Python the
  library is known to break on): a worker thread with its own loop, reported once per reason.

Ctrl-C in the main thread behaves as in ``asyncio.run``, whatever the case: the first SIGINT
cancels the coroutine's task and waits for it to unwind (so its ``finally`` blocks run, cancelled
requests are awaited, and no "Task was destroyed but it is pending" appears), then
``KeyboardInterrupt`` is raised in the caller; a further SIGINT raises it at once.

A sweep run from synchronous code (:func:`llmlat._engine.run_sync`) stops gracefully on the
signals of :func:`stop_signals`: SIGINT alone outside one, SIGTERM too in the ``llmlat`` command.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from types import ModuleType
from typing import Any, TypeVar

__all__ = ["call_in_loop", "loop_factory", "run_coroutine", "stop_signals", "stop_signals_in_force"]

T = TypeVar("T")

# Patch libraries, most preferred first, each with the first Python it is known to break on:
# the unmaintained nest_asyncio cannot follow 3.14's C-implemented current_task bookkeeping.
_PATCHERS: tuple[tuple[str, tuple[int, int] | None], ...] = (
    ("nest_asyncio2", None),
    ("nest_asyncio", (3, 14)),
)
_reported: set[str] = set()
# the signals that stop a sweep run from synchronous code (stop_signals), and those received
_STOP_SIGNALS: contextvars.ContextVar[tuple[tuple[signal.Signals, ...], list[signal.Signals]]] = (
    contextvars.ContextVar("llmlat_stop_signals")
)
_lock = threading.Lock()


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion and return its result, from any synchronous context.

    Parameters
    ----------
    coro : coroutine
        The coroutine to run. It must create its own loop-bound resources (connections and
        futures belong to the loop they were made in), since the loop depends on the context.

    Returns
    -------
    object
        What the coroutine returned.

    Raises
    ------
    KeyboardInterrupt
        After the coroutine was cancelled by Ctrl-C and finished unwinding. A coroutine that
        swallows the cancellation and returns normally has its value returned instead.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return _run_fresh(coro)
    problem = _reentry_problem(loop)
    if problem is None:
        return _run_nested(loop, coro)
    _report_once(problem)
    return _run_in_thread(coro)


def call_in_loop(loop: asyncio.AbstractEventLoop | None, fn: Callable[[], None]) -> None:
    """Run ``fn`` in ``loop``'s thread: now when called there, else as soon as the loop can.

    Does nothing when ``loop`` is None or closed (a sweep that never started, or has ended).
    """
    if loop is None or loop.is_closed():
        return
    try:
        here = asyncio.get_running_loop() is loop
    except RuntimeError:
        here = False
    if here:
        fn()
    else:
        loop.call_soon_threadsafe(fn)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory when uvloop is installed, else None (asyncio's default).

    Returns
    -------
    callable or None
        For ``asyncio.Runner(loop_factory=...)``.
    """
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _patcher() -> tuple[ModuleType | None, str]:
    """Return the patch module to use, or None and why there is none."""
    why = "neither nest_asyncio2 nor nest_asyncio is installed"
    for name, broken_from in _PATCHERS:
        if broken_from is not None and sys.version_info >= broken_from:
            why = f"{name} is known to break on Python {broken_from[0]}.{broken_from[1]}+"
            continue
        try:
            return importlib.import_module(name), ""
        except ImportError:
            continue
    return None, why


def _reentry_problem(loop: asyncio.AbstractEventLoop) -> str | None:
    """Return why ``loop`` cannot be re-entered in this thread, or None when it can."""
    if getattr(loop, "_nest_patched", False):
        return None  # already reentrant (patched by us or by the user)
    if not isinstance(loop, asyncio.BaseEventLoop):
        kind = type(loop)
        return f"the running {kind.__module__}.{kind.__qualname__} loop cannot be re-entered"
    module, why = _patcher()
    return None if module is not None else why


def _report_once(problem: str) -> None:
    with _lock:
        if problem in _reported:
            return
        _reported.add(problem)
    print(f"llmlat: {problem}; running on a worker thread with its own loop", file=sys.stderr)


def _patch(loop: asyncio.AbstractEventLoop) -> None:
    if getattr(loop, "_nest_patched", False):
        return
    module, _ = _patcher()
    assert module is not None  # checked by _reentry_problem
    if module.__name__ == "nest_asyncio2":
        # on 3.12+, keep asyncio.run closing the loops it creates, as the unpatched one does
        module.apply(loop, run_close_loop=True)
    else:
        module.apply(loop)


@contextlib.contextmanager
def _sigint_cancels(cancel: Callable[[], None]) -> Iterator[Callable[[], bool]]:
    """While active, the first SIGINT calls ``cancel`` and the next ones raise KeyboardInterrupt.

    Yields a function telling whether a SIGINT arrived. Takes over from any Python-level handler
    (the default one, or an outer ``asyncio.run``'s, whose loop is blocked by this synchronous
    call and could not act on it) and restores it afterwards; does nothing off the main thread
    or when SIGINT is ignored or left to the OS.
    """
    count = 0

    def on_sigint(signum: int, frame: object) -> None:
        nonlocal count
        count += 1
        if count == 1:
            cancel()
            return
        raise KeyboardInterrupt

    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield lambda: False
        return
    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield lambda: count > 0
    finally:
        signal.signal(signal.SIGINT, previous)


def _canceller(box: dict[str, Any]) -> Callable[[], None]:
    """Return a thread-safe ``cancel()`` for the task that ``_tracked`` puts in ``box``."""

    def cancel() -> None:
        task, loop = box.get("task"), box.get("loop")
        if task is None or loop is None or task.done():
            return
        # the loop may close between the check and the call: then there is nothing to cancel
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(task.cancel)

    return cancel


async def _tracked(coro: Coroutine[Any, Any, T], box: dict[str, Any]) -> T:
    box["loop"] = asyncio.get_running_loop()
    box["task"] = asyncio.current_task()
    return await coro


@contextlib.contextmanager
def _cancelled_means_interrupt(interrupted: Callable[[], bool]) -> Iterator[None]:
    """Turn the CancelledError of a Ctrl-C cancellation into KeyboardInterrupt."""
    try:
        yield
    except asyncio.CancelledError:
        if interrupted():
            raise KeyboardInterrupt from None
        raise


def _run_fresh(coro: Coroutine[Any, Any, T]) -> T:
    box: dict[str, Any] = {}
    # Runner (not asyncio.run, which nest-asyncio may have replaced) cancels leftovers and
    # shuts async generators and the default executor down on the way out
    with (
        _sigint_cancels(_canceller(box)) as interrupted,
        _cancelled_means_interrupt(interrupted),
        asyncio.Runner(loop_factory=loop_factory()) as runner,
    ):
        return runner.run(_tracked(coro, box))


def _run_nested(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    _patch(loop)
    task = asyncio.ensure_future(coro, loop=loop)
    box = {"task": task, "loop": loop}
    with _sigint_cancels(_canceller(box)) as interrupted, _cancelled_means_interrupt(interrupted):
        try:
            return loop.run_until_complete(task)
        finally:
            if not task.done():  # left by an exception raised inside the loop: unwind the task
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    loop.run_until_complete(task)


def _run_in_thread(coro: Coroutine[Any, Any, T]) -> T:
    box: dict[str, Any] = {}
    outcome: dict[str, Any] = {}

    def main() -> None:
        try:
            with asyncio.Runner(loop_factory=loop_factory()) as runner:
                outcome["value"] = runner.run(_tracked(coro, box))
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    with _sigint_cancels(_canceller(box)) as interrupted:
        thread = threading.Thread(target=main, name="llmlat-loop", daemon=True)
        thread.start()
        thread.join()
    with _cancelled_means_interrupt(interrupted):
        if "error" in outcome:
            raise outcome["error"]
    return outcome["value"]


@contextlib.contextmanager
def stop_signals(*signals: signal.Signals) -> Iterator[list[signal.Signals]]:
    """Within the block, a sweep run from synchronous code stops gracefully on ``signals``.

    A script calling :func:`llmlat.sweep` expects SIGTERM to end it, so a sweep takes only
    SIGINT by default; a process that is llmlat's own (the ``llmlat`` command) takes SIGTERM
    too, for every sweep it runs, through this one switch.

    Parameters
    ----------
    *signals : signal.Signals
        The signals that stop a sweep (see :func:`llmlat._engine.run_sync`).

    Yields
    ------
    list of signal.Signals
        The signals that stopped sweeps within the block, in the order received.
    """
    got: list[signal.Signals] = []
    token = _STOP_SIGNALS.set((signals, got))
    try:
        yield got
    finally:
        _STOP_SIGNALS.reset(token)


def stop_signals_in_force() -> tuple[tuple[signal.Signals, ...], list[signal.Signals]]:
    """Return the signals that stop a sweep here and the list that collects those received.

    Returns
    -------
    signals : tuple of signal.Signals
        Those of the enclosing :func:`stop_signals`, else SIGINT alone.
    got : list of signal.Signals
        Where a sweep appends the signal that stopped it (a throwaway list outside a block).
    """
    return _STOP_SIGNALS.get(((signal.SIGINT,), []))
