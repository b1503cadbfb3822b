"""Sharded sweeps in local processes (issue 13): exact load split, one merged result, faults.

The Ray backend runs the same coordinator and shards: tests/test_shard_ray.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sharding import QUICK, journal_meta, poll, sweep_in_thread

from llmlat import read, sweep
from llmlat._loadshapes import plan_levels
from llmlat._shard._partition import request_id, shard_plans, split_evenly
from llmlat._summary import summarize
from llmlat.config import SweepConfig


def test_the_union_of_shard_schedules_is_the_single_process_schedule():
    # gamma bursts, a warmup by count and by time, several levels
    plans = plan_levels(
        rate=[5.0, 40.0], requests=[23, 101], warmup=3, warmup_s=0.2, arrival="gamma",
        burstiness=6.0, max_in_flight=5, seed=3,
    )  # fmt: skip
    for plan in plans:
        whole = plan.schedule.offsets_s
        for shards in (1, 2, 3, 7):
            parts = [shard_plans(plans, k, shards)[plan.index] for k in range(shards)]
            ids = np.concatenate(
                [[request_id(0, i, k, shards) for i in range(len(p.schedule))]
                 for k, p in enumerate(parts)]
            )  # fmt: skip
            offsets = np.concatenate([p.schedule.offsets_s for p in parts])
            assert sorted(ids) == list(range(len(whole)))  # every send exactly once
            np.testing.assert_array_equal(offsets[np.argsort(ids)], whole)  # at its offset
            warm = sum(
                p.phase(i, o) == "warmup" for p in parts for i, o in enumerate(p.schedule.offsets_s)
            )
            assert warm == sum(plan.phase(i, o) == "warmup" for i, o in enumerate(whole))
            assert sum(p.max_in_flight for p in parts) == max(5, shards)


def test_closed_loop_concurrency_and_counts_split_as_evenly_as_possible():
    (plan,) = plan_levels(concurrency=7, requests=40, warmup=5)
    parts = [shard_plans([plan], k, 3)[0] for k in range(3)]
    assert [p.workers for p in parts] == split_evenly(7, 3) == [3, 2, 2]
    assert sum(p.requests for p in parts) == 40 and sum(p.warmup for p in parts) == 5
    # in proportion to the workers: every worker cycles about as often as on one process
    per_worker = [p.requests / p.workers for p in parts]
    assert max(per_worker) - min(per_worker) <= 0.5
    (few,) = plan_levels(concurrency=1, requests=4)
    assert [shard_plans([few], k, 2)[0].workers for k in range(2)] == [1, 0]
    assert [shard_plans([few], k, 2)[0].requests for k in range(2)] == [4, 0]


def _level_offsets(result):
    """Each request's scheduled offset from its level's start, by request id."""
    rows = result.requests.sort_values("request_id")
    starts = result.levels.groupby("level")["t_start"].min()
    return (rows["t_scheduled"] - rows["level"].map(starts)).to_numpy()


def test_open_loop_over_two_processes_sends_the_exact_schedule_and_merges(sim_process, tmp_path):
    url, _ = sim_process
    options = {
        **QUICK, "url": url, "rate": [60.0, 120.0], "requests": [12, 30], "warmup": 2,
        "arrival": "gamma", "burstiness": 4.0, "workers": 2,
    }  # fmt: skip
    saved = tmp_path / "sharded.parquet"
    first = sweep(save=saved, **options)
    plans = plan_levels(
        rate=[60.0, 120.0], requests=[12, 30], warmup=2, arrival="gamma", burstiness=4.0, seed=7
    )
    whole = np.concatenate([p.schedule.offsets_s for p in plans])
    req = first.requests
    # rows == requests issued, across shards; ids are the single-process ids
    assert req["request_id"].tolist() == list(range(len(whole)))
    shares = [sum(len(p.schedule.offsets_s[k::2]) for p in plans) for k in range(2)]
    assert first.levels.groupby("shard")["issued"].sum().tolist() == shares
    assert (req["request_id"] % 2 == req["shard"]).all() and req["ok"].all()
    assert (req["phase"] == "warmup").sum() == 2 * len(plans)
    assert req["host"].nunique() == 1 and len(first.meta["shards"]) == 2
    # the union of the shards' sends is the schedule, on one timeline (start barrier: the
    # shards' level starts agree to well under a send gap)
    np.testing.assert_allclose(_level_offsets(first), whole, atol=0.02)
    spread = first.levels.groupby("level")["t_start"].agg(np.ptp)
    assert (spread < 0.02).all()
    # the journal went through the coordinator: the saved dataset is the result
    back = read(saved)
    assert back.meta["complete"] and back.requests["shard"].tolist() == req["shard"].tolist()
    keys = ["level", "shard", "issued"]
    assert back.levels[keys].equals(first.levels[keys])
    # merged the same way under the same seed
    second = sweep(**options)
    same = ["request_id", "level", "shard", "phase", "worker"]
    assert second.requests[same].equals(req[same])
    np.testing.assert_allclose(_level_offsets(second), _level_offsets(first), atol=0.02)
    # analysis works as on one process: one summary row per level
    assert first.summary()["n"].tolist() == [12, 30]


def test_closed_loop_over_two_processes_splits_n(sim_process):
    url, _ = sim_process
    result = sweep(url=url, concurrency=[3], requests=6, workers=2, **QUICK)
    req = result.requests
    assert len(req) == 6 and req["request_id"].is_unique
    assert req.groupby("shard")["worker"].nunique().tolist() == [2, 1]
    assert sorted(req["worker"].unique()) == [0, 1, 2] and (req["worker"] % 2 == req["shard"]).all()
    assert req.groupby("shard").size().tolist() == [4, 2]
    assert req["in_flight"].max() <= 2  # each shard counts its own requests in flight
    # one levels row per shard: the level is flagged when any shard that took part was busy
    calm = result.levels.assign(loop_lag_p99_s=0.0)

    def flagged(levels):
        return summarize(req, result.attempts, levels)["client_bound"].tolist()

    assert flagged(calm.assign(cpu_util=[0.05, 0.05])) == [False]
    assert flagged(calm.assign(cpu_util=[0.05, 0.95])) == [True]
    assert flagged(calm.assign(cpu_util=[0.05, 0.99], issued=[6, 0])) == [False]  # idle shard


def test_a_shard_killed_mid_level_keeps_its_rows_and_the_others_finish(sim_process, tmp_path):
    url, _ = sim_process
    saved = tmp_path / "killed.parquet"
    # 4 s of sends: the kill lands mid-level even when a busy machine's polls of the journal
    # are slow (at 1.5 s, a loaded run's shard had sent its whole share before the kill)
    thread, box = sweep_in_thread(url=url, rate=40.0, requests=160, workers=2, save=saved, **QUICK)
    pids = [s["pid"] for s in journal_meta(saved)["shards"]]
    poll(lambda: (read(saved).requests["shard"] == 1).sum() >= 5)
    os.kill(pids[1], signal.SIGKILL)
    thread.join(60)
    result = box["result"]
    by_shard = result.requests.groupby("shard").size()
    assert by_shard[0] == 80  # the live shard sent its whole share
    assert 5 <= by_shard[1] < 80  # the dead one: what it had sent
    lost = [s["lost"] for s in result.meta["shards"]]
    assert lost[0] is None and "SIGKILL" in lost[1]
    assert read(saved).meta["shards"][1]["lost"] == lost[1]


@pytest.mark.parametrize(
    ("sig", "sigint", "code"),
    [
        # as a terminal's foreground job: SIGINT at its default, Ctrl-C goes to the group
        (signal.SIGINT, signal.SIG_DFL, 130),
        # a job started with `&` by a shell without job control (a CI script, `make test &`)
        # ignores SIGINT, its children inherit that, and the CLI rightly leaves an ignored
        # Ctrl-C ignored: it is stopped by SIGTERM (`kill`, a CI timeout's group kill)
        (signal.SIGTERM, signal.SIG_IGN, 143),
    ],
)
def test_a_stop_signal_stops_every_shard_with_the_grace_and_saves(
    sim_process, tmp_path, sig, sigint, code
):
    url, _ = sim_process
    saved = tmp_path / "stopped.parquet"
    cli = subprocess.Popen(
        [sys.executable, "-m", "llmlat", "sweep", "--url", url, "--rate", "40", "--duration-s",
         "60", "--workers", "2", "--save", str(saved), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )  # fmt: skip
    pids = [s["pid"] for s in journal_meta(saved)["shards"]]
    poll(lambda: read(saved).requests["shard"].nunique() == 2)
    os.killpg(cli.pid, sig)  # the whole group, as a terminal's Ctrl-C does
    try:
        _, err = cli.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # a lost Ctrl-C: no sweep runs on past the test
        cli.kill()
        _, err = cli.communicate()
    assert cli.returncode == code, err
    assert f"llmlat: stopping ({sig.name})" in err  # the grace handler took it, not a default
    result = read(saved)
    assert result.meta["interrupted"] and result.meta["complete"]
    assert result.requests["shard"].nunique() == 2 and len(result.requests) < 40 * 60
    # the requests in flight were let finish: nothing was cancelled
    assert not (result.requests["error_kind"] == "cancelled").any()
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"workers": 0}, "workers"),
        ({"cluster": "k8s"}, "cluster"),
        ({"cluster": "local", "ray_address": "auto"}, "ray_address"),
    ],
)
def test_bad_shard_options_name_the_field(bad, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        SweepConfig(rate=1.0, **bad)


def test_a_payload_function_the_processes_cannot_import_is_refused(sim_process):
    def payload(request_id):
        return "hi"

    payload.__module__ = "__main__"  # as in a notebook or a script
    with pytest.raises(ValueError, match=r"^payload: a callable must be importable"):
        sweep(payload, url=sim_process[0], rate=1.0, requests=2, workers=2, **QUICK)


def test_fit_plot_and_report_take_a_sharded_result_as_a_single_one(sim_process, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from llmlat import fit, plot
    from llmlat._report import build_report
    from llmlat.results import SweepResult

    url, _ = sim_process
    sharded = sweep(
        url=url,
        concurrency=[1, 2, 4, 8, 16],
        requests=[12, 12, 16, 32, 64],
        max_tokens=4,
        workers=2,
        **QUICK,
    )
    assert sharded.requests["shard"].nunique() == 2
    # the shard and host columns are bookkeeping: without them the fit is the same fit
    plain = SweepResult(
        sharded.requests.drop(columns=["shard", "host"]),
        sharded.attempts,
        sharded.levels,
        sharded.meta,
    )
    res, ref = fit(sharded, model="batch"), fit(plain, model="batch")
    assert res.params.equals(ref.params)
    assert res.summary().as_text() == ref.summary().as_text()
    assert len(plot.overview(sharded, res).axes) >= 2
    report = build_report(sharded, tmp_path / "report", model="batch", p95_s=1.0)
    assert report.path.exists() and report.fit is not None and report.plan is not None
