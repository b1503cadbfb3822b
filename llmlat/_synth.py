"""Seeded event simulations producing requests tables, for tests and benchmarks.

Independent of the HTTP engine and the provider simulator: an exact M/M/c (FCFS, c servers,
exponential service) fed by Poisson arrivals or by N clients with exponential think time, and a
continuous-batching server fed by N clients or by Poisson arrivals.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np
import pandas as pd

__all__ = [
    "batch_closed_requests",
    "batch_open_requests",
    "mgc_sweep",
    "mmc_closed_requests",
    "mmc_open_requests",
]


def _frame(level, kind, sched, start, end, worker) -> pd.DataFrame:
    sched, start, end = (np.asarray(v, dtype=np.float64) for v in (sched, start, end))
    n = len(sched)
    return pd.DataFrame(
        {
            "level": np.full(n, float(level)),
            "level_kind": pd.array([kind] * n, dtype="string"),
            "request_id": np.arange(n),
            "phase": pd.array(["measure"] * n, dtype="string"),
            "worker": pd.array(worker, dtype="Int64"),
            "t_scheduled": sched,
            "t_sent": sched,
            "t_end": end,
            "latency_s": end - sched,
            "service_s": end - sched,
            "queue_s": start - sched,
            "ok": np.ones(n, dtype=bool),
        }
    )


def mmc_open_requests(
    rates: list[float],
    mu: float,
    c: int,
    n: int,
    seed: int = 0,
    warmup: int = 3000,
    cv_s: float = 1.0,
) -> pd.DataFrame:
    """Simulate an open M/M/c (or M/G/c with gamma service) at each arrival rate.

    Parameters
    ----------
    rates : list of float
        Arrival rates (requests/s), one level each.
    mu : float
        Service rate of one server.
    c : int
        Number of servers.
    n : int
        Measured requests per level (after ``warmup`` discarded ones).
    seed : int, default 0
        Seed.
    warmup : int, default 3000
        Requests dropped from the start of each level (the queue starts empty, and near
        saturation it takes long to forget that).
    cv_s : float, default 1.0
        Coefficient of variation of the service time: 1 is exponential (M/M/c), any other
        value a gamma law with that CV (M/G/c).

    Returns
    -------
    pandas.DataFrame
        A requests table (``level_kind == "rate"``).
    """
    rng = np.random.default_rng(seed)
    out = []
    for lam in rates:
        m = n + warmup
        arr = np.cumsum(rng.exponential(1 / lam, m))
        if cv_s == 1.0:
            svc = rng.exponential(1 / mu, m)
        else:
            svc = rng.gamma(1 / cv_s**2, cv_s**2 / mu, m)
        free = [0.0] * c
        start = np.empty(m)
        for i in range(m):
            f = heapq.heappop(free)
            start[i] = max(arr[i], f)
            heapq.heappush(free, start[i] + svc[i])
        end = start + svc
        sl = slice(warmup, None)
        out.append(_frame(lam, "rate", arr[sl], start[sl], end[sl], [None] * n))
    return pd.concat(out, ignore_index=True)


def mmc_closed_requests(
    levels: list[int],
    mu: float,
    c: int,
    n: int,
    think_s: float = 0.0,
    seed: int = 0,
    warmup: int = 200,
) -> pd.DataFrame:
    """Simulate N clients (exponential think time) feeding an M/M/c, for each N.

    Parameters
    ----------
    levels : list of int
        Concurrency levels N.
    mu : float
        Service rate of one server.
    c : int
        Number of servers.
    n : int
        Measured requests per level (after ``warmup``).
    think_s : float, default 0.0
        Mean think time (0: send again at once).
    seed : int, default 0
        Seed.
    warmup : int, default 200
        Requests dropped from the start of each level.

    Returns
    -------
    pandas.DataFrame
        A requests table (``level_kind == "concurrency"``) with ``worker``.
    """
    rng = np.random.default_rng(seed)
    out = []
    for big_n in levels:
        m = n + warmup
        # events: (time, client); a client's next request is scheduled after its think time
        ready = [(rng.exponential(think_s) if think_s > 0 else 0.0, w) for w in range(big_n)]
        heapq.heapify(ready)
        free = [0.0] * c
        rows: list[tuple[float, float, float, int]] = []
        while len(rows) < m:  # a row's end is known when it is sent: nothing is censored
            t, w = heapq.heappop(ready)
            f = heapq.heappop(free)
            s = max(t, f)
            e = s + rng.exponential(1 / mu)
            heapq.heappush(free, e)
            rows.append((t, s, e, w))
            nxt = e + (rng.exponential(think_s) if think_s > 0 else 0.0)
            heapq.heappush(ready, (nxt, w))
        rows.sort()
        out.append(_frame(big_n, "concurrency", *zip(*rows[warmup:m], strict=True)))
    return pd.concat(out, ignore_index=True)


def _complete(rows: list, running: list, waiting: list, m: int) -> bool:
    """Whether the first m requests by send time have all finished (so none is censored)."""
    if len(rows) < m:
        return False
    oldest = min(r[0] for r in running + waiting)
    return sum(r[0] < oldest for r in rows) >= m


def batch_closed_requests(
    levels: list[int],
    slots: int,
    t0_s: float,
    t1_s: float,
    tokens: float,
    n: int,
    seed: int = 0,
    warmup: int = 100,
    spread: float = 0.5,
    join_steps: int = 1,
    drain: bool = False,
    step_s: Callable[[int], float] | None = None,
) -> pd.DataFrame:
    """Simulate N clients (no think time) against a continuous-batching server, for each N.

    As the simulator's batch engine (:mod:`llmlat.sim.model`) does: every step lasts
    ``t0_s + t1_s * batch`` and gives one token to each of the (at most ``slots``) running
    requests, the first at the end of a request's first step; waiting requests join, first come
    first served, at a step boundary. A client sends again the instant its answer ends, which is
    the instant the next step starts: with ``join_steps=1`` (the simulator behind HTTP, where the
    request arrives just after that step began) it joins one step later, unless the server is
    idle (an idle server starts a step at once). Output lengths are uniform on
    ``tokens * (1 -/+ spread)``.

    Parameters
    ----------
    levels : list of int
        Concurrency levels N.
    slots : int
        Slot cap B.
    t0_s, t1_s : float
        Step-time parameters.
    tokens : float
        Mean output tokens per request.
    n : int
        Measured requests per level (after ``warmup``).
    seed : int, default 0
        Seed.
    warmup : int, default 100
        Requests dropped from the start of each level.
    spread : float, default 0.5
        Relative half-width of the output-length distribution.
    join_steps : {1, 0}, default 1
        Steps a request sent at a step boundary of a busy server waits before it joins (0:
        it joins the step starting then).
    drain : bool, default False
        Stop the clients after ``n + warmup`` sends, as a sweep's closed level does, so the
        level ends with its drain (the batch shrinks as the last requests end, and they
        decode faster); else the clients keep sending until those requests have ended.
    step_s : callable, optional
        Step time of a batch of b requests, in place of ``t0_s + t1_s * b`` (a server of
        another step-time law, e.g. memory-bound then compute-bound: ``max(t0, t1 * b)``).

    Returns
    -------
    pandas.DataFrame
        A requests table (``level_kind == "concurrency"``) with ``completion_tokens``,
        ``t_first_token``, ``ttft_s`` and ``itl_mean_s`` (first to last token over the
        tokens less one: the mean step time while the request decoded).
    """
    rng = np.random.default_rng(seed)
    out = []
    low, high = int(tokens * (1 - spread)), int(tokens * (1 + spread)) + 1
    step_of = step_s or (lambda b: t0_s + t1_s * b)
    for big_n in levels:
        m = n + warmup
        waiting = [(0.0, w, 0) for w in range(big_n)]  # (sent, worker, first step), FIFO
        running: list[list] = []  # [sent, worker, tokens left, tokens total, first token]
        now, step = 0.0, 0
        rows: list[tuple] = []  # (sent, end, worker, tokens, first token)
        sends = big_n
        while (running or waiting) if drain else not _complete(rows, running, waiting, m):
            idle = not running
            while waiting and len(running) < slots and (idle or waiting[0][2] <= step):
                sent, w, _ = waiting.pop(0)
                total = int(rng.integers(low, high))
                running.append([sent, w, total, total, np.nan])
            now += step_of(len(running))
            step += 1
            for r in running:
                r[2] -= 1
                if r[2] == r[3] - 1:
                    r[4] = now
            for r in [r for r in running if r[2] == 0]:
                running.remove(r)
                rows.append((r[0], now, r[1], r[3], r[4]))
                if not drain or sends < m:
                    waiting.append((now, r[1], step + join_steps))
                    sends += 1
        rows.sort()
        kept = rows[warmup:m]
        workers = [r[2] for r in kept]
        out.append(
            _streamed_frame(big_n, "concurrency", [(r[0], r[1], r[3], r[4]) for r in kept], workers)
        )
    return pd.concat(out, ignore_index=True)


def _streamed_frame(level, kind, rows: list, worker) -> pd.DataFrame:
    """Build a requests table from a batching level's sorted ``(sent, end, tokens, first)``."""
    sends, ends, lengths, firsts = (np.asarray(v) for v in zip(*rows, strict=True))
    frame = _frame(level, kind, sends, sends, ends, worker)
    frame["completion_tokens"] = pd.array(lengths, dtype="Int64")
    frame["t_first_token"] = firsts
    frame["ttft_s"] = firsts - sends
    frame["itl_mean_s"] = (ends - firsts) / (lengths - 1)
    return frame


