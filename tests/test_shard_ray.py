"""Sharded sweeps on a real Ray (issue 13): a local ``ray.init`` and a two-node cluster.

The two-node test comes last: it shuts the session's local Ray down for its own cluster.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
from sharding import QUICK, journal_meta, poll, sweep_in_thread

from llmlat import read
from llmlat.config import SweepConfig

pytestmark = pytest.mark.ray


def test_a_ray_actor_killed_mid_level_keeps_its_rows(ray_local, sim_process, tmp_path):
    url, _ = sim_process
    saved = tmp_path / "ray.parquet"
    # workers default: one shard per CPU of the cluster (2); 6 s of sends, so that the kill
    # lands mid-level on a loaded machine (with 1.5 s, CI's shard 1 once finished first)
    thread, box = sweep_in_thread(url=url, rate=80.0, requests=480, cluster="ray", save=saved,
                                   **QUICK)  # fmt: skip
    shards = journal_meta(saved)["shards"]
    assert len(shards) == 2 and all(s["node"] for s in shards)
    poll(lambda: (read(saved).requests["shard"] == 1).sum() >= 5)
    os.kill(shards[1]["pid"], signal.SIGKILL)
    thread.join(60)
    result = box["result"]
    by_shard = result.requests.groupby("shard").size()
    assert by_shard[0] == 240 and 5 <= by_shard[1] < 240
    lost = [s["lost"] for s in result.meta["shards"]]
    assert lost[0] is None and "Ray actor died" in lost[1]
    assert ray_local.is_initialized()  # a Ray the sweep did not start is left running


def test_two_node_cluster_places_a_shard_on_each_node(ray_local, sim_process):
    from ray.cluster_utils import Cluster

    ray_local.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        url, _ = sim_process
        options = {**QUICK, "url": url, "rate": [50.0], "requests": 40, "arrival": "gamma"}
        from llmlat import sweep

        result = sweep(ray_address=cluster.address, **options)
        nodes = {s["node"] for s in result.meta["shards"]}
        assert len(nodes) == 2  # SPREAD: one shard per node
        whole = SweepConfig(**options).plans()[0].schedule.offsets_s
        req = result.requests
        assert req["request_id"].tolist() == list(range(len(whole))) and req["ok"].all()
        offsets = req["t_scheduled"] - result.levels["t_start"].min()
        np.testing.assert_allclose(offsets, whole, atol=0.02)
        assert not ray_local.is_initialized()  # the sweep joined the cluster and left it
    finally:
        cluster.shutdown()
