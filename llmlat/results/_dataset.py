"""SweepResult, the saved dataset, and the crash-safe writer the engine saves through.

On disk a dataset at ``PATH`` (say ``run.parquet``) is three files side by side:

- ``PATH``: the requests table as parquet (pandas keeps the dtypes, so ``<NA>`` stays ``<NA>``);
- ``<stem>.attempts.parquet`` (``run.attempts.parquet``): the attempts table as parquet;
- ``PATH.json`` (``run.parquet.json``): the sidecar, JSON with ``format``, ``format_version``,
  ``meta``, the levels table (``{"columns": [...], "rows": [[...], ...]}``, small) and the
  attempts file's name.

While a sweep runs, :class:`DatasetWriter` appends to ``PATH.journal`` (JSON lines: a header with
the meta and column names, then one line per appended batch, ``{"r": [[values...], ...],
"a": [...], "l": [...]}`` for its requests, attempts and levels, each written and
flushed to the OS as one write, so a crash or Ctrl-C of the process loses nothing already
appended; a last line cut short by a crash is skipped). ``close()`` writes the three files
(each to a temporary name, then renamed) and removes the journal. :func:`read` prefers the journal
when one exists and then sets ``meta["complete"] = False``; a closed writer sets it True. The
journal of a sweep that never closed its writer (crash, ``kill -9``) stays until
:func:`recover` (``llmlat read PATH --recover``) turns it into the dataset; a new writer refuses
to replace it, or any dataset, unless given ``overwrite=True``
(:mod:`llmlat.results._savepath` checks the path and locks a live journal).

Secrets: ``meta`` is normalized to plain JSON at construction and scrubbed there, so neither a
repr nor a saved file can show a credential: values under key names such as ``authorization`` or
``api_key`` become ``"<redacted>"``, ``Bearer`` tokens and credentials in URLs are masked, and the
value of any environment variable named by an ``api_key_env`` entry is replaced wherever it
appears in ``meta`` or in the ``error`` texts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import enum
import html
import importlib
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from llmlat._display import compact, to_text
from llmlat._redact import credential_header, redact
from llmlat._summary import summarize
from llmlat.cost import check_prices
from llmlat.results._savepath import (
    attempts_path,
    check_save_path,
    journal_in_use,
    journal_path,
    lock_journal,
    sidecar_path,
)
from llmlat.schema import (
    ATTEMPT_COLUMNS,
    LEVEL_COLUMNS,
    REQUEST_COLUMNS,
    Attempt,
    LevelStats,
    Record,
    coerce,
)
from llmlat.stats import check_slo, meets_slo

__all__ = ["DatasetWriter", "SweepResult", "read", "recover"]

FORMAT = "llmlat"
FORMAT_VERSION = 1
_REDACTED = "<redacted>"

# name -> (dataclass giving required columns and defaults, column dtypes)
_TABLES: dict[str, tuple[type, dict[str, str]]] = {
    "requests": (Record, REQUEST_COLUMNS),
    "attempts": (Attempt, ATTEMPT_COLUMNS),
    "levels": (LevelStats, LEVEL_COLUMNS),
}
# journal line tag -> table
_TAGS = {"r": "requests", "a": "attempts", "l": "levels"}

_REPR_LEVELS = 8  # a longer list of levels is abridged in the reprs


# ---------------------------------------------------------------- secrets and JSON-safe meta

_MIN_SECRET_LEN = 6  # shorter env values would redact ordinary text


def _env_secrets(meta: Any) -> list[str]:
    """Values of the environment variables that ``meta`` names under ``api_key_env``."""
    names: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if key == "api_key_env" and isinstance(value, str):
                    names.append(value)
                visit(value)
        elif isinstance(node, list | tuple):
            for value in node:
                visit(value)

    visit(meta)
    values = (os.environ.get(name) for name in names)
    return [v for v in values if v and len(v) >= _MIN_SECRET_LEN]


def _scrub(text: str, secrets: Sequence[str]) -> str:
    return redact(text, secrets)


def _json_default(value: Any) -> Any:
    """Encode the numpy scalars an engine may put in a record."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON-serializable")


# one encoder for every journal line (NaN and infinity kept, as Python's json reads them back)
_ENCODER = json.JSONEncoder(default=_json_default)


