"""Seeded event simulations producing requests tables, for tests and benchmarks.

Independent of the HTTP engine and the provider simulator: c FCFS servers (M/M/c, or M/G/c with
gamma service; a queue cap optional) fed by Poisson arrivals or by N clients with think time,
all through one engine (:class:`FCFS`, vectorised over independent replicas: a sweep's levels,
or the many replications of a long steady-state truth, :func:`fcfs_responses`), and a
continuous-batching server fed by N clients or by Poisson arrivals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd

__all__ = [
    "FCFS",
    "Steps",
    "batch_closed_requests",
    "batch_open_requests",
    "fcfs_responses",
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
    m = n + warmup
    arrivals, service = [], []
    for lam in rates:  # each level's draws in turn, then the levels as replicas of one engine
        arrivals.append(np.cumsum(rng.exponential(1 / lam, m)))
        service.append(_service(rng, mu, cv_s, m))
    arr = np.column_stack(arrivals)
    steps = FCFS(c, len(rates)).run(np.column_stack(service), arrivals=arr)
    sl = slice(warmup, None)
    out = [
        _frame(lam, "rate", arr[sl, j], steps.start[sl, j], steps.end[sl, j], [None] * n)
        for j, lam in enumerate(rates)
    ]
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
    m = n + warmup
    first, service, think = [], [], []
    for big_n in levels:  # a level draws each client's first think, then service and think
        if think_s > 0:  # time by turns; drawn ahead, then the levels as replicas
            draws = rng.exponential(1.0, big_n + 2 * m)
            first.append(think_s * draws[:big_n])
            service.append((1 / mu) * draws[big_n::2])
            think.append(think_s * draws[big_n + 1 :: 2])
        else:
            first.append(np.zeros(big_n))
            service.append(rng.exponential(1 / mu, m))
            think.append(np.zeros(m))
    engine = FCFS(c, len(levels), clients=np.array(levels), first_send=_columns(first, np.inf).T)
    steps = engine.run(np.column_stack(service), think=np.column_stack(think))
    out = []
    for j, big_n in enumerate(levels):
        sent, start, end, worker, _ = (x[warmup:] for x in _sorted_rows(steps, j, m))
        out.append(_frame(big_n, "concurrency", sent, start, end, worker))
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
    rtt_s: float = 0.0,
    together: bool = False,
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
    rtt_s : float, default 0
        Mean network round trip: each way is uniform on ``[0, rtt_s]``, drawn for every send
        and every token the client times. A request joins at the first step boundary after it
        arrives (an idle server starts a step at the first arrival, as behind HTTP, where
        clients sent at once arrive a few ms apart); its client sees its tokens late, and
        sends again when it sees the last. 0: no delay.
    together : bool, default False
        Start a level's clients all at once (as llmlat did before it spread them), instead
        of as the sweep engine starts them (``Sweeper._stagger``): client 0 alone, the others
        spread over its first cycle. With fixed output lengths the start decides for good
        whether the clients decode in step.

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

    def late(t: float) -> float:  # one way over the network
        return t + rng.uniform(0.0, rtt_s) if rtt_s > 0 else t

    for big_n in levels:
        m = n + warmup
        # (sent, worker, first step, arrival), FIFO by arrival
        waiting = [(0.0, w, 0, late(0.0)) for w in range(big_n if together else 1)]
        running: list[list] = []  # [sent, worker, tokens left, tokens total, first token]
        now, step = 0.0, 0
        rows: list[tuple] = []  # (sent, end, worker, tokens, first token)
        sends = big_n
        while (running or waiting) if drain else not _complete(rows, running, waiting, m):
            idle = not running
            waiting.sort(key=lambda r: r[3])  # stable: FIFO among equal arrivals
            if idle:
                now = max(now, waiting[0][3])
            while (
                waiting
                and len(running) < slots
                and waiting[0][3] <= now
                and (idle or waiting[0][2] <= step)
            ):
                sent, w, _, _ = waiting.pop(0)
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
                end = late(now)
                rows.append((r[0], end, r[1], r[3], late(r[4])))
                if len(rows) == 1 and not together:  # client 0's cycle spreads the others
                    firsts = end * (1.0 + np.arange(1, big_n) / big_n)
                    waiting += [(t, w, 0, late(t)) for w, t in enumerate(firsts, 1)]
                if not drain or sends < m:
                    waiting.append((end, r[1], step + join_steps, late(end)))
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


class Steps(NamedTuple):
    """What :meth:`FCFS.run` returns: one row per step, one column per replica."""

    sent: np.ndarray  # the request's send (arrival) time
    start: np.ndarray  # its service start (the send time if refused)
    end: np.ndarray  # its end (1 ms after the send if refused)
    worker: np.ndarray  # the closed client that sent it (-1 open)
    ok: np.ndarray  # admitted (False: refused by the cap)


class FCFS:
    """c first-come-first-served servers in ``reps`` independent replicas, exactly.

    The one M/G/c (/K) recursion of the package's simulations: each step serves one request
    per replica, the next arrival (open loop) or the request of the client whose next send is
    earliest (closed loop; ties to the lowest client, as N clients sending at once at time 0),
    on the server that frees first. With ``cap`` a request that finds ``cap`` waiting (``c +
    cap`` in the system) is refused: it holds no server, ends ``retry_s`` later, and a closed
    client then sends again (after its think time). Replicas advance together (vectorised),
    so many short independent runs cost little more than one; the state carries over from
    one :meth:`run` to the next, so a long run goes in blocks of draws.

    Parameters
    ----------
    c : int
        Servers.
    reps : int
        Independent replicas.
    cap : int, optional
        Most requests waiting (not in service).
    clients : int or array of int, optional
        Closed loop: clients of each replica (one value for all); absent: open loop.
    first_send : ndarray, shape (reps, clients), optional
        Closed loop: each client's first send (default: all at time 0; inf: no such client).
    retry_s : float, default 1e-3
        How long a refused request takes.
    """

    def __init__(
        self,
        c: int,
        reps: int,
        *,
        cap: int | None = None,
        clients: int | np.ndarray | None = None,
        first_send: np.ndarray | None = None,
        retry_s: float = 1e-3,
    ) -> None:
        self.free = np.zeros((reps, c))  # each server's free time (unsorted)
        # the ends of the admitted requests (a slot per place; -inf is an empty slot)
        self.held = None if cap is None else np.full((reps, c + cap), -np.inf)
        self.ready = None
        if clients is not None:  # each client's next send; absent clients never send
            n = np.broadcast_to(np.asarray(clients, dtype=np.int64), (reps,))
            self.ready = np.where(np.arange(n.max()) < n[:, None], 0.0, np.inf)
            if first_send is not None:
                self.ready[:] = first_send
        self.retry_s = retry_s
        self._reps = np.arange(reps)

    def run(
        self,
        service: np.ndarray,
        arrivals: np.ndarray | None = None,
        think: np.ndarray | None = None,
    ) -> Steps:
        """Serve ``len(service)`` more requests in each replica.

        Parameters
        ----------
        service : ndarray, shape (n, reps)
            The step's request's service time (unused if it is refused).
        arrivals : ndarray, shape (n, reps), optional
            Open loop: arrival times, increasing down each column.
        think : ndarray, shape (n, reps), optional
            Closed loop: the client's wait after this answer (or refusal) before it sends again.

        Returns
        -------
        Steps
        """
        n = len(service)
        shape = (n, len(self._reps))
        sent = np.empty(shape) if arrivals is None else arrivals
        start, end = np.empty(shape), np.empty(shape)
        ok = np.ones(shape, dtype=bool)
        worker = np.full(shape, -1, dtype=np.int64)
        free, held, ready, rows = self.free, self.held, self.ready, self._reps
        for i in range(n):
            if ready is None:
                t = sent[i]
            else:
                w = ready.argmin(axis=1)
                t = sent[i] = ready[rows, w]
                worker[i] = w
            k = free.argmin(axis=1)
            f = free[rows, k]
            e = np.add(np.maximum(t, f, out=start[i]), service[i], out=end[i])
            if held is None:
                free[rows, k] = e
            else:
                # held holds every admitted request still in the system: one has left (or a
                # place is empty) iff the earliest end is past
                slot = held.argmin(axis=1)
                gone = held[rows, slot]
                admit = np.less_equal(gone, t, out=ok[i])
                free[rows, k] = np.where(admit, e, f)
                held[rows, slot] = np.where(admit, e, gone)
                if ready is not None:
                    e = np.where(admit, e, t + self.retry_s)
            if ready is not None:
                ready[rows, w] = e if think is None else e + think[i]
        if held is not None:  # a refused request ends retry_s after it was sent
            start = np.where(ok, start, sent)
            end = np.where(ok, end, sent + self.retry_s)
        return Steps(sent, start, end, worker, ok)


def _sorted_rows(steps: Steps, j: int, size: int) -> Steps:
    """Replica j's first ``size`` steps, sorted as their (sent, start, end, worker, ok) sort."""
    rows = [x[:size, j] for x in steps]
    return Steps(*(x[np.lexsort(rows[::-1])] for x in rows))


