"""The IPython extension: ``%load_ext llmlat`` registers ``%%llmsweep``, ``%llmsim``, ``%llmfit``.

``%%llmsweep`` takes the options of the ``llmlat sweep`` command, generated from the same
options model (:class:`~llmlat.config.SweepConfig`, through :mod:`llmlat.cli.options`), plus a
few of its own, and the cell body as the payload; its ``%config LLMSweep.<option>`` traits are
generated from the model too. ``%llmsim`` takes the simulator's own option list
(:mod:`llmlat.cli.sim`) and runs it in a child process. A bad line is a one-line UsageError.
Everything heavy is imported when a magic runs, not when the extension loads.
"""

from __future__ import annotations

import argparse
import json
import keyword
import os
import shlex
import socket
from typing import TYPE_CHECKING, Any, NoReturn, cast
from urllib.parse import urlsplit

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from traitlets import (
    Bool,
    Dict,
    Enum,
    Float,
    Int,
    List,
    MetaHasTraits,
    TraitType,
    Unicode,
    Union,
)
from traitlets.config import Configurable

from llmlat._redact import redact
from llmlat.cli.options import (
    OneLineParser,
    add_config_options,
    add_plan_limits,
    flag_message,
    options_from_args,
    plan_limits,
)
from llmlat.config import AUTO, OptionSpec, option_specs

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from IPython.core.interactiveshell import InteractiveShell

    from llmlat.results import SweepResult
    from llmlat.sim.process import SimulatorProcess

__all__ = ["LLMMagics", "LLMSweep", "load_ipython_extension", "unload_ipython_extension"]

_CONNECT_TIMEOUT_S = 3.0


class MagicParser(OneLineParser):
    """The command-line parser of a magic: a bad line is a one-line UsageError."""

    def fail(self, message: str) -> NoReturn:
        """Raise ``UsageError(message)``.

        Parameters
        ----------
        message : str
            One line.
        """
        raise UsageError(message)


def _trait(spec: OptionSpec) -> TraitType:
    """Return the ``%config`` trait of a sweep option: unset (None) keeps its default."""
    number = Int if spec.kind is int else Float
    if spec.kind is bool:
        trait: TraitType = Bool(None, allow_none=True)
    elif spec.choices:
        trait = Enum(spec.choices, None, allow_none=True)
    elif spec.levels:
        kinds: list[TraitType] = [number(), List(number(), minlen=1)]
        if spec.name in ("concurrency", "rate"):  # an adaptive sweep
            kinds.append(Enum([AUTO]))
        trait = Union(kinds, default_value=None, allow_none=True)
    elif spec.kind in (int, float):
        trait = number(None, allow_none=True)
    elif spec.kind is dict:
        # values checked by the model (headers: text; slo: seconds, numbers or text)
        trait = Dict(default_value=None, allow_none=True)
    else:
        trait = Unicode(None, allow_none=True)
    trait.help = spec.help
    return trait.tag(config=True)


#: Defaults of ``%%llmsweep``, set with ``%config LLMSweep.<option> = value``: one trait per
#: option of :class:`~llmlat.config.SweepConfig`, generated from it.
LLMSweep = cast(
    "type[Configurable]",  # a class made by traitlets' metaclass from the options model
    MetaHasTraits(
        "LLMSweep",
        (Configurable,),
        {
            "__doc__": "Defaults of ``%%llmsweep``: ``%config LLMSweep.<option> = value``.\n\n"
            "One trait per option of :class:`llmlat.config.SweepConfig` (same name, help and "
            "validation). An option given on the magic's line wins; an unset one (None) keeps "
            "the model's default.",
            "__module__": __name__,
            **{spec.name: _trait(spec) for spec in option_specs()},
        },
    ),
)


