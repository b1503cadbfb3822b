"""The IPython extension: ``%load_ext llmlat`` registers ``%%llmsweep`` and ``%llmsim``.

``%%llmsweep`` takes the options of the ``llmlat sweep`` command (the parser is built by
:mod:`llmlat.cli.sweep`, so the two never drift apart) plus a few of its own, and the cell body
as the payload. ``%llmsim`` takes the simulator's own option list (:mod:`llmlat.cli.sim`).
Defaults come from ``%config LLMSweep.<option> = ...``. Everything heavy is imported when a magic
runs, not when the extension loads.
"""

from __future__ import annotations

import argparse
import json
import keyword
import os
import shlex
import socket
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import MagicArgumentParser
from traitlets import Bool, Enum, Float, Int, Unicode
from traitlets.config import Configurable

from llmlat.redact import redact

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from IPython.core.interactiveshell import InteractiveShell

    from llmlat.results import SweepResult
    from llmlat.sim import Simulator

__all__ = ["LLMMagics", "LLMSweep", "load_ipython_extension", "unload_ipython_extension"]

_API_NAMES = ("openai-chat", "openai-completions", "anthropic-messages")
# magic-only short forms of `llmlat sweep` options
_SHORT = {"-c": "--concurrency", "-r": "--rate", "-n": "--requests"}
_CONNECT_TIMEOUT_S = 3.0


class LLMSweep(Configurable):
    """Defaults of ``%%llmsweep``, set with ``%config LLMSweep.<option> = value``.

    An option given on the magic's line wins over these; an unset one (None) leaves the
    ``llmlat sweep`` default.
    """

    url = Unicode(None, allow_none=True, help="Base URL of the endpoint to measure.").tag(
        config=True
    )
    api = Enum(_API_NAMES, None, allow_none=True, help="API flavour.").tag(config=True)
    model = Unicode(None, allow_none=True, help="Model name sent in each request.").tag(config=True)
    api_key_env = Unicode(
        None, allow_none=True, help="Name of the environment variable holding the API key."
    ).tag(config=True)
    timeout_s = Float(None, allow_none=True, help="Timeout per attempt, seconds.").tag(config=True)
    stream = Bool(None, allow_none=True, help="Ask for streamed answers (TTFT, ITL).").tag(
        config=True
    )
    max_tokens = Int(None, allow_none=True, help="max_tokens sent in each request.").tag(
        config=True
    )
    retries = Int(None, allow_none=True, help="Retries for 429, 5xx, connection errors.").tag(
        config=True
    )
    backoff_base_s = Float(None, allow_none=True, help="Scale of the retry backoff.").tag(
        config=True
    )
    backoff_max_s = Float(None, allow_none=True, help="Largest backoff before jitter.").tag(
        config=True
    )
    max_retry_wait_s = Float(None, allow_none=True, help="Longest wait before a retry.").tag(
        config=True
    )
    seed = Int(None, allow_none=True, help="Seed of every random choice.").tag(config=True)
    progress = Bool(None, allow_none=True, help="Show a progress bar.").tag(config=True)


# LLMSweep trait -> (dest of the `llmlat sweep` option, whether the flag is the negation)
_TRAIT_DEST = {
    "url": ("url", False),
    "api": ("api", False),
    "model": ("model", False),
    "api_key_env": ("api_key_env", False),
    "timeout_s": ("timeout", False),
    "stream": ("no_stream", True),
    "max_tokens": ("max_tokens", False),
    "retries": ("retries", False),
    "backoff_base_s": ("backoff_base", False),
    "backoff_max_s": ("backoff_max", False),
    "max_retry_wait_s": ("max_retry_wait", False),
    "seed": ("seed", False),
    "progress": ("no_progress", True),
}


def _sweep_parser() -> MagicArgumentParser:
    """Return the ``llmlat sweep`` parser, raising UsageError, with the magic's own options."""
    from llmlat.cli import sweep as sweep_cli

    subparsers = MagicArgumentParser(prog="%%llmsweep").add_subparsers()
    sweep_cli.add_parser(subparsers)  # subparsers are of the root's class: errors -> UsageError
    parser = subparsers.choices["sweep"]
    parser.prog = "%%llmsweep"
    parser.usage = "%%llmsweep [options] (-c N,N,... | -r R,R,... | --trace FILE)"
    own = parser.add_argument_group("notebook (%%llmsweep only)")
    own.add_argument("-o", "--output", metavar="NAME", help="store the SweepResult as NAME")
    own.add_argument(
        "--stream", dest="no_stream", action="store_false", default=argparse.SUPPRESS,
        help="ask for streamed answers (the default; undoes %%config LLMSweep.stream = False)",
    )  # fmt: skip
    own.add_argument("-h", "--help", action="store_true", help="show this help")
    return parser