def _plain(value: Any, where: str, secrets: Sequence[str]) -> Any:
    """Return ``value`` as plain, scrubbed JSON data (non-finite floats and NA become None)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _scrub(value, secrets)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, int | float):
        return value if not isinstance(value, float) or math.isfinite(value) else None
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            name = str(key)
            secret = credential_header(name) and not (
                item is None or (isinstance(item, str) and not item)
            )
            out[name] = _REDACTED if secret else _plain(item, f"{where}[{name!r}]", secrets)
        return out
    if isinstance(value, list | tuple | set | frozenset | np.ndarray):
        return [_plain(item, f"{where}[{i}]", secrets) for i, item in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value), where, secrets)
    if isinstance(value, os.PathLike):
        return _scrub(os.fspath(value), secrets)
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return _plain(value.value, where, secrets)
    if value is pd.NA or value is pd.NaT:
        return None
    raise ValueError(f"{where}: a {type(value).__name__} is not JSON-serializable")


def _clean_meta(meta: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    if meta is None:
        return {}, []
    if not isinstance(meta, Mapping):
        raise ValueError(f"meta: expected a dict, got {type(meta).__name__}")
    secrets = _env_secrets(meta)
    return _plain(meta, "meta", secrets), secrets


# ---------------------------------------------------------------- tables


def _table(frame: pd.DataFrame | None, name: str) -> pd.DataFrame:
    """Coerce ``frame`` to the schema of table ``name``, filling optional columns with defaults."""
    cls, columns = _TABLES[name]
    if frame is None:
        return coerce(
            pd.DataFrame({c: pd.Series([], dtype=t) for c, t in columns.items()}), columns
        )
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"{name}: expected a DataFrame, got {type(frame).__name__}")
    missing = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
    missing = [c for c in missing if c not in frame.columns]
    if missing:
        raise ValueError(f"{name}: missing column(s): {', '.join(missing)}")
    frame = frame.reset_index(drop=True)  # coerce() expects the index 0..n-1
    defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.name not in frame.columns}
    if defaults:
        frame = frame.assign(
            **{
                c: pd.Series([v] * len(frame), dtype=object, index=frame.index)
                for c, v in defaults.items()
            }
        )
    try:
        return coerce(frame, columns)
    except (TypeError, ValueError):
        for column, dtype in columns.items():
            try:
                frame[column].astype(dtype)
            except (TypeError, ValueError) as exc:
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise ValueError(f"{name}.{column}: cannot be read as {dtype} ({first})") from None
        raise


def _rows(frame: pd.DataFrame) -> list[list[Any]]:
    """Return the rows of a small table as plain JSON values (NaN and NA become null)."""
    return [[_plain(v, "levels", ()) for v in row] for row in frame.itertuples(index=False)]


def _scrub_errors(frame: pd.DataFrame, secrets: Sequence[str]) -> pd.DataFrame:
    if not len(frame):
        return frame
    error = frame["error"]
    masked = {text: _scrub(text, secrets) for text in error.dropna().unique()}
    return frame.assign(error=error.map(masked, na_action="ignore").astype(error.dtype))


# ---------------------------------------------------------------- SweepResult


class SweepResult:
    """The measurements of one sweep (or several combined): tidy tables and metadata.

    Parameters
    ----------
    requests : pandas.DataFrame, optional
        One row per logical request (:data:`llmlat.schema.REQUEST_COLUMNS`). The columns
        ``run_id``, ``level``, ``level_kind`` and ``request_id`` are required; any other missing
        column is filled with the :class:`~llmlat.schema.Record` default (NaN, ``<NA>``, 0).
    attempts : pandas.DataFrame, optional
        One row per HTTP attempt (:data:`llmlat.schema.ATTEMPT_COLUMNS`).
    levels : pandas.DataFrame, optional
        One row per level run (:data:`llmlat.schema.LEVEL_COLUMNS`).
    meta : dict, optional
        Run metadata (see the interface contract: ``run_id``, ``api``, ``url``, ...). It is
        normalized to plain JSON (tuples become lists, numpy scalars Python numbers, non-finite
        floats None) and scrubbed of credentials, so it saves and reads back exactly.

    Raises
    ------
    ValueError
        If a table lacks a required column or has a value of the wrong type, or ``meta`` holds
        something that is not JSON data; the message names the table and column or meta key.

    Attributes
    ----------
    requests, attempts, levels : pandas.DataFrame
        The tables with the schema's dtypes, in the schema's column order.
    meta : dict
        The metadata, JSON-safe.
    """

    def __init__(
        self,
        requests: pd.DataFrame | None = None,
        attempts: pd.DataFrame | None = None,
        levels: pd.DataFrame | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.meta, secrets = _clean_meta(meta)
        self.requests = _scrub_errors(_table(requests, "requests"), secrets)
        self.attempts = _scrub_errors(_table(attempts, "attempts"), secrets)
        self.levels = _table(levels, "levels")
        if self.slo is not None:  # derived, so a dataset read back agrees with its SLO
            met = meets_slo(self.requests, self.slo)
            self.requests["meets_slo"] = pd.array(met, dtype="boolean")

    @property
    def slo(self) -> dict[str, float] | None:
        """The sweep's SLO (``slo=`` option, from ``meta["load"]``), or None."""
        load = self.meta.get("load")
        return check_slo(load.get("slo")) if isinstance(load, dict) else None

    @property
    def prices(self) -> dict[str, float] | None:
        """The sweep's token prices (``prices=`` option, from ``meta["load"]``), or None."""
        load = self.meta.get("load")
        return check_prices(load.get("prices")) if isinstance(load, dict) else None

    # ------------------------------------------------------------ properties

    @property
    def run_id(self) -> str | None:
        """The run's id: ``meta["run_id"]``, else the only ``run_id`` in the requests, else None."""
        if self.meta.get("run_id"):
            return str(self.meta["run_id"])
        ids = self.requests["run_id"].dropna().unique()
        return str(ids[0]) if len(ids) == 1 else None

    @property
    def level_kind(self) -> str | None:
        """``"concurrency"``, ``"rate"`` or ``"trace"`` (None for an empty result)."""
        kinds = self.requests["level_kind"].dropna().unique()
        if len(kinds) == 1:
            return str(kinds[0])
        kind = self.meta.get("level_kind")
        return kind if isinstance(kind, str) else None

    # ------------------------------------------------------------ analysis

    def summary(
        self,
        phase: str | None = "measure",
        prices: Any = None,
        slo: dict[str, float] | None = None,
    ) -> pd.DataFrame:
        """One row per level: counts, rates, throughput, latency/TTFT/ITL percentiles, checks.

        Parameters
        ----------
        phase : {"measure", "warmup"} or None, default "measure"
            Which rows to summarize; None takes warmup and measured rows together.
        prices : llmlat.Prices or mapping, optional
            Token prices in USD per million (``input``, ``output``, ``cache_read``,
            ``cache_write``; default: the sweep's ``prices=``): adds ``cost_usd``,
            ``cost_per_1k_requests_usd``, ``cost_per_hour_usd`` (at the level's measured
            throughput) and ``cost_unpriced`` (:mod:`llmlat.cost`).
        slo : dict of str to float, optional
            Bounds on ``ttft_s``, ``itl_s``, ``latency_s`` (default: the sweep's ``slo=``):
            adds SLO attainment and goodput, with intervals.

        Returns
        -------
        pandas.DataFrame
            See :func:`llmlat._summary.summarize` for every column and its definition
            (including the ``steady`` and ``client_bound`` rules).
        """
        slo = self.slo if slo is None else slo
        prices = self.prices if prices is None else prices
        return summarize(
            self.requests, self.attempts, self.levels, phase=phase, prices=prices, slo=slo
        )

    def plot(self, kind: str = "latency", **kwargs: Any) -> Any:
        """Draw a figure of this sweep with ``llmlat.plot.<kind>(self, **kwargs)``.

        Parameters
        ----------
        kind : str, default "latency"
            The name of a function of :mod:`llmlat.plot` (e.g. "latency", "throughput",
            "ecdf", "errors", "overview", "utilization").
        **kwargs
            Passed on to that function.

        Returns
        -------
        matplotlib.figure.Figure
            Whatever the plotting function returns.

        Raises
        ------
        ValueError
            If ``llmlat.plot`` has no public function named ``kind``.
        """
        module = importlib.import_module("llmlat.plot")
        tables = getattr(module, "TABLE_FIGURES", ())
        names = [n for n in getattr(module, "__all__", []) if n not in tables]
        if kind not in names:
            raise ValueError(f"kind: unknown plot {kind!r}; expected one of {sorted(names)}")
        return getattr(module, kind)(self, **kwargs)

    def compare(self, *others: SweepResult, confidence: float = 0.95) -> pd.DataFrame:
        """Compare other sweeps with this one, level by level (this one is the baseline).

        Parameters
        ----------
        *others : SweepResult
            One or more sweeps of the same target.
        confidence : float, default 0.95
            Coverage of each difference interval.

        Returns
        -------
        pandas.DataFrame
            See :func:`llmlat.compare_runs`: per level, the differences of p50 and p95 latency,
            throughput and 429 share, with intervals; levels in one run only say so.
        """
        from llmlat.comparison import compare_runs

        return compare_runs([self, *others], confidence=confidence)

    # ------------------------------------------------------------ combining

    @classmethod
    def concat(cls, results: Iterable[SweepResult]) -> SweepResult:
        """Combine sweeps of the same level kind into one result.

        Parameters
        ----------
        results : iterable of SweepResult
            The sweeps, e.g. one at concurrency 1-10 and a later one at 50-100.

        Returns
        -------
        SweepResult
            The tables stacked; ``meta`` holds the entries every run shares plus ``"runs"``, the
            list of each run's meta. Its summary has one row per run and level (``run_id`` is a
            column when there are several runs, because their clocks are unrelated).

        Raises
        ------
        ValueError
            If the sweeps have different level kinds or an item is not a SweepResult.
        """
        results = list(results)
        for item in results:
            if not isinstance(item, SweepResult):
                raise ValueError(f"results: expected SweepResult, got {type(item).__name__}")
        kinds = {r.level_kind for r in results if r.level_kind is not None}
        if len(kinds) > 1:
            raise ValueError(f"level_kind: cannot combine {' and '.join(sorted(kinds))} sweeps")
        if len(results) < 2:
            return cls(*(results[0]._tables() if results else ()))
        metas = [r.meta for r in results]
        runs = [run for m in metas for run in m.get("runs", [m])]
        missing = object()
        common = {k: v for k, v in metas[0].items() if all(m.get(k, missing) == v for m in metas)}
        common.pop("runs", None)

        def stack(name: str) -> pd.DataFrame:
            frames = [getattr(r, name) for r in results]
            frames = [f for f in frames if len(f)] or frames[:1]
            return pd.concat(frames, ignore_index=True)

        return cls(stack("requests"), stack("attempts"), stack("levels"), {**common, "runs": runs})

    def __add__(self, other: object) -> SweepResult:
        if not isinstance(other, SweepResult):
            return NotImplemented
        return SweepResult.concat([self, other])

    def _tables(self) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, Any]]:
        return self.requests, self.attempts, self.levels, self.meta

    # ------------------------------------------------------------ saving

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the dataset: requests parquet at ``path``, attempts and a JSON sidecar beside it.

        The files are written under temporary names and renamed, so a reader never sees a half
        file; the journal of an unfinished sweep at the same path is removed (it is superseded:
        ``read(path).save(path)`` is how such a journal is kept, see :func:`recover`).

        Parameters
        ----------
        path : str or os.PathLike
            The requests file, e.g. ``"runs/article.parquet"`` (parent folders are created).

        Returns
        -------
        pathlib.Path
            ``path``.

        Raises
        ------
        ValueError
            If a sweep that is still running writes its journal at ``path``.
        """
        path = Path(path)
        if journal_in_use(journal_path(path)):
            raise ValueError(f"path: a running sweep is writing {journal_path(path)}")
        path.parent.mkdir(parents=True, exist_ok=True)
        attempts_file = attempts_path(path)
        _atomic(attempts_file, lambda tmp: self.attempts.to_parquet(tmp, index=False))
        _atomic(path, lambda tmp: self.requests.to_parquet(tmp, index=False))
        sidecar = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "meta": self.meta,
            "levels": {"columns": list(self.levels.columns), "rows": _rows(self.levels)},
            "attempts": attempts_file.name,
        }
        text = json.dumps(sidecar, indent=1, allow_nan=False)
        _atomic(sidecar_path(path), lambda tmp: tmp.write_text(text, encoding="utf-8"))
        with contextlib.suppress(FileNotFoundError):
            journal_path(path).unlink()
        return path

    # ------------------------------------------------------------ display

    def _headline(self) -> tuple[list[str], str]:
        """(identity parts, counts text) shared by both reprs."""
        meta = self.meta
        parts = [f"run {self.run_id}"] if self.run_id else []
        parts += [str(meta[k]) for k in ("api", "model", "url") if meta.get(k)]
        kind = self.level_kind
        levels = meta.get("levels") or sorted(self.requests["level"].dropna().unique().tolist())
        if kind and levels:
            shown = [f"{v:g}" if isinstance(v, float) else str(v) for v in levels]
            if len(shown) > _REPR_LEVELS:
                shown = [*shown[:3], "...", *shown[-2:]]
            parts.append(f"{kind} [{', '.join(shown)}]")
        measured = self.requests[self.requests["phase"] != "warmup"]
        n = len(measured)
        counts = f"{n} requests"
        if n:
            counts += f", {measured['ok'].mean():.1%} ok"
        if meta.get("complete") is False:
            counts += ", incomplete"
        if meta.get("interrupted"):
            counts += ", interrupted"
        return parts, counts

    def __repr__(self) -> str:
        parts, counts = self._headline()
        head = f"SweepResult({', '.join([*parts, counts])})"
        table = compact(self.summary())
        return head if table.empty else f"{head}\n{to_text(table)}"

    def _repr_html_(self) -> str:
        parts, counts = self._headline()
        head = " · ".join(html.escape(p) for p in [*parts, counts])
        table = to_text(compact(self.summary()), html=True)
        return f"<div><p><b>llmlat sweep</b> · {head}</p>{table}</div>"


# ---------------------------------------------------------------- files


def _atomic(path: Path, write: Callable[[Path], object]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def read(path: str | os.PathLike[str]) -> SweepResult:
    """Open a dataset saved by :meth:`SweepResult.save` or by a :class:`DatasetWriter`.

    An unfinished writer's journal (a sweep still running, or one that crashed or was
    interrupted) takes precedence: every row appended so far is recovered and
    ``meta["complete"]`` is False. A parquet file of the record schema without a sidecar opens
    too, with empty ``meta``, attempts and levels.

    Parameters
    ----------
    path : str or os.PathLike
        The requests parquet file given to ``save`` / ``DatasetWriter``.

    Returns
    -------
    SweepResult
        The same tables (dtypes, NaN and ``<NA>`` included) and meta that were saved.

    Raises
    ------
    FileNotFoundError
        If there is no dataset at ``path`` (or its attempts file is missing).
    ValueError
        If a file is not a readable llmlat dataset; the message names the file.
    """
    path = Path(path)
    journal = journal_path(path)
    if journal.exists():
        return _read_journal(journal)
    if not path.exists():
        raise FileNotFoundError(f"no llmlat dataset at {path}")
    requests = _read_parquet(path)
    sidecar_file = sidecar_path(path)
    if not sidecar_file.exists():
        return _build(path, requests, None, None, {})
    try:
        sidecar = json.loads(sidecar_file.read_text(encoding="utf-8"))
        if sidecar.get("format") != FORMAT:
            raise ValueError(f"format is {sidecar.get('format')!r}, not {FORMAT!r}")
        levels = pd.DataFrame(sidecar["levels"]["rows"], columns=sidecar["levels"]["columns"])
        attempts_name, meta = sidecar["attempts"], sidecar["meta"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{sidecar_file}: not a readable llmlat sidecar ({_first(exc)})") from None
    attempts_file = path.with_name(attempts_name)
    if not attempts_file.exists():
        raise FileNotFoundError(f"{attempts_file}: attempts file of {path} is missing")
    return _build(path, requests, _read_parquet(attempts_file), levels, meta)


def recover(path: str | os.PathLike[str]) -> SweepResult:
    """Turn the journal of a sweep that crashed or was killed into the dataset at ``path``.

    Parameters
    ----------
    path : str or os.PathLike
        The path the sweep was saving to (its journal is ``PATH.journal``).

    Returns
    -------
    SweepResult
        What the journal held (``meta["complete"]`` is False), now saved at ``path``; the
        journal is removed.

    Raises
    ------
    FileNotFoundError
        If there is no journal at ``path``.
    ValueError
        If a running sweep is still writing the journal, or it is not readable.
    """
    path = Path(path)
    journal = journal_path(path)
    if not journal.exists():
        raise FileNotFoundError(f"no journal of an unfinished sweep at {journal}")
    result = _read_journal(journal)
    result.save(path)
    return result


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises many types for a bad file
        raise ValueError(f"{path}: not a readable parquet file ({_first(exc)})") from None


def _build(
    path: Path,
    requests: pd.DataFrame,
    attempts: pd.DataFrame | None,
    levels: pd.DataFrame | None,
    meta: dict[str, Any],
) -> SweepResult:
    try:
        return SweepResult(requests, attempts, levels, meta)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _batches(journal: Path, lines: list[str]) -> list[Any]:
    """Decode the journal's batch lines, skipping a last line cut short by a crash."""
    lines = [line for line in lines if line]
    try:  # one call for the whole journal: per-line decoding is several times slower
        return json.loads("[" + ",".join(lines[:-1]) + "]") + _last_batch(lines[-1:])
    except ValueError:
        pass
    batches = []
    for number, line in enumerate(lines[:-1], start=2):
        try:
            batches.append(json.loads(line))
        except ValueError:
            raise ValueError(f"{journal}: line {number} is not a journal entry") from None
    return batches + _last_batch(lines[-1:])


