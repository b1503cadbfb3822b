"""``llmlat sweep``: run a sweep from the shell, print the per-level table, save the dataset.

Examples::

    llmlat sweep --concurrency 1,10,100 --save out.parquet          # built-in simulator
    llmlat sweep --url http://127.0.0.1:8000 --model m --rate 1,2,4 --duration-s 30

The flags are generated from :class:`~llmlat.config.SweepConfig` (``timeout_s`` ->
``--timeout-s``). Ctrl-C stops new sends, gives the requests in flight a few seconds to finish
(a second Ctrl-C cancels them at once; each stays a row), prints and saves what was measured,
and exits with code 130; SIGTERM (``kill PID``) does the same and exits with code 143. A sweep
started with ``&`` by a shell without job control (a script, CI) ignores Ctrl-C, as Unix starts
such jobs, and the sweep leaves it ignored: stop it with ``kill PID``. A sweep in which no
request succeeded exits with code 3 and prints the last error (when the first requests all fail
the same way, the sweep stops there).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from llmlat.cli.options import add_config_options, options_from_args

__all__ = ["add_parser", "add_payload_options", "read_payload", "warn_client_bound"]


def add_payload_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--prompt`` / ``--payload``: what to send (not an option of the model).

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The parser to extend.
    """
    what = parser.add_argument_group("what to send (default: a short built-in prompt)")
    one = what.add_mutually_exclusive_group()
    one.add_argument("--prompt", metavar="TEXT", help="a plain prompt (one user message)")
    one.add_argument(
        "--payload", type=Path, metavar="FILE.json", help="a request body, or a JSON list of them"
    )


def add_parser(subparsers: Any) -> None:
    """Register ``llmlat sweep``.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The ``llmlat`` command's subparsers.
    """
    p = subparsers.add_parser(
        "sweep",
        help="measure latency at several load levels",
        description="Send load at each level in turn, record every request, print a per-level "
        "table. Give one of --concurrency, --rate or --trace.",
        usage="llmlat sweep (-c N,N,... | -r R,R,... | --trace FILE) [options]",
        epilog="stopping: Ctrl-C or SIGTERM (`kill PID`) stops new sends, lets the requests in "
        "flight finish (a few seconds; a second signal cancels them), prints and saves what "
        "was measured, and exits with 130 (Ctrl-C) or 143 (SIGTERM). A sweep started with `&` "
        "from a script or CI job ignores Ctrl-C (Unix starts such jobs so): stop it with "
        "`kill PID`.",
    )
    add_payload_options(p)
    add_config_options(p)
    out = p.add_argument_group("output")
    out.add_argument(
        "--full", action="store_true", help="print every summary column, not the compact table"
    )
    p.set_defaults(func=_run)


def read_payload(path: Path) -> Any:
    """Read a JSON payload file.

    Parameters
    ----------
    path : path
        The file.

    Returns
    -------
    object
        The parsed JSON (a payload or a list of payloads).

    Raises
    ------
    ValueError
        If the file cannot be read or is not JSON, naming it.
    """
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"payload: cannot read {path} ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"payload: {path} is not valid JSON ({exc.msg})") from None


def _run(args: argparse.Namespace) -> int:
    from llmlat._display import compact, to_text
    from llmlat._engine import sweep

    warnings.formatwarning = _one_line_warning
    payload = args.prompt if args.payload is None else read_payload(args.payload)
    result = sweep(payload, **options_from_args(args))  # main(): SIGTERM stops it as Ctrl-C
    summary = result.summary()
    print(to_text(summary if args.full else compact(summary)))
    warn_client_bound(summary)
    if result.meta["load"]["save"] is not None:
        print(
            f"saved {len(result.requests)} requests to {result.meta['load']['save']}",
            file=sys.stderr,
        )
    if result.meta.get("interrupted") and not result.meta.get("stopped_reason"):
        print("interrupted: the results above are partial", file=sys.stderr)
        return 130  # main() says 143 when SIGTERM stopped it
    if not result.requests["ok"].any():  # exit code 3 (EXIT_CODES)
        errors = result.requests["error"].dropna()
        said = f": {errors.iloc[-1]}" if len(errors) else ""
        print(f"error: no request succeeded{said}", file=sys.stderr)
        return 3
    return 0


def warn_client_bound(summary: Any) -> None:
    """Warn on stderr of each level the engine's self-diagnosis flagged as client-bound.

    Parameters
    ----------
    summary : pandas.DataFrame
        A per-level summary (:meth:`SweepResult.summary`).
    """
    import pandas as pd

    if "client_bound" not in summary.columns:
        return
    flagged = summary["client_bound"].fillna(False).astype(bool)
    if "ok" in summary.columns:  # a level with no success has no latency to inflate
        flagged &= summary["ok"] > 0
    for _, row in summary[flagged].iterrows():
        inflation, lag = row.get("inflation"), row.get("loop_lag_p99_s")
        by = "" if pd.isna(inflation) else f" by up to {inflation:.0%}"
        lag_text = "" if pd.isna(lag) else f", event-loop lag p99 {lag * 1e3:.3g} ms"
        # a warning about the data, so stderr (a notebook shows it apart from the output)
        print(
            f"llmlat: warning: at level {row['level']:g} the client itself was busy (CPU or "
            f"event-loop lag{lag_text}): its latencies (TTFT, ITL first) may be inflated{by}",
            file=sys.stderr,
        )


def _one_line_warning(message: Warning | str, *args: Any, **kwargs: Any) -> str:
    return f"warning: {message}\n"
