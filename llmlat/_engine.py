"""The sweep engine: run the planned load levels against a target and record every request.

:class:`Sweeper` executes the :class:`~llmlat._loadshapes.LevelPlan` of each level in order (closed
loop: N workers; open loop / trace: sends at scheduled times, latency counted from the
scheduled time), keeps one :class:`~llmlat.schema.Record` per issued request whatever happens,
samples its own event-loop lag and CPU time per level (so a client-bound level can be flagged),
shows a progress bar, and appends finished rows to disk as it goes when asked to.
:func:`asweep` and :func:`sweep` are the one-call forms.

Stopping: :meth:`Sweeper.stop` stops new sends and lets in-flight requests finish; cancelling
the task that runs a sweep also cancels the in-flight requests, awaits them, keeps their rows
(``error_kind="cancelled"``) and flushes the save file. Ctrl-C in :func:`sweep` does the first,
then the second after a grace period (or at a second Ctrl-C); :func:`run_sync` is that runner.
Within :func:`~llmlat._loop.stop_signals` it takes other signals the same way: the ``llmlat``
command runs every command so, so SIGTERM stops any sweep it runs (``llmlat sweep``, sharded or
not, the demo's).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import math
import os
import platform
import secrets
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Coroutine, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from llmlat._adaptive import AdaptiveSearch
from llmlat._apis import cacheable_system, make_payload
from llmlat._client import Client, FailFast, list_models
from llmlat._fdlimit import ensure_open_files
from llmlat._loadshapes import DEFAULT_LENGTH_TEXT, LevelPlan
from llmlat._loop import call_in_loop, loop_factory, run_coroutine, stop_signals_in_force
from llmlat._notice import notice
from llmlat._redact import redact_url
from llmlat._version import __version__
from llmlat.config import SweepConfig, jsonable, with_options
from llmlat.results import check_save_path
from llmlat.schema import (
    Attempt,
    LevelStats,
    Record,
    attempts_frame,
    levels_frame,
    requests_frame,
)
from llmlat.sim.process import serve_simulator

if TYPE_CHECKING:  # pandas loads when a result is built, not while measuring
    from llmlat.results import DatasetWriter, SweepResult

__all__ = ["DEFAULT_PROMPT", "Sweeper", "asweep", "run_sync", "sweep"]

#: What is sent when no payload is given.
DEFAULT_PROMPT = "Explain in three sentences why the sky is blue."

_LAG_INTERVAL_S = 0.01  # event-loop lag sampling period
_FLUSH_INTERVAL_S = 0.2  # finished rows reach the save file within 0.25 s (timer lateness)
_GRACE_S = 5.0  # after a stop signal, how long requests in flight may take to finish
_POSTFIX_INTERVAL_S = 0.5  # how often the progress bar's ok rate / p95 are recomputed
_LEVEL_LABEL = {"concurrency": "N={:g}", "rate": "rate={:g}/s", "trace": "trace x{:g}"}


class Sweeper:
    """A sweep over load levels, ready to run once.

    Parameters
    ----------
    payload : dict, str, list, callable or None
        What to send: a request body (dict or JSON text), a plain prompt (a one-message chat,
        or a completions prompt), a list of those (request ``i`` sends item ``i % len``), or a
        callable ``f(request_id) -> payload``. None sends :data:`DEFAULT_PROMPT`.
    config : SweepConfig, optional
        The options (:class:`llmlat.config.SweepConfig`); the defaults when None.
    **options
        Options of :class:`~llmlat.config.SweepConfig` by name, replacing those of ``config``
        (see :func:`sweep` for the list).

    Raises
    ------
    ValueError
        Naming the first invalid option.
    TypeError
        For an unknown option name.
    """

    @with_options
    def __init__(
        self, payload: Any = None, config: SweepConfig | None = None, **options: Any
    ) -> None:
        cfg = self.config = SweepConfig.from_options(config, **options)
        self._plans = cfg.plans()
        # concurrency/rate "auto": levels chosen one at a time (llmlat._adaptive)
        self._search = None if cfg.auto() is None else AdaptiveSearch(cfg)
        # a closed-loop level that issues fewer requests than it has workers never fills up
        short = [
            p.workers for p in self._plans if p.workers and (p.total() or p.workers) < p.workers
        ]
        if short:
            warnings.warn(
                f"requests={cfg.requests} is below concurrency {short}: those levels never have "
                f"that many requests in flight (the default is {DEFAULT_LENGTH_TEXT})",
                stacklevel=3,
            )
        cfg.target().api_key()  # the named variable must be set (the key itself is not kept)
        self._retry = cfg.retry_policy()
        self._model = cfg.model
        self._fail_fast = FailFast()
        self._payload = payload  # shards (llmlat._shard) receive it as given
        self._payload_of = _payload_source(
            payload, cfg.api, self._plans, cfg.seed, cfg.cache_system_prompt
        )
        self._payload_summary = _payload_summary(payload)
        # issue 11: checked before anything is sent, so a bad path never costs a run
        self._save = (
            None if cfg.save is None else check_save_path(cfg.save, overwrite=cfg.overwrite)
        )
        self._run_id = cfg.run_id or f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"
        self._meta: dict[str, Any] = {}
        self._issued: list[Record] = []  # every request issued, in request_id order
        self._unfinished: dict[int, Record] = {}
        self._attempts: list[Attempt] = []
        self._levels: list[LevelStats] = []
        self._pending: tuple[list[Record], list[Attempt]] = ([], [])
        self._writer: DatasetWriter | None = None
        self._flush_timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task] = set()
        self._stopping = False
        self._sleepers: set[asyncio.Future] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._interrupted = False
        self._started = False
        self._t0_ns = 0
        self._bar: Any = None
        self._level_done = 0
        self._level_ok = 0
        self._level_latencies: list[float] = []
        self._last_postfix = 0.0
        self._coordinator: Any = None  # a sharded sweep's llmlat._shard.Coordinator
        self._gate: Any = None  # in a shard, its llmlat._shard._worker.ShardWorker

    # ------------------------------------------------------------------ public

    def stop(self) -> None:
        """Stop sending new requests; in-flight ones finish, then :meth:`run` returns.

        Safe to call from any thread.
        """
        self._stopping = True
        if self._coordinator is not None:
            self._coordinator.stop()
        call_in_loop(self._loop, self._wake_sleepers)

    def result(self) -> SweepResult:
        """Return what has finished so far (everything, once :meth:`run` has returned).

        Returns
        -------
        SweepResult
            Finished requests (in ``request_id`` order), their attempts, the levels done and
            the run's metadata (``meta["interrupted"]`` tells whether the run was cut short).
        """
        if self._coordinator is not None:
            return self._coordinator.result()
        from llmlat.results import SweepResult

        done = [r for r in self._issued if r.request_id not in self._unfinished]
        meta = {**self._meta, "interrupted": self._interrupted}
        return SweepResult(
            requests_frame(done),
            attempts_frame(sorted(self._attempts, key=_attempt_order)),
            levels_frame(self._levels),
            meta,
        )

    async def run(self) -> SweepResult:
        """Run every level in order and return the result.

        Returns
        -------
        SweepResult
            One row per issued request, one per HTTP attempt, one per level.

        Raises
        ------
        asyncio.CancelledError
            When the task running the sweep is cancelled: in-flight requests are cancelled and
            kept as rows, the save file is flushed, then the cancellation propagates
            (:meth:`result` still gives the partial result).
        """
        if self._started:
            raise RuntimeError("a Sweeper runs once; make a new one")
        self._started = True
        self._loop = asyncio.get_running_loop()
        cfg = self.config
        if cfg.shard_cluster() is None:  # shards check their own share, in their process
            self._check_open_files()
        if cfg.url is not None:
            return await self._run_against(cfg.urls(), None)
        async with serve_simulator(cfg.sim_config(), in_process=not cfg.simulator_process) as sim:
            notice(f"no url given: measuring the built-in simulator at {sim.url}")
            self._model = cfg.model or sim.config.model
            return await self._run_against([sim.url], jsonable(dataclasses.asdict(sim.config)))

    # ------------------------------------------------------------------ the run

    def _check_open_files(self) -> None:
        """Raise the open-file limit for the sockets the levels need, or refuse the sweep."""
        cfg = self.config
        # room for a socket per request in flight (two with an in-process simulator, which
        # holds the other end); None: an open loop without a cap
        plans = self._plans if self._search is None else [self._search.ceiling_plan()]
        caps = [c for p in plans if (c := p.workers or p.max_in_flight) is not None]
        ensure_open_files(
            max(caps) if len(caps) == len(plans) else None,
            2 if cfg.url is None and not cfg.simulator_process else 1,
            "concurrency" if plans[0].workers else "max_in_flight",
        )

    async def _run_against(self, urls: list[str], sim_config: dict | None) -> SweepResult:
        cfg = self.config
        url = urls[0]  # the primary; the others are fallbacks (issue 14)
        if self._model is None:  # the server's first listed model, or a one-line error
            self._model = await self._listed_model(urls)
        target = dataclasses.replace(cfg.target(url), model=self._model)
        self._t0_ns = time.perf_counter_ns()
        self._meta = {
            "llmlat_version": __version__,
            "run_id": self._run_id,
            "started_at": datetime.now(UTC).isoformat(),
            "t0_perf_s": self._t0_ns / 1e9,
            "url": redact_url(url),
            "targets": [redact_url(u) for u in urls],  # served_by indexes this list
            "api": cfg.api,
            "model": self._model,
            "api_key_env": cfg.api_key_env,  # the name only, never the key
            "level_kind": self._plans[0].kind,
            "levels": [p.value for p in self._plans],
            "load": cfg.to_meta(),  # every option (SweepConfig), secrets left out
            "seed": cfg.seed,
            "machine": {
                "platform": platform.platform(),
                "python": platform.python_version(),
                "cpu_count": os.cpu_count(),
                "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
            },
            "simulator": sim_config,
            "interrupted": False,
            "payload_summary": self._payload_summary,
        }
        if cfg.shard_cluster() is not None:  # shards in processes or on Ray, merged here
            from llmlat._shard import Coordinator

            self._coordinator = Coordinator(self, url if len(urls) == 1 else tuple(urls))
            return await self._coordinator.run()
        if self._save is not None:
            from llmlat.results import DatasetWriter

            self._writer = DatasetWriter(
                self._save, dict(self._meta), overwrite=self.config.overwrite
            )
            self._flush_tick()
        self._bar = self._make_bar()
        # a full collection over everything imported so far (pandas, numpy, ...) pauses the
        # loop for tens of ms mid-level; frozen objects are skipped until the run ends
        gc.freeze()
        try:
            async with Client(
                target,
                self._retry,
                run_id=self._run_id,
                t0_ns=self._t0_ns,
                seed=cfg.seed,
                transport=cfg.transport,
                fallbacks=urls[1:],
                failover=cfg.failover(),
                rpm=cfg.client_rpm,
            ) as client:
                for plan in self._level_plans():
                    if self._stopping:
                        break
                    if plan.index and cfg.pause_s:
                        await self._sleep(cfg.pause_s)
                    if not self._stopping:
                        await self._run_level(plan, client)
        except BaseException:
            self._interrupted = True
            raise
        finally:
            gc.unfreeze()
            if self._search is not None:  # the levels it chose, and why
                self._meta.update(self._search.meta())
            self._interrupted = self._interrupted or self._stopping
            if self._bar is not None:
                self._bar.close()
            self._close_writer()
        return self.result()

    async def _listed_model(self, urls: list[str]) -> str:
        """Return the first model the first URL that answers lists (``GET /v1/models``).

        The fallbacks are asked in order when the primary is down, as requests would fail over;
        the primary's error is raised when none answers.
        """
        cfg = self.config
        errors = []
        for i, url in enumerate(urls):
            try:
                models = await list_models(cfg.target(url), transport=cfg.transport)
            except ValueError as exc:
                errors.append(exc)
                continue
            by = "the server lists" if i == 0 else f"fallback {redact_url(url)} lists"
            notice(
                f"no model given: using {models[0]!r}, the first of the {len(models)} "
                f"{by} (GET /v1/models)"
            )
            return models[0]
        raise errors[0]

    def _level_plans(self) -> Iterable[LevelPlan]:
        """Return the planned levels, or those an adaptive search chooses as levels end."""
        if self._search is None:
            return self._plans

        def rows(level: float) -> tuple[Any, Any]:
            return (
                requests_frame([r for r in self._issued if r.level == level]),
                attempts_frame([a for a in self._attempts if a.level == level]),
            )

        return self._search.plans(rows, self._now, lambda: self._stopping)

    async def _run_level(self, plan: LevelPlan, client: Client) -> None:
        if self.config.preconnect:  # before the level's clock starts: connects are not its latency
            await client.preconnect(plan.workers or plan.max_in_flight or 0)
        if self._gate is not None and not await self._gated(plan):
            return
        stats = LevelStats(self._run_id, plan.value, plan.kind, t_start=self._now())
        issued_before = len(self._issued)
        lags: list[float] = []
        sampler = asyncio.create_task(_sample_lag(lags))
        cpu0 = time.process_time()
        self._start_bar_level(plan)
        try:
            if plan.workers is not None:
                stats.stopped_by = await self._closed_loop(plan, client)
            else:
                stats.stopped_by = await self._open_loop(plan, client)
            await self._gather_tasks()
        except BaseException as exc:
            stats.stopped_by = "interrupted" if isinstance(exc, asyncio.CancelledError) else "error"
            self._stopping = True
            for task in self._tasks:
                task.cancel()
            await self._gather_tasks(raise_errors=False)
            raise
        finally:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
            self._cancel_unstarted()
            stats.t_end = self._now()
            stats.issued = len(self._issued) - issued_before
            stats.cpu_s = time.process_time() - cpu0
            wall = stats.t_end - stats.t_start
            stats.cpu_util = stats.cpu_s / wall if wall > 0 else math.nan
            if lags:
                arr = np.asarray(lags)
                p50, p99 = np.percentile(arr, [50, 99])
                stats.loop_lag_p50_s, stats.loop_lag_p99_s = float(p50), float(p99)
                stats.loop_lag_max_s = float(arr.max())
            self._levels.append(stats)
            if self._writer is not None:
                self._flush()
                self._writer.add_level(stats)
            if self._gate is not None:
                self._gate.level_ended(plan.index, stats)

    async def _gated(self, plan: LevelPlan) -> bool:
        """In a shard: start the level at the coordinator's instant; False if stopped first."""
        start_s = await self._gate.wait_go(plan.index)
        if start_s is None:
            return False
        await self._sleep(start_s - self._now())
        return not self._stopping

    async def _closed_loop(self, plan: LevelPlan, client: Client) -> str:
        issued = measured = 0
        t_level = self._now()
        # by duration: measured time starts after warmup_s and after the warmup-th send
        end = math.inf
        if plan.duration_s is not None and not plan.warmup:
            end = t_level + plan.warmup_s + plan.duration_s

        n = plan.workers or 0
        # client 0's first cycle, which spreads the others' first sends (see _stagger)
        first_cycle: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        async def worker(w: int) -> None:
            try:
                if w:
                    await self._stagger(first_cycle, w, n)
                await loop(w)
            finally:  # a client 0 that stops before its first answer lets the others go
                if not first_cycle.done():
                    first_cycle.set_result(0.0)

        async def loop(w: int) -> None:
            nonlocal issued, measured, end
            while not self._stopping:
                now = self._now()
                if now >= end or (plan.requests is not None and measured >= plan.requests):
                    return
                record = self._issue(plan, issued, now, now - t_level, w)
                issued += 1
                measured += record.phase == "measure"
                if plan.duration_s is not None and plan.warmup and issued == plan.warmup:
                    end = max(now, t_level + plan.warmup_s) + plan.duration_s
                await self._send(client, record)
                if plan.think_time_s:
                    await self._sleep(plan.think_time_s)
                if not first_cycle.done():  # client 0, alone until now
                    first_cycle.set_result(self._now() - t_level)

        for w in range(n):
            self._spawn(worker(w))
        await self._gather_tasks()
        return "interrupted" if self._stopping else plan.stop_rule

    async def _stagger(self, first_cycle: asyncio.Future[float], w: int, n: int) -> None:
        """Hold client ``w`` of ``n`` until ``w / n`` of a cycle after client 0's second send.

        Client 0 sends alone first; its first cycle (answer and think time), unloaded, spreads
        the others' first sends over the next one, so the servers start out of phase. Started
        at once, servers of near-constant service stay in phase for tens of cycles (only the
        services' spread moves them apart), and past c clients a request then waits for a
        whole round of departures: at service CV 0.05 a default level read a p95 24% above
        the steady one at 68 clients on 64 servers and 28% at 18 on 16 (exact simulation;
        35% over HTTP); spread, -0.2% and -2% (``benchmarks/bench_phase.py``). A client 0
        whose first request fails at once lets the others start about together, as before;
        each shard of a sharded sweep spreads its own clients.
        """
        cycle_s = await first_cycle
        await self._sleep(cycle_s * w / n)

    async def _open_loop(self, plan: LevelPlan, client: Client) -> str:
        assert plan.schedule is not None
        cap = asyncio.Semaphore(plan.max_in_flight) if plan.max_in_flight else None
        t_level = self._now()
        for index, offset in enumerate(plan.schedule.offsets_s.tolist()):
            t_due = t_level + offset
            await self._sleep(t_due - self._now())
            if cap is not None and not self._stopping:
                await cap.acquire()  # waiting for a slot shows as schedule lag
            if self._stopping:
                return "interrupted"
            self._spawn(self._send(client, self._issue(plan, index, t_due, offset, None), cap))
        return plan.stop_rule

    # ------------------------------------------------------------------ requests

    def _issue(
        self, plan: LevelPlan, index: int, t_scheduled: float, offset_s: float, worker: int | None
    ) -> Record:
        """Make the row of a request about to be sent: issued, it is a row whatever happens."""
        request_id = self._request_id(index)
        record = Record(
            self._run_id,
            plan.value,
            plan.kind,
            request_id,
            phase=plan.phase(index, offset_s),
            worker=worker,
            in_flight=len(self._unfinished) + 1,  # issued and not finished
            t_scheduled=t_scheduled,
        )
        self._issued.append(record)
        self._unfinished[request_id] = record
        return record

    def _request_id(self, index: int) -> int:
        """Return the id of the level's ``index``-th request: sequential (a shard interleaves)."""
        return len(self._issued) if self._gate is None else self._gate.request_id(index)

    async def _send(
        self, client: Client, record: Record, cap: asyncio.Semaphore | None = None
    ) -> None:
        attempts: list[Attempt] = []  # filled as attempts start: kept even when cancelled
        try:
            # on cancellation the client fills the record before re-raising
            await client.send(record, self._payload_of(record), attempts)
        except Exception as exc:  # a bug, or a bad payload from a callable: the sweep stops
            _abandon(record, self._now(), f"not completed: {type(exc).__name__}")
            raise
        finally:
            if cap is not None:
                cap.release()
            self._finish(record, attempts)

    def _finish(self, record: Record, attempts: list[Attempt]) -> None:
        reason = self._fail_fast.observe(record)
        if reason is not None:  # the first requests all failed the same way: more would too
            self._meta["stopped_reason"] = reason
            notice(f"stopping: {reason}")
            self.stop()
        self._unfinished.pop(record.request_id, None)
        self._attempts.extend(attempts)
        self._pending[0].append(record)
        self._pending[1].extend(attempts)
        self._level_done += 1
        if record.ok:
            self._level_ok += 1
            if record.phase == "measure":
                self._level_latencies.append(record.latency_s)
        now = time.perf_counter()
        if self._bar is not None:
            self._bar.update(1)
            if now - self._last_postfix >= _POSTFIX_INTERVAL_S:
                self._last_postfix = now
                self._bar.set_postfix_str(self._postfix(), refresh=False)

    def _cancel_unstarted(self) -> None:
        """Give a row to requests issued but cancelled before the client ever ran."""
        now = self._now()
        for record in list(self._unfinished.values()):
            _abandon(record, now, "cancelled before it was sent")
            self._finish(record, [])

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _gather_tasks(self, *, raise_errors: bool = True) -> None:
        """Await every request / worker task; re-raise the first unexpected error."""
        while self._tasks:
            results = await asyncio.gather(*list(self._tasks), return_exceptions=True)
            errors = [
                r
                for r in results
                if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)
            ]
            if errors and raise_errors:
                raise errors[0]

    # ------------------------------------------------------------------ helpers

    def _now(self) -> float:
        return (time.perf_counter_ns() - self._t0_ns) / 1e9

    def _wake_sleepers(self) -> None:
        for wakeup in list(self._sleepers):
            _resolve(wakeup)

    async def _sleep(self, seconds: float) -> None:
        """Sleep at least ``seconds`` of perf_counter time; :meth:`stop` wakes it early."""
        assert self._loop is not None
        end = self._now() + seconds
        # the loop's timers may fire up to a clock tick early (uvloop counts whole ms)
        while not self._stopping and (left := end - self._now()) > 0:
            wakeup = self._loop.create_future()
            handle = self._loop.call_later(left, _resolve, wakeup)
            self._sleepers.add(wakeup)
            try:
                await wakeup
            finally:
                handle.cancel()
                self._sleepers.discard(wakeup)

    def _flush(self) -> None:
        records, attempts = self._pending
        self._pending = ([], [])
        if self._writer is not None and (records or attempts):
            self._writer.append(records, attempts)

    def _flush_tick(self) -> None:
        """Flush now and every _FLUSH_INTERVAL_S: rows reach the file even when nothing ends."""
        assert self._loop is not None and self._writer is not None
        try:
            self._flush()
        except OSError as exc:  # disk full, say: keep the rows in memory and stop the sweep
            warnings.warn(
                f"save: writing {self._save} failed ({exc.strerror or exc}); the sweep stops",
                stacklevel=1,
            )
            self._writer.abort()
            self._writer = None
            self.stop()
            return
        self._flush_timer = self._loop.call_later(_FLUSH_INTERVAL_S, self._flush_tick)

    def _close_writer(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
        if self._writer is None:
            return
        self._flush()
        updates: dict[str, Any] = {
            k: self._meta[k] for k in ("levels", "adaptive") if k in self._meta
        }
        self._writer.close(
            {
                "interrupted": self._interrupted,
                "stopped_reason": self._meta.get("stopped_reason"),
                **updates,
            }
        )
        self._writer = None

    def _make_bar(self) -> Any:
        if not self.config.progress:
            return None
        try:  # in Jupyter, tqdm.auto warns and falls back to text when ipywidgets is missing
            import ipywidgets  # noqa: F401
        except ImportError:
            from tqdm.std import tqdm
        else:
            from tqdm.auto import tqdm

        totals = [p.total() for p in self._plans] if self._search is None else [None]
        total = None if None in totals else sum(t for t in totals if t is not None)
        return tqdm(total=total, unit="req", dynamic_ncols=True, leave=True)

    def _start_bar_level(self, plan: LevelPlan) -> None:
        self._level_done = self._level_ok = 0
        self._level_latencies = []
        if self._bar is not None:
            self._bar.set_description_str(_LEVEL_LABEL[plan.kind].format(plan.value))

    def _postfix(self) -> str:
        ok = self._level_ok / self._level_done if self._level_done else math.nan
        lat = self._level_latencies
        p95 = f"{np.percentile(lat, 95):.3g}s" if lat else "-"
        return f"ok {ok:.0%} p95 {p95}"


@with_options
async def asweep(
    payload: Any = None, config: SweepConfig | None = None, **options: Any
) -> SweepResult:
    """Run a sweep in the running event loop.

    Parameters
    ----------
    payload : dict, str, list, callable or None
        What to send, see :class:`Sweeper`.
    config : SweepConfig, optional
        Options as a :class:`~llmlat.config.SweepConfig`; the keywords below replace its values.
    {options}

    Returns
    -------
    SweepResult
        One row per request issued.

    Raises
    ------
    ValueError
        Naming the first invalid option.
    asyncio.CancelledError
        When cancelled, after in-flight requests are cancelled and the save file is flushed.
    """
    return await Sweeper(payload, config, **options).run()


@with_options
def sweep(payload: Any = None, config: SweepConfig | None = None, **options: Any) -> SweepResult:
    """Run a sweep from synchronous code (plain Python, IPython, or inside a running loop).

    Ctrl-C stops new sends and gives the requests in flight a grace period to finish (a second
    Ctrl-C cancels them at once); cancelled requests stay rows (``error_kind="cancelled"``).
    The partial result is returned with ``meta["interrupted"] = True``.

    Parameters
    ----------
    payload : dict, str, list, callable or None
        What to send, see :class:`Sweeper`.
    config : SweepConfig, optional
        Options as a :class:`~llmlat.config.SweepConfig`; the keywords below replace its values.
    {options}

    Returns
    -------
    SweepResult
        One row per request issued.

    Raises
    ------
    ValueError
        Naming the first invalid option.
    """
    return run_sync(Sweeper(payload, config, **options))


def run_sync(sweeper: Sweeper) -> SweepResult:
    """Run a sweep from synchronous code; a stop signal stops it gracefully.

    The stop signals are SIGINT (Ctrl-C), or those of the enclosing
    :func:`~llmlat._loop.stop_signals`. A
    signal is taken only in the main thread and only when its handler is the default one
    (Python's Ctrl-C handler for SIGINT, the OS's for the others): an ignored signal stays
    ignored (a job started with ``&`` by a shell without job control ignores SIGINT) and a
    handler of the caller's own stays in place. The first signal stops new sends and gives the
    requests in flight :data:`_GRACE_S` to finish; a second one, or the grace's end, cancels
    them (each stays a row).

    Parameters
    ----------
    sweeper : Sweeper
        A sweep not yet run.

    Returns
    -------
    SweepResult
        One row per request issued; ``meta["interrupted"]`` when cut short.
    """
    signals, got = stop_signals_in_force()
    before = len(got)
    try:
        result = _run_fresh_or_nested(sweeper, signals, got)
    except (KeyboardInterrupt, asyncio.CancelledError):
        sweeper.stop()  # in case the sweep runs on in a helper thread
        result = sweeper.result()
        result.meta["interrupted"] = True
        if len(got) == before:  # Ctrl-C through a handler not ours
            got.append(signal.SIGINT)
    if result.meta.get("interrupted"):
        notice(f"interrupted; returning the {len(result.requests)} requests measured so far")
    return result


def _run_fresh_or_nested(
    sweeper: Sweeper, signals: tuple[signal.Signals, ...], got: list[signal.Signals]
) -> SweepResult:
    """Run the sweep on a fresh loop (uvloop when installed), or via the running-loop helper."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return run_coroutine(sweeper.run())
    ours = tuple(s for s in signals if _default_handler(s)) if _in_main_thread() else ()
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(_run_with_grace(sweeper, ours, got) if ours else sweeper.run())


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _default_handler(sig: signal.Signals) -> bool:
    """Whether ``sig`` is at its default: a sweep takes it over only then."""
    default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
    return signal.getsignal(sig) is default


async def _run_with_grace(
    sweeper: Sweeper, signals: tuple[signal.Signals, ...], got: list[signal.Signals]
) -> SweepResult:
    """Run the sweep; the first signal stops it gracefully, a second or the grace's end cancels.

    The signals received are appended to ``got``.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    grace: list[asyncio.TimerHandle] = []

    def on_signal(sig: signal.Signals) -> None:
        got.append(sig)
        if grace:
            task.cancel()
            return
        sweeper.stop()
        grace.append(loop.call_later(_GRACE_S, task.cancel))
        again = "Ctrl-C" if sig == signal.SIGINT else sig.name
        print(
            f"llmlat: stopping ({sig.name}); waiting up to {_GRACE_S:g}s for the requests in "
            f"flight ({again} again to cancel them)",
            file=sys.stderr,
        )

    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return await sweeper.run()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        for handle in grace:
            handle.cancel()


async def _sample_lag(lags: list[float]) -> None:
    """Append how late each periodic wake-up of the event loop is, until cancelled."""
    clock = time.perf_counter
    while True:
        t = clock()
        await asyncio.sleep(_LAG_INTERVAL_S)
        lags.append(max(0.0, clock() - t - _LAG_INTERVAL_S))


def _abandon(record: Record, now: float, error: str) -> None:
    """Mark a request the client did not finish as cancelled at ``now``."""
    record.ok = False
    record.error_kind = "cancelled"
    record.error = error
    record.t_end = now
    record.latency_s = now - record.t_scheduled


def _attempt_order(attempt: Attempt) -> tuple[int, int]:
    return attempt.request_id, attempt.attempt


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


def _payload_source(
    payload: Any, api: str, plans: list[LevelPlan], seed: int = 0, cache_system: bool = False
) -> Callable[[Record], dict]:
    """Return ``f(record) -> payload dict``, validating what can be validated up front."""

    def build(item: Any) -> dict:
        body = make_payload(item, api)
        return cacheable_system(body, api) if cache_system else body

    if isinstance(payload, str):
        text = payload.strip()
        if text.startswith("{"):
            try:
                payload = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"payload: invalid JSON ({exc.msg})") from None
    if payload is None:
        payload = DEFAULT_PROMPT
    if callable(payload):
        func = payload
        return lambda record: build(func(record.request_id))
    if isinstance(payload, list | tuple):
        if not payload:
            raise ValueError("payload: the list of payloads is empty")
        items = [build(p) for p in payload]
        return lambda record: items[record.request_id % len(items)]
    base = build(payload)
    schedule = plans[0].schedule if plans[0].kind == "trace" else None
    if schedule is None or (schedule.prompt_tokens is None and schedule.completion_tokens is None):
        return lambda record: base
    return _trace_payloads(base, api, plans[0], seed)


