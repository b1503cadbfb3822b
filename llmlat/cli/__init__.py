"""The ``llmlat`` command: ``llmlat sim``, ``llmlat sweep``, ``llmlat demo``, ...

Each subcommand lives next to the code it drives and registers itself here through an
``add_parser(subparsers)`` function that sets ``func`` (taking the parsed args, returning an
exit code). Bad options exit with code 2 and a one-line message, as argparse does.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]

# modules that each contribute one or more subcommands through add_parser(subparsers)
_COMMANDS = (
    "llmlat.cli.sweep",
    "llmlat.cli.sim",
    "llmlat.cli.read",
    "llmlat.report",
    "llmlat.demo",
)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser with every subcommand registered."""
    from llmlat._version import __version__

    parser = argparse.ArgumentParser(
        prog="llmlat",
        description="Measure how concurrency changes LLM API latency.",
    )
    parser.add_argument("--version", action="version", version=f"llmlat {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMANDS:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``llmlat`` command line.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name; ``sys.argv[1:]`` when None.

    Returns
    -------
    int
        The process exit code: 0 on success, 2 on bad usage, 130 when interrupted.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError) as exc:  # bad input found after parsing: exit 2
        print(f"llmlat {args.command}: error: {exc}", file=sys.stderr)
        return 2
