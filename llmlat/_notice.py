"""Informational notices: one line to stderr in a terminal, to stdout in a notebook.

A notebook shows stderr as a red box, which reads as an error; a notice such as "no url given:
measuring the built-in simulator" is not one. :func:`and_list` words a list in a message.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

__all__ = ["and_list", "notice"]


def and_list(values: Iterable[Any], fmt: str = "g") -> str:
    """Join values as "1, 2 and 3" (``fmt`` formats each: ``"s"`` for text).

    Parameters
    ----------
    values : iterable
    fmt : str, default "g"

    Returns
    -------
    str
    """
    text = [f"{v:{fmt}}" for v in values]
    return " and ".join(text) if len(text) < 3 else f"{', '.join(text[:-1])} and {text[-1]}"


def notice(text: str) -> None:
    """Print ``llmlat: <text>`` where a person reads notices.

    Parameters
    ----------
    text : str
        One line.
    """
    in_kernel = type(sys.stderr).__module__.startswith("ipykernel")
    print(f"llmlat: {text}", file=sys.stdout if in_kernel else sys.stderr, flush=True)