def _sim_parser() -> MagicArgumentParser:
    from llmlat.cli.sim import add_config_arguments

    parser = MagicArgumentParser(
        prog="llmsim",
        description="Start, stop or show the built-in simulated provider of this notebook.",
    )
    parser.add_argument("action", nargs="?", default="status", choices=("start", "stop", "status"))
    parser.add_argument("--port", type=int, default=0, help="port (default: 0, a free one)")
    parser.add_argument("-h", "--help", action="store_true", help="show this help")
    add_config_arguments(parser)
    return parser


def _fit_parser() -> MagicArgumentParser:
    parser = MagicArgumentParser(
        prog="%llmfit",
        description="Fit a queueing model to a sweep (a SweepResult or a DataFrame variable).",
    )
    parser.add_argument("name", help="variable holding the sweep, e.g. res from %%llmsweep -o res")
    parser.add_argument("--model", default="auto", help="auto, mm1, mmc, mgc, closed or batch")
    parser.add_argument("--metric", default="latency", choices=("latency", "ttft"))
    parser.add_argument("--stat", default="mean", choices=("mean", "p50", "p95", "p99"))
    parser.add_argument(
        "--compare", action="store_true", help="show every model ranked by AIC instead"
    )
    parser.add_argument("-o", "--output", metavar="NAME", help="store the FitResult as NAME")
    parser.add_argument("-h", "--help", action="store_true", help="show this help")
    return parser


def _split(line: str) -> list[str]:
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"cannot split the options: {exc}") from None
    out = []
    for arg in argv:
        short = arg[:2]
        if short in _SHORT:
            out.extend([_SHORT[short], arg[2:]] if len(arg) > 2 else [_SHORT[short]])
        else:
            out.append(arg)
    return out


def _trailing_semicolon(text: str) -> tuple[str, bool]:
    stripped = text.rstrip()
    if stripped.endswith(";"):
        return stripped[:-1], True
    return text, False


def _read_body(cell: str) -> Any:
    """Return the payload in the cell body: None, a JSON object or list, or a prompt."""
    text = cell.strip()
    if not text:
        return None
    if text[0] not in "{[":
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"cell body: not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})"
        ) from None


def _check_reachable(url: str) -> None:
    """Raise UsageError when nothing accepts connections at ``url`` (a quick TCP connect)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise UsageError(f"--url: {exc}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise UsageError(f"--url: expected http(s)://host[:port], got scheme {parts.scheme!r}")
    try:
        socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(f"--url: cannot reach {parts.scheme}://{host}:{port} ({reason})") from None


def _redact(text: str, api_key_env: str | None) -> str:
    """Remove the API key's value from a message, should any layer ever have echoed it."""
    return redact(text, [os.environ.get(api_key_env) if api_key_env else None])