def _sweep_parser() -> MagicParser:
    """Return the parser of ``%%llmsweep``: the sweep's options, generated, and the magic's own."""
    from llmlat.cli.sweep import add_payload_options

    parser = MagicParser(
        prog="%%llmsweep",
        usage="%(prog)s [options] (-c N,N,... | -r R,R,... | --trace FILE)",
        description="Measure latency at several load levels; the cell body is what to send "
        "(a JSON request body, a JSON list of them, or a plain prompt). Defaults come from "
        "%config LLMSweep.<option>.",
        add_help=False,
    )
    own = parser.add_argument_group("notebook (%%llmsweep only)")
    own.add_argument("-o", "--output", metavar="NAME", help="store the SweepResult as NAME")
    own.add_argument(
        "--full", action="store_true", help="show every summary column, not the compact table"
    )
    own.add_argument("-h", "--help", action="store_true", help="show this help")
    add_payload_options(parser)
    add_config_options(parser)
    return parser


def _sim_parser() -> MagicParser:
    from llmlat.cli.sim import add_config_arguments

    parser = MagicParser(
        prog="%llmsim",
        add_help=False,
        description="Start, stop or show the built-in simulated provider of this notebook.",
    )
    parser.add_argument(
        "action",
        nargs="?",
        default="status",
        choices=("start", "stop", "status"),
        help="start (or restart) a simulator, stop it, or show it (default: status)",
    )
    parser.add_argument("--port", type=int, default=0, help="port (default: 0, a free one)")
    parser.add_argument("-h", "--help", action="store_true", help="show this help")
    add_config_arguments(parser)
    return parser


def _fit_parser() -> MagicParser:
    parser = MagicParser(
        prog="%llmfit",
        add_help=False,
        description="Fit a queueing model to a sweep (a SweepResult or a DataFrame variable).",
    )
    parser.add_argument("name", help="variable holding the sweep, e.g. res from %%llmsweep -o res")
    parser.add_argument(
        "--model", default="auto", help="auto, mm1, mmc, mgc, closed or batch (default: auto)"
    )
    parser.add_argument(
        "--metric",
        default="latency",
        choices=("latency", "ttft"),
        help="what to model: end-to-end latency or time to first token (default: latency)",
    )
    parser.add_argument(
        "--stat",
        default="mean",
        choices=("mean", "p50", "p95", "p99"),
        help="the per-level statistic fitted (default: mean)",
    )
    parser.add_argument(
        "--compare", action="store_true", help="show every model ranked by AIC instead"
    )
    # the same plan flags as ``llmlat report``
    parser.add_argument(
        "--p95-s", type=float, metavar="S", help="show the capacity plan for this p95 target"
    )
    add_plan_limits(parser)
    parser.add_argument(
        "-o", "--output", metavar="NAME", help="store the FitResult (or with a target, the Plan)"
    )
    parser.add_argument("-h", "--help", action="store_true", help="show this help")
    return parser


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"cannot split the options: {exc}") from None


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


