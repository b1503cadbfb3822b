"""Sweep results: the tables, their files and the journal that keeps rows while a sweep runs.

:class:`SweepResult` holds the tables; :meth:`SweepResult.save` writes parquet + a JSON sidecar,
:func:`read` opens them, and :class:`DatasetWriter` journals rows crash-safely during a sweep;
:func:`check_save_path` vets a save path before a sweep sends anything and :func:`recover` keeps
the journal of a sweep that crashed.

The tables load pandas (and pyarrow: ~80 MB) on first use, not on import: a sweep that saves
nothing measures without them, and imports them only to build its result.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from llmlat.results._savepath import check_save_path

if TYPE_CHECKING:  # pragma: no cover
    from llmlat.results._dataset import DatasetWriter, SweepResult, read, recover

__all__ = ["DatasetWriter", "SweepResult", "check_save_path", "read", "recover"]

_LAZY = ("DatasetWriter", "SweepResult", "read", "recover")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module("llmlat.results._dataset"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
