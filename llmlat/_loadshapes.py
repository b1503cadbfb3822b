"""Load shapes: what the engine sends at each swept level, decided before anything is sent.

Three shapes, as in the design's load semantics:

- closed loop, ``concurrency=N``: N workers, each sends, waits for the answer, waits the think
  time, sends again (nothing to draw up front);
- open loop, ``rate=lambda``: send offsets drawn up front from a seeded renewal process
  (``"poisson"``, ``"constant"`` or ``"gamma"`` with ``burstiness`` = CV^2 of the gaps),
  optionally capped by ``max_in_flight``;
- trace replay: send offsets (and optional token counts) taken from a table or a list.

Everything here is pure: :func:`plan_levels` validates the options and returns one
:class:`LevelPlan` per level, which :mod:`llmlat._engine` executes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    pass

__all__ = [
    "ARRIVALS",
    "LevelPlan",
    "Schedule",
    "arrival_gaps",
    "default_length",
    "open_loop_schedule",
    "plan_levels",
    "trace_schedule",
]

#: Arrival processes of the open loop.
ARRIVALS = ("poisson", "constant", "gamma")


@dataclass(frozen=True, eq=False)
class Schedule:
    """Send offsets of an open-loop or trace level, with optional per-request token counts.

    Attributes
    ----------
    offsets_s : numpy.ndarray
        Seconds from the level's start at which each request should be sent, non-decreasing,
        the first at 0.
    prompt_tokens, completion_tokens : numpy.ndarray or None
        Per-request token counts from a trace (same length as ``offsets_s``), else None.
    blocks : tuple or None
        Per request, the prefix block ids of its prompt (a Mooncake trace's ``hash_ids``:
        see :func:`llmlat._traces.prompt_text`), else None.
    """

    offsets_s: np.ndarray
    prompt_tokens: np.ndarray | None = None
    completion_tokens: np.ndarray | None = None
    blocks: tuple[tuple[int, ...], ...] | None = None

    def __len__(self) -> int:
        return len(self.offsets_s)

    def rate(self) -> float:
        """Return the schedule's mean send rate in requests/s (NaN with fewer than 2 sends)."""
        n = len(self.offsets_s)
        if n < 2:
            return math.nan
        span = float(self.offsets_s[-1] - self.offsets_s[0])
        return (n - 1) / span if span > 0 else math.inf

    def _take(self, n: int) -> Schedule:
        def cut(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[:n]

        blocks = None if self.blocks is None else self.blocks[:n]
        return Schedule(
            self.offsets_s[:n], cut(self.prompt_tokens), cut(self.completion_tokens), blocks
        )


def arrival_gaps(
    rate: float,
    size: int,
    *,
    arrival: str = "poisson",
    burstiness: float = 1.0,
    rng: np.random.Generator,
) -> np.ndarray:
    """Draw ``size`` inter-arrival gaps of a renewal process with mean ``1/rate``.

    Parameters
    ----------
    rate : float
        Mean arrivals per second, > 0.
    size : int
        Number of gaps.
    arrival : {"poisson", "constant", "gamma"}
        Exponential gaps (CV^2 = 1), equal gaps (CV^2 = 0), or gamma gaps with
        CV^2 = ``burstiness`` (shape ``1/burstiness``).
    burstiness : float
        CV^2 of the gaps for ``"gamma"``; > 1 is burstier than Poisson, < 1 smoother.
    rng : numpy.random.Generator
        The seeded source of randomness.

    Returns
    -------
    numpy.ndarray
        ``size`` non-negative gaps in seconds.
    """
    mean = 1.0 / rate
    if arrival == "constant":
        return np.full(size, mean)
    if arrival == "poisson":
        return rng.exponential(mean, size)
    shape = 1.0 / burstiness
    return rng.gamma(shape, mean / shape, size)


def open_loop_schedule(
    rate: float,
    *,
    requests: int | None = None,
    duration_s: float | None = None,
    arrival: str = "poisson",
    burstiness: float = 1.0,
    seed: int | Sequence[int] = 0,
) -> Schedule:
    """Draw the send offsets of one open-loop level.

    The first request goes at offset 0, each next one a drawn gap later.

    Parameters
    ----------
    rate : float
        Target rate in requests/s.
    requests : int, optional
        Number of sends; or
    duration_s : float, optional
        Send everything whose offset falls before this many seconds.
    arrival, burstiness
        See :func:`arrival_gaps`.
    seed : int or sequence of int
        Seed of :func:`numpy.random.default_rng`; the same seed gives the same schedule.

    Returns
    -------
    Schedule
        The offsets.

    Raises
    ------
    ValueError
        If neither or both of ``requests`` and ``duration_s`` are given, or a value is invalid.
    """
    _check_arrival(arrival, burstiness)
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"rate: {rate!r} is not allowed (a number of requests/s > 0)")
    if (requests is None) == (duration_s is None):
        raise ValueError("requests: give exactly one of requests and duration_s")
    rng = np.random.default_rng(seed)
    if requests is not None:
        if arrival == "constant":  # exact multiples: a cumulative sum would drift
            return Schedule(np.arange(requests) / rate)
        gaps = arrival_gaps(
            rate, max(requests - 1, 0), arrival=arrival, burstiness=burstiness, rng=rng
        )
        return Schedule(np.concatenate(([0.0], np.cumsum(gaps)))[:requests])
    assert duration_s is not None
    if arrival == "constant":
        offsets = np.arange(math.ceil(duration_s * rate)) / rate
        return Schedule(offsets[offsets < duration_s])
    # draw in chunks until past the horizon
    chunks = [np.zeros(1)]
    last = 0.0
    while last < duration_s:
        n = max(16, math.ceil((duration_s - last) * rate * 1.2) + 8)
        offsets = last + np.cumsum(
            arrival_gaps(rate, n, arrival=arrival, burstiness=burstiness, rng=rng)
        )
        chunks.append(offsets)
        last = float(offsets[-1])
    offsets = np.concatenate(chunks)
    return Schedule(offsets[offsets < duration_s])