def _check_reachable(urls: list[str]) -> None:
    """Raise UsageError when nothing accepts connections at any of ``urls`` (quick TCP connects).

    One reachable URL of a failover list is enough: the others fail over to it. ``urls`` are
    :meth:`SweepConfig.urls <llmlat.config.SweepConfig.urls>`, so each is already an http(s)
    URL with a host.
    """
    failed = []
    for url in urls:
        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise UsageError(f"--url: {exc}") from None
        try:
            socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT_S).close()
            return
        except OSError as exc:
            failed.append(f"{parts.scheme}://{host}:{port} ({exc.strerror or type(exc).__name__})")
    where = failed[0] if len(failed) == 1 else f"any of {', '.join(failed)}"
    raise UsageError(f"--url: cannot reach {where}")


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

    def __init__(self, shell: InteractiveShell, defaults: Configurable) -> None:
        super().__init__(shell)
        self.defaults = defaults
        self.simulator: SimulatorProcess | None = None

    @line_cell_magic
    def llmsweep(self, line: str, cell: str | None = None) -> SweepResult | pd.DataFrame | None:
        """Measure latency at several load levels; the cell body is what to send.

        A cell ``%%llmsweep -c 1,10,100 -n 50 -o res --save run.parquet`` with the body
        ``{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32}``, or a line
        ``%llmsweep -c 1,10 -n 20 --prompt "Hi" -o res``.

        The body is a JSON request body, a JSON list of them (cycled), or plain text taken as
        the user's prompt; the line magic sends ``--prompt`` / ``--payload``, or the default
        prompt. The options are those of ``llmlat sweep`` (``%llmsweep --help`` lists them),
        plus ``-c``/``-r``/``-n`` for ``--concurrency``/``--rate``/``--requests``, ``-o NAME``
        to store the SweepResult and ``--full``; defaults come from
        ``%config LLMSweep.<option>``. ``$var`` and ``{expr}`` expand from the namespace.
        Without ``--url`` it measures the simulator of ``%llmsim start``, else one started for
        the run. Returns the SweepResult, shown as its compact per-level table (``--full``: the
        full summary DataFrame instead); a trailing ``;`` on the line or the body silences it.
        Interrupting the kernel stops the sweep: the partial result is stored and saved.
        """
        line, quiet_line = _trailing_semicolon(line)
        cell, quiet_cell = _trailing_semicolon(cell or "")
        args = self._parse(_sweep_parser(), line)
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
            self._namespace[args.output] = result
        from llmlat.cli.sweep import warn_client_bound

        summary = result.summary()
        warn_client_bound(summary)
        if quiet_line or quiet_cell:
            return None
        # the data, not a display copy of it: the result shows its compact table
        return summary if args.full else result

    @line_magic
    def llmsim(self, line: str) -> None:
        """Start, stop or show the built-in simulated provider: ``%llmsim [start|stop|status]``.

        For example ``%llmsim start --preset article --seed 1``, ``%llmsim status``,
        ``%llmsim stop``. ``start`` takes the options of ``llmlat sim`` (``%llmsim --help``
        lists them) and replaces a simulator already running. The simulator is a child
        process on 127.0.0.1, stopped with the kernel at the latest. While one runs,
        ``%%llmsweep`` without ``--url`` measures it.
        """
        args = self._parse(_sim_parser(), line)
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

        For example ``%llmfit res`` (the best model by AIC, its summary shown),
        ``%llmfit res --model mmc -o fit`` (c and mu of an M/M/c, stored as ``fit``),
        ``%llmfit res --compare`` (every model side by side),
        ``%llmfit res --p95-s 2 --rpm 600`` (the fit's capacity plan for that target).

        Returns the :class:`~llmlat.fitting.FitResult` (its summary shows under the cell), with
        a target (``--p95-s``, ``--rpm``, ``--tpm``, ``--itpm``, ``--otpm``) its
        :class:`~llmlat.fitting.Plan`, or with ``--compare`` the table of models. Data that
        cannot identify a model is a one-line error saying what to measure next.
        """
        from llmlat.fitting import compare, fit

        line, quiet = _trailing_semicolon(line)
        args = self._parse(_fit_parser(), line)
        if args is None:
            return None
        if args.name not in self._namespace:
            raise UsageError(f"%llmfit: no variable named {args.name!r}")
        data = self._namespace[args.name]
        try:
            if args.compare:
                out = compare(data, metric=args.metric, stat=args.stat)
            else:
                out = fit(data, model=args.model, metric=args.metric, stat=args.stat)
                limits = plan_limits(args)
                if args.p95_s is not None or limits:
                    out = out.plan(p95=args.p95_s, **limits)
        except ValueError as exc:
            raise UsageError(f"%llmfit: {exc}") from None
        if args.output is not None:
            self._namespace[args.output] = out
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

    @property
    def _namespace(self) -> dict[str, Any]:
        """The user's namespace (the magics are registered with a shell)."""
        assert self.shell is not None
        return self.shell.user_ns

    def _configured(self) -> dict[str, Any]:
        """Return the options set with ``%config LLMSweep.<option>``."""
        values = {
            name: getattr(self.defaults, name) for name in self.defaults.trait_names(config=True)
        }
        return {name: value for name, value in values.items() if value is not None}

    @staticmethod
    def _parse(parser: MagicParser, line: str) -> argparse.Namespace | None:
        """Parse ``line``; None after printing the help."""
        argv = _split(line)
        if "-h" in argv or "--help" in argv:  # before parsing: other options may be wrong
            print(parser.format_help())
            return None
        return parser.parse_args(argv)

    def _sweep_options(self, args: argparse.Namespace) -> dict[str, Any]:
        configured, given = self._configured(), options_from_args(args)
        if "url" in given or "simulator" in given:  # the line's choice of target wins whole
            configured.pop("url", None)
            configured.pop("simulator", None)
        options = {**configured, **given}
        if options.get("url") is None and options.get("simulator") is None and self.simulator:
            sim = self.simulator
            options["url"] = sim.url
            options.setdefault("model", sim.config.model)
        return options

    def _sweep(self, payload: Any, args: argparse.Namespace) -> SweepResult:
        from llmlat._engine import Sweeper, run_sync

        options = self._sweep_options(args)
        if payload is None:
            payload = args.prompt if args.payload is None else _read_payload(args.payload)
        try:
            sweeper = Sweeper(payload, **options)
            if sweeper.config.url is not None:  # its URL list as SweepConfig reads it
                _check_reachable(sweeper.config.urls())
            # Ctrl-C (and the stop signals in force) as a script's sweep takes them
            result = run_sync(sweeper)
        except (ValueError, TypeError) as exc:
            raise UsageError(_redact(flag_message(exc), options.get("api_key_env"))) from None
        if result.meta.get("interrupted"):
            self._say_where(result, args)
        return result

    @staticmethod
    def _say_where(result: SweepResult, args: argparse.Namespace) -> None:
        """Say where an interrupted sweep's partial result went (run_sync said it stopped)."""
        from llmlat._notice import notice

        where = []
        if args.output is not None:
            where.append(f"stored in {args.output}")
        if result.meta["load"]["save"] is not None:
            where.append(f"saved to {result.meta['load']['save']}")
        if where:
            notice(f"partial result {' and '.join(where)}")

    def _start_simulator(self, args: argparse.Namespace) -> None:
        from llmlat.cli.sim import config_from_args
        from llmlat.sim.config import option_fields
        from llmlat.sim.process import SimulatorProcess

        try:
            config = config_from_args(args)
            sim = SimulatorProcess(config, port=args.port)
        except ValueError as exc:
            flags = {o.name: "--" + o.name.replace("_", "-") for o in option_fields()}
            raise UsageError(flag_message(exc, flags | {"port": "--port"})) from None
        replaced = self.stop_simulator()
        try:
            sim.start()
        except OSError as exc:
            raise UsageError(f"--port: cannot listen on {args.port} ({exc})") from None
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


def _bodiless_cell_magic(lines: list[str]) -> list[str]:
    """Run a ``%%llmsweep`` cell with nothing below its first line as the line magic.

    IPython refuses a cell magic with an empty body, so ``%%llmsweep --help`` alone in a cell
    would fail; the line form does the same thing (help, or the default prompt).
    """
    if lines and lines[0].startswith("%%llmsweep") and not "".join(lines[1:]).strip():
        return [lines[0][1:]]
    return lines


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """Register ``%%llmsweep``, ``%llmsim``, ``%llmfit`` and the ``LLMSweep`` configurable.

    Parameters
    ----------
    ipython : InteractiveShell
        The running shell.
    """
    defaults = LLMSweep(parent=ipython)
    # IPython's list is inferred as list[InteractiveShell] (it starts as [self]): any Configurable
    ipython.configurables.append(defaults)  # type: ignore[arg-type]
    ipython.register_magics(LLMMagics(ipython, defaults))
    if _bodiless_cell_magic not in ipython.input_transformers_cleanup:
        ipython.input_transformers_cleanup.append(_bodiless_cell_magic)


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    """Remove the magics and the configurable again and stop the ``%llmsim`` simulator.

    Parameters
    ----------
    ipython : InteractiveShell
        The running shell.
    """
    if _bodiless_cell_magic in ipython.input_transformers_cleanup:
        ipython.input_transformers_cleanup.remove(_bodiless_cell_magic)
    manager = ipython.magics_manager
    magics = manager.registry.pop(LLMMagics.__name__, None)
    if magics is not None:
        magics.stop_simulator()
        ipython.configurables[:] = [c for c in ipython.configurables if c is not magics.defaults]
    for kind, names in LLMMagics.magics.items():
        for name in names:
            manager.magics[kind].pop(name, None)
