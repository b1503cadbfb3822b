"""Traces to replay (``trace=``): reading the file, the public formats, prompts of a given size.

A trace is a table with one row per request. Three layouts are recognised by their columns
(names matched case-insensitively):

- **Azure LLM inference traces** (Azure/AzurePublicDataset, 2023 and 2024): ``TIMESTAMP``
  (date-time text), ``ContextTokens``, ``GeneratedTokens``.
- **Mooncake** (kvcache-ai/Mooncake, JSON lines): ``timestamp`` (milliseconds since the first
  request), ``input_length``, ``output_length``, ``hash_ids`` (one id per block of
  :data:`MOONCAKE_BLOCK_TOKENS` prompt tokens; requests whose ids agree share that prefix).
- **llmlat's own**: a time column, one of :data:`TIME_COLUMNS` (seconds, or date-times), with
  optional token counts in :data:`PROMPT_COLUMNS` / :data:`COMPLETION_COLUMNS`.

:func:`trace_columns` turns any of them into send times in seconds and token counts;
:func:`llmlat._loadshapes.trace_schedule` makes the schedule, :func:`prompt_text` the prompts
(about one token per word, the simulator's count and a BPE tokenizer's alike), with the
shared prefixes of ``hash_ids`` kept.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "COMPLETION_COLUMNS",
    "FORMATS",
    "MOONCAKE_BLOCK_TOKENS",
    "PROMPT_COLUMNS",
    "TIME_COLUMNS",
    "TraceColumns",
    "TraceFormat",
    "prompt_text",
    "read_trace",
    "trace_columns",
]

#: llmlat's own layout: column aliases (lower-cased), first match wins.
TIME_COLUMNS = ("offset_s", "t_s", "t", "time_s", "time", "timestamp", "arrival_time")
PROMPT_COLUMNS = (
    "prompt_tokens",
    "input_tokens",
    "context_tokens",
    "contexttokens",
    "input_length",
)
COMPLETION_COLUMNS = (
    "completion_tokens",
    "output_tokens",
    "generated_tokens",
    "generatedtokens",
    "output_length",
)
#: Prompt tokens per Mooncake hash id.
MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class TraceFormat:
    """A trace layout: the columns that identify it and what its times count.

    Attributes
    ----------
    name : str
    time, prompt, completion : tuple of str
        Lower-cased column names (aliases, first match wins).
    time_unit_s : float
        Seconds per unit of a numeric time (date-times are read as such).
    blocks : str or None
        The column of per-request prefix block ids.
    """

    name: str
    time: tuple[str, ...]
    prompt: tuple[str, ...]
    completion: tuple[str, ...]
    time_unit_s: float = 1.0
    blocks: str | None = None

    def matches(self, columns: set[str]) -> bool:
        """Tell whether a table with these (lower-cased) columns is in this layout."""
        return all(any(a in columns for a in group) for group in self._identity())

    def _identity(self) -> list[tuple[str, ...]]:
        if self.name == "llmlat":
            return [self.time]
        return [self.time, self.prompt, self.completion]


#: The layouts, most specific first.
FORMATS = (
    TraceFormat(
        "mooncake",
        ("timestamp",),
        ("input_length",),
        ("output_length",),
        time_unit_s=1e-3,
        blocks="hash_ids",
    ),
    TraceFormat("azure", ("timestamp",), ("contexttokens",), ("generatedtokens",)),
    TraceFormat("llmlat", TIME_COLUMNS, PROMPT_COLUMNS, COMPLETION_COLUMNS),
)


@dataclass(frozen=True, eq=False)
class TraceColumns:
    """A trace's requests in a layout-free form, in the table's order.

    Attributes
    ----------
    format : str
        The layout's name.
    seconds : numpy.ndarray
        Send times in seconds (any origin).
    prompt_tokens, completion_tokens : numpy.ndarray or None
        Token counts.
    blocks : list or None
        Per request, its prefix block ids (Mooncake ``hash_ids``).
    """

    format: str
    seconds: np.ndarray
    prompt_tokens: np.ndarray | None = None
    completion_tokens: np.ndarray | None = None
    blocks: list[tuple[int, ...]] | None = None


def read_trace(path: str | os.PathLike) -> pd.DataFrame:
    """Read a trace file: CSV, parquet, or JSON lines (``.jsonl``; ``.json`` one object a line).

    Parameters
    ----------
    path : str or path

    Returns
    -------
    pandas.DataFrame

    Raises
    ------
    ValueError
        ``trace: cannot read ...`` when the file is missing or not a table.
    """
    import pandas as pd

    path = Path(path)
    try:
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        if path.suffix in (".jsonl", ".json"):
            return pd.read_json(path, lines=True)
        return pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"trace: cannot read {path} ({exc})") from None


def trace_columns(frame: pd.DataFrame) -> TraceColumns:
    """Find the layout of a trace table and read its send times, token counts and blocks.

    Parameters
    ----------
    frame : pandas.DataFrame
        One row per request (see the module docstring for the layouts).

    Returns
    -------
    TraceColumns

    Raises
    ------
    ValueError
        ``trace: ...`` without a time column, or with times or counts that cannot be read.
    """
    by_name = {str(c).lower(): c for c in frame.columns}
    fmt = next((f for f in FORMATS if f.matches(set(by_name))), None)
    if fmt is None:
        raise ValueError(f"trace: needs a time column, one of {', '.join(TIME_COLUMNS)}")
    times = frame[_first(by_name, fmt.time)]
    blocks = None
    if fmt.blocks is not None and fmt.blocks in by_name:
        blocks = [_block_ids(v) for v in frame[by_name[fmt.blocks]]]
    return TraceColumns(
        fmt.name,
        _seconds(times, fmt.time_unit_s),
        _token_column(frame, by_name, fmt.prompt),
        _token_column(frame, by_name, fmt.completion),
        blocks,
    )


def _first(by_name: dict[str, Any], aliases: tuple[str, ...]) -> Any:
    return next((by_name[a] for a in aliases if a in by_name), None)


def _seconds(times: pd.Series, unit_s: float) -> np.ndarray:
    import pandas as pd

    if len(times) == 0:
        raise ValueError("trace: is empty")
    if not pd.api.types.is_datetime64_any_dtype(times) and not pd.api.types.is_numeric_dtype(times):
        with contextlib.suppress(TypeError, ValueError):  # date-time text (Azure's TIMESTAMP)
            times = pd.to_datetime(times, format="ISO8601")
    if pd.api.types.is_datetime64_any_dtype(times):
        return (times - times.min()).dt.total_seconds().to_numpy(dtype=np.float64)
    try:
        seconds = pd.to_numeric(times).to_numpy(dtype=np.float64) * unit_s
    except (TypeError, ValueError):
        raise ValueError("trace: send times must be numbers (seconds) or datetimes") from None
    if not np.all(np.isfinite(seconds)):
        raise ValueError("trace: send times must be finite, with none missing")
    return seconds


def _token_column(
    frame: pd.DataFrame, by_name: dict[str, Any], aliases: tuple[str, ...]
) -> np.ndarray | None:
    import pandas as pd

    col = _first(by_name, aliases)
    if col is None:
        return None
    values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=np.float64)
    if np.any(~np.isfinite(values) | (values < 0)):
        raise ValueError(f"trace: column {col!r} must hold non-negative token counts")
    return values.astype(np.int64)


def _block_ids(value: Any) -> tuple[int, ...]:
    if value is None or (isinstance(value, float) and value != value):
        return ()
    try:
        return tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError("trace: hash_ids must be lists of integers") from None


# Common English words of three letters: with the space after it each is 4 characters (one
# token by the simulator's count, characters / 4) and one token for a BPE tokenizer.
_WORD_TEXT = (
    "the and for are but not you all any can had her was one our out day get has him his "
    "how man new now old see two way who boy did its let put say she too use air ask big "
    "buy car cut dog eat end eye far few fun god got gun hot job key kid law lay leg lie "
    "lot low map may mom net oil own pay per red run sea set sit six sky son sun tax ten "
    "top try war win yes yet"
)
_WORDS = np.array(_WORD_TEXT.split())


def prompt_text(tokens: int, blocks: Sequence[int] = (), key: int = 0, seed: int = 0) -> str:
    """Return a prompt of about ``tokens`` tokens (one word each).

    Parameters
    ----------
    tokens : int
        Prompt length in tokens (at least 1 word).
    blocks : sequence of int
        Prefix block ids (Mooncake ``hash_ids``): block ``h`` is always the same
        :data:`MOONCAKE_BLOCK_TOKENS` words, so prompts whose ids agree share that prefix.
    key : int
        Identifies the request: the words past the blocks are its own, so two prompts share
        no prefix by accident (a prefix cache would count it).
    seed : int
        Seed of the words.

    Returns
    -------
    str
    """
    tokens = max(1, int(tokens))
    words: list[str] = []
    for block in blocks:
        if len(words) >= tokens:
            break
        words.extend(_block(seed, int(block)))
    rest = tokens - len(words)
    if rest > 0:
        rng = np.random.default_rng((seed, 0, key))
        words.extend(_WORDS[rng.integers(len(_WORDS), size=rest)].tolist())
    return " ".join(words[:tokens])


@functools.lru_cache(maxsize=4096)
def _block(seed: int, block: int) -> tuple[str, ...]:
    rng = np.random.default_rng((seed, 1, block))
    return tuple(_WORDS[rng.integers(len(_WORDS), size=MOONCAKE_BLOCK_TOKENS)].tolist())
