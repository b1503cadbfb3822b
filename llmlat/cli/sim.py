"""``llmlat sim``: run the simulated provider from the shell until Ctrl-C or SIGTERM.

The options are generated from the :class:`~llmlat.sim.config.SimConfig` fields
(``--slots 8``, ``--queue-limit none``, ...), so the command, the Jupyter magic and the Python
API share one list; :func:`add_config_arguments` and :func:`config_from_args` let other commands
reuse it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

from llmlat.sim.config import PRESETS, SimConfig, config_from_options, option_fields

__all__ = ["add_config_arguments", "add_parser", "config_from_args", "main"]


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--preset`` and one ``--<option>`` per :class:`SimConfig` field to a parser.

    Every added option defaults to None ("not given"), so the preset's value stays unless the
    user sets it; :func:`config_from_args` builds the config.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The parser (or argument group) to extend.
    """
    group = parser.add_argument_group("simulator options")
    group.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=None,
        help="start from a named replica (default: the SimConfig defaults)",
    )
    for opt in option_fields():
        meta = opt.type.__name__.upper() + ("|none" if opt.nullable else "")
        group.add_argument(
            "--" + opt.name.replace("_", "-"),
            dest=f"sim_{opt.name}",
            metavar=None if opt.choices else meta,
            choices=opt.choices,
            default=None,
            help=f"{opt.help} (default: {opt.default})",
        )


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """Build the config from arguments added by :func:`add_config_arguments`.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed arguments.

    Returns
    -------
    SimConfig

    Raises
    ------
    ValueError
        An invalid value; the message names the option.
    """
    values: dict[str, Any] = {name: getattr(args, f"sim_{name}") for name, *_ in option_fields()}
    return config_from_options(args.preset, **values)


def add_parser(subparsers: Any) -> None:
    """Register the ``sim`` subcommand.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The ``llmlat`` command's subparsers.
    """
    parser = subparsers.add_parser(
        "sim",
        help="run the simulated LLM provider",
        description="Serve the simulated provider on HTTP until Ctrl-C or SIGTERM.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default: 0, a free one)")
    add_config_arguments(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Run the simulator until interrupted.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed ``llmlat sim`` arguments.

    Returns
    -------
    int
        0 after a clean stop.
    """
    from llmlat.sim.simulator import Simulator, new_event_loop

    sim = Simulator(config_from_args(args), host=args.host, port=args.port)
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        try:
            runner.run(_serve(sim))
        except OSError as exc:  # e.g. the port is taken: a usage error, not a crash
            raise ValueError(
                f"port: cannot listen on {args.host}:{args.port}: {exc.strerror}"
            ) from None
    return 0


async def _serve(sim: Any) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with sim:
        cfg = sim.config
        print(
            f"llmlat simulator ({cfg.mode}, slots={cfg.slots}) listening on {sim.url}"
            " - Ctrl-C to stop",
            flush=True,
        )
        await stop.wait()
    print("llmlat simulator stopped", file=sys.stderr, flush=True)
