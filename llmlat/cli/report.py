"""``llmlat report DATASET``: fit a queueing model to a saved sweep and write an HTML report."""

from __future__ import annotations

import argparse
from typing import Any

from llmlat.cli.options import (
    add_config_options,
    add_plan_limits,
    options_from_args,
    plan_limits,
)

__all__ = ["add_parser"]


def add_parser(subparsers: Any) -> None:
    """Register ``llmlat report DATASET``.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The ``llmlat`` command's subparsers.
    """
    parser = subparsers.add_parser(
        "report",
        help="write an HTML report (summary, fit, plan, figures) of a saved dataset",
        description="Fit a queueing model to a saved sweep and write an HTML report.",
    )
    parser.add_argument("dataset", help="a dataset written by llmlat (sweep --save, .save())")
    parser.add_argument("--out", default="report", help="report folder (default: report)")
    parser.add_argument(
        "--model",
        default="auto",
        help="queueing model to fit: auto, mm1, mmc, mgc, closed or batch (default: auto)",
    )
    parser.add_argument("--p95-s", type=float, metavar="S", help="p95 latency target of the plan")
    add_plan_limits(parser)
    add_config_options(parser, only=("prices",))  # a run swept without them, priced now
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from llmlat._report import build_report
    from llmlat.cost import check_prices
    from llmlat.results import read

    prices = check_prices(options_from_args(args).get("prices"))
    result = read(args.dataset)
    report = build_report(
        result,
        args.out,
        model=args.model,
        p95_s=args.p95_s,
        limits=plan_limits(args),
        prices=prices,
    )
    for note in report.notes:
        print(f"note: {note}")
    if report.next_levels_text():
        print(report.next_levels_text())
    print(f"report: {report.path}")
    return 0 if report.fit is not None else 4  # EXIT_CODES: the page says why there is no fit
