"""Sharded sweeps: one sweep run by K shards in local processes or as Ray actors.

``sweep(..., workers=K)`` (``cluster="local"``, the default) or ``cluster="ray"`` /
``ray_address=...`` makes the engine hand its run to a :class:`Coordinator`:

- :mod:`._partition`: each level's exact split (schedule by index, workers evenly);
- :mod:`._worker`: a shard, the existing engine gated by the coordinator;
- :mod:`._local`: shards as child processes (stdlib); :mod:`._ray`: shards as Ray actors;
- :mod:`._coordinator`: start barrier, row streaming and journal, the merged result.
"""

from llmlat._shard._coordinator import EXTRA_COLUMNS, Coordinator

__all__ = ["EXTRA_COLUMNS", "Coordinator"]
