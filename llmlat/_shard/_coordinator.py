"""The coordinator of a sharded sweep: start, run every level on all shards at once, merge.

It starts the shards, journals their rows as they stream in, and merges one
:class:`~llmlat.results.SweepResult`.

Per level: every live shard opens its connections and reports ready; the coordinator picks a
start instant a little ahead (its wall clock plus a margin of a few round trips) and tells each
shard that instant on the shard's own wall clock (the offsets were estimated at start-up from
the round trip of a few clock readings, min-RTT sample); each shard sleeps until it and runs
its slice of the level on its own monotonic clock. While levels run, the coordinator drains
every shard's finished rows every 0.2 s, adds ``shard`` and ``host``, appends them to the
journal and the progress bar. The merged tables are sorted by request id (requests,
attempts) and by level then shard (levels: one row per shard and level, each shard's own
event-loop lag and CPU), so a seeded sweep merges the same way every time.

A shard that dies (or whose call fails) keeps the rows it sent; the others finish; the
result's ``meta["shards"]`` says which died and why. :meth:`Coordinator.stop` stops every
shard (requests in flight finish); cancelling :meth:`Coordinator.run` cancels them in every
shard (their rows stay, ``error_kind="cancelled"``), drains, flushes, and re-raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmlat._loop import call_in_loop
from llmlat._notice import notice
from llmlat._shard._handle import ShardHandle, ShardLost
from llmlat._shard._partition import next_base
from llmlat.results import DatasetWriter, SweepResult
from llmlat.schema import ATTEMPT_COLUMNS, LEVEL_COLUMNS, REQUEST_COLUMNS

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from llmlat._engine import Sweeper
    from llmlat.config import SweepConfig

__all__ = ["EXTRA_COLUMNS", "Coordinator"]

#: Columns a sharded sweep adds to each table: which shard measured the row, on which host.
EXTRA_COLUMNS = ("shard", "host")

_DRAIN_INTERVAL_S = 0.2  # rows reach the journal within about this (as in one process)
_START_MARGIN_S = 0.1  # the common start instant is this (plus 4 round trips) ahead
_CLOCK_PINGS = 5
_WIND_DOWN_S = 30.0  # after the last level (or a cancel): how long shards may take to end

_COLUMN = {name: i for i, name in enumerate(REQUEST_COLUMNS)}
_ISSUED = list(LEVEL_COLUMNS).index("issued")


@dataclass
class _Shard:
    """The coordinator's record of one shard."""

    handle: ShardHandle
    shard: int
    host: str = ""
    pid: int | None = None
    node: str | None = None
    offset_ns: int = 0  # its wall clock minus ours
    rtt_s: float = float("nan")
    shift_s: float | None = None  # its run clock to ours
    lost: str | None = None  # why it died, or its call failed
    error: str | None = None  # its engine's own error
    rows: int = 0
    tasks: set[asyncio.Task] = field(default_factory=set)

    def info(self) -> dict[str, Any]:
        return {
            "shard": self.shard,
            "host": self.host,
            "pid": self.pid,
            "node": self.node,
            "clock_offset_s": self.offset_ns / 1e9,
            "clock_rtt_s": self.rtt_s,
            "time_shift_s": self.shift_s,
            "rows": self.rows,
            "lost": self.lost,
            "error": self.error,
        }


