"""Informational notices: one line to stderr in a terminal, to stdout in a notebook.

A notebook shows stderr as a red box, which reads as an error; a notice such as "no url given:
measuring the built-in simulator" is not one.
"""

from __future__ import annotations

import sys

__all__ = ["notice"]


def notice(text: str) -> None:
    """Print ``llmlat: <text>`` where a person reads notices.

    Parameters
    ----------
    text : str
        One line.
    """
    in_kernel = type(sys.stderr).__module__.startswith("ipykernel")
    print(f"llmlat: {text}", file=sys.stdout if in_kernel else sys.stderr, flush=True)