def _columns(parts: list[np.ndarray], pad: float) -> np.ndarray:
    """Stack 1-D arrays as the columns of one array, the shorter ones padded with ``pad``."""
    out = np.full((max(map(len, parts)), len(parts)), pad)
    for j, part in enumerate(parts):
        out[: len(part), j] = part
    return out


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
    with no warmup: a closed level's N clients start as the engine starts them, client 0 alone,
    the others spread over its first cycle (the start-up transient is in the data, as in a real
    sweep); an open level's Poisson arrivals run for its duration. With
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
    # every level's draws first, in the order of one level after another (the simulation
    # never draws), then all levels at once as replicas of one engine
    service, sent, think = [], [], []
    for value in levels:
        reqs, dur = default_length(kind, value)
        reqs, dur = int(length * (reqs or 0)), length * (dur or 0.0)
        if kind == "concurrency":
            service.append(_service(rng, mu, cv_s, reqs))
            think.append(np.full(reqs, think_s))
            if think_s > 0 and think_cv > 0:
                think[-1] = _service(rng, 1.0 / think_s, think_cv, reqs)
        else:
            arr = np.cumsum(rng.exponential(1 / value, int(3 * value * dur) + 50))
            sent.append(arr[arr < dur])
            service.append(_service(rng, mu, cv_s, len(sent[-1])))
    sizes = [len(s) for s in service]
    if kind == "concurrency":
        steps = _closed_levels(c, np.array(levels), queue_cap, service, think)
    else:
        engine = FCFS(c, len(levels), cap=queue_cap)
        steps = engine.run(_columns(service, 0.0), arrivals=_columns(sent, np.inf))
    out = []
    for j, (value, size) in enumerate(zip(levels, sizes, strict=True)):
        sent_j, start, end, worker, ok = _sorted_rows(steps, j, size)
        frame = _frame(value, kind, sent_j, start, end, [w if w >= 0 else None for w in worker])
        frame["ok"] = ok
        frame["status"] = pd.array(np.where(ok, 200, 429), dtype="Int64")
        frame["error_kind"] = pd.array([None if o else "rate_limited" for o in ok], dtype="string")
        frame["attempts"] = 1
        out.append(frame)
    return pd.concat(out, ignore_index=True)