def batch_open_requests(
    rates: list[float],
    slots: int,
    t0_s: float,
    t1_s: float,
    tokens: float,
    duration_s: float | list[float],
    seed: int = 0,
    spread: float = 0.5,
) -> pd.DataFrame:
    """Simulate Poisson arrivals at a continuous-batching server, for each rate, exactly.

    The engine of :func:`batch_closed_requests`: a request arriving at an idle server starts a
    step at once; one arriving during a step joins at its end, first come first served, when
    a slot is free. Each level starts empty, sends for ``duration_s`` and ends when every
    request has (its drain included, as a sweep's open level does).

    Parameters
    ----------
    rates : list of float
        Arrival rates (requests/s), one level each.
    slots : int
        Slot cap B.
    t0_s, t1_s : float
        Step-time parameters.
    tokens : float
        Mean output tokens per request (uniform on ``tokens * (1 -/+ spread)``).
    duration_s : float or list of float
        How long each level sends (one value, or one per rate).
    seed : int, default 0
        Seed.
    spread : float, default 0.5
        Relative half-width of the output-length distribution.

    Returns
    -------
    pandas.DataFrame
        A requests table (``level_kind == "rate"``) with ``completion_tokens``,
        ``t_first_token``, ``ttft_s`` and ``itl_mean_s``.
    """
    rng = np.random.default_rng(seed)
    low, high = int(tokens * (1 - spread)), int(tokens * (1 + spread)) + 1
    spans = np.broadcast_to(np.asarray(duration_s, dtype=np.float64), (len(rates),))
    out = []
    for lam, span in zip(rates, spans, strict=True):
        arr = np.cumsum(rng.exponential(1 / lam, int(2 * lam * span) + 50))
        arr = arr[arr < span]
        lengths = rng.integers(low, high, len(arr))
        running: list[list] = []  # [arrival, tokens left, tokens total, first token]
        rows: list[tuple] = []
        now, i = 0.0, 0
        while i < len(arr) or running:
            if not running:  # idle: the next arrival starts a step at once
                now = max(now, float(arr[i]))
            while i < len(arr) and arr[i] <= now and len(running) < slots:
                running.append([float(arr[i]), int(lengths[i]), int(lengths[i]), np.nan])
                i += 1
            now += t0_s + t1_s * len(running)
            for r in running:
                r[1] -= 1
                if r[1] == r[2] - 1:
                    r[3] = now
            rows += [(r[0], now, r[2], r[3]) for r in running if r[1] == 0]
            running = [r for r in running if r[1] > 0]
        out.append(_streamed_frame(lam, "rate", sorted(rows), [None] * len(rows)))
    return pd.concat(out, ignore_index=True)


