"""Command-line options generated from :class:`~llmlat.config.SweepConfig`, and one-line errors.

:func:`add_config_options` adds one ``--kebab-case`` flag per option (``timeout_s`` ->
``--timeout-s``; booleans also get ``--no-...``), grouped as the model groups them, with the
model's help text and default. A flag not given is absent from the parsed namespace, so the
model's default (or a ``%config`` value in the magic) applies: there is one default.
:func:`options_from_args` turns the namespace into option values.

:class:`OneLineParser` reports a bad command line in one line,
``llmlat: --flag: what is wrong (what is allowed)``, suggests the nearest flag for a typo and
keeps the usage block for ``--help``; :func:`flag_message` rewrites a :class:`ValueError` of
the model (``timeout_s: ...``) in the command line's spelling (``--timeout-s: ...``).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from llmlat.config import AUTO, GROUPS, OptionSpec, did_you_mean, option_specs

__all__ = [
    "EXIT_CODES",
    "SHORT_FLAGS",
    "OneLineParser",
    "add_config_options",
    "add_plan_limits",
    "flag_message",
    "options_from_args",
    "per_minute",
    "plan_limits",
]

#: Exit codes of every ``llmlat`` command.
EXIT_CODES = {
    0: "success",
    1: "an unexpected error (a bug: please report it)",
    2: "bad usage: an invalid option or input, explained in one line",
    3: "no request of the sweep succeeded (connection refused, TLS, 401, ...): the last error",
    4: "(report) written without a fitted model, so without a plan: the note says why",
    130: "interrupted (Ctrl-C); what was measured is printed and saved",
    143: "stopped by SIGTERM (`kill PID`); what was measured is printed and saved",
}

#: Short forms of the most used options (``llmlat sweep`` and ``%%llmsweep`` alike).
SHORT_FLAGS = {"concurrency": "-c", "rate": "-r", "requests": "-n"}

_ARGUMENT = re.compile(r"^argument (?P<flags>[^:]+): (?P<text>.*)$", re.S)
_CHOICE = re.compile(r"^invalid choice: (?P<value>.+?) \(choose from (?P<allowed>.*)\)$", re.S)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: ``llmlat: --flag: what (allowed)``.

    Subclasses change :meth:`fail` (the magics raise ``UsageError`` instead of exiting).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # one spelling per option, no prefixes
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Report a parsing error in one line (argparse's hook).

        Parameters
        ----------
        message : str
            argparse's message.
        """
        self.fail(self._one_line(message))

    def fail(self, message: str) -> NoReturn:
        """Print ``llmlat: <message>`` to stderr and exit with code 2.

        Parameters
        ----------
        message : str
            One line.
        """
        print(f"llmlat: {message}", file=sys.stderr)
        sys.exit(2)

    def unknown(self, extras: list[str]) -> NoReturn:
        """Fail on arguments nobody took, suggesting the nearest flag for a typo.

        Parameters
        ----------
        extras : list of str
            What the parser left over.
        """
        word = next((a for a in extras if a.startswith("-")), extras[0])
        if not word.startswith("-"):
            self.fail(f"{word}: unexpected argument (options start with --; see --help)")
        flags = [s for a in self._actions for s in a.option_strings if s.startswith("--")]
        name = word.split("=", 1)[0]
        self.fail(f"{name}: unknown option{did_you_mean(name, flags) or ' (see --help)'}")

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        """Parse, failing in one line on leftovers (see :meth:`unknown`).

        Parameters
        ----------
        args : list of str, optional
        namespace : argparse.Namespace, optional

        Returns
        -------
        argparse.Namespace
        """
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.unknown(extras)
        return parsed

    def _one_line(self, message: str) -> str:
        match = _ARGUMENT.match(message)
        if match is None:
            if message.startswith("unrecognized arguments: "):
                self.unknown(message.split(": ", 1)[1].split())
            required = "the following arguments are required: "
            if message.startswith(required):
                return f"{message[len(required) :]}: required (see --help)"
            return message
        flags = match["flags"].split("/")
        flag = next((f for f in flags if f.startswith("--")), flags[0])
        text = match["text"]
        choice = _CHOICE.match(text)
        if choice:
            allowed = choice["allowed"].replace("'", "")
            close = difflib.get_close_matches(choice["value"].strip("'"), allowed.split(", "), 1)
            hint = f"; did you mean {close[0]}?" if close else ""
            text = f"{choice['value']} is not allowed (one of {allowed}{hint})"
        elif text == "expected one argument":
            text = "expected a value"
        elif text.startswith("not allowed with argument "):
            other = text.removeprefix("not allowed with argument ").split("/")[-1]
            text = f"give {flag} or {other}, not both"
        return f"{flag}: {text}"


def flag_message(exc: BaseException, flags: dict[str, str] | None = None) -> str:
    """Rewrite an error naming an option (``timeout_s: ...``) with its flag (``--timeout-s: ...``).

    Parameters
    ----------
    exc : ValueError or TypeError
        An error of the options model (or of anything naming an option first).
    flags : dict, optional
        Extra Python name -> flag pairs (e.g. a command's own options).

    Returns
    -------
    str
        One line.
    """
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    name, sep, rest = text.partition(": ")
    options = {o.name: o.flag for o in option_specs()}
    known = options | (flags or {})
    if not (sep and name in known):
        return text
    if name in options:  # the model's messages name other options too ("one of rate and trace")
        # a name standing alone, not a part of a path or file name ("runs/rate/x.parquet")
        alone = r"(?<![\w/\\.-])(" + "|".join(options) + r")(?![\w/\\.-])"
        rest = re.sub(alone, lambda m: options[m[1]], rest)
    return f"{known[name]}: {rest}"


