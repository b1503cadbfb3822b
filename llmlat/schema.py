"""The record schema: one row per logical request, per HTTP attempt, and per swept level.

Every stage of llmlat speaks these two tables. The engine fills :class:`Record` and
:class:`Attempt` objects (cheap slotted dataclasses, so the hot path stays light), and
:func:`requests_frame` / :func:`attempts_frame` turn them into tidy DataFrames with stable
dtypes. Times are seconds (float64) from the run's start, taken with ``perf_counter_ns``;
a time that never happened is NaN, a count that the server did not report is ``<NA>``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the measuring path needs no pandas: it loads when a table is built
    import pandas as pd

__all__ = [
    "ATTEMPT_COLUMNS",
    "ERROR_KINDS",
    "LEVEL_COLUMNS",
    "LEVEL_KINDS",
    "PHASES",
    "REQUEST_COLUMNS",
    "Attempt",
    "LevelStats",
    "Record",
    "attempts_frame",
    "coerce",
    "levels_frame",
    "requests_frame",
]

#: Values of ``error_kind``; a successful request has ``<NA>``. ``protocol`` is a malformed
#: answer, or a complete 200 answer that carried no generated token.
ERROR_KINDS = (
    "rate_limited",
    "server_error",
    "client_error",
    "timeout",
    "connection",
    "protocol",
    "cancelled",
)
#: Values of ``level_kind``.
LEVEL_KINDS = ("concurrency", "rate", "trace")
#: Values of ``phase``.
PHASES = ("warmup", "measure")

_F = "float64"
_I = "Int64"  # nullable: the server may not say
_S = "string"

#: Column name -> pandas dtype of the requests table, in display order.
REQUEST_COLUMNS: dict[str, str] = {
    "run_id": _S,
    "level": _F,
    "level_kind": _S,
    "request_id": "int64",
    "phase": _S,
    "worker": _I,
    "t_scheduled": _F,
    "t_sent": _F,
    "t_first_byte": _F,
    "t_first_token": _F,
    "t_end": _F,
    "latency_s": _F,
    "service_s": _F,
    "ttft_s": _F,
    "lag_s": _F,
    "connect_s": _F,
    "itl_mean_s": _F,
    "itl_p50_s": _F,
    "itl_max_s": _F,
    "tpot_s": _F,
    "chunks": "int64",
    "in_flight": _I,
    "ok": "bool",
    "status": _I,
    "error_kind": _S,
    "error": _S,
    "attempts": "int64",
    "retry_wait_s": _F,
    "retry_after_s": _F,
    "prompt_tokens": _I,
    "completion_tokens": _I,
    "cached_tokens": _I,
    "cache_creation_tokens": _I,
    "served_by": _I,
    "failover_s": _F,
    "meets_slo": "boolean",  # the sweep's slo= met (llmlat.stats.meets_slo); <NA> without one
}

#: Column name -> pandas dtype of the attempts table (one row per HTTP attempt).
ATTEMPT_COLUMNS: dict[str, str] = {
    "run_id": _S,
    "level": _F,
    "request_id": "int64",
    "attempt": "int64",
    "wait_before_s": _F,
    "connect_s": _F,
    "t_sent": _F,
    "t_first_byte": _F,
    "t_end": _F,
    "status": _I,
    "error_kind": _S,
    "error": _S,
    "retry_after_s": _F,
    "target": "int64",
    # what the provider declared on this answer (llmlat._ratelimit): its per-minute limits, the
    # budget left after this request, and seconds until the budget is full again
    "ratelimit_limit_requests": _I,
    "ratelimit_remaining_requests": _I,
    "ratelimit_reset_requests_s": _F,
    "ratelimit_limit_tokens": _I,
    "ratelimit_remaining_tokens": _I,
    "ratelimit_reset_tokens_s": _F,
    "ratelimit_limit_input_tokens": _I,  # Anthropic's input and output token limits apart
    "ratelimit_remaining_input_tokens": _I,
    "ratelimit_reset_input_tokens_s": _F,
    "ratelimit_limit_output_tokens": _I,
    "ratelimit_remaining_output_tokens": _I,
    "ratelimit_reset_output_tokens_s": _F,
}

#: Column name -> pandas dtype of the levels table: one row per swept level, what the engine
#: saw of itself while measuring it (so the summary can flag a client-bound level).
LEVEL_COLUMNS: dict[str, str] = {
    "run_id": _S,
    "level": _F,
    "level_kind": _S,
    "t_start": _F,
    "t_end": _F,
    "issued": "int64",
    "stopped_by": _S,  # "requests" | "duration" | "interrupted" | "error"
    "loop_lag_p50_s": _F,
    "loop_lag_p99_s": _F,
    "loop_lag_max_s": _F,
    "cpu_s": _F,
    "cpu_util": _F,
}

_NAN = float("nan")


@dataclass(slots=True)
class Record:
    """One logical request as measured by the client (see :data:`REQUEST_COLUMNS`).

    ``latency_s`` counts from ``t_scheduled`` (so open-loop client-side waiting is included and
    there is no coordinated omission); ``service_s`` counts from ``t_sent`` of the first attempt,
    taken once its connection is open (so it excludes the connect); ``connect_s`` is the TCP
    (and TLS) connect time of the first attempt (NaN on a reused connection); ``lag_s`` is
    ``t_sent - t_scheduled - connect_s``: how late the client began sending. With fallback
    targets (``url=[primary, fallback, ...]``), ``served_by`` is the index of the target that
    answered (``<NA>`` when none did) and ``failover_s`` the seconds from the first send to the
    send of the answering attempt when a fallback answered (0 when the primary did, NaN when
    none did).
    """

    run_id: str
    level: float
    level_kind: str
    request_id: int
    phase: str = "measure"
    worker: int | None = None
    t_scheduled: float = _NAN
    t_sent: float = _NAN
    t_first_byte: float = _NAN
    t_first_token: float = _NAN
    t_end: float = _NAN
    latency_s: float = _NAN
    service_s: float = _NAN
    ttft_s: float = _NAN
    lag_s: float = _NAN
    connect_s: float = _NAN
    itl_mean_s: float = _NAN
    itl_p50_s: float = _NAN
    itl_max_s: float = _NAN
    tpot_s: float = _NAN
    chunks: int = 0
    in_flight: int | None = None
    ok: bool = False
    status: int | None = None
    error_kind: str | None = None
    error: str | None = None
    attempts: int = 0
    retry_wait_s: float = 0.0
    retry_after_s: float = _NAN
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cache_creation_tokens: int | None = None
    served_by: int | None = None
    failover_s: float = _NAN
    meets_slo: bool | None = None


@dataclass(slots=True)
class Attempt:
    """One HTTP attempt of a logical request (see :data:`ATTEMPT_COLUMNS`).

    ``connect_s`` is the TCP (and TLS) connect time of the attempt, NaN on a reused connection;
    ``t_sent`` is taken after it. ``target`` is the index of the URL it went to (0: the primary).
    ``retry_after_s`` and the ``ratelimit_*`` fields are what the answer's headers said
    (``x-ratelimit-*``, ``anthropic-ratelimit-*``, ``retry-after``; see
    :mod:`llmlat._ratelimit`), on every answered attempt, ``<NA>``/NaN when it said nothing.
    """

    run_id: str
    level: float
    request_id: int
    attempt: int
    wait_before_s: float = 0.0
    connect_s: float = _NAN
    t_sent: float = _NAN
    t_first_byte: float = _NAN
    t_end: float = _NAN
    status: int | None = None
    error_kind: str | None = None
    error: str | None = None
    retry_after_s: float = _NAN
    target: int = 0
    ratelimit_limit_requests: int | None = None
    ratelimit_remaining_requests: int | None = None
    ratelimit_reset_requests_s: float = _NAN
    ratelimit_limit_tokens: int | None = None
    ratelimit_remaining_tokens: int | None = None
    ratelimit_reset_tokens_s: float = _NAN
    ratelimit_limit_input_tokens: int | None = None
    ratelimit_remaining_input_tokens: int | None = None
    ratelimit_reset_input_tokens_s: float = _NAN
    ratelimit_limit_output_tokens: int | None = None
    ratelimit_remaining_output_tokens: int | None = None
    ratelimit_reset_output_tokens_s: float = _NAN


@dataclass(slots=True)
class LevelStats:
    """How one level ran: its span, why it stopped, the client's own event-loop lag and CPU.

    ``cpu_util`` is the client process's CPU seconds over the level's wall seconds; a value near
    1 (one core busy) or a large loop lag means the client, not the server, may have inflated
    the latencies measured at that level.
    """

    run_id: str
    level: float
    level_kind: str
    t_start: float = _NAN
    t_end: float = _NAN
    issued: int = 0
    stopped_by: str = "requests"
    loop_lag_p50_s: float = _NAN
    loop_lag_p99_s: float = _NAN
    loop_lag_max_s: float = _NAN
    cpu_s: float = _NAN
    cpu_util: float = _NAN


assert [f.name for f in fields(Record)] == list(REQUEST_COLUMNS)
assert [f.name for f in fields(Attempt)] == list(ATTEMPT_COLUMNS)
assert [f.name for f in fields(LevelStats)] == list(LEVEL_COLUMNS)


def coerce(frame: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """Return ``frame`` with exactly ``columns``, in order, each cast to its dtype.

    Parameters
    ----------
    frame : pandas.DataFrame
        A table that holds at least the named columns (extra columns are kept after them).
    columns : dict of str to str
        Column name -> dtype, e.g. :data:`REQUEST_COLUMNS`.

    Returns
    -------
    pandas.DataFrame
        A new frame with stable dtypes.

    Raises
    ------
    ValueError
        If a required column is missing; the message names it.
    """
    import pandas as pd

    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"missing column(s): {', '.join(missing)}")
    frame = frame.reset_index(drop=True)  # rows are matched by position, not by label
    out = {}
    for name, dtype in columns.items():
        col = frame[name]
        if dtype == "bool":
            col = col.fillna(False)
        out[name] = col.astype(dtype)
    extra = [c for c in frame.columns if c not in columns]
    result = pd.DataFrame(out)
    for c in extra:
        result[c] = frame[c]
    return result


def _frame(rows: Iterable, columns: dict[str, str]) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    rows = rows if isinstance(rows, list | tuple) else list(rows)
    if not rows:
        return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in columns.items()})
    out = {}
    for name, dtype in columns.items():  # column by column: no row tuples held at once
        values = list(map(attrgetter(name), rows))
        if dtype == "float64":
            out[name] = np.asarray(values, dtype=np.float64)
        else:
            out[name] = pd.array(values, dtype=dtype)
    return pd.DataFrame(out)


def requests_frame(records: Iterable[Record]) -> pd.DataFrame:
    """Build the tidy requests table from :class:`Record` objects.

    Parameters
    ----------
    records : iterable of Record
        The measured requests, in any order.

    Returns
    -------
    pandas.DataFrame
        One row per record with the columns and dtypes of :data:`REQUEST_COLUMNS`.
    """
    return _frame(records, REQUEST_COLUMNS)


def attempts_frame(attempts: Iterable[Attempt]) -> pd.DataFrame:
    """Build the tidy attempts table from :class:`Attempt` objects.

    Parameters
    ----------
    attempts : iterable of Attempt
        Every HTTP attempt made.

    Returns
    -------
    pandas.DataFrame
        One row per attempt with the columns and dtypes of :data:`ATTEMPT_COLUMNS`.
    """
    return _frame(attempts, ATTEMPT_COLUMNS)


def levels_frame(levels: Iterable[LevelStats]) -> pd.DataFrame:
    """Build the levels table from :class:`LevelStats` objects.

    Parameters
    ----------
    levels : iterable of LevelStats
        One entry per level run.

    Returns
    -------
    pandas.DataFrame
        One row per level with the columns and dtypes of :data:`LEVEL_COLUMNS`.
    """
    return _frame(levels, LEVEL_COLUMNS)