@magics_class
class LLMMagics(Magics):
    """The llmlat magics; one instance per shell, holding the ``%llmsim`` simulator.

    Parameters
    ----------
    shell : InteractiveShell
        The shell the magics belong to.
    defaults : LLMSweep
        The ``%config``-able defaults of ``%%llmsweep``.
    """

    def __init__(self, shell: InteractiveShell, defaults: LLMSweep) -> None:
        super().__init__(shell)
        self.defaults = defaults
        self.simulator: Simulator | None = None

    @line_cell_magic
    def llmsweep(self, line: str, cell: str | None = None) -> pd.DataFrame | None:
        """Measure latency at several load levels; the cell body is what to send.

        ::

            %%llmsweep -c 1,10,100 -n 50 -o res --save run.parquet
            {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32}

            %llmsweep -c 1,10 -n 20 --prompt "Hi" -o res

        The body is a JSON request body, a JSON list of them (cycled), or plain text taken as
        the user's prompt. As a line magic it sends ``--prompt`` / ``--payload``, or the default
        prompt.
        Options are those of ``llmlat sweep`` (``%llmsweep --help`` lists them) plus
        ``-c``/``-r``/``-n`` for ``--concurrency``/``--rate``/``--requests``, ``-o NAME`` to
        store the SweepResult, and ``--stream``. ``$var`` and ``{expr}`` expand from the
        namespace. Without ``--url`` (or ``%config LLMSweep.url``) it measures the simulator of
        ``%llmsim start``, else one started for the run. Returns the per-level summary; a
        trailing ``;`` on the line or the body silences it. Interrupting the kernel stops the
        sweep: the partial result is stored and saved.
        """
        line, quiet_line = _trailing_semicolon(line)
        cell, quiet_cell = _trailing_semicolon(cell or "")
        parser = _sweep_parser()
        args = self._parse(parser, line, argparse.Namespace(**self._configured()))
        if args is None:
            return None
        if args.output is not None and (
            not args.output.isidentifier() or keyword.iskeyword(args.output)
        ):
            raise UsageError(f"-o: {args.output!r} is not a valid variable name")
        payload = _read_body(cell)
        if payload is not None and (args.prompt is not None or args.payload is not None):
            raise UsageError("give the payload in the cell body or with --prompt/--payload")
        result = self._sweep(payload, args)
        if args.output is not None:
            self.shell.user_ns[args.output] = result
        from llmlat.cli.sweep import warn_client_bound

        summary = result.summary()
        warn_client_bound(summary)
        return None if quiet_line or quiet_cell else summary

    @line_magic
    def llmsim(self, line: str) -> None:
        """Start, stop or show the built-in simulated provider: ``%llmsim [start|stop|status]``.

        ::

            %llmsim start --preset article --seed 1
            %llmsim status
            %llmsim stop

        ``start`` takes the options of ``llmlat sim`` (``%llmsim --help`` lists them) and
        replaces a simulator already running. While one runs, ``%%llmsweep`` without ``--url``
        measures it.
        """
        args = self._parse(_sim_parser(), line, argparse.Namespace())
        if args is None:
            return
        if args.action != "start":
            given = [k for k, v in vars(args).items() if k.startswith("sim_") and v is not None]
            if given or args.preset is not None or args.port:
                raise UsageError(f"%llmsim {args.action}: takes no options")
        if args.action == "start":
            self._start_simulator(args)
        elif args.action == "stop":
            print("llmlat simulator stopped" if self.stop_simulator() else "no simulator running")
        elif self.simulator is None:
            print("no simulator running; start one with %llmsim start [--preset article ...]")
        else:
            sim = self.simulator
            served = len(sim.truth())
            print(f"{sim!r}: {served} requests received")
            print(f"config: {sim.config}")

    @line_magic
    def llmfit(self, line: str) -> Any:
        """Fit a queueing model to a measured sweep: ``%llmfit res [--model auto] [-o fit]``.

        ::

            %llmfit res                      # the best model by AIC, its summary shown
            %llmfit res --model mmc -o fit   # c and mu of an M/M/c, stored as fit
            %llmfit res --compare            # every model side by side

        Returns the :class:`~llmlat.fitting.FitResult` (its summary shows under the cell), or
        with ``--compare`` the table of models. Data that cannot identify a model is a one-line
        error saying what to measure next.
        """
        from llmlat.fitting import compare, fit

        line, quiet = _trailing_semicolon(line)
        args = self._parse(_fit_parser(), line, argparse.Namespace())
        if args is None:
            return None
        if args.name not in self.shell.user_ns:
            raise UsageError(f"%llmfit: no variable named {args.name!r}")
        data = self.shell.user_ns[args.name]
        try:
            if args.compare:
                out = compare(data, metric=args.metric, stat=args.stat)
            else:
                out = fit(data, model=args.model, metric=args.metric, stat=args.stat)
        except ValueError as exc:
            raise UsageError(f"%llmfit: {exc}") from None
        if args.output is not None:
            self.shell.user_ns[args.output] = out
        return None if quiet else out

    def stop_simulator(self) -> bool:
        """Stop the ``%llmsim`` simulator.

        Returns
        -------
        bool
            Whether one was running.
        """
        sim, self.simulator = self.simulator, None
        if sim is None:
            return False
        sim.stop()
        return True

    # ------------------------------------------------------------------ helpers

    def _configured(self) -> dict[str, Any]:
        """Return the ``%config`` defaults as ``llmlat sweep`` argument values."""
        values = {}
        for trait, (dest, negated) in _TRAIT_DEST.items():
            value = getattr(self.defaults, trait)
            if value is not None:
                values[dest] = (not value) if negated else value
        return values

    @staticmethod
    def _parse(
        parser: MagicArgumentParser, line: str, namespace: argparse.Namespace
    ) -> argparse.Namespace | None:
        """Parse ``line``; None after printing the help. Pre-set namespace values are defaults."""
        argv = _split(line)
        if "-h" in argv or "--help" in argv:  # before parsing: required options may be missing
            print(parser.format_help())
            return None
        return parser.parse_args(argv, namespace)

    def _sweep_options(self, args: argparse.Namespace) -> dict[str, Any]:
        from llmlat.cli import sweep as sweep_cli

        try:
            options = sweep_cli.options_from_args(args)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if options["url"] is None and options["simulator"] is None and self.simulator is not None:
            sim = self.simulator
            options["url"] = sim.url
            if options["model"] is None:
                options["model"] = sim.config.model
        if options["url"] is not None:
            _check_reachable(options["url"])
        return options

    def _sweep(self, payload: Any, args: argparse.Namespace) -> SweepResult:
        from llmlat._loop import run_coroutine
        from llmlat.engine import Sweeper

        options = self._sweep_options(args)
        if payload is None:
            payload = args.prompt if args.payload is None else _read_payload(args.payload)
        try:
            sweeper = Sweeper(payload, **options)
            try:
                result = run_coroutine(sweeper.run())
            except KeyboardInterrupt:
                result = sweeper.result()
        except ValueError as exc:
            raise UsageError(_redact(str(exc), options["api_key_env"])) from None
        if result.meta.get("interrupted"):
            self._say_interrupted(result, args)
        return result

    @staticmethod
    def _say_interrupted(result: SweepResult, args: argparse.Namespace) -> None:
        where = []
        if args.output is not None:
            where.append(f"stored in {args.output}")
        if args.save is not None:
            where.append(f"saved to {args.save}")
        tail = f"; partial result {' and '.join(where)}" if where else ""
        print(
            f"llmlat: interrupted: {len(result.requests)} requests finished{tail}", file=sys.stderr
        )

    def _start_simulator(self, args: argparse.Namespace) -> None:
        from llmlat.cli.sim import config_from_args
        from llmlat.sim import Simulator

        try:
            config = config_from_args(args)
            sim = Simulator(config, port=args.port)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        replaced = self.stop_simulator()
        try:
            sim.start()
        except OSError as exc:
            raise UsageError(f"--port: cannot listen on {args.port} ({exc.strerror})") from None
        self.simulator = sim
        what = f"preset {args.preset}" if args.preset else "default options"
        print(
            f"llmlat simulator ({what}: {config.mode}, {config.slots} slots, model "
            f"{config.model!r}) {'restarted' if replaced else 'running'} at {sim.url}; "
            "%%llmsweep without --url measures it"
        )


def _read_payload(path: Any) -> Any:
    from llmlat.cli import sweep as sweep_cli

    try:
        return sweep_cli.read_payload(path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """Register ``%%llmsweep``, ``%llmsim``, ``%llmfit`` and the ``LLMSweep`` configurable.

    Parameters
    ----------
    ipython : InteractiveShell
        The running shell.
    """
    defaults = LLMSweep(parent=ipython)
    ipython.configurables.append(defaults)
    ipython.register_magics(LLMMagics(ipython, defaults))


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    """Remove the magics and the configurable again and stop the ``%llmsim`` simulator.

    Parameters
    ----------
    ipython : InteractiveShell
        The running shell.
    """
    manager = ipython.magics_manager
    magics = manager.registry.pop(LLMMagics.__name__, None)
    if magics is not None:
        magics.stop_simulator()
        ipython.configurables[:] = [c for c in ipython.configurables if c is not magics.defaults]
    for kind, names in LLMMagics.magics.items():
        for name in names:
            manager.magics[kind].pop(name, None)
