"""``llmlat demo``: sweep the built-in simulator, fit, plan and write a report (no key, no network).

``--simulator``, ``--seed`` and ``--progress`` are the sweep's options
(:class:`~llmlat.config.SweepConfig`), spelled and explained as ``llmlat sweep`` does.
"""

from __future__ import annotations

import argparse
from typing import Any

from llmlat.cli.options import add_config_options

__all__ = ["add_parser"]

_DEMO_PRESET = "article"


def add_parser(subparsers: Any) -> None:
    """Register ``llmlat demo``.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The ``llmlat`` command's subparsers.
    """
    parser = subparsers.add_parser(
        "demo",
        help="sweep the built-in simulator, fit, plan and write a report",
        description="The whole job end to end on the built-in simulator: sweep concurrency "
        "1..100, fit c and mu, plan the load that keeps p95 under a target, write an HTML "
        f"report. The simulator is the {_DEMO_PRESET!r} preset unless --simulator says otherwise.",
    )
    parser.add_argument("--out", default="report", help="report folder (default: report)")
    parser.add_argument(
        "--p95-s",
        type=float,
        metavar="S",
        help="p95 latency target of the plan (default: twice the lightest level's p95)",
    )
    parser.add_argument("--quick", action="store_true", help="a shorter sweep (a first look)")
    add_config_options(parser, only=("simulator", "seed", "progress"))
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from llmlat._demo import run_demo
    from llmlat.config import SweepConfig

    preset = getattr(args, "simulator", _DEMO_PRESET)
    SweepConfig(simulator=preset, concurrency=1)  # --simulator checked as llmlat sweep does
    run_demo(
        args.out,
        preset=preset,
        p95_s=args.p95_s,
        seed=getattr(args, "seed", 0),
        quick=args.quick,
        progress=getattr(args, "progress", True),
    )
    return 0
