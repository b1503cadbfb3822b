"""How a level's load is split over K shards, exactly: pure functions of the plans.

- Open loop and trace: the coordinator draws the level's whole schedule, and shard ``k`` sends
  the requests of index ``k, k + K, k + 2K, ...`` (each at its offset from the common start),
  so the union of the shards' sends is the single-process schedule, whatever the arrival
  process. The warmup count follows the index: a send is warmup on its shard iff it is on one
  process.
- Closed loop: the N workers are split as evenly as possible (the first ``N mod K`` shards
  have one more; shard ``k``'s worker ``w`` is the sweep's worker ``w * K + k``); the request
  and warmup counts in proportion to the workers, so every worker cycles about as many times
  as on one process.
- Request ids: shard ``k``'s ``i``-th request of a level is ``base + i * K + k``. For a
  schedule that is the send's index in the single-process sweep; ids of a closed loop
  interleave in time order as they would on one process.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from llmlat._loadshapes import LevelPlan, Schedule

__all__ = ["next_base", "proportional", "request_id", "shard_plans", "split_evenly"]


def split_evenly(total: int, parts: int) -> list[int]:
    """Split ``total`` into ``parts`` integers as evenly as possible (the first ones larger).

    Parameters
    ----------
    total : int
        What to split, >= 0.
    parts : int
        How many shares, >= 1.

    Returns
    -------
    list of int
        Shares summing to ``total``, differing by at most one.
    """
    return [len(range(k, total, parts)) for k in range(parts)]


def proportional(total: int, weights: list[int]) -> list[int]:
    """Split ``total`` in proportion to ``weights`` (largest remainder; zero weight, zero share).

    Parameters
    ----------
    total : int
        What to split, >= 0.
    weights : list of int
        Non-negative weights, at least one positive.

    Returns
    -------
    list of int
        Shares summing to ``total``.
    """
    whole = sum(weights)
    exact = [total * w / whole for w in weights]
    shares = [int(x) for x in exact]
    # the remainder goes to the largest fractional parts, ties to the first shard
    order = sorted(range(len(weights)), key=lambda k: (shares[k] - exact[k], k))
    for k in order[: total - sum(shares)]:
        shares[k] += 1
    return shares


def _slice(schedule: Schedule, k: int, parts: int) -> Schedule:
    def cut(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[k::parts]

    return Schedule(
        schedule.offsets_s[k::parts], cut(schedule.prompt_tokens), cut(schedule.completion_tokens)
    )


def shard_plan(plan: LevelPlan, k: int, parts: int) -> LevelPlan:
    """Return shard ``k``'s part of one level (of ``parts`` shards).

    Parameters
    ----------
    plan : LevelPlan
        The level as one process would run it.
    k : int
        The shard, ``0 <= k < parts``.
    parts : int
        The number of shards.

    Returns
    -------
    LevelPlan
        The shard's sends (schedule slice) or workers and request counts. An open-loop cap on
        requests in flight is split evenly too (at least one per shard).
    """
    if plan.schedule is not None:
        cap = plan.max_in_flight
        return dataclasses.replace(
            plan,
            schedule=_slice(plan.schedule, k, parts),
            warmup=split_evenly(plan.warmup, parts)[k],
            max_in_flight=None if cap is None else max(1, split_evenly(cap, parts)[k]),
        )
    assert plan.workers is not None
    workers = split_evenly(plan.workers, parts)
    requests = None if plan.requests is None else proportional(plan.requests, workers)[k]
    return dataclasses.replace(
        plan,
        workers=workers[k],
        requests=requests,
        warmup=proportional(plan.warmup, workers)[k],
    )


def shard_plans(plans: list[LevelPlan], k: int, parts: int) -> list[LevelPlan]:
    """Return shard ``k``'s part of every level (see :func:`shard_plan`).

    Parameters
    ----------
    plans : list of LevelPlan
        The sweep's levels.
    k : int
        The shard.
    parts : int
        The number of shards.

    Returns
    -------
    list of LevelPlan
    """
    return [shard_plan(plan, k, parts) for plan in plans]


def request_id(base: int, index: int, k: int, parts: int) -> int:
    """Return the id of shard ``k``'s ``index``-th request of a level whose ids start at ``base``.

    Parameters
    ----------
    base : int
        The level's first id.
    index : int
        The request's position among the shard's requests of the level.
    k : int
        The shard.
    parts : int
        The number of shards.

    Returns
    -------
    int
    """
    return base + index * parts + k


def next_base(base: int, plan: LevelPlan, parts: int, issued: list[int], top_id: int) -> int:
    """Return the first id of the level after ``plan``: past every id this level could use.

    Parameters
    ----------
    base : int
        This level's first id.
    plan : LevelPlan
        This level (unsharded).
    parts : int
        The number of shards.
    issued : list of int
        Requests each live shard issued in the level.
    top_id : int
        The largest id received (-1 for none), which covers shards that died.

    Returns
    -------
    int
        ``base + len(schedule)`` for a schedule, as on one process; a closed loop's next id
        after the largest its shards could have given.
    """
    past = base + (len(plan.schedule) if plan.schedule is not None else 0)
    return max(past, base + parts * max(issued, default=0), top_id + 1)