def _closed_levels(
    c: int, clients: np.ndarray, cap: int | None, service: list[np.ndarray], think: list[np.ndarray]
) -> Steps:
    """Run closed levels as the sweep engine starts them (``Sweeper._stagger``).

    Client 0 sends alone; once its first cycle (answer and think time) has passed, client
    ``w`` of N first sends ``w / N`` of that cycle later.
    """
    n = int(clients.max())
    first = np.where(np.arange(n) == 0, 0.0, np.inf)
    engine = FCFS(c, len(clients), cap=cap, clients=clients, first_send=first[None, :])
    s, z = _columns(service, 0.0), _columns(think, 0.0)
    alone = engine.run(s[:1], think=z[:1])
    assert engine.ready is not None
    cycle = engine.ready[:, :1].copy()  # the level starts at 0
    w = np.arange(n)
    engine.ready[:, 1:] = np.where(
        w[1:] < clients[:, None], cycle * (1.0 + w[1:] / clients[:, None]), np.inf
    )
    rest = engine.run(s[1:], think=z[1:])
    return Steps(*(np.concatenate(pair) for pair in zip(alone, rest, strict=True)))


def _warmup(c: int, rho: float, cap: int | None, clients: int | None, cv_s: float) -> int:
    """Count the steps that take an empty FCFS M/G/c(/K) to steady state: ten relaxations.

    In arrivals, a relaxation time is about 1 / (1 - sqrt(rho))^2 near capacity (M/M/c's
    spectral gap), at most about (c + cap + 1)^2 / pi^2 behind a cap (a walk over the
    system's places: M/M/c/K's gap), and at least a service time (c rho arrivals).

    A closed level's N clients: ten sends each, and more for steady service. Started at
    once, its servers begin in phase, and past c clients a request then waits for a whole
    round of departures; only the services' own spread moves the phases apart. At CV 0.05
    the p95 of 68 clients on 64 servers reads 612, 588, 583 and 581 ms over cycles 10-20,
    20-30, 30-50 and 50-80 (581 to cycle 160); 16 and 4 servers settle by about 50 too, and
    CV 0.5 by 10: ``max(10, 2.5 / cv_s)`` sends each.
    """
    if clients is not None:
        return int(clients * max(10.0, 2.5 / cv_s))
    relax = 1.0 / (1.0 - np.sqrt(rho)) ** 2 if rho < 1 else np.inf
    if cap is not None:
        relax = min(relax, 1.0 + max(rho, 1.0) * (c + cap + 1) ** 2 / np.pi**2)
    if not np.isfinite(relax):
        raise ValueError(f"rate: {rho:.0%} of capacity without a queue cap has no steady state")
    return int(10 * max(relax, c * rho))