def trace_schedule(
    trace: Any,
    *,
    requests: int | None = None,
    duration_s: float | None = None,
    speed: float = 1.0,
) -> Schedule:
    """Turn a trace (a table or a list of send offsets) into a :class:`Schedule`.

    Parameters
    ----------
    trace : pandas.DataFrame, pandas.Series or sequence of float
        Send times. A table is read by :func:`llmlat._traces.trace_columns`: llmlat's own
        layout (a column ``offset_s`` or ``t_s``, ``t``, ``time_s``, ``time``, ``timestamp``,
        ``arrival_time``: numbers in seconds, or datetimes; optional ``prompt_tokens`` /
        ``input_tokens`` and ``completion_tokens`` / ``output_tokens``), an Azure LLM inference
        trace (``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``) or a Mooncake trace
        (``timestamp`` in ms, ``input_length``, ``output_length``, ``hash_ids``); column names
        are matched case-insensitively. Times are sorted and shifted so the first send is at
        offset 0.
    requests : int, optional
        Keep only the first ``requests`` sends.
    duration_s : float, optional
        Keep only the sends before this offset (after ``speed``).
    speed : float, default 1.0
        Replay this many times faster than recorded (0.5: half as fast): offsets are divided
        by it.

    Returns
    -------
    Schedule
        The replayed offsets and token counts.

    Raises
    ------
    ValueError
        If the trace is empty, has no time column, or holds missing or non-finite times.
    """
    import pandas as pd  # a trace is a table: pandas loads when one is replayed

    from llmlat._traces import TraceColumns, trace_columns

    _check_float("trace_speed", speed, positive=True)
    if isinstance(trace, pd.DataFrame):
        cols = trace_columns(trace)
    else:
        try:
            seconds = pd.to_numeric(pd.Series(trace)).to_numpy(dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError("trace: send times must be numbers (seconds) or datetimes") from None
        if len(seconds) == 0:
            raise ValueError("trace: is empty")
        if not np.all(np.isfinite(seconds)):
            raise ValueError("trace: send times must be finite, with none missing")
        cols = TraceColumns("llmlat", seconds)
    seconds = cols.seconds
    order = np.argsort(seconds, kind="stable")
    offsets = (seconds[order] - seconds[order[0]]) / speed
    sched = Schedule(
        offsets,
        None if cols.prompt_tokens is None else cols.prompt_tokens[order],
        None if cols.completion_tokens is None else cols.completion_tokens[order],
        None if cols.blocks is None else tuple(cols.blocks[i] for i in order),
    )
    if requests is not None:
        sched = sched._take(requests)
    if duration_s is not None:
        sched = sched._take(int(np.searchsorted(sched.offsets_s, duration_s, side="left")))
    return sched


@dataclass(frozen=True, eq=False)
class LevelPlan:
    """Everything the engine needs to run one level.

    Attributes
    ----------
    index : int
        Position of the level in the sweep (0-based).
    kind : {"concurrency", "rate", "trace"}
        The level's ``level_kind``.
    value : float
        The swept value: workers, target requests/s, or a trace's replay speed (1.0: as
        recorded).
    workers : int or None
        Closed loop: the number of workers.
    think_time_s : float
        Closed loop: pause of a worker between the end of one request and the next send.
    schedule : Schedule or None
        Open loop and trace: the send offsets (warmup included).
    max_in_flight : int or None
        Open loop and trace: cap on concurrent requests (a send waits for a free slot, and the
        wait shows as schedule lag).
    requests : int or None
        Closed loop: how many measured requests to issue after the warmup; None: by duration.
    duration_s : float or None
        Closed loop: stop sending this many seconds after the warmup.
    warmup : int
        The first ``warmup`` requests of the level are ``phase="warmup"``.
    warmup_s : float
        Requests sent (scheduled) in the first ``warmup_s`` seconds are ``phase="warmup"`` too.
    stop_rule : {"requests", "duration"}
        What ends the level: a request count (or the whole schedule) or a duration.
    """

    index: int
    kind: str
    value: float
    workers: int | None = None
    think_time_s: float = 0.0
    schedule: Schedule | None = None
    max_in_flight: int | None = None
    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    warmup_s: float = 0.0
    stop_rule: str = "requests"

    def total(self) -> int | None:
        """Return how many requests the level will issue, or None when not known up front."""
        if self.schedule is not None:
            return len(self.schedule)
        if self.requests is None or self.warmup_s:
            return None  # by duration, or a warmup whose request count depends on the server
        return self.requests + self.warmup

    def phase(self, index: int, offset_s: float) -> str:
        """Return the phase of the level's ``index``-th request, scheduled at ``offset_s``."""
        return "warmup" if index < self.warmup or offset_s < self.warmup_s else "measure"


#: Arrivals an open-loop level expects by default (see :func:`default_length`).
OPEN_ARRIVALS = 1000
#: A closed-loop level's default requests: at least this many, and this many per client.
CLOSED_REQUESTS = 100
CLOSED_ROUNDS = 10
#: The default level length in words, for help texts and warnings.
DEFAULT_LENGTH_TEXT = (
    f"max({CLOSED_REQUESTS}, {CLOSED_ROUNDS} N) requests closed loop, "
    f"max(10 s, {OPEN_ARRIVALS} / rate) open loop"
)


def default_length(kind: str, value: float) -> tuple[int | None, float | None]:
    """Return the default ``(requests, duration_s)`` of a level: enough for a steady state.

    A closed loop of N workers issues ``max(CLOSED_REQUESTS, CLOSED_ROUNDS * N)`` requests:
    each worker cycles many times (the first round, the N clients' first sends into an empty
    server, is the start-up transient), and the light levels, where the service time shows
    alone, hold enough requests to pin it within a few percent. An open loop at rate lambda runs
    ``max(10, OPEN_ARRIVALS / lambda)`` seconds: an open queue starting empty relaxes to its
    steady state over about ``rho / (1 - sqrt(rho))^2`` arrivals whatever its number of
    servers (~340 at 90% load), so a level must see a few times that to be steady near
    saturation and to show an overload (throughput short of the offered rate) beyond its
    Poisson noise. A trace is
    replayed whole.

    Parameters
    ----------
    kind : {"concurrency", "rate", "trace"}
        The level kind.
    value : float
        The swept value.

    Returns
    -------
    tuple
        ``(requests, None)`` or ``(None, duration_s)`` or ``(None, None)`` (whole trace).
    """
    if kind == "concurrency":
        return max(CLOSED_REQUESTS, CLOSED_ROUNDS * int(value)), None
    if kind == "rate":
        return None, max(10.0, OPEN_ARRIVALS / value)
    return None, None


def plan_levels(
    *,
    concurrency: int | Sequence[int] | None = None,
    rate: float | Sequence[float] | None = None,
    trace: Any = None,
    think_time_s: float = 0.0,
    arrival: str = "poisson",
    burstiness: float = 1.0,
    max_in_flight: int | None = None,
    requests: int | Sequence[int] | None = None,
    duration_s: float | Sequence[float] | None = None,
    warmup: int = 0,
    warmup_s: float = 0.0,
    seed: int = 0,
    trace_speed: float = 1.0,
) -> list[LevelPlan]:
    """Validate the load options and plan every level of a sweep, in the order given.

    Parameters
    ----------
    concurrency : int or sequence of int, optional
        Closed-loop levels (workers).
    rate : float or sequence of float, optional
        Open-loop levels (requests/s). Exactly one of ``concurrency``, ``rate`` and ``trace``.
    trace : table or sequence of float, optional
        A trace to replay as one level (see :func:`trace_schedule`).
    think_time_s : float
        Closed loop: think time between a worker's requests.
    arrival, burstiness
        Open loop: see :func:`arrival_gaps`.
    max_in_flight : int, optional
        Open loop and trace: cap on concurrent requests.
    requests : int or sequence of int, optional
        Measured requests per level (after the warmup); a sequence gives one per level.
    duration_s : float or sequence of float, optional
        Measured seconds per level (after the warmup), or one per level; at most one of
        ``requests`` and ``duration_s``; the default is :func:`default_length`.
    warmup : int
        Warmup requests per level (kept, marked ``phase="warmup"``).
    warmup_s : float
        Warmup seconds per level.
    seed : int
        Seed of every draw; level ``i`` uses the stream ``(seed, i)``.
    trace_speed : float, default 1.0
        Replay the trace this many times faster than recorded (the level's value).

    Returns
    -------
    list of LevelPlan
        One per level.

    Raises
    ------
    ValueError
        Naming the first invalid option.
    """
    given = [
        n
        for n, v in (("concurrency", concurrency), ("rate", rate), ("trace", trace))
        if v is not None
    ]
    if len(given) != 1:
        raise ValueError("concurrency: give exactly one of concurrency, rate and trace")
    if requests is not None and duration_s is not None:
        raise ValueError("requests: give at most one of requests and duration_s")
    n_levels = len(_levels(given[0], concurrency if concurrency is not None else rate))
    per_requests = _per_level("requests", requests, n_levels)
    per_duration = _per_level("duration_s", duration_s, n_levels)
    for value in per_requests:
        _check_int("requests", value, minimum=1)
    for value in per_duration:
        _check_float("duration_s", value, positive=True)
    _check_int("warmup", warmup, minimum=0)
    _check_float("warmup_s", warmup_s)
    _check_float("think_time_s", think_time_s)
    _check_int("max_in_flight", max_in_flight, minimum=1)
    _check_arrival(arrival, burstiness)
    _check_int("seed", seed, minimum=0)
    _check_float("trace_speed", trace_speed, positive=True)
    if trace_speed != 1.0 and trace is None:
        raise ValueError("trace_speed: only used with trace (the speed of its replay)")

    plans = []
    if concurrency is not None:
        for i, n in enumerate(_levels("concurrency", concurrency)):
            _check_int("concurrency", n, minimum=1)
            reqs, dur = (per_requests[i], per_duration[i])
            if reqs is None and dur is None:
                reqs, dur = default_length("concurrency", n)
            plans.append(
                LevelPlan(
                    i,
                    "concurrency",
                    float(n),
                    workers=int(n),
                    think_time_s=float(think_time_s),
                    requests=reqs,
                    duration_s=dur,
                    warmup=warmup,
                    stop_rule="requests" if reqs is not None else "duration",
                    warmup_s=float(warmup_s),
                )
            )
        return plans
    if rate is not None:
        for i, lam in enumerate(_levels("rate", rate)):
            _check_float("rate", lam, positive=True)
            reqs, dur = (per_requests[i], per_duration[i])
            if reqs is None and dur is None:
                reqs, dur = default_length("rate", lam)
            # one seeded stream per level: schedules drawn from it are prefixes of each other
            draw = partial(
                open_loop_schedule, lam, arrival=arrival, burstiness=burstiness, seed=(seed, i)
            )
            # measurement starts after warmup_s and after the warmup-th send
            warmup_end = warmup_s
            if warmup:
                warmup_end = max(warmup_s, draw(requests=warmup + 1).offsets_s[-1])
            if reqs is not None:
                n_warmup = len(draw(duration_s=warmup_end)) if warmup_end > 0 else 0
                sched = draw(requests=n_warmup + reqs)
            else:
                sched = draw(duration_s=warmup_end + dur)
            plans.append(
                LevelPlan(
                    i,
                    "rate",
                    float(lam),
                    schedule=sched,
                    max_in_flight=max_in_flight,
                    warmup=warmup,
                    warmup_s=float(warmup_s),
                    stop_rule="requests" if reqs is not None else "duration",
                )
            )
        return plans
    trace_requests, trace_duration_s = per_requests[0], per_duration[0]
    sched = trace_schedule(trace, speed=trace_speed)
    offsets = sched.offsets_s
    warmup_end = max(warmup_s, offsets[warmup] if warmup < len(offsets) else math.inf)
    if trace_requests is not None:
        n_warmup = max(warmup, int(np.searchsorted(offsets, warmup_s, side="left")))
        sched = sched._take(n_warmup + trace_requests)
    elif trace_duration_s is not None:
        end = warmup_end + trace_duration_s
        sched = sched._take(int(np.searchsorted(offsets, end, side="left")))
    if len(sched) == 0:
        raise ValueError("trace: no send falls within the requested duration_s")
    return [
        LevelPlan(
            0,
            "trace",
            float(trace_speed),
            schedule=sched,
            max_in_flight=max_in_flight,
            warmup=warmup,
            warmup_s=float(warmup_s),
            stop_rule="requests" if trace_duration_s is None else "duration",
        )
    ]


def _levels(name: str, value: Any) -> list:
    values = list(value) if _is_sequence(value) else [value]
    if not values:
        raise ValueError(f"{name}: give at least one level")
    return values


def _per_level(name: str, value: Any, n_levels: int) -> list:
    """One value per level: a scalar (or None) repeats, a sequence must match the levels."""
    if not _is_sequence(value):
        return [value] * n_levels
    values = list(value)
    if len(values) != n_levels:
        raise ValueError(
            f"{name}: give one value or one per level ({n_levels} levels), got {len(values)}"
        )
    return values


def _is_sequence(value: Any) -> bool:
    """Whether ``value`` holds one value per level (a list, tuple, array or Series)."""
    return isinstance(value, Iterable) and not isinstance(value, str | bytes | dict)


def _check_arrival(arrival: str, burstiness: float) -> None:
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival: {arrival!r} is not allowed (one of {', '.join(ARRIVALS)})")
    _check_float("burstiness", burstiness, positive=True)


def _check_int(name: str, value: Any, *, minimum: int) -> None:
    if value is None:
        return
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= minimum
    if not ok:
        raise ValueError(f"{name}: {value!r} is not allowed (an integer >= {minimum})")


def _check_float(name: str, value: Any, *, positive: bool = False) -> None:
    if value is None:
        return
    ok = isinstance(value, int | float | np.number) and not isinstance(value, bool)
    ok = ok and math.isfinite(value) and (value > 0 if positive else value >= 0)
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name}: {value!r} is not allowed (a finite number {bound})")