class Coordinator:
    """Run a sweep as shards and merge them (see the module docstring).

    Parameters
    ----------
    sweeper : Sweeper
        The engine the user made: its options, plans, payload, run id, metadata, save path and
        progress bar are the sweep's.
    url : str or tuple of str
        The target's base URL (the simulator's when none was given), or the primary and its
        fallbacks.
    """

    def __init__(self, sweeper: Sweeper, url: str | tuple[str, ...]) -> None:
        self._sweeper = sweeper
        self._url = url
        self._meta: dict[str, Any] = sweeper._meta
        self._shards: list[_Shard] = []
        self._rows: tuple[list[list], list[list], list[list]] = ([], [], [])
        self._writer: DatasetWriter | None = None
        self._bar: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = sweeper._stopping
        self._interrupted = False
        self._top_id = -1
        self._ray = False

    # ------------------------------------------------------------------ public

    def stop(self) -> None:
        """Stop every shard: no new sends, requests in flight finish. Safe from any thread."""
        self._stopping = True
        call_in_loop(self._loop, self._stop_shards)

    def result(self) -> SweepResult:
        """Return the merged result of the rows received so far (all, once :meth:`run` ended).

        Returns
        -------
        SweepResult
            The schema's tables plus ``shard`` and ``host``; ``meta["shards"]`` describes each
            shard (host, pid, Ray node, clock offset and round trip, rows, why it was lost).
        """
        requests, attempts, levels = self._rows
        meta = {
            **self._meta,
            "interrupted": self._interrupted or self._stopping,
            "shards": [s.info() for s in self._shards],
        }
        return SweepResult(
            _frame(requests, REQUEST_COLUMNS, ["request_id"]),
            _frame(attempts, ATTEMPT_COLUMNS, ["request_id", "attempt"]),
            _frame(levels, LEVEL_COLUMNS, []),
            meta,
        )

    async def run(self) -> SweepResult:
        """Start the shards, run every level on all of them, merge; see the module docstring.

        Returns
        -------
        SweepResult
            The merged result.
        """
        self._loop = asyncio.get_running_loop()
        sweeper = self._sweeper
        # our run clock's zero on our wall clock: the timeline every shard's rows move to
        wall0_ns = time.time_ns() - (time.perf_counter_ns() - sweeper._t0_ns)
        drain: asyncio.Task | None = None
        drained = asyncio.Event()
        try:
            await self._start()
            if sweeper._save is not None:
                self._writer = DatasetWriter(
                    sweeper._save,
                    self.result().meta,
                    overwrite=sweeper.config.overwrite,
                    extra_columns=EXTRA_COLUMNS,
                )
            self._bar = sweeper._make_bar()
            sweeper._bar = self._bar
            drain = asyncio.create_task(self._drain_every(drained))
            await self._run_levels(wall0_ns)
        except BaseException:
            self._interrupted = True
            raise
        finally:
            drained.set()
            await self._end(drain)
        return self.result()

    # ------------------------------------------------------------------ start and levels

    async def _start(self) -> None:
        cfg = self._sweeper.config
        shard_config = cfg.replace(
            url=self._url,
            model=self._sweeper._model,
            simulator=None,
            workers=None,
            cluster=None,
            ray_address=None,
            progress=False,
            save=None,
            overwrite=False,
            run_id=self._sweeper._run_id,
        )
        # the engine class travels with the payload: shards run it without importing it
        init = (type(self._sweeper), self._sweeper._payload, shard_config)
        cluster: dict[str, Any] = {"kind": cfg.shard_cluster()}
        handles: list[ShardHandle]
        if cfg.shard_cluster() == "ray":
            from llmlat._shard._ray import RayShard, connect

            self._ray, cluster["ray_startup_s"], cpus = connect(cfg.ray_address)
            count = cfg.workers or cpus
            share = min(1.0, cpus / count)
            handles = [RayShard(k, (*init, k, count), share) for k in range(count)]
        else:
            from llmlat._shard._local import ProcessShard

            count = cfg.workers or 1
            handles = [ProcessShard(k, _pickled(*init, k, count)) for k in range(count)]
        cluster["workers"] = count
        self._meta["cluster"] = cluster
        self._shards = [_Shard(handle, handle.shard) for handle in handles]
        infos = await asyncio.gather(*(self._call(s, "start") for s in self._shards))
        for shard, info in zip(self._shards, infos, strict=True):
            if info is not None:
                shard.host, shard.pid, shard.node = info["host"], info["pid"], info["node"]
        await asyncio.gather(*(self._sync_clock(s) for s in self._live()))
        if not self._live():
            raise RuntimeError(f"no shard started: {self._shards[0].lost}")

    async def _sync_clock(self, shard: _Shard) -> None:
        """Estimate the shard's wall-clock offset from the reading with the shortest round trip."""
        best: tuple[int, int] | None = None
        for _ in range(_CLOCK_PINGS):
            t0 = time.time_ns()
            theirs = await self._call(shard, "clock")
            t1 = time.time_ns()
            if theirs is None:
                return
            if best is None or t1 - t0 < best[0]:
                best = (t1 - t0, theirs - (t0 + t1) // 2)
        assert best is not None
        shard.rtt_s, shard.offset_ns = best[0] / 1e9, best[1]

    async def _run_levels(self, wall0_ns: int) -> None:
        base = 0
        for plan in self._sweeper._plans:
            live = self._live()
            if self._stopping or not live:
                return
            reached = await asyncio.gather(*(self._call(s, "ready", plan.index) for s in live))
            going = [s for s, ok in zip(live, reached, strict=True) if ok]
            if self._stopping or not going:
                return
            margin_s = _START_MARGIN_S + 4 * max(s.rtt_s for s in going)
            start_ns = time.time_ns() + int(margin_s * 1e9)
            start_run_s = (start_ns - wall0_ns) / 1e9
            shifts = await asyncio.gather(
                *(
                    self._call(s, "go", plan.index, start_ns + s.offset_ns, start_run_s, base)
                    for s in going
                )
            )
            for shard, shift in zip(going, shifts, strict=True):
                shard.shift_s = shift if shift is not None else shard.shift_s
            self._sweeper._start_bar_level(plan)
            rows = await asyncio.gather(*(self._call(s, "level_done", plan.index) for s in going))
            issued = []
            for shard, row in zip(going, rows, strict=True):
                if row is not None:
                    issued.append(row[_ISSUED])
                    self._add(shard, [], [], [row])
            base = next_base(base, plan, len(self._shards), issued, self._top_id)

    # ------------------------------------------------------------------ rows

    async def _drain_every(self, done: asyncio.Event) -> None:
        # never cancelled mid-call: a shard hands its rows over once
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), _DRAIN_INTERVAL_S)
            await self._drain()

    async def _drain(self) -> None:
        live = self._live()
        batches = await asyncio.gather(*(self._call(s, "drain") for s in live))
        for shard, batch in zip(live, batches, strict=True):
            if batch is None:
                continue
            self._add(shard, batch["r"], batch["a"], [])
            reason = batch["stopped_reason"]
            if reason and not self._meta.get("stopped_reason"):
                self._meta["stopped_reason"] = reason
                notice(f"stopping: {reason} (shard {shard.shard})")
                self.stop()

    def _add(self, shard: _Shard, requests: list, attempts: list, levels: list) -> None:
        """Keep a shard's rows (adding ``shard`` and ``host``), journal them, count progress."""
        extra = (shard.shard, shard.host)
        for rows in (requests, attempts, levels):
            for row in rows:
                row.extend(extra)
        for kept, rows in zip(self._rows, (requests, attempts, levels), strict=True):
            kept.extend(rows)
        shard.rows += len(requests)
        if requests:
            self._top_id = max(self._top_id, max(r[_COLUMN["request_id"]] for r in requests))
        if self._writer is not None:
            try:
                self._writer.append_rows(requests, attempts, levels)
            except OSError as exc:  # disk full, say: keep the rows in memory and stop the sweep
                warnings.warn(
                    f"save: writing {self._writer.path} failed ({exc.strerror or exc}); the "
                    "sweep stops",
                    stacklevel=1,
                )
                self._writer.abort()
                self._writer = None
                self.stop()
        self._progress(requests)

    def _progress(self, requests: list[list]) -> None:
        sweeper = self._sweeper
        if self._bar is None or not requests:
            return
        ok, phase, latency = _COLUMN["ok"], _COLUMN["phase"], _COLUMN["latency_s"]
        sweeper._level_done += len(requests)
        for row in requests:
            if row[ok]:
                sweeper._level_ok += 1
                if row[phase] == "measure":
                    sweeper._level_latencies.append(row[latency])
        self._bar.update(len(requests))
        self._bar.set_postfix_str(sweeper._postfix(), refresh=False)

    # ------------------------------------------------------------------ the end

    async def _end(self, drain: asyncio.Task | None) -> None:
        """Let every shard end (cancelled when the run was), take their last rows, close."""
        if drain is not None:
            await asyncio.gather(drain, return_exceptions=True)
        live = self._live()
        try:
            # a shard may wait at a level's gate (stopped before it began): stop releases it
            how = "cancel" if self._interrupted else "stop"
            await asyncio.gather(*(self._call(s, how) for s in live))
            ends = asyncio.gather(*(self._call(s, "finish") for s in live))
            try:
                infos = await asyncio.wait_for(ends, _WIND_DOWN_S)
            except TimeoutError:
                infos = [None] * len(live)
            for shard, info in zip(live, infos, strict=True):
                if info is not None:
                    shard.error = info["error"]
            await self._drain()
        finally:
            await asyncio.gather(*(s.handle.close() for s in self._shards), return_exceptions=True)
            if self._bar is not None:
                self._bar.close()
            if self._writer is not None:
                result = self.result()
                keys = ("interrupted", "shards", "stopped_reason")
                self._writer.close({k: result.meta.get(k) for k in keys})
                self._writer = None
            if self._ray:
                from llmlat._shard._ray import disconnect

                disconnect()
        for shard in self._shards:
            if shard.error:
                notice(f"shard {shard.shard} on {shard.host} failed: {shard.error}")

    # ------------------------------------------------------------------ helpers

    def _live(self) -> list[_Shard]:
        return [s for s in self._shards if s.lost is None]

    async def _call(self, shard: _Shard, method: str, *args: Any) -> Any:
        """Call a shard; a lost shard is recorded (and said) once, and gives None."""
        try:
            return await shard.handle.call(method, *args)
        except ShardLost as exc:
            if shard.lost is None:
                shard.lost = str(exc)
                where = f" on {shard.host}" if shard.host else ""
                notice(f"shard {shard.shard}{where} lost: {exc}; its rows sent so far are kept")
            return None

    def _stop_shards(self) -> None:
        for shard in self._live():
            task = asyncio.create_task(self._call(shard, "stop"))
            shard.tasks.add(task)
            task.add_done_callback(shard.tasks.discard)


def _pickled(engine: type, payload: Any, config: SweepConfig, shard: int, shards: int) -> bytes:
    """Return the init message of a shard process (ValueError: a payload it could not rebuild)."""
    if callable(payload) and getattr(payload, "__module__", None) == "__main__":
        raise ValueError(
            "payload: a callable must be importable by the shard processes (define it in a "
            "module, not in __main__ or a notebook), or run the shards on Ray (cluster='ray')"
        )
    try:
        return pickle.dumps((engine, payload, config, shard, shards))
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise ValueError(f"payload: cannot be sent to the shard processes ({exc})") from None


def _frame(rows: list[list], columns: dict[str, str], order: list[str]) -> pd.DataFrame:
    import pandas as pd

    names = [*columns, *EXTRA_COLUMNS]
    frame = pd.DataFrame.from_records(rows, columns=names) if rows else pd.DataFrame(columns=names)
    frame = frame.astype({"shard": "int64", "host": "string"})
    if order:
        frame = frame.sort_values(order, kind="stable", ignore_index=True)
    return frame
