"""Shards as Ray actors on an existing Ray cluster (``cluster="ray"``, ``ray_address``).

llmlat brings no worker protocol of its own: each shard is an async actor holding a
:class:`~llmlat._shard._worker.ShardWorker`, placed with the ``SPREAD`` strategy so shards go
to different nodes, one CPU each (a fraction of one when more shards than CPUs are asked
for). Without ``ray_address`` a Ray already initialised in this process is used, else
``ray.init()`` starts a local one (or joins ``RAY_ADDRESS``), which is shut down again after
the sweep. llmlat must be importable on every node (the same version as here).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from llmlat._shard._handle import ShardLost

__all__ = ["RayShard", "connect", "disconnect"]


def connect(address: str | None) -> tuple[bool, float, int]:
    """Join (or start) a Ray cluster unless this process already has one.

    Parameters
    ----------
    address : str or None
        ``"auto"``, ``"ray://host:port"``, a GCS address, or None (a local Ray).

    Returns
    -------
    tuple
        ``(started_here, seconds it took, CPUs of the cluster)``.

    Raises
    ------
    ValueError
        When Ray is not installed, or the cluster cannot be reached (naming ``ray_address``).
    """
    try:
        import ray
    except ImportError:
        raise ValueError("cluster: Ray is not installed (pip install 'llmlat[ray]')") from None
    t0 = time.perf_counter()
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(
                address=address,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValueError(f"ray_address: cannot join Ray at {address!r} ({first})") from None
    cpus = int(ray.cluster_resources().get("CPU", 1))
    return started, time.perf_counter() - t0, max(1, cpus)


def disconnect() -> None:
    """Shut down the Ray this process started (see :func:`connect`)."""
    import ray

    ray.shutdown()


class RayShard:
    """A shard as a Ray actor.

    Parameters
    ----------
    shard : int
        Its index.
    init : tuple
        ``(engine, payload, config, shard, shards)`` of its ShardWorker.
    num_cpus : float
        CPUs the actor reserves.
    """

    def __init__(self, shard: int, init: tuple, num_cpus: float) -> None:
        import ray

        from llmlat._shard._worker import ShardWorker

        self.shard = shard
        self.pid: int | None = None
        actor = ray.remote(ShardWorker).options(
            num_cpus=num_cpus, scheduling_strategy="SPREAD", max_restarts=0
        )
        self._actor: Any = actor.remote(*init)

    async def call(self, method: str, *args: Any) -> Any:
        """Call ``method`` of the actor; see :class:`~._handle.ShardHandle`."""
        from ray.exceptions import RayActorError, RayError

        try:
            ref = getattr(self._actor, method).remote(*args)
            return await asyncio.wrap_future(ref.future())
        except RayActorError as exc:
            raise ShardLost(f"Ray actor died ({_first_line(exc)})") from None
        except RayError as exc:
            raise ShardLost(f"{method}: {_first_line(exc)}") from None

    def kill(self) -> None:
        """Kill the actor at once."""
        import ray

        ray.kill(self._actor, no_restart=True)

    async def close(self) -> None:
        """Kill the actor (after its final drain)."""
        self.kill()


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
