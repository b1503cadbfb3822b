"""Shards in local processes (stdlib only): ``python -m llmlat._shard._local FD`` per shard.

The coordinator starts each child with :mod:`subprocess` (spawned: nothing of the parent is
inherited, and a user's script or notebook is never re-imported) in its own session, so a
terminal's Ctrl-C reaches the coordinator only, which then stops every shard with the same
grace. Parent and child speak over one socket pair with
:class:`multiprocessing.connection.Connection` messages: ``(call_id, method, args)`` one way,
``(call_id, ok, value)`` the other. The child serves until the connection closes, which
also happens when the coordinator dies, so no shard outlives its sweep. A child that dies is
told apart from a failed call by its exit: the handle's pending and later calls raise
:class:`~llmlat._shard._handle.ShardLost` with its exit code or signal and the last line it
wrote to stderr.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import itertools
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

from llmlat._shard._handle import ShardLost

__all__ = ["ProcessShard", "main"]

_CLOSE_TIMEOUT_S = 10.0  # a closed connection ends the child: after a final drain it is quick


class ProcessShard:
    """A shard in a child process (see the module docstring).

    Parameters
    ----------
    shard : int
        Its index.
    init : bytes
        The pickled ``(engine, payload, config, shard, shards)`` of its
        :class:`~llmlat._shard._worker.ShardWorker`.
    """

    def __init__(self, shard: int, init: bytes) -> None:
        self.shard = shard
        self._loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "llmlat._shard._local", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        theirs.close()
        self.pid = self._proc.pid
        # the socket is kept to shut it down: closing an fd another thread reads does not
        self._socket = ours
        self._conn = Connection(os.dup(ours.fileno()))
        self._ids = itertools.count()
        self._pending: dict[int, asyncio.Future] = {}
        self._lost: str | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._conn.send_bytes(init)
        threading.Thread(target=self._read_stderr, daemon=True).start()
        threading.Thread(target=self._read, daemon=True).start()

    async def call(self, method: str, *args: Any) -> Any:
        """Call ``method`` of the shard's worker; see :class:`~._handle.ShardHandle`."""
        if self._lost is not None:
            raise ShardLost(self._lost)
        call_id = next(self._ids)
        future = self._pending[call_id] = self._loop.create_future()
        with contextlib.suppress(OSError):  # the reader thread is about to say why
            self._conn.send((call_id, method, args))
        try:
            return await future
        finally:
            self._pending.pop(call_id, None)

    def kill(self) -> None:
        """Kill the child at once (SIGKILL)."""
        with contextlib.suppress(ProcessLookupError):
            self._proc.kill()

    async def close(self) -> None:
        """Close the connection; the child ends its engine and exits (killed after a timeout)."""
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        try:
            await asyncio.to_thread(self._proc.wait, _CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            await asyncio.to_thread(self._proc.wait)

    # ------------------------------------------------------------------ reader threads

    def _read(self) -> None:
        try:
            while True:
                message = self._conn.recv()
                self._loop.call_soon_threadsafe(self._answer, message)
        except (EOFError, OSError, pickle.UnpicklingError):
            pass
        self._conn.close()
        code = self._proc.wait()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            self._loop.call_soon_threadsafe(self._died, code)

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            if text := line.decode(errors="replace").strip():
                self._stderr.append(text)

    def _answer(self, message: tuple[int, bool, Any]) -> None:
        call_id, ok, value = message
        future = self._pending.get(call_id)
        if future is None or future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(ShardLost(value))

    def _died(self, code: int) -> None:
        how = f"exited with code {code}"
        if code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        last = f" ({self._stderr[-1]})" if self._stderr else ""
        self._lost = f"process {self.pid} {how}{last}"
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ShardLost(self._lost))


# ---------------------------------------------------------------- the child


async def _serve(conn: Connection, worker: Any) -> None:
    """Answer the coordinator's calls until the connection closes; then end the engine."""
    loop = asyncio.get_running_loop()
    closed = loop.create_future()
    tasks: set[asyncio.Task] = set()

    async def answer(call_id: int, method: str, args: tuple) -> None:
        try:
            value = getattr(worker, method)(*args)
            if inspect.isawaitable(value):
                value = await value
            reply = (call_id, True, value)
        except Exception as exc:
            reply = (call_id, False, f"{method}: {type(exc).__name__}: {exc}")
        with contextlib.suppress(OSError):  # the coordinator has gone
            conn.send(reply)

    def dispatch(message: tuple[int, str, tuple]) -> None:
        task = loop.create_task(answer(*message))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def read() -> None:
        try:
            while True:
                loop.call_soon_threadsafe(dispatch, conn.recv())
        except (EOFError, OSError):
            loop.call_soon_threadsafe(_resolve, closed)

    threading.Thread(target=read, daemon=True).start()
    await closed
    worker.cancel()
    await worker.finish()


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


def main(argv: list[str]) -> None:
    """Serve one shard over the connection whose file descriptor is ``argv[0]``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    conn = Connection(int(argv[0]))
    init = pickle.loads(conn.recv_bytes())

    from llmlat._loop import loop_factory
    from llmlat._shard._worker import ShardWorker

    worker = ShardWorker(*init)
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(_serve(conn, worker))


if __name__ == "__main__":
    main(sys.argv[1:])
