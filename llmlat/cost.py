"""What requests cost, from the tokens the server reported: :class:`Prices` and its uses.

A request's ``cost_usd`` is priced from its usage as the server reported it, never from an
estimate of the prompt or the answer:

- ``prompt_tokens`` counts every input token (llmlat records Anthropic's ``input_tokens``
  plus its cache reads and writes, as OpenAI's ``prompt_tokens`` does), of which
  ``cached_tokens`` were read from the prompt cache and ``cache_creation_tokens`` written to it;
  the rest is priced as plain input.
- A row without ``prompt_tokens`` or ``completion_tokens`` (a 429, an error, a server that does
  not report usage) gets NaN and a ``cost_note`` saying why. A cache count the server did not
  send (``<NA>``) means it reported no cache use: no discount, no surcharge.
- Cached or written tokens without a ``cache_read`` / ``cache_write`` price: NaN, with the note.

Per level (:func:`level_cost`, the ``cost_*`` columns of ``SweepResult.summary(prices=...)``,
or of every summary of a sweep run with the ``prices=`` option, ``--prices`` in the CLI and
``%%llmsweep``):
``cost_per_1k_requests_usd`` is the mean cost of the level's successful requests times 1,000
(failed requests report no usage and are not billed); ``cost_per_hour_usd`` is that mean times
the level's measured throughput (ok completions per second) times 3,600: the spend of an hour
at that load. Either is NaN when a successful request could not be priced, and
``cost_unpriced`` counts those.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["COST_COLUMNS", "Prices", "check_prices", "level_cost", "request_costs"]

#: Per-level columns :func:`level_cost` adds to a summary, with their dtypes.
COST_COLUMNS: dict[str, str] = {
    "cost_usd": "float64",
    "cost_per_1k_requests_usd": "float64",
    "cost_per_hour_usd": "float64",
    "cost_unpriced": "int64",
}

_PER = 1e6  # prices are per million tokens


@dataclass(frozen=True)
class Prices:
    """Token prices in US dollars per million tokens.

    Parameters
    ----------
    input : float
        Uncached input (prompt) tokens.
    output : float
        Output (completion) tokens.
    cache_read : float, optional
        Input tokens read from the prompt cache (Anthropic: 0.1 x input; OpenAI: 0.5 x or
        less). None: a request that read from the cache cannot be priced.
    cache_write : float, optional
        Input tokens written to the cache (Anthropic's 5-minute cache: 1.25 x input; OpenAI
        charges none: 0, or the input price). None: a request that wrote cannot be priced.

    Raises
    ------
    ValueError
        Naming the first price that is not a finite number >= 0.

    Examples
    --------
    >>> Prices(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    Prices(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    """

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value is None and name in ("cache_read", "cache_write"):
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float | np.number)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(
                    f"prices.{name}: {value!r} is not allowed (USD per million tokens, >= 0)"
                )
            object.__setattr__(self, name, float(value))

    @classmethod
    def coerce(cls, value: Prices | Mapping[str, float]) -> Prices:
        """Return ``value`` as :class:`Prices` (a mapping uses the same names).

        Parameters
        ----------
        value : Prices or mapping
            ``{"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}``.

        Returns
        -------
        Prices

        Raises
        ------
        ValueError
            An unknown or missing name, or a bad price; the message names it.
        """
        if isinstance(value, Prices):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(
                f"prices: expected Prices or a mapping of input/output/cache_read/cache_write "
                f"(USD per million tokens), got {type(value).__name__}"
            )
        names = ("input", "output", "cache_read", "cache_write")
        unknown = sorted(set(value) - set(names))
        if unknown:
            raise ValueError(f"prices: unknown price {unknown[0]!r} (one of {', '.join(names)})")
        missing = [n for n in ("input", "output") if n not in value]
        if missing:
            raise ValueError(f"prices.{missing[0]}: required (USD per million tokens)")
        return cls(**{name: _number(price) for name, price in value.items()})

    def to_dict(self) -> dict[str, float]:
        """Return the prices given, by name (the ``prices=`` option's form; no None).

        Returns
        -------
        dict of str to float
        """
        return {name: price for name, price in asdict(self).items() if price is not None}


def check_prices(prices: Any) -> dict[str, float] | None:
    """Validate the ``prices`` option: a :class:`Prices` or a mapping (numbers, or text).

    Parameters
    ----------
    prices : Prices, mapping or None

    Returns
    -------
    dict of str to float or None
        The prices given, by name (:meth:`Prices.to_dict`); None for None.

    Raises
    ------
    ValueError
        One line starting ``prices: `` (the option), naming the bad price.
    """
    if prices is None:
        return None
    try:
        return Prices.coerce(prices).to_dict()
    except ValueError as exc:  # "prices.input: ..." names the option first, as every option
        raise ValueError(str(exc).replace("prices.", "prices: ", 1)) from None


def _number(value: Any) -> Any:
    """Return a price given as text (the command line's ``'input: 3'``) as a number."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value  # Prices names the field in its error
    return value


def _counts(requests: pd.DataFrame, name: str) -> np.ndarray:
    """Return a token column as float (NaN where not reported or absent)."""
    if name not in requests.columns:
        return np.full(len(requests), np.nan)
    return pd.to_numeric(requests[name], errors="coerce").astype("float64").to_numpy()


def request_costs(requests: Any, prices: Prices | Mapping[str, float]) -> pd.DataFrame:
    """Price every request from the tokens its server reported.

    Parameters
    ----------
    requests : SweepResult or pandas.DataFrame
        A result, or a requests table with the token columns of :mod:`llmlat.schema`.
    prices : Prices or mapping
        See :class:`Prices`.

    Returns
    -------
    pandas.DataFrame
        The requests table with ``cost_usd`` (float, NaN when it cannot be priced) and
        ``cost_note`` (string: why not; ``<NA>`` when priced) added.
    """
    prices = Prices.coerce(prices)
    frame = getattr(requests, "requests", requests)
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"requests: expected a SweepResult or a DataFrame, got {type(frame)}")
    prompt, completion = _counts(frame, "prompt_tokens"), _counts(frame, "completion_tokens")
    read = np.nan_to_num(_counts(frame, "cached_tokens"))
    wrote = np.nan_to_num(_counts(frame, "cache_creation_tokens"))
    plain = prompt - read - wrote
    cost = (
        plain * prices.input
        + completion * prices.output
        + read * (prices.cache_read or 0.0)
        + wrote * (prices.cache_write or 0.0)
    ) / _PER
    note = np.full(len(frame), None, dtype=object)
    kinds = (
        frame["error_kind"] if "error_kind" in frame.columns else pd.Series([pd.NA] * len(frame))
    )
    for i in np.flatnonzero(np.isnan(prompt) | np.isnan(completion)):
        kind = kinds.iloc[i]
        note[i] = "no usage reported" + ("" if pd.isna(kind) else f" (failed: {kind})")
    checks = [
        (plain < 0, "cached + written tokens exceed prompt_tokens"),
        ((read > 0) & (prices.cache_read is None), "cache reads but no cache_read price"),
        ((wrote > 0) & (prices.cache_write is None), "cache writes but no cache_write price"),
    ]
    for bad, why in checks:
        for i in np.flatnonzero(bad & pd.isna(note)):
            note[i] = why
    cost[~pd.isna(note)] = np.nan
    return frame.assign(cost_usd=cost.astype("float64"), cost_note=pd.array(note, dtype="string"))


def level_cost(
    frame: pd.DataFrame, throughput_rps: float, prices: Prices | Mapping[str, float]
) -> dict[str, Any]:
    """Return the cost columns of one level (see the module docstring).

    Parameters
    ----------
    frame : pandas.DataFrame
        The level's requests (one phase).
    throughput_rps : float
        Its measured throughput, ok completions per second.
    prices : Prices or mapping

    Returns
    -------
    dict
        The values of :data:`COST_COLUMNS`.
    """
    priced = request_costs(frame, prices)
    ok = priced["ok"].fillna(False).to_numpy(bool) if "ok" in priced else np.ones(len(priced), bool)
    cost = priced["cost_usd"].to_numpy()
    unpriced = int(np.isnan(cost[ok]).sum())
    mean = float(cost[ok].mean()) if ok.any() and not unpriced else math.nan
    return {
        "cost_usd": float(np.nansum(cost)),
        "cost_per_1k_requests_usd": mean * 1000.0,
        "cost_per_hour_usd": mean * throughput_rps * 3600.0,
        "cost_unpriced": unpriced,
    }