def _last_batch(last: list[str]) -> list[Any]:
    try:
        return [json.loads(last[0])] if last else []
    except ValueError:  # cut short by the crash: everything before it is whole
        return []


def _read_journal(journal: Path) -> SweepResult:
    try:
        lines = journal.read_text(encoding="utf-8").split("\n")
        header = json.loads(lines[0])
        if header["format"] != FORMAT:
            raise ValueError(f"format is {header['format']!r}, not {FORMAT!r}")
        columns, meta = header["columns"], header["meta"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{journal}: not a readable llmlat journal ({_first(exc)})") from None
    rows: dict[str, list[list[Any]]] = {tag: [] for tag in _TAGS}
    try:
        for batch in _batches(journal, lines[1:]):
            for tag, values in batch.items():
                rows[tag].extend(values)
    except (KeyError, TypeError, AttributeError):
        raise ValueError(f"{journal}: not a journal entry: {str(batch)[:60]}") from None
    frames = {
        _TAGS[tag]: pd.DataFrame.from_records(data, columns=columns[tag])
        for tag, data in rows.items()
    }
    # rows were journalled as they finished: restore the order a live result has
    for name, keys in (("requests", ["request_id"]), ("attempts", ["request_id", "attempt"])):
        if (frame := frames[name]) is not None:
            frames[name] = frame.sort_values(keys, kind="stable", ignore_index=True)
    meta = {**meta, "complete": False}
    return _build(journal, frames["requests"], frames["attempts"], frames["levels"], meta)


# ---------------------------------------------------------------- DatasetWriter


class DatasetWriter:
    """Crash-safe incremental saving of a sweep as it runs.

    Every :meth:`append` writes its rows to a JSON-lines journal (``PATH.journal``) in one
    write and flushes it to the operating system, so a crash, ``kill`` or Ctrl-C loses nothing
    already appended; :meth:`add_level` also fsyncs it, so a power cut loses at most the
    level that was running. :meth:`close` writes the final dataset exactly as
    :meth:`SweepResult.save` does (plus ``meta["complete"] = True``) and removes the journal.
    :func:`read` opens the path either way; :func:`recover` keeps the journal of a sweep that
    never closed its writer. While open, the writer holds a lock on the journal, so no other
    writer (and no :meth:`SweepResult.save`) can replace it.

    Parameters
    ----------
    path : str or os.PathLike
        Where the requests parquet will be (parent folders are created).
    meta : dict, optional
        Run metadata, cleaned as in :class:`SweepResult`.
    overwrite : bool, default False
        Replace a dataset or an unfinished sweep's journal already at ``path``; otherwise
        their presence is an error (see :func:`~llmlat.results._savepath.check_save_path`).
    extra_columns : sequence of str, optional
        Columns every table has after the schema's (a sharded sweep's ``shard`` and ``host``);
        their rows come through :meth:`append_rows`.

    Raises
    ------
    ValueError
        One line naming ``save`` when ``path`` cannot be written or is taken.

    Examples
    --------
    >>> with DatasetWriter("run.parquet", {"run_id": "r1"}) as writer:  # doctest: +SKIP
    ...     writer.append(records, attempts)
    ...     writer.add_level(level_stats)
    """

    _request_values = attrgetter(*REQUEST_COLUMNS)
    _attempt_values = attrgetter(*ATTEMPT_COLUMNS)
    _level_values = attrgetter(*LEVEL_COLUMNS)

    def __init__(
        self,
        path: str | os.PathLike[str],
        meta: Mapping[str, Any] | None = None,
        *,
        overwrite: bool = False,
        extra_columns: Sequence[str] = (),
    ):
        self.meta, self._secrets = _clean_meta(meta)
        self.path = check_save_path(path, overwrite=overwrite)
        self._journal = journal_path(self.path)
        # "a" then truncate once locked: opening with "w" would empty a running sweep's journal
        self._file = self._journal.open("a", encoding="utf-8")
        if not lock_journal(self._file):
            self._file.close()
            raise ValueError(f"save: a running sweep is writing {self._journal}")
        self._file.truncate(0)
        columns = {tag: [*_TABLES[name][1], *extra_columns] for tag, name in _TAGS.items()}
        self._write(json.dumps({"format": FORMAT, "meta": self.meta, "columns": columns}))

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` (or :meth:`abort`) was called."""
        return self._file.closed

    def _write(self, line: str) -> None:
        if self._file.closed:
            raise ValueError(f"{self.path}: the writer is closed")
        text = line + "\n"
        if self._secrets:
            text = _scrub(text, self._secrets)
        self._file.write(text)
        self._file.flush()

    def append(self, records: Iterable[Record], attempts: Iterable[Attempt] = ()) -> None:
        """Append finished requests and their HTTP attempts (one line, written and flushed).

        Parameters
        ----------
        records : iterable of Record
            Finished logical requests.
        attempts : iterable of Attempt, optional
            Their HTTP attempts.
        """
        self.append_rows(map(self._request_values, records), map(self._attempt_values, attempts))

    def append_rows(
        self,
        requests: Iterable[Sequence[Any]] = (),
        attempts: Iterable[Sequence[Any]] = (),
        levels: Iterable[Sequence[Any]] = (),
    ) -> None:
        """Append rows given as values in column order (one line, written and flushed).

        Parameters
        ----------
        requests, attempts, levels : iterable of sequence
            Rows of each table: the schema's columns, then the writer's extra columns. Level
            rows are also fsynced (see :meth:`add_level`).
        """
        batch = {"r": list(requests), "a": list(attempts), "l": list(levels)}
        if batch["r"] or batch["a"] or batch["l"]:
            self._write(_ENCODER.encode({tag: rows for tag, rows in batch.items() if rows}))
        if batch["l"]:
            os.fsync(self._file.fileno())

    def add_level(self, level: LevelStats) -> None:
        """Record how a level ran (its span, stop reason, the client's lag and CPU), then fsync.

        Parameters
        ----------
        level : LevelStats
            The finished level.
        """
        self.append_rows(levels=[self._level_values(level)])

    def close(self, meta_updates: Mapping[str, Any] | None = None) -> None:
        """Write the final dataset and remove the journal (a second call does nothing).

        Parameters
        ----------
        meta_updates : dict, optional
            Entries to add to ``meta`` (e.g. ``{"interrupted": True}``).
        """
        if self._file.closed:
            return
        self._file.close()
        result = _read_journal(self._journal)
        meta = {**result.meta, **(meta_updates or {}), "complete": True}
        SweepResult(*result._tables()[:3], meta).save(self.path)

    def abort(self) -> None:
        """Stop writing and keep the journal, so :func:`read` reports the data incomplete."""
        self._file.close()

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
