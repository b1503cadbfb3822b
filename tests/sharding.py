"""Helpers of the sharded-sweep tests (tests/test_shard.py, tests/test_shard_ray.py)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from llmlat import sweep

#: Options every sharded test sweep shares.
QUICK = {"progress": False, "seed": 7, "model": "sim-model"}


def sweep_in_thread(**options):
    """Run ``sweep(**options)`` in a thread; its result lands in ``box["result"]``."""
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("result", sweep(**options)))
    thread.start()
    return thread, box


def poll(condition, timeout=60.0):
    """Wait until ``condition()`` holds (asserting within ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def journal_meta(path: Path) -> dict:
    """Wait for the journal of ``path`` and return the meta of its header."""
    journal = path.with_name(path.name + ".journal")
    poll(lambda: journal.exists() and journal.stat().st_size > 0)
    return json.loads(journal.read_text().split("\n", 1)[0])["meta"]
