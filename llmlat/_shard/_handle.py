"""What the coordinator holds of a shard, whatever runs it: a handle with ``call`` and ``close``."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["ShardHandle", "ShardLost"]


class ShardLost(Exception):
    """The shard died or its call failed; the text says why (exit code, signal, error)."""


class ShardHandle(Protocol):
    """A running shard, local process or Ray actor.

    Attributes
    ----------
    shard : int
        Its index.
    """

    shard: int

    async def call(self, method: str, *args: Any) -> Any:
        """Call a :class:`~llmlat._shard._worker.ShardWorker` method in the shard.

        Raises
        ------
        ShardLost
            When the shard has died, or the method raised.
        """

    async def close(self) -> None:
        """End the shard (after its final drain): its process exits, or its actor is killed."""
