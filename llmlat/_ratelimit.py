"""A provider's rate-limit headers, read into tidy numbers on every attempt.

OpenAI (and the many servers that copy it) send ``x-ratelimit-limit-requests``,
``x-ratelimit-remaining-requests`` and ``x-ratelimit-reset-requests`` (and ``-tokens``), the
reset as a duration (``"6m0s"``, ``"1s"``, ``"20ms"``); Anthropic sends
``anthropic-ratelimit-requests-limit``, ``-remaining`` and ``-reset`` (and ``tokens-``), the reset
as an RFC 3339 time, and also its separate ``input-tokens`` and ``output-tokens`` limits (in
``ratelimit_*_input_tokens`` and ``ratelimit_*_output_tokens``). Both land in the same attempt
columns (``ratelimit_*`` of
:data:`llmlat.schema.ATTEMPT_COLUMNS`): limits and
remaining budgets as counts, resets as seconds from the moment the answer came.

Every value passes :func:`llmlat._redact.redact` first, like any text a server echoes, and only
a number that parses is kept: a value that is not one (or held a secret) is ``<NA>``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from llmlat._redact import redact

__all__ = ["HEADERS", "parse_count", "parse_reset_s", "read_limits"]

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_count(value: str) -> int | None:
    """Read a limit or remaining budget: a non-negative integer (``"1000"``), else None.

    Parameters
    ----------
    value : str

    Returns
    -------
    int or None
    """
    try:
        number = float(value)
    except ValueError:
        return None
    return int(number) if math.isfinite(number) and number >= 0 else None


def parse_reset_s(value: str, now: float | None = None) -> float:
    """Seconds until a limit resets, from a duration or an RFC 3339 time; NaN if neither.

    Parameters
    ----------
    value : str
        ``"6m0s"``, ``"1.5s"``, ``"20ms"``, ``"1h2m"`` (OpenAI), a plain number of seconds, or
        ``"2026-11-30T20:01:02.5Z"`` (Anthropic).
    now : float, optional
        The wall-clock time (``time.time()``) the answer came; now when None.

    Returns
    -------
    float
        Seconds >= 0 (a time already past is 0).
    """
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if parts and "".join(a + b for a, b in parts) == text:
            seconds = sum(float(a) * _UNIT_S[b] for a, b in parts)
        else:
            try:
                when = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
            except ValueError:
                return math.nan
            if when.tzinfo is None:  # RFC 3339 always has an offset: not one
                return math.nan
            seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else math.nan


# header -> (column, parser); OpenAI's and Anthropic's names land in the same columns
HEADERS: dict[str, tuple[str, Any]] = {}
for _kind in ("requests", "tokens"):
    for _which, _parse in (("limit", parse_count), ("remaining", parse_count)):
        HEADERS[f"x-ratelimit-{_which}-{_kind}"] = (f"ratelimit_{_which}_{_kind}", _parse)
        HEADERS[f"anthropic-ratelimit-{_kind}-{_which}"] = (f"ratelimit_{_which}_{_kind}", _parse)
    HEADERS[f"x-ratelimit-reset-{_kind}"] = (f"ratelimit_reset_{_kind}_s", parse_reset_s)
    HEADERS[f"anthropic-ratelimit-{_kind}-reset"] = (f"ratelimit_reset_{_kind}_s", parse_reset_s)
for _kind in ("input_tokens", "output_tokens"):  # Anthropic's separate input and output limits
    _name = _kind.replace("_", "-")
    HEADERS[f"anthropic-ratelimit-{_name}-limit"] = (f"ratelimit_limit_{_kind}", parse_count)
    HEADERS[f"anthropic-ratelimit-{_name}-remaining"] = (
        f"ratelimit_remaining_{_kind}",
        parse_count,
    )
    HEADERS[f"anthropic-ratelimit-{_name}-reset"] = (f"ratelimit_reset_{_kind}_s", parse_reset_s)


def read_limits(headers: Mapping[str, str], into: Any, now: float | None = None) -> None:
    """Set the ``ratelimit_*`` attributes of ``into`` from the headers that are present.

    Parameters
    ----------
    headers : mapping of str to str
        Response headers with lower-case names.
    into : object
        An :class:`~llmlat.schema.Attempt` (any object with the attributes).
    now : float, optional
        The wall-clock time (``time.time()``) the headers came, which an RFC 3339 reset is
        counted from; now when None. Read at the answer's end instead, a reset came out short
        by the whole answer's duration.
    """
    found = [(HEADERS[name], value) for name, value in headers.items() if name in HEADERS]
    if not found:
        return
    # one pass of the redactor for all of them (its cost is mostly per call); a header value
    # holds no line break, so the lines come back one per value
    texts = redact("\n".join(value for _, value in found)).split("\n")
    for ((column, parse), _), text in zip(found, texts, strict=True):
        setattr(into, column, parse_reset_s(text, now) if parse is parse_reset_s else parse(text))
