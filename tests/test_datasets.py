"""The shipped datasets: each one loads, matches its datasheet in datasets/README.md, and fits."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import llmlat
from llmlat import datasets

ROOT = Path(__file__).resolve().parents[1] / "datasets"
README = ROOT / "README.md"
# 20 MB for the whole folder (issue 6)
MAX_BYTES = 20 * 2**20


def _datasheets() -> dict[str, dict[str, str]]:
    """Dataset name -> its facts table, from README sections headed by backquoted names."""
    sheets: dict[str, dict[str, str]] = {}
    pending: list[str] = []  # the names the next facts rows belong to
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            pending = re.findall(r"`([^`]+)`", line)
        elif re.fullmatch(r"`[^`]+`:", line.strip()):  # a facts table for one name of the section
            pending = [line.strip()[1:-2]]
        elif (
            line.startswith("| ")
            and pending
            and not line.startswith("| fact")
            and "---" not in line
        ):
            key, value = (cell.strip() for cell in line.strip("|").split("|", 1))
            for name in pending:
                sheets.setdefault(name, {})[key] = value
    return sheets


SHEETS = _datasheets()
NAMES = datasets.list()


def _numbers(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def test_the_readme_names_every_dataset_and_nothing_else() -> None:
    assert sorted(SHEETS) == NAMES
    folders = {p.name for p in ROOT.iterdir() if p.is_dir()}
    assert folders == {name.split("/")[0] for name in NAMES}


def test_the_folder_stays_small() -> None:
    size = sum(p.stat().st_size for p in ROOT.rglob("*") if p.is_file())
    assert size < MAX_BYTES


@pytest.mark.parametrize("name", NAMES)
def test_dataset_loads_and_matches_its_datasheet(name: str) -> None:
    sheet = SHEETS[name]
    data = datasets.load(name)
    if sheet["kind"] == "per-level table":
        assert isinstance(data, pd.DataFrame)
        table = data
        assert "License" in data.attrs["source"]
    else:
        assert sheet["kind"] == "sweep"
        assert isinstance(data, llmlat.SweepResult)
        # the same files open by path, and the name finds the saved sweep, not its attempts
        again = llmlat.read(ROOT / f"{name}.parquet")
        pd.testing.assert_frame_equal(again.requests, data.requests)
        assert data.meta["llmlat_version"] and data.meta["simulator"]["mode"] in ("batch", "mmc")
        assert data.requests["t_scheduled"].notna().all()
        assert '"llmlat_version"' in datasets.source(name)  # provenance: the sidecar metadata
        runs = data.meta.get("runs", [data.meta])
        assert len(runs) == int(sheet["runs"])
        assert {run["seed"] for run in runs} == {int(sheet["seed"])}
        assert data.requests["run_id"].nunique() == len(runs)
        table = data.summary()
    assert set(table["level_kind"]) == {sheet["level_kind"]}
    levels = table["level"].to_numpy(dtype=float)
    stated = sheet["levels"]
    count = re.fullmatch(r"(\d+) \w+ set by the plan", stated)
    if count:
        assert len(np.unique(levels)) == int(count.group(1))
    else:
        assert np.unique(levels).tolist() == _numbers(stated)
    budgets = [cell.strip() for cell in sheet["measured requests"].split(",")]
    if budgets != ["timed"]:
        assert len(budgets) == len(table)
        for n, budget in zip(table["n"], budgets, strict=True):
            if budget != "timed":
                assert n == int(budget)


@pytest.mark.parametrize("name", NAMES)
def test_dataset_fits(name: str) -> None:
    data = datasets.load(name)
    stated = SHEETS[name]["fit"]
    top = re.fullmatch(r"levels <= (\d+)", stated)
    if top:  # only the levels where every request was admitted describe the queue
        data = data.requests[data.requests["level"] <= float(top.group(1))]
    if stated == "yes" or top:
        res = llmlat.fit(data, model="mmc")
        assert res.params["c"] >= 1 and res.params["mu"] > 0
        assert np.isfinite(res.aic) and res.capacity_rps > 0
    else:  # the datasheet says why; the fit must refuse with a one-line reason, not a wrong c
        assert stated.startswith("no: ")
        with pytest.raises(ValueError, match=r"^(level|max_refused): "):
            llmlat.fit(data, model="mmc")


def test_list_by_kind() -> None:
    tables, sweeps = datasets.list(kind="table"), datasets.list(kind="sweep")
    assert sorted(tables + sweeps) == NAMES
    assert [SHEETS[n]["kind"] for n in tables] == ["per-level table"] * len(tables)
    assert [SHEETS[n]["kind"] for n in sweeps] == ["sweep"] * len(sweeps)
    with pytest.raises(ValueError, match="kind: "):
        datasets.list(kind="csv")


def test_list_and_load_reject_an_unknown_name() -> None:
    with pytest.raises(ValueError, match="name: unknown dataset"):
        datasets.load("no-such/dataset")
