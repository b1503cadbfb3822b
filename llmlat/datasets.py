"""Datasets shipped with llmlat, by name, ready for :func:`llmlat.fit`.

Two kinds, one folder each under ``datasets/``: public benchmark data as a per-level CSV with its
``SOURCE.md`` (origin, commit, license, caveats), and sweeps saved by :meth:`SweepResult.save`
(``<name>.parquet`` with its JSON sidecar), whose provenance is their sidecar metadata and whose
datasheet is ``datasets/README.md``. An installed wheel carries the folder as package data
(``llmlat/_datasets``, copied there by the build); a source checkout or an editable install reads
the ``datasets/`` folder next to the package.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pandas as pd

from llmlat.results import SweepResult, read

__all__ = ["list", "load", "root", "source"]

_builtin_list = list


def root() -> Path:
    """Return the folder the datasets are read from.

    Returns
    -------
    pathlib.Path
        ``llmlat/_datasets`` inside an installed wheel; in a source checkout (or an editable
        install) the repository's ``datasets/`` folder.
    """
    packaged = Path(str(resources.files("llmlat") / "_datasets"))
    # only a checkout has the folder beside the package (in site-packages, "datasets" would be
    # another distribution's)
    return packaged if packaged.is_dir() else Path(__file__).resolve().parent.parent / "datasets"


def _index() -> dict[str, Path]:
    found: dict[str, Path] = {}
    folder = root()
    for csv in sorted(folder.glob("*/*.csv")):
        if (csv.parent / "SOURCE.md").is_file():
            found[f"{csv.parent.name}/{csv.stem}"] = csv
    for sweep in sorted(folder.glob("*/*.parquet")):
        if sweep.with_name(sweep.name + ".json").is_file():  # a saved sweep, not its attempts
            found[f"{sweep.parent.name}/{sweep.stem}"] = sweep
    return found


_KINDS = {"table": ".csv", "sweep": ".parquet"}


def list(kind: str | None = None) -> _builtin_list[str]:  # shadows the builtin on purpose
    """List the available datasets.

    Parameters
    ----------
    kind : {"table", "sweep"}, optional
        Only per-level tables (public data, CSV) or only saved sweeps; default both.

    Returns
    -------
    list of str
        Names like ``"inferencex-closedloop/gpt-oss-120b"`` (folder / table or sweep).

    Raises
    ------
    ValueError
        For an unknown ``kind``.
    """
    if kind is not None and kind not in _KINDS:
        raise ValueError(f"kind: expected 'table' or 'sweep', got {kind!r}")
    index = _index()
    return sorted(n for n, p in index.items() if kind is None or p.suffix == _KINDS[kind])


def _path(name: str) -> Path:
    index = _index()
    if name not in index:
        raise ValueError(f"name: unknown dataset {name!r}; available: {', '.join(sorted(index))}")
    return index[name]


def load(name: str) -> pd.DataFrame | SweepResult:
    """Load a dataset: a per-level table (one row per load level) or a saved sweep.

    Parameters
    ----------
    name : str
        One of :func:`list`.

    Returns
    -------
    pandas.DataFrame or SweepResult
        A CSV dataset: columns ``level``, ``level_kind``, ``n``, ``throughput_rps``,
        ``latency_{mean,std,p50,p90,p99}_s``, the same for ``ttft``, token means and others
        described in the dataset's SOURCE; ``attrs["source"]`` holds the SOURCE text.
        A saved sweep: the :class:`~llmlat.results.SweepResult` that :func:`llmlat.read` opens.

    Raises
    ------
    ValueError
        For an unknown name.
    """
    path = _path(name)
    if path.suffix == ".parquet":
        return read(path)
    table = pd.read_csv(path)
    table["level_kind"] = table["level_kind"].astype("string")
    table.attrs["name"] = name
    table.attrs["source"] = source(name)
    return table


def source(name: str) -> str:
    """Return the SOURCE text of a dataset: origin, license and caveats (a sweep: its metadata).

    Parameters
    ----------
    name : str
        One of :func:`list`.

    Returns
    -------
    str
        Markdown text; for a saved sweep without a ``SOURCE.md``, its sidecar metadata as JSON
        (llmlat version, target, load, seed).
    """
    path = _path(name)
    source_md = path.parent / "SOURCE.md"
    if path.suffix == ".parquet" and not source_md.is_file():
        return json.dumps(read(path).meta, indent=1)
    return source_md.read_text(encoding="utf-8")