def _trace_payloads(base: dict, api: str, plan: LevelPlan, seed: int) -> Callable[[Record], dict]:
    """Shape payloads by a trace's token counts.

    The prompt becomes about that many tokens (:func:`llmlat._traces.prompt_text`: each
    request's own words, after the shared blocks of a Mooncake trace's ``hash_ids``);
    ``max_tokens`` becomes the completion tokens (the target's ``max_tokens``, when given,
    overrides it).
    """
    from llmlat._traces import prompt_text

    sched = plan.schedule
    assert sched is not None

    def payload_of(record: Record) -> dict:
        i = record.request_id  # a trace is the sweep's only level: ids count its sends
        body = dict(base)
        if sched.prompt_tokens is not None:
            blocks = () if sched.blocks is None else sched.blocks[i]
            text = prompt_text(int(sched.prompt_tokens[i]), blocks, key=i, seed=seed)
            body.update(make_payload(text, api))
        if sched.completion_tokens is not None:
            body["max_tokens"] = max(1, int(sched.completion_tokens[i]))
        return body

    return payload_of


def _payload_summary(payload: Any) -> str:
    if payload is None:
        return f"default prompt ({len(DEFAULT_PROMPT)} chars)"
    if callable(payload):
        return f"callable {getattr(payload, '__name__', type(payload).__name__)}"
    if isinstance(payload, list | tuple):
        return f"{len(payload)} payloads"
    if isinstance(payload, str):
        return f"prompt text ({len(payload)} chars)"
    return f"payload dict with keys {sorted(payload)}"
