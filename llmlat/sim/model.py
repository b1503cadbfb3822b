"""The replica model: admission, the two service engines, faults and ground truth (no HTTP).

All scheduling uses the event loop's clock and *ideal* times: a step or a service that ends at
``t`` starts the next one at ``t`` even when the loop ran the callback late, so lateness never
accumulates and rates stay exact on a loaded machine. Truth times are ``time.perf_counter()``
taken when each event really happened.

The HTTP layer drives a request through :meth:`Replica.arrive`, :meth:`Replica.admit`,
:meth:`Replica.serve`, then watches its :class:`Sequence` (``started``, ``emitted``,
``finished``) and calls :meth:`Replica.release` when the response is over.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import random
import time
from collections import deque
from dataclasses import astuple, dataclass
from datetime import UTC, datetime
from operator import attrgetter
from typing import TYPE_CHECKING

from llmlat.sim.cache import Prefix, PrefixCache
from llmlat.sim.config import SimConfig

if TYPE_CHECKING:  # pandas only for the truth table: a simulator process serves without it
    import pandas as pd

__all__ = [
    "OUTCOMES",
    "TRUTH_COLUMNS",
    "Refusal",
    "Replica",
    "Sequence",
    "TokenBucket",
    "TruthRow",
    "format_duration",
    "format_time",
    "truth_frame",
]

_NAN = float("nan")

#: Values of the truth column ``outcome``.
OUTCOMES = (
    "ok",  # served in full
    "invalid",  # 400 (bad body, no Anthropic max_tokens, over the context) or 413 (too big)
    "rate_limited",  # 429: an RPM or TPM bucket was empty
    "queue_full",  # 429: queue_limit requests were already waiting
    "error_500",  # fault, or the simulator failed
    "error_503",
    "dropped",  # connection closed mid-response (fault)
    "malformed",  # one event / the body was not valid JSON (fault)
    "stalled",  # hung for stall_s before service (fault)
    "disconnected",  # the client went away before the end
)

#: Column name -> dtype of the truth table (``Simulator.truth()``).
TRUTH_COLUMNS: dict[str, str] = {
    "request_id": "int64",
    "client_request_id": "string",
    "api": "string",
    "stream": "boolean",
    "status": "Int64",
    "outcome": "string",
    "t_arrival": "float64",
    "t_admitted": "float64",
    "t_service_start": "float64",
    "t_first_token": "float64",
    "t_last_token": "float64",
    "t_end": "float64",
    "queue_wait_s": "float64",
    "prompt_tokens": "Int64",
    "cached_tokens": "Int64",
    "cache_creation_tokens": "Int64",
    "completion_tokens": "Int64",
    "retry_after_s": "float64",
}


@dataclass(slots=True)
class TruthRow:
    """What the replica knows about one request it received (see :data:`TRUTH_COLUMNS`).

    Times are absolute ``time.perf_counter()`` seconds; NaN when the event never happened.
    ``outcome`` is one of :data:`OUTCOMES`, or None while the request is still being served;
    every request that ended has one.
    ``completion_tokens`` counts the tokens sent to the client. ``queue_wait_s`` is derived
    (``t_service_start - t_admitted``) when the table is built.
    """

    request_id: int
    client_request_id: str | None
    api: str
    stream: bool | None = None
    status: int | None = None
    outcome: str | None = None
    t_arrival: float = _NAN
    t_admitted: float = _NAN
    t_service_start: float = _NAN
    t_first_token: float = _NAN
    t_last_token: float = _NAN
    t_end: float = _NAN
    queue_wait_s: float = _NAN
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    cache_creation_tokens: int | None = None
    completion_tokens: int | None = None
    retry_after_s: float = _NAN


def truth_frame(rows: list[TruthRow]) -> pd.DataFrame:
    """Build the truth table from rows.

    Parameters
    ----------
    rows : list of TruthRow
        One per request received.

    Returns
    -------
    pandas.DataFrame
        Columns and dtypes of :data:`TRUTH_COLUMNS`, one row per request, in arrival order.
    """
    import numpy as np
    import pandas as pd

    data = [astuple(r) for r in rows]
    if not data:
        return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in TRUTH_COLUMNS.items()})
    cols = dict(zip(TRUTH_COLUMNS, zip(*data, strict=True), strict=True))
    out = {}
    for name, dtype in TRUTH_COLUMNS.items():
        if dtype == "float64":
            out[name] = np.asarray(cols[name], dtype=np.float64)
        else:
            out[name] = pd.array(cols[name], dtype=dtype)
    frame = pd.DataFrame(out)
    frame["queue_wait_s"] = frame["t_service_start"] - frame["t_admitted"]
    return frame


class TokenBucket:
    """A per-minute limit as a token bucket refilled continuously at ``per_minute / 60`` a second.

    The bucket holds ``burst_s`` seconds of the limit: 60 is a whole minute's allowance (a burst
    of the full limit passes at once); 1 enforces the limit per second, as providers may ("60,000
    requests per minute may be enforced as 1,000 per second"). A request larger than the bucket
    (a long prompt against a per-second share of the tokens-per-minute limit) is admitted when
    the bucket is full and leaves it in debt, so the long-run rate stays the limit; one larger
    than the whole per-minute limit never fits.

    Parameters
    ----------
    per_minute : float
        The limit: tokens added per minute.
    now : float
        Current time (loop clock); the bucket starts full.
    burst_s : float, default 60.0
        Seconds of the limit the bucket holds.
    """

    __slots__ = ("capacity", "level", "per_minute", "rate", "t")

    def __init__(self, per_minute: float, now: float, burst_s: float = 60.0) -> None:
        self.per_minute = float(per_minute)
        self.rate = self.per_minute / 60.0
        self.capacity = self.rate * burst_s
        self.level = self.capacity
        self.t = now

    def refill(self, now: float) -> None:
        """Add what flowed in since the last call, up to the capacity."""
        if now > self.t:
            self.level = min(self.capacity, self.level + (now - self.t) * self.rate)
            self.t = now

    def wait_s(self, amount: float) -> float:
        """Seconds until ``amount`` tokens may be taken (0 when now, inf when never)."""
        if amount > max(self.capacity, self.per_minute):
            return math.inf
        return max(0.0, (min(amount, self.capacity) - self.level) / self.rate)

    def reset_s(self) -> float:
        """Seconds until the bucket is full again."""
        return (self.capacity - self.level) / self.rate


@dataclass(slots=True)
class Refusal:
    """An admission refusal: a 429 (or a 400 when a request can never fit the TPM bucket).

    Attributes
    ----------
    reason : {"queue_full", "rate_limited"}
        Why.
    retry_after_s : float
        When a retry is likely admitted: for a bucket, the real time until it holds the tokens
        (inf when never); for a full queue, the queue length (this request included) over
        the replica's service rate, the expected wait for a slot, as providers estimate it.
    limit : str or None
        What the refusing bucket counts: "requests", "tokens", "input tokens" or "output
        tokens".
    """

    reason: str
    retry_after_s: float
    limit: str | None = None


class Sequence:
    """One admitted request inside the replica.

    The engines advance ``started``, ``emitted`` and ``finished`` and call :meth:`notify`;
    the HTTP handler awaits :meth:`wait` and writes what became due in one go.

    Attributes
    ----------
    row : TruthRow
        Its truth row.
    n_tokens : int
        Output tokens it will get.
    fault : str or None
        The fault drawn for it ("error_500", "error_503", "dropped", "malformed", "stalled").
    service_s : float
        Service time (mmc mode).
    emitted : int
        Tokens generated so far.
    """

    __slots__ = (
        "_waiter",
        "emitted",
        "fault",
        "finished",
        "loop",
        "n_tokens",
        "prefill_left",
        "row",
        "service_s",
        "started",
        "timer",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        row: TruthRow,
        n_tokens: int,
        prefill_tokens: int,
        fault: str | None,
        service_s: float,
    ) -> None:
        self.loop = loop
        self.row = row
        self.n_tokens = n_tokens
        self.prefill_left = prefill_tokens  # prompt tokens still to prefill (batch mode)
        self.fault = fault
        self.service_s = service_s
        self.emitted = 0
        self.started = False
        self.finished = False
        self.timer: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Future | None = None

    def start(self, at: float | None = None) -> None:
        """Mark the start of service (called by an engine).

        Parameters
        ----------
        at : float, optional
            Truth time of the start; now when None.
        """
        self.started = True
        self.row.t_service_start = at if at is not None else time.perf_counter()
        self.notify()

    def notify(self) -> None:
        """Wake the handler waiting on this sequence, if any."""
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> None:
        """Wait for the next change (service start, tokens, end)."""
        self._waiter = self.loop.create_future()
        await self._waiter


_prefill_left = attrgetter("prefill_left")


class _BatchEngine:
    """Continuous batching with chunked prefill, one step at a time.

    A step prefills at most ``prefill_chunk_tokens`` prompt tokens (of the active sequences,
    shortest remaining prompt first) and emits one token to every active sequence whose prompt
    is done, so a huge prompt lengthens a bounded number of steps instead of one step by its
    whole prefill.
    """

    def __init__(self, config: SimConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.cfg = config
        self.loop = loop
        self.active: list[Sequence] = []
        self.prefilling: list[Sequence] = []  # active ones whose prompt is not done
        self.waiting: deque[Sequence] = deque()
        self.busy = False  # a step is running and ends at t_next
        self.t_next = 0.0
        self.timer: asyncio.TimerHandle | None = None

    def submit(self, seq: Sequence) -> None:
        self.waiting.append(seq)
        if not self.busy:  # idle: the first step starts now
            self._run()

    def abort(self, seq: Sequence) -> None:
        if seq in self.waiting:
            self.waiting.remove(seq)
        elif seq in self.active:
            self.active.remove(seq)
            if seq.prefill_left:
                self.prefilling.remove(seq)

    def _prefill(self) -> int:
        """Spend one step's prompt-token budget, shortest prompt first; return the tokens."""
        # shortest first: one long prompt does not hold up the short ones behind it (vLLM's
        # long_prefill_token_threshold and SGLang's chunked prefill serve the same end)
        budget = self.cfg.prefill_chunk_tokens
        self.prefilling.sort(key=_prefill_left)
        for seq in self.prefilling:
            chunk = min(seq.prefill_left, budget)
            seq.prefill_left -= chunk
            budget -= chunk
            if not budget:
                break
        self.prefilling = [seq for seq in self.prefilling if seq.prefill_left]
        return self.cfg.prefill_chunk_tokens - budget

    def _run(self) -> None:
        self.timer = None
        cfg = self.cfg
        now = self.loop.time()
        t = self.t_next if self.busy else now
        while True:
            if self.busy:  # the step ending at t emits one token to every prefilled sequence
                still = []
                for seq in self.active:
                    if seq.prefill_left:  # its prompt needs more steps
                        still.append(seq)
                        continue
                    seq.emitted += 1
                    if seq.emitted >= seq.n_tokens:
                        seq.finished = True
                    else:
                        still.append(seq)
                    seq.notify()
                self.active = still
            while self.waiting and len(self.active) < cfg.slots:
                seq = self.waiting.popleft()
                self.active.append(seq)
                if seq.prefill_left and cfg.prefill_per_token_s:
                    self.prefilling.append(seq)
                else:  # a free prefill takes no step
                    seq.prefill_left = 0
                seq.start()
            if not self.active:
                self.busy = False
                return
            prefill = self._prefill() if self.prefilling else 0
            duration = cfg.t0_s + cfg.t1_s * len(self.active) + cfg.prefill_per_token_s * prefill
            if duration == 0:  # zero-time steps: the whole batch completes at this instant
                for seq in self.active:
                    seq.prefill_left = 0
                    seq.emitted = seq.n_tokens
                    seq.finished = True
                    seq.notify()
                self.active = []
                self.prefilling = []
                continue
            self.busy = True
            t += duration
            self.t_next = t
            if t > now:
                self.timer = self.loop.call_at(t, self._run)
                return

    def service_rate(self) -> float:
        # a full batch finishes `slots` sequences every (mean output tokens) steps; prefill,
        # small for typical prompts, is left out
        cfg = self.cfg
        serving = [seq.n_tokens for seq in itertools.chain(self.active, self.waiting)]
        tokens = sum(serving) / len(serving) if serving else cfg.output_tokens
        step = cfg.t0_s + cfg.t1_s * cfg.slots
        return math.inf if step == 0 else cfg.slots / (tokens * step)

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


class _MMcEngine:
    """``slots`` servers, FIFO queue, exponential service, tokens paced evenly."""

    def __init__(self, config: SimConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.cfg = config
        self.loop = loop
        self.free = config.slots
        self.releases: list[float] = []  # heap of busy servers' release times
        self.waiting: deque[Sequence] = deque()
        # release time -> timer handle (uvloop's handles have no .when())
        self.timers: dict[asyncio.TimerHandle, float] = {}

    def submit(self, seq: Sequence) -> None:
        if self.free and not self.waiting:  # no wait at all, by construction
            self._start(seq, self.loop.time(), at=seq.row.t_admitted)
        else:
            self.waiting.append(seq)

    def abort(self, seq: Sequence) -> None:
        # a server stays busy for the drawn service time whether the client listens or not
        if seq in self.waiting:
            self.waiting.remove(seq)
        if seq.timer is not None:
            seq.timer.cancel()

    def _start(self, seq: Sequence, t: float, at: float | None = None) -> None:
        self.free -= 1
        end = t + seq.service_s
        heapq.heappush(self.releases, end)
        self.timers[self.loop.call_at(end, self._release, end)] = end
        seq.start(at)
        self._tick(seq, t)

    def _tick(self, seq: Sequence, t: float) -> None:
        # token k (1..n) is due at t + service * k / n
        now = self.loop.time()
        n, s = seq.n_tokens, seq.service_s
        due = n if now >= t + s else min(n, int((now - t) * n / s))
        if due > seq.emitted:
            seq.emitted = due
            seq.finished = due >= n
            seq.notify()
        if not seq.finished:
            seq.timer = self.loop.call_at(t + s * (seq.emitted + 1) / n, self._tick, seq, t)

    def _release(self, end: float) -> None:
        heapq.heappop(self.releases)
        self.free += 1
        self.timers = {h: w for h, w in self.timers.items() if w > end and not h.cancelled()}
        if self.waiting:
            self._start(self.waiting.popleft(), end)

    def service_rate(self) -> float:
        return self.cfg.slots * self.cfg.mu

    def close(self) -> None:
        for handle in self.timers:
            handle.cancel()


_FAULTS = ("error_500", "error_503", "dropped", "malformed", "stalled")


class Replica:
    """A provider replica: admission control, a service engine, faults and the truth log.

    Must be created and used inside the event loop that serves it.

    Parameters
    ----------
    config : SimConfig
        The options.
    """

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.loop = asyncio.get_running_loop()
        self.rows: deque[TruthRow] = deque(maxlen=config.truth_limit)
        self._arrivals = 0  # request ids go on counting when old rows are dropped
        now = self.loop.time()
        burst = config.limit_burst_s
        # (bucket, what it counts); Anthropic declares its input and output token limits apart
        self.buckets = [
            (TokenBucket(per_minute, now, burst), kind)
            for per_minute, kind in (
                (config.rpm, "requests"),
                (config.tpm, "tokens"),
                (config.itpm, "input_tokens"),
                (config.otpm, "output_tokens"),
            )
            if per_minute
        ]
        self.engine = (_BatchEngine if config.mode == "batch" else _MMcEngine)(config, self.loop)
        self.stalls: set[asyncio.TimerHandle] = set()
        self.cache = PrefixCache(config.cache_min_tokens, config.cache_ttl_s)
        probs = (config.p_500, config.p_503, config.p_drop, config.p_malformed, config.p_stall)
        self._fault_cdf = list(itertools.accumulate(probs)) if any(probs) else None
        self._random_length = config.output_dist != "fixed"
        self._random = bool(self._fault_cdf) or config.mode == "mmc" or self._random_length

    # -- arrival and admission -------------------------------------------------------------
    def arrive(self, api: str, client_request_id: str | None) -> TruthRow:
        """Log the arrival of a request and return its truth row.

        Parameters
        ----------
        api : str
            "openai-chat", "openai-completions" or "anthropic-messages".
        client_request_id : str or None
            The ``x-llmlat-request-id`` header, verbatim.

        Returns
        -------
        TruthRow
        """
        row = TruthRow(self._arrivals, client_request_id, api, t_arrival=time.perf_counter())
        self._arrivals += 1
        self.rows.append(row)
        return row

    def admit(
        self,
        row: TruthRow,
        prompt_tokens: int,
        max_tokens: int | None,
        prefixes: list[Prefix] | None = None,
    ) -> Sequence | Refusal:
        """Apply the buckets and the queue limit; draw length, service time and fault.

        An admitted request then looks its prompt up in the prefix cache (a refused one never
        reaches it): the tokens read are not prefilled, and ``row.cached_tokens`` /
        ``row.cache_creation_tokens`` say what it read and wrote.

        Parameters
        ----------
        row : TruthRow
            From :meth:`arrive`.
        prompt_tokens : int
            Prompt size.
        max_tokens : int or None
            The request's output length, or None to draw one.
        prefixes : list of Prefix, optional
            Its cacheable prefixes, shortest first (:mod:`llmlat.sim.cache`).

        Returns
        -------
        Sequence or Refusal
        """
        cfg = self.config
        # always the same draws in the same order, so request i gets the same ones every run
        rng = random.Random((cfg.seed << 40) | row.request_id) if self._random else None
        u_fault = rng.random() if rng else 1.0
        service_s = rng.expovariate(cfg.mu) if rng and cfg.mode == "mmc" else 0.0
        drawn = self._draw_length(rng) if rng and self._random_length else cfg.output_tokens
        n = max_tokens if max_tokens is not None else drawn
        row.prompt_tokens = prompt_tokens
        now = self.loop.time()
        amounts = {
            "requests": 1,
            "tokens": prompt_tokens + n,
            "input_tokens": prompt_tokens,
            "output_tokens": n,
        }
        refusal = self._check_buckets(now, amounts)
        limit = cfg.queue_limit
        if refusal is None and limit is not None and self.queued() >= limit and not self._free():
            # the expected wait of one more in the queue: what providers can know, unlike
            # the remaining service times the replica draws
            refusal = Refusal("queue_full", (self.queued() + 1) / self.engine.service_rate())
        if refusal is not None:
            row.outcome = refusal.reason
            row.retry_after_s = refusal.retry_after_s
            return refusal
        for bucket, kind in self.buckets:
            bucket.level -= amounts[kind]
        row.t_admitted = time.perf_counter()
        fault = None
        if self._fault_cdf is not None:
            for name, edge in zip(_FAULTS, self._fault_cdf, strict=True):
                if u_fault < edge:
                    fault = name
                    break
        row.outcome = fault
        prefixes = prefixes if cfg.cache_ttl_s else None
        use = self.cache.lookup(row.api, prefixes, now) if prefixes else None
        row.cached_tokens = use.read_tokens if use else 0
        row.cache_creation_tokens = use.write_tokens if use else 0
        seq = Sequence(self.loop, row, n, prompt_tokens - row.cached_tokens, fault, service_s)
        if prefixes and use and use.writes:
            self.cache.wrote(use, seq, prefixes, now)
        return seq

    def _draw_length(self, rng: random.Random) -> int:
        m = self.config.output_tokens
        if self.config.output_dist == "uniform":
            n = rng.randint(m - m // 2, m + m // 2)
        else:  # geometric on 1, 2, ... with mean m
            n = 1 if m <= 1 else 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - 1.0 / m))
        return max(1, min(n, self.config.max_output_tokens))

    def _free(self) -> bool:
        """Whether a new request would start service without waiting."""
        engine = self.engine
        if isinstance(engine, _MMcEngine):
            return engine.free > 0 and not engine.waiting
        return len(engine.active) + len(engine.waiting) < self.config.slots

    def queued(self) -> int:
        """Return how many admitted requests wait for a slot (stalled ones excluded).

        Returns
        -------
        int
        """
        engine = self.engine
        if isinstance(engine, _MMcEngine):
            return len(engine.waiting)
        # in batch mode a request waits in ``waiting`` until the next step even with a free slot
        return max(0, len(engine.active) + len(engine.waiting) - self.config.slots)

    def _check_buckets(self, now: float, amounts: dict[str, int]) -> Refusal | None:
        worst: Refusal | None = None
        for bucket, kind in self.buckets:
            bucket.refill(now)
            wait = bucket.wait_s(amounts[kind])
            if wait > 0 and (worst is None or wait > worst.retry_after_s):
                worst = Refusal("rate_limited", wait, kind.replace("_", " "))
        return worst

    def limit_headers(self, api: str = "openai-chat") -> dict[str, str]:
        """Return the current rate-limit headers of the configured buckets, as the API sends them.

        OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` (the reset a duration
        like ``"6m0s"``), or for ``anthropic-messages`` Anthropic's
        ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}``
        (the reset an RFC 3339 time). Remaining is what the bucket holds after this request was
        admitted; reset is when the bucket is full again.

        Parameters
        ----------
        api : str
            The endpoint's API.

        Returns
        -------
        dict of str to str
        """
        headers = {}
        now = self.loop.time()
        anthropic = api == "anthropic-messages"
        wall = time.time()
        for bucket, kind in self.buckets:
            if not anthropic and "_" in kind:  # OpenAI's APIs declare no input/output limits
                continue
            bucket.refill(now)
            values = {
                "limit": str(int(bucket.per_minute)),
                "remaining": str(max(0, int(bucket.level))),
                "reset": format_time(wall + bucket.reset_s())
                if anthropic
                else format_duration(bucket.reset_s()),
            }
            for which, value in values.items():
                name = (
                    f"anthropic-ratelimit-{kind.replace('_', '-')}-{which}"
                    if anthropic
                    else f"x-ratelimit-{which}-{kind}"
                )
                headers[name] = value
        return headers

    # -- service ---------------------------------------------------------------------------
    def serve(self, seq: Sequence) -> None:
        """Queue an admitted sequence for service (after its stall, if it drew one).

        Parameters
        ----------
        seq : Sequence
            From :meth:`admit`.
        """
        if seq.fault == "stalled":
            handle = self.loop.call_later(self.config.stall_s, self._unstall, seq)
            seq.timer = handle
            self.stalls.add(handle)
        else:
            self.engine.submit(seq)

    def _unstall(self, seq: Sequence) -> None:
        self.stalls.discard(seq.timer)
        seq.timer = None
        self.engine.submit(seq)

    def release(self, seq: Sequence) -> None:
        """Forget a sequence whose response is over (its client may have left early).

        Parameters
        ----------
        seq : Sequence
            The sequence.
        """
        if not seq.finished:
            if seq.timer is not None and seq.fault == "stalled" and not seq.started:
                seq.timer.cancel()
                self.stalls.discard(seq.timer)
            else:
                self.engine.abort(seq)

    def close(self) -> None:
        """Cancel every pending timer (the server is stopping)."""
        self.engine.close()
        for handle in self.stalls:
            handle.cancel()
        self.stalls.clear()

    def truth(self) -> pd.DataFrame:
        """Return the truth table.

        Returns
        -------
        pandas.DataFrame
            See :func:`truth_frame`.
        """
        return truth_frame(list(self.rows))


def format_time(epoch_s: float) -> str:
    """Format a wall-clock time as RFC 3339 in UTC, like Anthropic's ``*-reset`` headers.

    Parameters
    ----------
    epoch_s : float
        Seconds since the epoch.

    Returns
    -------
    str
        E.g. ``"2026-11-30T20:01:02.345Z"`` (milliseconds kept: the simulator's buckets refill
        within a second).
    """
    when = datetime.fromtimestamp(epoch_s, UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def format_duration(seconds: float) -> str:
    """Format a duration like the public providers' ``x-ratelimit-reset-*`` headers.

    Parameters
    ----------
    seconds : float
        A duration.

    Returns
    -------
    str
        ``"250ms"``, ``"1.5s"`` or ``"6m0s"``.
    """
    if not math.isfinite(seconds):
        return "0s"
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.0f}s"