def add_config_options(
    parser: argparse.ArgumentParser, *, only: tuple[str, ...] | None = None
) -> None:
    """Add a flag for every :class:`~llmlat.config.SweepConfig` option, grouped.

    ``--concurrency``, ``--rate`` and ``--requests`` also get the short forms of
    :data:`SHORT_FLAGS`.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The parser to extend.
    only : tuple of str, optional
        Offer these options only (a command sharing some of the sweep's); all when None.
    """
    specs = [o for o in option_specs() if only is None or o.name in only]
    titles = {o.group: GROUPS[o.group] for o in specs}
    groups = {key: parser.add_argument_group(title) for key, title in titles.items()}
    for spec in specs:
        flags = [SHORT_FLAGS[spec.name]] if spec.name in SHORT_FLAGS else []
        groups[spec.group].add_argument(
            *flags, spec.flag, dest=spec.name, default=argparse.SUPPRESS, **_argument(spec)
        )


def options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Return the options given in a namespace parsed with :func:`add_config_options`.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed arguments (options not given are absent).

    Returns
    -------
    dict
        Option values by Python name.
    """
    values = {o.name: getattr(args, o.name) for o in option_specs() if hasattr(args, o.name)}
    for o in option_specs():  # 'Name: value' pairs (headers, slo) make a dict
        if o.kind is dict and values.get(o.name) is not None:
            values[o.name] = dict(values[o.name])
    return values


def _argument(spec: OptionSpec) -> dict[str, Any]:
    """``add_argument`` keywords of one option: its parser, metavar, choices and help."""
    default = "" if spec.default is None else f" (default: {_shown(spec.default)})"
    help_text = (spec.help.removesuffix(".") + default).replace("%", "%%")
    if spec.kind is bool:
        return {"action": argparse.BooleanOptionalAction, "help": help_text}
    keywords: dict[str, Any] = {"help": help_text, "metavar": spec.metavar}
    if spec.choices:
        keywords.update(choices=spec.choices, metavar=None)
    elif spec.kind is dict:
        keywords.update(type=_header, action="append")
    elif spec.levels:
        keywords["type"] = _levels(spec.kind, spec.name)
    elif spec.kind in (int, float):
        keywords["type"] = _number(spec.kind)
        keywords["metavar"] = spec.metavar or ("S" if spec.name.endswith("_s") else "N")
    elif spec.kind is Path:
        keywords["type"] = Path
    return keywords


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return value if isinstance(value, str) else repr(value)


def _what(kind: type) -> str:
    return "an integer" if kind is int else "a number"


def _number(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {_what(kind)}") from None

    parse.__name__ = kind.__name__
    return parse


def _levels(kind: type, name: str) -> Callable[[str], Any]:
    """Parse ``5``, or ``5,10,20`` (one value per level) into a number or a list of them."""

    def parse(text: str) -> Any:
        if text.strip() == AUTO and name in ("concurrency", "rate"):
            return AUTO  # an adaptive sweep (llmlat._adaptive)
        parts = [p.strip() for p in text.split(",") if p.strip()]
        try:
            values = [kind(p) for p in parts]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not allowed ({_what(kind)}, or a comma-separated list of them)"
            ) from None
        if not values:
            raise argparse.ArgumentTypeError("give at least one value")
        return values[0] if len(values) == 1 and name in ("requests", "duration_s") else values

    parse.__name__ = kind.__name__
    return parse


#: the plan's per-minute limits (FitResult.plan keywords) -> what their flag's help says
_PLAN_LIMITS = {
    "rpm": "requests-per-minute limit (auto: the one it declared)",
    "tpm": "tokens-per-minute limit (auto: every token limit it declared)",
    "itpm": "input-tokens-per-minute limit, as Anthropic's (auto: the one it declared)",
    "otpm": "output-tokens-per-minute limit, as Anthropic's (auto: the one it declared)",
}


def add_plan_limits(parser: argparse.ArgumentParser) -> None:
    """Add the plan's ``--rpm``, ``--tpm``, ``--itpm`` and ``--otpm`` flags.

    ``llmlat report`` and ``%llmfit`` take them; :func:`plan_limits` reads them back.

    Parameters
    ----------
    parser : argparse.ArgumentParser
    """
    for name, what in _PLAN_LIMITS.items():
        parser.add_argument(
            f"--{name}", type=per_minute, metavar="N|auto", help=f"the provider's {what}"
        )


def plan_limits(args: argparse.Namespace) -> dict[str, Any]:
    """Return the per-minute limits given as flags, as :meth:`FitResult.plan` keywords.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed by a parser that :func:`add_plan_limits` set up.

    Returns
    -------
    dict of str to float or str
        Only the limits given (``"auto"`` kept as is).
    """
    return {k: v for k in _PLAN_LIMITS if (v := getattr(args, k, None)) is not None}


def per_minute(text: str) -> float | str:
    """Parse a per-minute limit flag (``--rpm``, ``--tpm``): a positive number, or ``auto``.

    ``auto`` plans with the limit the provider declared in its rate-limit headers, as the
    sweep's attempts recorded it.

    Parameters
    ----------
    text : str

    Returns
    -------
    float or str
    """
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not allowed (a positive number per minute, or auto)"
        )
    return value


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed (expected 'Name: value')")
    return name.strip(), value.strip()
