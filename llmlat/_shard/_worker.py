"""One shard: the existing engine, running its part of every level at the coordinator's word.

:class:`ShardWorker` is what a shard process (:mod:`llmlat._shard._local`) or a Ray actor
(:mod:`llmlat._shard._ray`) holds; the coordinator calls its methods. It runs the engine class
the coordinator sends (:class:`llmlat._engine.Sweeper`; sent, not imported, as the engine is
the layer below that starts the coordinator) with the worker as its gate:

- its plans are its slice of the sweep's (:func:`~llmlat._shard._partition.shard_plans`);
- before each level it opens its connections, says it is ready (:meth:`ShardWorker.wait_go`)
  and waits for the common start instant (the coordinator's "go"), then sleeps until that
  instant on its own clock;
- its request ids interleave with the other shards' (:meth:`ShardWorker.request_id`).

Latencies are differences of one shard's monotonic clock. Row times are moved to the
coordinator's timeline by one shift per shard, taken at the first level's start instant
(its wall-clock alignment, estimated by the coordinator, is all that enters it).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import warnings
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from llmlat._shard._partition import request_id, shard_plans
from llmlat.schema import ATTEMPT_COLUMNS, LEVEL_COLUMNS, REQUEST_COLUMNS

if TYPE_CHECKING:  # pragma: no cover
    from llmlat._engine import Sweeper
    from llmlat.config import SweepConfig

__all__ = ["ShardWorker"]

_REQUEST_VALUES = attrgetter(*REQUEST_COLUMNS)
_ATTEMPT_VALUES = attrgetter(*ATTEMPT_COLUMNS)
_LEVEL_VALUES = attrgetter(*LEVEL_COLUMNS)


def _time_columns(columns: dict[str, str]) -> list[int]:
    return [i for i, name in enumerate(columns) if name.startswith("t_")]


_REQUEST_TIMES = _time_columns(REQUEST_COLUMNS)
_ATTEMPT_TIMES = _time_columns(ATTEMPT_COLUMNS)
_LEVEL_TIMES = _time_columns(LEVEL_COLUMNS)


_WORKER = list(REQUEST_COLUMNS).index("worker")


def _shifted(values: tuple, times: list[int], shift: float) -> list:
    row = list(values)
    for i in times:
        row[i] += shift
    return row


class ShardWorker:
    """The coordinator's handle inside a shard: start, clock, ready, go, drain, stop, finish.

    Every method is called by the coordinator (over a pipe, or as a Ray actor method) and
    returns plain data.

    Parameters
    ----------
    engine : type
        The engine class, :class:`llmlat._engine.Sweeper`.
    payload : object
        What to send.
    config : SweepConfig
        The sweep's options with the URL and model set, unsharded.
    shard, shards : int
        This shard and how many there are.
    """

    def __init__(
        self, engine: type[Sweeper], payload: Any, config: SweepConfig, shard: int, shards: int
    ) -> None:
        self._args = (engine, payload, config)
        self._shard, self._shards = shard, shards
        self._base = 0  # the running level's first request id
        self._sweeper: Sweeper | None = None
        self._task: asyncio.Task | None = None
        self._reached: dict[int, asyncio.Future] = {}
        self._go: dict[int, asyncio.Future] = {}
        self._ended: dict[int, asyncio.Future] = {}
        self._shift: float | None = None

    # ------------------------------------------------------------------ coordinator's calls

    async def start(self) -> dict[str, Any]:
        """Start the engine (it runs until the first level's gate) and say where it runs.

        Returns
        -------
        dict
            ``host``, ``pid`` and ``node`` (the Ray node id, or None).
        """
        engine, payload, config = self._args
        if config.client_rpm is not None:  # the sweep's client-side bucket, shared out evenly
            config = config.replace(client_rpm=config.client_rpm / self._shards)
        with warnings.catch_warnings():  # the coordinator has warned about the options
            warnings.simplefilter("ignore")
            sweeper = self._sweeper = engine(payload, config)
        sweeper._plans = shard_plans(sweeper._plans, self._shard, self._shards)
        sweeper._gate = self
        self._task = asyncio.create_task(sweeper.run())
        return {"host": socket.gethostname(), "pid": os.getpid(), "node": _ray_node()}

    def clock(self) -> int:
        """Return this host's wall clock, ns (the coordinator estimates the offset)."""
        return time.time_ns()

    async def ready(self, level: int) -> bool:
        """Wait until the engine is at ``level``'s gate (connections open); False if it ended."""
        return await self._until(self._future(self._reached, level))

    def go(self, level: int, start_ns: int, start_run_s: float, base: int) -> float:
        """Start ``level`` at ``start_ns`` of this host's wall clock, ids from ``base``.

        Parameters
        ----------
        level : int
            The level's index.
        start_ns : int
            The start instant, this host's wall clock (ns).
        start_run_s : float
            The same instant on the coordinator's run clock (seconds).
        base : int
            The level's first request id.

        Returns
        -------
        float
            The shift from this shard's run clock to the coordinator's (seconds).
        """
        assert self._sweeper is not None
        start_s = self._sweeper._now() + (start_ns - time.time_ns()) / 1e9
        if self._shift is None:  # one shift for the whole run: a shard's times stay consistent
            self._shift = start_run_s - start_s
        _resolve(self._future(self._go, level), (base, start_s))
        return self._shift

    async def level_done(self, level: int) -> list | None:
        """Wait for ``level`` to end; return its level row (shifted), or None if it never ran."""
        future = self._future(self._ended, level)
        if not await self._until(future) or future.result() is None:
            return None
        return _shifted(_LEVEL_VALUES(future.result()), _LEVEL_TIMES, self._shift or 0.0)

    def drain(self) -> dict[str, Any]:
        """Return the rows finished since the last drain and why the engine stopped, if it did."""
        sweeper = self._sweeper
        if sweeper is None:
            return {"r": [], "a": [], "stopped_reason": None}
        records, attempts = sweeper._pending  # what the engine would journal next
        sweeper._pending = ([], [])
        shift = self._shift or 0.0
        requests = [_shifted(_REQUEST_VALUES(r), _REQUEST_TIMES, shift) for r in records]
        for row in requests:  # closed loop: the sweep's worker number (the split is round-robin)
            if row[_WORKER] is not None:
                row[_WORKER] = row[_WORKER] * self._shards + self._shard
        return {
            "r": requests,
            "a": [_shifted(_ATTEMPT_VALUES(a), _ATTEMPT_TIMES, shift) for a in attempts],
            "stopped_reason": sweeper._meta.get("stopped_reason"),
        }

    def stop(self) -> None:
        """Stop sending; requests in flight finish."""
        if self._sweeper is not None:
            self._sweeper.stop()
        for future in self._go.values():  # an engine waiting at a gate stops there
            _resolve(future, None)

    def cancel(self) -> None:
        """Cancel the requests in flight (they stay rows, ``error_kind="cancelled"``)."""
        if self._task is not None:
            self._task.cancel()

    async def finish(self) -> dict[str, Any]:
        """Wait for the engine to end; return ``error`` (its text, or None)."""
        error = None
        if self._task is not None:
            try:
                await asyncio.shield(self._task)
            except asyncio.CancelledError:
                if not self._task.cancelled():
                    raise
            except Exception as exc:  # the run's own error: reported, the rows are kept
                error = f"{type(exc).__name__}: {exc}"
        return {"error": error}

    # ------------------------------------------------------------------ the engine's side

    async def wait_go(self, level: int) -> float | None:
        """Say ``level``'s gate is reached; wait for the go: the start on the engine's clock.

        None when the sweep is stopped first.
        """
        _resolve(self._future(self._reached, level), True)
        if self._sweeper is not None and self._sweeper._stopping:
            return None
        go = await self._future(self._go, level)
        if go is None:
            return None
        self._base, start_s = go
        return start_s

    def request_id(self, index: int) -> int:
        """Return the id of this shard's ``index``-th request of the running level."""
        return request_id(self._base, index, self._shard, self._shards)

    def level_ended(self, level: int, stats: Any) -> None:
        """Record that ``level`` ended with these LevelStats (None: it never started)."""
        _resolve(self._future(self._ended, level), stats)

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _future(table: dict[int, asyncio.Future], level: int) -> asyncio.Future:
        if level not in table:
            table[level] = asyncio.get_running_loop().create_future()
        return table[level]

    async def _until(self, future: asyncio.Future) -> bool:
        """Wait for ``future`` or the engine's end; whether ``future`` is done."""
        if self._task is not None and not future.done():
            await asyncio.wait([future, self._task], return_when=asyncio.FIRST_COMPLETED)
        return future.done()


def _resolve(future: asyncio.Future, value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _ray_node() -> str | None:
    """Return the Ray node id when running in a Ray worker, else None."""
    import sys

    if "ray" not in sys.modules:
        return None
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
