"""Sweep results: the tables, their files and the journal that keeps rows while a sweep runs.

:class:`SweepResult` holds the tables; :meth:`SweepResult.save` writes parquet + a JSON sidecar,
:func:`read` opens them, and :class:`DatasetWriter` journals rows crash-safely during a sweep;
:func:`check_save_path` vets a save path before a sweep sends anything and :func:`recover` keeps
the journal of a sweep that crashed.
"""

from llmlat.results._dataset import DatasetWriter, SweepResult, read, recover
from llmlat.results._savepath import check_save_path

__all__ = ["DatasetWriter", "SweepResult", "check_save_path", "read", "recover"]
