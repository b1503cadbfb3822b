"""The options model: one validation, one default, per-level values, metadata without secrets."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from llmlat.config import RetryPolicy, SweepConfig, Target, option_specs


def test_defaults_and_views():
    config = SweepConfig(concurrency=[1, 10])
    assert config.concurrency == (1, 10)  # frozen: sequences become tuples
    assert isinstance(config.target(), Target) and isinstance(config.retry_policy(), RetryPolicy)
    assert config.target("http://127.0.0.1:9").url == "http://127.0.0.1:9"
    assert [p.workers for p in config.plans()] == [1, 10]
    assert [p.requests for p in config.plans()] == [100, 100]  # enough for a steady state
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 3  # type: ignore[misc]
    assert config.replace(seed=3).seed == 3 and config.seed == 0


def test_per_level_lengths():
    config = SweepConfig(rate=[1.0, 2.0], duration_s=[3.0, 4.0], seed=1)
    plans = config.plans()
    assert [p.stop_rule for p in plans] == ["duration", "duration"]
    assert plans[0].schedule.offsets_s.max() < 3.0 < plans[1].schedule.offsets_s.max() < 4.0
    assert SweepConfig(concurrency=[1, 2, 3], requests=[5, 6, 7]).requests == (5, 6, 7)
    with pytest.raises(ValueError, match=r"^requests: give one value or one per level \(3 lev"):
        SweepConfig(concurrency=[1, 2, 3], requests=[5, 6])


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({}, "concurrency"),
        ({"concurrency": 1, "rate": 2}, "concurrency"),
        ({"concurrency": 0}, "concurrency"),
        ({"rate": -1}, "rate"),
        ({"concurrency": 1, "timeout_s": 0}, "timeout_s"),
        ({"concurrency": 1, "api": "grpc"}, "api"),
        ({"concurrency": 1, "retries": -1}, "retries"),
        ({"concurrency": 1, "pause_s": -1}, "pause_s"),
        ({"concurrency": 1, "transport": "h2"}, "transport"),
        ({"concurrency": 1, "overwrite": "yes"}, "overwrite"),
        ({"concurrency": 1, "simulator": "nope"}, "simulator"),
        ({"concurrency": 1, "url": "http://127.0.0.1:9", "simulator": "article"}, "simulator"),
        ({"concurrency": 1, "run_id": "a/b"}, "run_id"),
        ({"trace": "/nonexistent/trace.csv"}, "trace"),
        ({"concurrency": 1, "url": "ftp://127.0.0.1"}, "url"),
        ({"concurrency": 1, "url": "http://[::1"}, "url"),  # urlsplit's own error, named
        ({"concurrency": 1, "url": "http://127.0.0.1:99999"}, "url"),
        ({"concurrency": 1, "url": "http://127.0.0.1:9,http://[::1"}, "url"),
    ],
)
def test_a_bad_option_is_a_value_error_naming_it(options, name):
    with pytest.raises(ValueError, match=f"^{name}: "):
        SweepConfig(**options)


def test_unknown_option_suggests_the_nearest():
    with pytest.raises(TypeError, match=r"'timeout' \(did you mean timeout_s\?\)"):
        SweepConfig.from_options(concurrency=1, timeout=3)


def test_every_option_is_described():
    specs = option_specs()
    assert len({o.flag for o in specs}) == len(specs)
    for spec in specs:
        assert spec.flag == "--" + spec.name.replace("_", "-")  # the one mechanical mapping
        assert spec.help.endswith(".") and len(spec.help) > 20, spec.name
        assert spec.kind in (str, int, float, bool, dict) or spec.kind.__name__ == "Path"
    names = {o.name for o in specs}
    assert {"overwrite", "preconnect", "transport", "simulator_process"} <= names


def test_meta_has_every_option_and_no_secrets(tmp_path):
    trace = tmp_path / "trace.csv"
    pd.DataFrame({"t_s": [0.0, 0.5, 1.0]}).to_csv(trace, index=False)
    config = SweepConfig(
        trace=str(trace),
        url="http://user:pw@127.0.0.1:9/v1?key=sekrit",
        headers={"Authorization": "Bearer sekrit"},
    )
    meta = config.to_meta()
    assert list(meta) == [o.name for o in option_specs()]
    assert "sekrit" not in repr(meta) and "pw" not in repr(meta)
    assert meta["headers"] == ["Authorization"] and meta["trace"].endswith("3 sends")
    assert "sekrit" not in repr(config)