def fcfs_responses(
    c: int,
    mu: float,
    cv_s: float,
    reps: int,
    length: int,
    seed: int,
    *,
    rate: float | None = None,
    clients: int | None = None,
    cap: int | None = None,
    waited: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Steady-state response times of ``reps`` independent FCFS M/G/c (/K) runs.

    Each run starts empty, serves :func:`_warmup`'s requests unrecorded, then ``length``
    recorded ones: Poisson arrivals at ``rate`` (open loop, with ``cap`` most waiting), or
    ``clients`` closed clients sending again at once. Service is gamma with mean ``1 / mu``
    and CV ``cv_s``. The draws are unit gamma and exponential variates in blocks of 1,000 steps
    (service, then gaps), so one seed gives every system the same draws at the same steps
    (common random numbers: two loads' quantiles differ by the load, hardly by the draws; only
    the recorded window moves with each load's warm-up).

    Parameters
    ----------
    c : int
        Servers.
    mu : float
        Service rate of one server.
    cv_s : float
        Service-time coefficient of variation.
    reps : int
        Independent runs (replications).
    length : int
        Recorded requests per run.
    seed : int
        Seed.
    rate : float, optional
        Open loop: the arrival rate.
    clients : int, optional
        Closed loop: the clients (no think time).
    cap : int, optional
        Open loop: most requests waiting; more are refused.
    waited : bool, default False
        Also return whether each request waited for a server.

    Returns
    -------
    numpy.ndarray
        Shape ``(length, reps)``, in request order; NaN where the cap refused the request.
        With ``waited``, a pair: those and a boolean array of the same shape, True where an
        admitted request started after it was sent.
    """
    if (rate is None) == (clients is None):
        raise ValueError("fcfs_responses: give one of rate (open) or clients (closed)")
    rng = np.random.default_rng(seed)
    warm = _warmup(c, (rate or 0.0) / (c * mu), cap, clients, cv_s)
    engine = FCFS(c, reps, cap=cap, clients=clients)
    shape = 1.0 / cv_s**2
    out = np.empty((length, reps))
    queued = np.zeros((length, reps), dtype=bool)
    last = np.zeros(reps)
    block = 1000
    for first in range(0, warm + length, block):
        n = min(block, warm + length - first)
        service = rng.standard_gamma(shape, (block, reps))[:n] / (shape * mu)
        gaps = rng.standard_exponential((block, reps))[:n]
        arrivals = None
        if rate is not None:
            arrivals = last + np.cumsum(gaps / rate, axis=0)
            last = arrivals[-1]
        steps = engine.run(service, arrivals)
        resp = np.where(steps.ok, steps.end - steps.sent, np.nan)
        skip = min(max(warm - first, 0), n)
        out[first + skip - warm : first + n - warm] = resp[skip:]
        queued[first + skip - warm : first + n - warm] = (steps.ok & (steps.start > steps.sent))[
            skip:
        ]
    return (out, queued) if waited else out
