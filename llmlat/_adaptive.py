"""Adaptive sweeps: ``concurrency="auto"`` and ``rate="auto"`` choose their own levels.

The engine (:class:`llmlat._engine.Sweeper`) runs the levels :meth:`AdaptiveSearch.plans` yields,
one at a time; each is chosen from what the levels before it measured.

1. **Grow.** Start light (one client; or ``start_rate``, for :data:`AUTO_FIRST_REQUESTS`
   requests unless a length is given) and grow geometrically (x2 a level; an
   open loop jumps further while it has fewer than 0.5 requests in flight, a load at which even
   one server is at most half busy) until one of:

   - a closed loop's throughput stops growing, judged on the intervals of
     :func:`llmlat.stats.throughput_interval` (never a point comparison) against the last level
     that grew: two levels in a row not clearly above it by more than :data:`MIN_GAIN`
     (short levels have wide intervals: one more level decides; growth less than in
     proportion is no stop, as a batching server's throughput grows so long before its slot
     cap);
   - an open level is served clearly less than offered (its throughput interval lies below
     95% of the rate): it is past capacity;
   - a budget is spent: the level's p95 latency exceeds ``max_p95_s``, or it had more than
     ``max_429_rate`` 429 answers per request (final ones, or retried);
   - a limit: ``max_concurrency`` / ``max_rate`` reached, or the next level would pass
     ``max_requests`` / ``max_time_s``.

2. **Find the knee.** Closed loop: Kleinrock's saturation point ``N* = X_max (W_1 + Z)``, the
   most throughput measured times a lone request's cycle (its latency at one client plus the
   think time), the cycle taken by Little's law as ``1 / X_1`` (one client's throughput,
   measured as ``X_max`` is, past the first round, so a slow first request, e.g. a cold prompt
   cache, does not move it): below ``N*`` requests rarely wait, above it throughput stays at
   capacity (for ``c`` exponential servers ``N* = c``). ``X_max`` pools the levels on the
   plateau (the last level that grew and those after it, not clearly below the best), as the
   largest of several noisy rates is biased high; when growth stopped for another reason it is
   the most measured, and the knee a lower bound. Open loop:
   the capacity ``lambda*``, the throughput of the levels served clearly less than offered
   (the most throughput measured when none was).

3. **Place levels around it** where they identify the model best. Closed loop: ``N*`` times
   0.5, 0.75, 1, 1.25, 1.5, 2: the levels below it pin the service time, those above pin the
   capacity ``c mu``, the ones near it the number of servers (where the curve bends). Unless
   throughput was still clearly below ``X_max`` at a growth level of ``1.5 N*`` or more: for
   ``c`` servers it is flat from ``N*`` on (with exponential think time, at 1.5 ``N*`` at most
   6% short on one server, 0.6% on four: a level rarely measures that clearly), so the service
   time grows with load there, as on a continuous-batching server (a decode step slows as the
   batch grows, up to its slot cap). ``N*`` is then where the asymptotes cross (about 4 on the
   simulator's ``article`` replica of 32 slots), and the curve bends at the slot cap, where
   throughput levels off: by ``P``, the plateau's start, the first growth level past the last
   one clearly below ``X_max`` within :data:`MIN_GAIN` of ``X_max`` (when a growth level
   after ``P`` shows throughput level too: the top level alone may have the most only because
   it is the last). Levels go at 0.75 ``P`` (below it, where the curve bends) and, when fewer
   than two growth levels past ``P`` were served within the 429 budget, at 1.5 ``P``: a fit
   identifies a slot cap only with two levels past it, and a queue cap's 429s drop the top
   growth level. Around ``N*`` they would lie where the growth
   levels already pin the step time (``benchmarks/bench_adaptive.py``: 32 slots, growth
   stopped at 64, the batch fit on the latency alone identified the cap in 12 of 12 seeds
   against 0 of 12). Open
   loop: 0.5, 0.7, 0.8, 0.9 times ``lambda*`` (its one-sided 95% lower bound, when measured
   past capacity), where waiting grows fastest with load and so says most about ``c``; a
   level past capacity never settles, so none is placed there.
   A candidate within 10% of a measured level, past a level that spent a budget, past the
   user's limits or beyond ``max_requests`` / ``max_time_s`` is not run (a level's time is
   expected from its length: an open level's last send plus the last level's p95 latency, a
   closed level's requests over the throughput the levels so far predict).

Every level run is an ordinary level of the result (it fits like any other);
``result.meta["adaptive"]`` records the growth, why it stopped, the knee, the plateau's start
when the levels went around it (``plateau_start``, ``placed_around``), the levels placed and
why, and a one-line notice says the same as the sweep runs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from llmlat._loadshapes import LevelPlan
from llmlat._notice import notice
from llmlat.config import (
    AUTO_FIRST_REQUESTS,
    AUTO_MAX_429_RATE,
    AUTO_MAX_CONCURRENCY,
    AUTO_START_RATE,
    SweepConfig,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["MIN_GAIN", "AdaptiveSearch", "LevelOutcome", "level_outcome"]

#: Growth factor of the levels while throughput grows.
GROWTH = 2.0
#: Throughput "grows" when it is above the best so far by more than this share, at 95%.
MIN_GAIN = 0.05
#: An open loop grows faster while it holds fewer requests in flight than this.
_LIGHT_IN_FLIGHT = 0.5
#: An open level served below this share of its rate (whole interval) is past capacity.
_SERVED = 0.95
#: Where levels go, as multiples of the knee.
CLOSED_PLACES = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
#: Closed loop, throughput still rising well past N* (batching): multiples of the plateau's
#: start P; the second only when fewer than two growth levels past P count (no budget spent).
PLATEAU_PLACES = (0.75, 1.5)
#: Throughput still clearly below X_max at this multiple of N* (or more): the plateau is not N*.
_PAST_KNEE = 1.5
OPEN_PLACES = (0.5, 0.7, 0.8, 0.9)
#: A candidate this close (relative) to a measured level adds little.
_NEAR = 0.1
_Z95 = 1.959963984540054
_Z90 = 1.6448536269514722  # one-sided 95%
#: Growth stops after this many levels in a row whose throughput is not clearly above.
_MISSES = 2


@dataclasses.dataclass(frozen=True)
class LevelOutcome:
    """What the search reads of one finished level.

    Attributes
    ----------
    value : float
        The level.
    throughput, low, high : float
        Steady-window throughput (requests/s) and its 95% interval.
    mean_latency_s, p95_s : float
        Of the ok requests past the transient.
    rate_limited : float
        429 answers per request of the level: the larger of the share of requests that ended
        in a 429 and the attempts answered 429 (retried ones too) over the requests.
    sent : int
        Requests the level issued (every phase).
    wall_s : float
        From its first send to its last end.
    """

    value: float
    throughput: float
    low: float
    high: float
    mean_latency_s: float
    p95_s: float
    rate_limited: float
    sent: int
    wall_s: float


def level_outcome(
    requests: pd.DataFrame, attempts: pd.DataFrame | None, value: float
) -> LevelOutcome:
    """Read a finished level's requests (every phase) the way the summary does.

    Parameters
    ----------
    requests : pandas.DataFrame
        The level's rows (:data:`llmlat.schema.REQUEST_COLUMNS`).
    attempts : pandas.DataFrame or None
        Its HTTP attempts (:data:`llmlat.schema.ATTEMPT_COLUMNS`), for the 429s retried.
    value : float
        The level.

    Returns
    -------
    LevelOutcome
    """
    import pandas as pd

    from llmlat import stats
    from llmlat._summary import summarize

    if not len(requests):  # stopped before it sent anything
        nan = math.nan
        return LevelOutcome(value, nan, nan, nan, nan, nan, 0.0, 0, nan)
    row = summarize(requests, attempts).iloc[0]
    phase = stats.phases(requests)
    start, end = stats.row_times(requests)
    kind = requests["level_kind"].iloc[0]
    x, low, high = stats.throughput_interval(
        start, end, stats.ok_mask(requests), phase == "transient", phase != "warmup",
        min_batch=stats.level_batch(kind, value), clients=stats.closed_clients(kind, value),
        workers=stats.column(requests, "worker"),
    )  # fmt: skip
    done = np.isfinite(start) & np.isfinite(end)
    wall = float(end[done].max() - start[done].min()) if done.any() else math.nan
    limited = np.nanmax([row["rate_limited_rate"], 0.0])
    if "http_429" in row and row["http_429"] is not pd.NA:
        limited = max(limited, float(row["http_429"]) / max(1, int(row["n"])))
    return LevelOutcome(
        value,
        x,
        low,
        high,
        float(row["latency_mean_s"]),
        float(row["latency_p95_s"]),
        float(limited),
        len(requests),
        wall,
    )


class AdaptiveSearch:
    """Choose the levels of an adaptive sweep, one at a time (see the module docstring).

    Parameters
    ----------
    config : SweepConfig
        With ``concurrency="auto"`` or ``rate="auto"``.
    """

    def __init__(self, config: SweepConfig) -> None:
        kind = config.auto()
        if kind is None:
            raise ValueError("concurrency: an adaptive sweep needs concurrency or rate 'auto'")
        self.config = config
        self.kind = kind
        self.closed = kind == "concurrency"
        if self.closed:
            self.start: float = 1.0
            self.ceiling: float = float(config.max_concurrency or AUTO_MAX_CONCURRENCY)
        else:
            self.start = float(config.start_rate or AUTO_START_RATE)
            self.ceiling = float(config.max_rate) if config.max_rate else math.inf
        self.max_429 = (
            AUTO_MAX_429_RATE if config.max_429_rate is None else float(config.max_429_rate)
        )
        self.outcomes: list[LevelOutcome] = []
        self.values: list[float] = []  # every level run, in order
        self.growth: list[float] = []
        self.stopped_by = ""
        self.stop_detail = ""
        self.budget_level = math.inf  # no level at or past it (it spent a budget)
        self.knee = math.nan
        self.base = math.nan  # open loop: what the levels are placed below
        self.knee_rule = ""
        self.knee_reached = False
        self.plateau = math.nan  # closed loop: the plateau's start, when it is not N*
        self.plateau_rule = ""
        self.placed: list[float] = []
        self.skipped: dict[str, str] = {}
        self._anchor: LevelOutcome  # the last growth level whose throughput grew (or the first)
        self._misses = 0  # growth levels since then

    # ------------------------------------------------------------------ engine side

    def ceiling_plan(self) -> LevelPlan:
        """Return a plan of the heaviest level the search may run (for resource checks).

        Returns
        -------
        LevelPlan
        """
        cfg = self.config
        if self.closed:
            return LevelPlan(0, self.kind, self.ceiling, workers=int(self.ceiling))
        return LevelPlan(0, self.kind, self.ceiling, max_in_flight=cfg.max_in_flight)

    def plans(
        self,
        rows: Callable[[float], tuple[pd.DataFrame, pd.DataFrame | None]],
        elapsed_s: Callable[[], float],
        stopped: Callable[[], bool] = lambda: False,
    ) -> Iterator[LevelPlan]:
        """Yield the levels to run, reading each one's rows after it ran.

        Parameters
        ----------
        rows : callable
            ``rows(level)``: the finished requests of a level that ran, and their attempts
            (or None).
        elapsed_s : callable
            Seconds since the sweep started.
        stopped : callable
            Whether the sweep was stopped: then nothing more is chosen.

        Yields
        ------
        LevelPlan
        """
        t0 = elapsed_s()
        value: float | None = self.start
        while value is not None:
            plan = self._plan(value)
            reason = self._over_budget(plan, elapsed_s() - t0)
            if reason:
                self._stop(reason[0], reason[1])
                break
            yield plan
            self._observe(level_outcome(*rows(plan.value), plan.value))
            if stopped():
                self._stop("stopped", "the sweep was stopped")
                return
            value = self._next_growth()
        self._find_knee()
        candidates = self._candidates()
        notice(self.summary_line(candidates))
        for value in candidates:
            plan = self._plan(value)
            reason = self._over_budget(plan, elapsed_s() - t0)
            if reason:
                self.skipped[f"{value:g}"] = reason[1]
                continue
            self.placed.append(value)
            yield plan
            self._observe(level_outcome(*rows(plan.value), plan.value), grow=False)
            if stopped():
                return

    def meta(self) -> dict[str, Any]:
        """Return what the search did, for ``result.meta``: the levels and ``adaptive``.

        Returns
        -------
        dict
        """
        limits = {
            "max_concurrency" if self.closed else "max_rate": self.ceiling,
            "max_requests": self.config.max_requests,
            "max_time_s": self.config.max_time_s,
            "max_p95_s": self.config.max_p95_s,
            "max_429_rate": self.max_429,
        }
        return {
            "levels": list(self.values),
            "adaptive": {
                "kind": self.kind,
                "growth_levels": list(self.growth),
                "stopped_by": self.stopped_by,
                "stop_detail": self.stop_detail,
                "knee": None if math.isnan(self.knee) else self.knee,
                "placed_below": None if math.isnan(self.base) else self.base,
                "knee_reached": self.knee_reached,
                "knee_rule": self.knee_rule,
                "plateau_start": None if math.isnan(self.plateau) else self.plateau,
                "plateau_rule": self.plateau_rule,
                "placed_around": "knee" if math.isnan(self.plateau) else "plateau_start",
                "placed_levels": list(self.placed),
                "skipped_levels": dict(self.skipped),
                "why": self._why(),
                "limits": {k: (None if v == math.inf else v) for k, v in limits.items()},
            },
        }

    def summary_line(self, candidates: list[float]) -> str:
        """Return the one-line notice: where growth stopped, the knee, the levels to add.

        Parameters
        ----------
        candidates : list of float
            The levels about to be placed.

        Returns
        -------
        str
        """
        name = "N" if self.closed else "rate"
        if math.isnan(self.knee):
            knee = "no knee (no level had a throughput)"
        else:
            bound = "" if self.knee_reached else "at least "
            knee = f"knee {name}* = {bound}{self.knee:.3g} ({self.knee_rule})"
            if self.plateau_rule:
                knee += f"; {self.plateau_rule}"
        added = ", ".join(f"{v:g}" for v in candidates) or "none"
        return f"auto: {self.stop_detail}; {knee}; adding {name} = {added}"

    # ------------------------------------------------------------------ decisions

    def _plan(self, value: float) -> LevelPlan:
        cfg = self.config
        values = [*self.values, value]
        levels: dict[str, Any] = {self.kind: [int(v) for v in values] if self.closed else values}
        if not self.closed and cfg.requests is None and cfg.duration_s is None:
            # the default length is 1,000 arrivals (1,000 s at 1/s): the light first level
            # only times a lone request
            levels["requests"] = [AUTO_FIRST_REQUESTS] + [None] * (len(values) - 1)
        return cfg.plans(**levels)[-1]

    def _observe(self, outcome: LevelOutcome, *, grow: bool = True) -> None:
        if not self.outcomes:
            self._anchor = outcome
        self.outcomes.append(outcome)
        self.values.append(outcome.value)
        if grow:
            self.growth.append(outcome.value)

    def _stop(self, by: str, detail: str) -> None:
        self.stopped_by, self.stop_detail = by, detail

    def _next_growth(self) -> float | None:
        """Check the last growth level; return the next one, or None (with the reason)."""
        last = self.outcomes[-1]
        name = "N" if self.closed else "rate"
        at = f"at {name} = {last.value:g}"
        cfg = self.config
        if cfg.max_p95_s is not None and last.p95_s > cfg.max_p95_s:
            self.budget_level = last.value
            self._stop("p95_budget", f"p95 {last.p95_s:.3g}s > max_p95_s {cfg.max_p95_s:g} {at}")
            return None
        if last.rate_limited > self.max_429:
            self.budget_level = last.value
            self._stop(
                "429_budget",
                f"{last.rate_limited:.3g} 429s per request > max_429_rate {self.max_429:g} {at}",
            )
            return None
        if not self.closed and _overloaded(last):
            self._stop(
                "capacity",
                f"served {last.throughput:.3g}/s [{last.low:.3g}, {last.high:.3g}] of "
                f"{last.value:g}/s offered {at}",
            )
            return None
        if self.closed and len(self.outcomes) > 1:
            anchor = self._anchor
            if _grows(last, anchor):
                self._anchor, self._misses = last, 0
            else:
                self._misses += 1
                if self._misses >= _MISSES:
                    self._stop(
                        "throughput",
                        f"throughput {last.throughput:.3g}/s [{last.low:.3g}, {last.high:.3g}] "
                        f"{at}: {_MISSES} levels in a row not above {anchor.throughput:.3g}/s "
                        f"[{anchor.low:.3g}, {anchor.high:.3g}] at {name} = {anchor.value:g} "
                        f"grown by {MIN_GAIN:.0%}",
                    )
                    return None
        if last.value >= self.ceiling:
            limit = "max_concurrency" if self.closed else "max_rate"
            how = (
                f"throughput not above N = {self._anchor.value:g}'s"
                if self._misses
                else "throughput still growing"
            )
            self._stop("limit", f"{limit} {self.ceiling:g} reached with {how}")
            return None
        factor = GROWTH
        in_flight = last.throughput * last.mean_latency_s
        if not self.closed and in_flight > 0:
            factor = max(GROWTH, _LIGHT_IN_FLIGHT / in_flight)
        nxt = last.value * factor
        nxt = float(math.floor(nxt)) if self.closed else _round(nxt)
        return min(nxt, self.ceiling)

    def _over_budget(self, plan: LevelPlan, elapsed_s: float) -> tuple[str, str] | None:
        """Whether running ``plan`` would pass ``max_requests`` or ``max_time_s``."""
        cfg = self.config
        sent = sum(o.sent for o in self.outcomes)
        rate = self._expected_rate(plan.value)
        n = plan.total()
        if n is None:  # by duration
            n = math.ceil(rate * (plan.duration_s or 0.0)) + plan.warmup if rate else None
        if cfg.max_requests is not None and n is not None and sent + n > cfg.max_requests:
            return "max_requests", f"max_requests {cfg.max_requests} would be passed"
        if cfg.max_time_s is not None:
            if plan.schedule is not None and len(plan.schedule):
                # its last send, then a drain: the last level's p95 latency
                drain = self.outcomes[-1].p95_s if self.outcomes else 0.0
                need = float(plan.schedule.offsets_s[-1]) + (drain if drain == drain else 0.0)
            elif plan.duration_s is not None:
                need = plan.duration_s
            else:
                need = (n or 0) / rate if rate else 0.0
            if elapsed_s + need > cfg.max_time_s:
                return "max_time_s", f"max_time_s {cfg.max_time_s:g} would be passed"
        return None

    def _expected_rate(self, value: float) -> float:
        """Completions per second expected at ``value`` from the levels so far (0: unknown)."""
        if not self.closed:
            return value
        known = [o for o in self.outcomes if o.throughput == o.throughput]
        if not known:
            return 0.0
        best = max(o.throughput for o in known)
        return min(value * known[0].throughput, best)  # N clients, each at most X_1

    def _find_knee(self) -> None:
        known = [o for o in self.outcomes if o.throughput == o.throughput]
        if not known:
            return
        self.knee_reached = self.stopped_by in ("throughput", "capacity")
        over = [] if self.closed else [o for o in known if _overloaded(o)]
        if over:  # open levels past capacity each measure it
            x_max, se, on = _plateau(over)
        elif self.closed and self.knee_reached:  # the plateau: the last level that grew, on
            x_max, se, on = _plateau([o for o in known if o.value >= self._anchor.value])
        else:  # still growing: the most measured is a lower bound
            on = [max(known, key=lambda o: o.throughput)]
            x_max, se = on[0].throughput, math.nan
        where = ", ".join(f"{o.value:g}" for o in on)
        if self.closed:
            first = self.outcomes[0]
            if not first.throughput > 0:  # one client got nothing through: no cycle to scale
                return
            self.knee = x_max / first.throughput
            self.knee_rule = (
                f"X_max {x_max:.3g}/s (N = {where}) x (W_1 + Z) = 1 / X_1 "
                f"{1 / first.throughput:.3g}s"
            )
            self._find_plateau(known, x_max, se if se == se else _se(on[0]))
        else:
            self.knee = self.base = x_max
            self.knee_rule = (
                f"the throughput served at rate {where}/s, past capacity"
                if over
                else f"the most throughput measured, at rate {where}/s"
            )
            if over and se == se:  # levels go below its lower bound: none past capacity
                self.base = max(0.0, x_max - _Z90 * se)
                self.knee_rule += f"; levels placed below its 95% lower bound {self.base:.3g}/s"

    def _find_plateau(self, known: list[LevelOutcome], x_max: float, se: float) -> None:
        """Find a closed loop's plateau start, when throughput still rose well past N*.

        ``rising`` are the growth levels whose throughput lies clearly below ``x_max`` (by
        more than 1.96 standard errors of the difference). The plateau starts at the first
        growth level after the last of them within :data:`MIN_GAIN` of ``x_max`` (what the
        growth rule calls no growth: a short level's wide interval can pool one still 10%
        short, as the simulator's 32-slot replica did at 16 clients), when another one after
        it shows it level (the top level alone may just be the most measured, with
        throughput still rising).
        """
        rising = [o.value for o in known if x_max - o.throughput > _Z95 * math.hypot(_se(o), se)]
        if not rising or max(rising) < _PAST_KNEE * self.knee:
            return
        last = max(rising)
        after = [o for o in known if o.value > last]
        level = [o.value for o in after if o.throughput * (1 + MIN_GAIN) >= x_max]
        if not level or max(o.value for o in after) <= min(level):
            return
        self.plateau = min(level)
        self.plateau_rule = (
            f"throughput still clearly below X_max at N = {last:g} >= {_PAST_KNEE:g} N*, so "
            f"the service time grows with load (batching): it levels off by N = "
            f"{self.plateau:g}, where levels go"
        )

    def _candidates(self) -> list[float]:
        if math.isnan(self.knee):
            return []
        places: tuple[float, ...] = CLOSED_PLACES if self.closed else OPEN_PLACES
        low = 1.0 if self.closed else 0.0
        out: list[float] = []
        base = self.knee if self.closed else self.base
        if self.plateau == self.plateau:
            base = self.plateau
            past = [o for o in self.outcomes if o.value > base and o.rate_limited <= self.max_429]
            places = PLATEAU_PLACES if len(past) < 2 else PLATEAU_PLACES[:1]
        for f in places:
            v = base * f
            v = float(max(1, round(v))) if self.closed else _round(v)
            if v < low or v > self.ceiling or v >= self.budget_level:
                continue
            near = [m for m in [*self.values, *out] if abs(v - m) <= _NEAR * m]
            if v > 0 and not near:
                out.append(v)
        return sorted(out)

    def _why(self) -> str:
        if self.plateau == self.plateau:
            return (
                "throughput still rose well past N* = X_max (W_1 + Z), where the asymptotes of "
                "a server whose service time grows with load (continuous batching) cross, far "
                "below its slot cap; the growth levels below pin the step time, so levels go "
                "around the plateau's start instead: 0.75 x (below it, where the slot cap "
                "bends the curve) and 1.5 x when fewer than two growth levels past it count (a "
                "fit identifies a slot cap only with two levels past it)"
            )
        if self.closed:
            return (
                "levels at 0.5-2 x N* = X_max (W_1 + Z): below it requests rarely wait (they pin "
                "the service time), above it throughput stays at capacity (they pin c mu), near "
                "it the curve bends (they pin the number of servers)"
            )
        return (
            "levels at 50-90% of the capacity found, where waiting grows fastest with load (they "
            "pin the number of servers and the service rate); a level past capacity never "
            "settles, so none is placed there"
        )


def _overloaded(outcome: LevelOutcome) -> bool:
    """Tell whether an open level served clearly less than offered (interval below 95%)."""
    return outcome.high < _SERVED * outcome.value


def _plateau(known: list[LevelOutcome]) -> tuple[float, float, list[LevelOutcome]]:
    """Return the most throughput measured: the levels not clearly below the best, pooled.

    The largest of several noisy throughputs is biased high; the levels on the plateau
    (within 95% of the best's by their intervals) all measure it, so their
    inverse-variance weighted mean is the estimate; its standard error comes with it.
    """
    best = max(known, key=lambda o: o.throughput)
    se = {id(o): _se(o) for o in known}
    if not all(s > 0 for s in se.values()):
        return best.throughput, math.nan, [best]
    on = [
        o
        for o in known
        if best.throughput - o.throughput <= _Z95 * math.hypot(se[id(o)], se[id(best)])
    ]
    weights = np.array([1 / se[id(o)] ** 2 for o in on])
    x = float(np.dot(weights, [o.throughput for o in on]) / weights.sum())
    return x, float(weights.sum() ** -0.5), sorted(on, key=lambda o: o.value)


def _se(outcome: LevelOutcome) -> float:
    """Return the standard error of a level's throughput, from its 95% interval."""
    return (outcome.high - outcome.low) / (2 * _Z95)


def _grows(last: LevelOutcome, best: LevelOutcome) -> bool:
    """Whether ``last`` is above ``best`` by more than MIN_GAIN at 95% (one-sided)."""
    if not (last.throughput == last.throughput and best.throughput == best.throughput):
        return True  # cannot tell yet: keep growing
    se = [_se(o) for o in (last, best)]
    if not all(s == s for s in se):
        return last.throughput > best.throughput * (1 + MIN_GAIN)
    spread = math.hypot(*se)
    return last.throughput - best.throughput * (1 + MIN_GAIN) > _Z90 * spread


def _round(rate: float) -> float:
    """Round a rate to 3 significant digits (levels a reader can type again)."""
    return float(f"{rate:.3g}")
