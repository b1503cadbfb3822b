"""``llmlat read``: show a saved dataset, or what an unfinished sweep's journal holds.

Examples::

    llmlat read out.parquet            # the summary; says so when rows come from a journal
    llmlat read out.parquet --recover  # keep a crashed sweep's journal as out.parquet
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``llmlat read``.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The ``llmlat`` command's subparsers.
    """
    p = subparsers.add_parser(
        "read",
        help="show a dataset, or recover a crashed sweep's journal",
        description="Print a dataset's summary. A sweep that did not finish left its rows in "
        "PATH.journal: they are shown, and --recover writes them as the dataset PATH.",
    )
    p.add_argument("path", type=Path, metavar="PATH", help="the dataset (the --save path)")
    p.add_argument(
        "--recover", action="store_true", help="write an unfinished sweep's journal as PATH"
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from llmlat.results import read, recover
    from llmlat.results._savepath import journal_in_use, journal_path

    path: Path = args.path
    journal = journal_path(path)
    running = journal.exists() and journal_in_use(journal)
    if args.recover:
        if running:
            raise ValueError(f"--recover: a running sweep is writing {journal}; wait for it")
        result = recover(path)
        print(f"recovered {len(result.requests)} requests from {journal} into {path}")
        return 0
    result = read(path)
    print(repr(result))  # the headline and the per-level table
    if running:
        print(f"{journal}: a sweep is still writing it; these are its rows so far", file=sys.stderr)
    elif journal.exists():
        print(
            f"{journal}: the rows of a sweep that did not finish ({len(result.requests)} "
            f"requests). Keep them as the dataset with `llmlat read {path} --recover` "
            f"(in Python: llmlat.results.recover({str(path)!r})); a new sweep may replace "
            "them only with --overwrite",
            file=sys.stderr,
        )
    return 0