def _service(rng: np.random.Generator, mu: float, cv_s: float, size: int) -> np.ndarray:
    """Service times of mean 1/mu: exponential for cv 1, else gamma with that CV."""
    if cv_s == 1.0:
        return rng.exponential(1 / mu, size)
    return rng.gamma(1 / cv_s**2, cv_s**2 / mu, size)


def mgc_sweep(
    kind: str,
    levels: list[float],
    mu: float,
    c: int,
    *,
    cv_s: float = 1.0,
    queue_cap: int | None = None,
    seed: int = 0,
    length: float = 1.0,
    think_s: float = 0.0,
    think_cv: float = 0.0,
) -> pd.DataFrame:
    """Simulate a whole sweep as llmlat runs it, on c FCFS servers (M/G/c), exactly.

    Each level starts empty and runs the default length of :func:`llmlat._loadshapes.default_length`
    with no warmup: a closed level's N clients all send at time 0 (the start-up transient is in
    the data, as in a real sweep); an open level's Poisson arrivals run for its duration. With
    ``queue_cap`` a level refuses (429, ``rate_limited``, after 1 ms) a request that finds that
    many requests waiting; a closed level's client then sends again.

    Parameters
    ----------
    kind : {"concurrency", "rate"}
        Closed loop (levels are client counts, no think time) or open loop (arrival rates).
    levels : list of float
        The swept values.
    mu : float
        Service rate of one server (mean service time 1 / mu).
    c : int
        Servers.
    cv_s : float, default 1.0
        Service-time coefficient of variation (1: exponential; else gamma).
    queue_cap : int, optional
        Most requests waiting (not in service); more are refused.
    seed : int, default 0
        Seed.
    length : float, default 1.0
        Multiplies every level's default length.
    think_s : float, default 0.0
        A closed level's clients wait this long after each answer before sending again (a
        constant, as the engine's ``think_time_s``).
    think_cv : float, default 0.0
        Coefficient of variation of those waits: 0 keeps them constant, 1 makes them
        exponential, any other value gamma with that CV (mean ``think_s``).

    Returns
    -------
    pandas.DataFrame
        A requests table with ``ok``, ``status``, ``error_kind`` and ``attempts``.
    """
    from llmlat._loadshapes import default_length

    rng = np.random.default_rng(seed)
    out = []
    for value in levels:
        reqs, dur = default_length(kind, value)
        reqs, dur = int(length * (reqs or 0)), length * (dur or 0.0)
        free = [0.0] * c
        rows = []  # (sent, start, end, worker, ok)
        if kind == "concurrency":
            ready = [(0.0, w) for w in range(int(value))]
            svc = _service(rng, mu, cv_s, reqs)
            think = np.full(reqs, think_s)
            if think_s > 0 and think_cv > 0:
                think = _service(rng, 1.0 / think_s, think_cv, reqs)
            held: list[float] = []  # accepted requests still in the system
            for i in range(reqs):
                t, w = heapq.heappop(ready)
                while held and held[0] <= t:
                    heapq.heappop(held)
                if queue_cap is not None and len(held) - c >= queue_cap:
                    heapq.heappush(ready, (t + 1e-3 + think[i], w))
                    rows.append((t, t, t + 1e-3, w, False))
                    continue
                f = heapq.heappop(free)
                e = max(t, f) + svc[i]
                heapq.heappush(free, e)
                heapq.heappush(held, e)
                heapq.heappush(ready, (e + think[i], w))
                rows.append((t, max(t, f), e, w, True))
        else:
            arr = np.cumsum(rng.exponential(1 / value, int(3 * value * dur) + 50))
            arr = arr[arr < dur]
            svc = _service(rng, mu, cv_s, len(arr))
            ends: list[float] = []  # accepted requests still in the system
            for i, a in enumerate(arr):
                while ends and ends[0] <= a:
                    heapq.heappop(ends)
                if queue_cap is not None and len(ends) - c >= queue_cap:
                    rows.append((a, a, a + 1e-3, -1, False))
                    continue
                f = heapq.heappop(free)
                e = max(a, f) + svc[i]
                heapq.heappush(free, e)
                heapq.heappush(ends, e)
                rows.append((a, max(a, f), e, -1, True))
        rows.sort()
        sent, start, end, worker, ok = (np.asarray(x) for x in zip(*rows, strict=True))
        frame = _frame(value, kind, sent, start, end, [w if w >= 0 else None for w in worker])
        frame["ok"] = ok.astype(bool)
        frame["status"] = pd.array(np.where(ok, 200, 429), dtype="Int64")
        frame["error_kind"] = pd.array([None if o else "rate_limited" for o in ok], dtype="string")
        frame["attempts"] = 1
        out.append(frame)
    return pd.concat(out, ignore_index=True)
