"""Public benchmark data shipped with llmlat, as per-level tables ready for :func:`llmlat.fit`.

Each dataset is a CSV in a folder with its ``SOURCE.md`` (origin, commit, license, caveats).
The folder is looked up as package data first (``llmlat/datasets``) and then in the
``datasets/`` folder of a source checkout, next to the package.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pandas as pd

__all__ = ["list", "load", "source"]

_builtin_list = list


def _roots() -> _builtin_list[Path]:
    roots = []
    packaged = resources.files("llmlat") / "datasets"
    if packaged.is_dir():
        roots.append(Path(str(packaged)))
    checkout = Path(__file__).resolve().parent.parent / "datasets"
    if checkout.is_dir():
        roots.append(checkout)
    return roots


def _index() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for root in _roots():
        for csv in sorted(root.glob("*/*.csv")):
            if (csv.parent / "SOURCE.md").is_file():
                found.setdefault(f"{csv.parent.name}/{csv.stem}", csv)
    return found


def list() -> _builtin_list[str]:  # shadows the builtin on purpose: llmlat.datasets.list()
    """List the available datasets.

    Returns
    -------
    list of str
        Names like ``"inferencex-closedloop/gpt-oss-120b"`` (folder / table).
    """
    return sorted(_index())


def _path(name: str) -> Path:
    index = _index()
    if name not in index:
        raise ValueError(f"name: unknown dataset {name!r}; available: {', '.join(sorted(index))}")
    return index[name]


def load(name: str) -> pd.DataFrame:
    """Load a dataset as a per-level table (one row per load level).

    Parameters
    ----------
    name : str
        One of :func:`list`.

    Returns
    -------
    pandas.DataFrame
        Columns ``level``, ``level_kind``, ``n``, ``throughput_rps``,
        ``latency_{mean,std,p50,p90,p99}_s``, the same for ``ttft``, token means and others
        described in the dataset's SOURCE; ``attrs["source"]`` holds the SOURCE text.

    Raises
    ------
    ValueError
        For an unknown name.
    """
    path = _path(name)
    table = pd.read_csv(path)
    table["level_kind"] = table["level_kind"].astype("string")
    table.attrs["name"] = name
    table.attrs["source"] = source(name)
    return table


def source(name: str) -> str:
    """Return the SOURCE text of a dataset: origin, license and caveats.

    Parameters
    ----------
    name : str
        One of :func:`list`.

    Returns
    -------
    str
        Markdown text.
    """
    return (_path(name).parent / "SOURCE.md").read_text(encoding="utf-8")
