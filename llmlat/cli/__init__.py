"""The ``llmlat`` command: ``llmlat sim``, ``llmlat sweep``, ``llmlat demo``, ``llmlat report``.

Each subcommand lives in a module of this package with an ``add_parser(subparsers)`` function
that sets ``func`` (taking the parsed args, returning an exit code). A bad option or input is
one line, ``llmlat: --flag: what is wrong (what is allowed)``, and exit code 2
(:data:`~llmlat.cli.options.EXIT_CODES`).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence

from llmlat.cli.options import EXIT_CODES, OneLineParser, flag_message

__all__ = ["main"]

# modules that each contribute one subcommand through add_parser(subparsers)
_COMMANDS = (
    "llmlat.cli.sweep",
    "llmlat.cli.sim",
    "llmlat.cli.read",
    "llmlat.cli.report",
    "llmlat.cli.demo",
)


def build_parser() -> OneLineParser:
    """Return the argument parser with every subcommand registered.

    Returns
    -------
    OneLineParser
    """
    from llmlat._version import __version__

    codes = "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES.items())
    parser = OneLineParser(
        prog="llmlat",
        description="Measure how concurrency changes LLM API latency.",
        epilog=f"exit codes:\n{codes}\n\n`llmlat COMMAND --help` lists a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"llmlat {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMANDS:
        importlib.import_module(name).add_parser(sub)
    for command in sub.choices.values():  # main() reports late errors in its flags' spelling
        command.set_defaults(command_parser=command)
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
        The process exit code (:data:`~llmlat.cli.options.EXIT_CODES`): 0 on success, 2 on
        bad usage, 3 when a sweep had no successful request, 130 when interrupted, 143 when a
        sweep was stopped by SIGTERM.
    """
    from llmlat._loop import stop_signals  # light: the engine loads only for a sweep

    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    command: OneLineParser = args.command_parser
    if extras:
        command.unknown(extras)
    # the command owns its process: SIGTERM (`kill`, a CI timeout) stops any sweep it runs as
    # Ctrl-C does, and a stopped sweep's command exits as the shell counts a signal (130, 143)
    with stop_signals(signal.SIGINT, signal.SIGTERM) as stopped:
        code = _run(args, command)
    return 128 + stopped[0] if stopped else code


def _run(args: argparse.Namespace, command: OneLineParser) -> int:
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("llmlat: interrupted", file=sys.stderr)
        return 130
    except (ValueError, TypeError, FileNotFoundError) as exc:  # bad input found after parsing
        # an error naming an option (`slots: ...`) shows its flag (`--slots: ...`)
        flags = {
            flag[2:].replace("-", "_"): flag
            for action in command._actions
            for flag in action.option_strings
            if flag.startswith("--")
        }
        print(f"llmlat: {flag_message(exc, flags)}", file=sys.stderr)
        return 2
