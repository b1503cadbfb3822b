"""``llmlat sweep``: run a sweep from the shell, print the summary table, save the dataset.

Examples::

    llmlat sweep --concurrency 1,10,100 --save out.parquet          # built-in simulator
    llmlat sweep --url http://127.0.0.1:8000 --model m --rate 1,2,4 --duration 30

Ctrl-C stops new sends, gives the requests in flight a few seconds to finish (a second Ctrl-C
cancels them at once; each stays a row), prints and saves what was measured, and exits with
code 130.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "options_from_args", "read_payload", "warn_client_bound"]


def _list_of(kind: type, name: str) -> Any:
    def parse(text: str) -> list:
        try:
            values = [kind(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: expected comma-separated numbers") from None
        if not values:
            raise argparse.ArgumentTypeError(f"{name}: give at least one level")
        return values

    return parse


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError("--header: expected 'Name: value'")
    return name.strip(), value.strip()


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
        description="Send load at each level in turn, record every request, print a summary.",
    )
    target = p.add_argument_group("target")
    target.add_argument("--url", help="base URL; default: start the built-in simulator")
    target.add_argument(
        "--api",
        default="openai-chat",
        choices=("openai-chat", "openai-completions", "anthropic-messages"),
    )
    target.add_argument("--model", help="model name sent in each request")
    target.add_argument("--api-key-env", metavar="VAR", help="environment variable with the key")
    target.add_argument(
        "--header", action="append", type=_header, default=[], metavar="'NAME: VALUE'"
    )
    target.add_argument("--timeout", type=float, default=60.0, metavar="S", help="per attempt")
    target.add_argument("--no-stream", action="store_true", help="ask for whole JSON answers")
    target.add_argument("--max-tokens", type=int, metavar="N")
    target.add_argument(
        "--preset", metavar="NAME", help="simulator preset (only without --url), e.g. article"
    )

    what = p.add_mutually_exclusive_group()
    what.add_argument("--prompt", metavar="TEXT", help="a plain prompt (one user message)")
    what.add_argument(
        "--payload", type=Path, metavar="FILE.json", help="a request body, or a list of them"
    )

    load = p.add_argument_group("load")
    shape = load.add_mutually_exclusive_group(required=True)
    shape.add_argument(
        "--concurrency", type=_list_of(int, "--concurrency"), metavar="N,N,...",
        help="closed-loop levels (requests in flight)",
    )  # fmt: skip
    shape.add_argument(
        "--rate", type=_list_of(float, "--rate"), metavar="R,R,...",
        help="open-loop levels (requests/s)",
    )  # fmt: skip
    shape.add_argument(
        "--trace", type=Path, metavar="FILE", help="replay send offsets from a CSV or parquet file"
    )
    load.add_argument("--think-time", type=float, default=0.0, metavar="S")
    load.add_argument("--arrival", default="poisson", choices=("poisson", "constant", "gamma"))
    load.add_argument("--burstiness", type=float, default=1.0, metavar="CV2")
    load.add_argument("--max-in-flight", type=int, metavar="N")
    length = load.add_mutually_exclusive_group()
    length.add_argument("--requests", type=int, metavar="N", help="measured requests per level")
    length.add_argument("--duration", type=float, metavar="S", help="measured seconds per level")
    load.add_argument("--warmup", type=int, default=0, metavar="N", help="warmup requests")
    load.add_argument("--warmup-s", type=float, default=0.0, metavar="S", help="warmup seconds")
    load.add_argument("--pause", type=float, default=0.0, metavar="S", help="between levels")
    load.add_argument("--retries", type=int, default=3, metavar="N")
    load.add_argument("--backoff-base", type=float, default=0.5, metavar="S")
    load.add_argument("--backoff-max", type=float, default=30.0, metavar="S")
    load.add_argument("--max-retry-wait", type=float, default=60.0, metavar="S")
    load.add_argument("--seed", type=int, default=0)

    out = p.add_argument_group("output")
    out.add_argument("--save", type=Path, metavar="OUT.parquet", help="dataset, written as it goes")
    out.add_argument(
        "--overwrite", action="store_true", help="let --save replace a dataset or journal there"
    )
    out.add_argument("--run-id")
    out.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_run)


def _read_table(path: Path) -> Any:
    import pandas as pd

    try:
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        return pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"trace: cannot read {path}: {exc}") from None


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
        raise ValueError(f"payload: cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"payload: {path} is not valid JSON ({exc.msg})") from None


def options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Turn parsed ``llmlat sweep`` options into keyword options of :class:`~llmlat.engine.Sweeper`.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed by the parser :func:`add_parser` builds (the ``%%llmsweep`` magic reuses it).

    Returns
    -------
    dict
        Sweeper options.

    Raises
    ------
    ValueError
        For options that contradict each other, or an unreadable trace file.
    """
    if args.preset is not None and args.url is not None:
        raise ValueError("--preset: only used without --url")
    return {
        "url": args.url,
        "simulator": args.preset,
        "api": args.api,
        "model": args.model,
        "api_key_env": args.api_key_env,
        "headers": dict(args.header) or None,
        "timeout_s": args.timeout,
        "stream": not args.no_stream,
        "max_tokens": args.max_tokens,
        "concurrency": args.concurrency,
        "rate": args.rate,
        "trace": None if args.trace is None else _read_table(args.trace),
        "think_time_s": args.think_time,
        "arrival": args.arrival,
        "burstiness": args.burstiness,
        "max_in_flight": args.max_in_flight,
        "requests": args.requests,
        "duration_s": args.duration,
        "warmup": args.warmup,
        "warmup_s": args.warmup_s,
        "pause_s": args.pause,
        "retries": args.retries,
        "backoff_base_s": args.backoff_base,
        "backoff_max_s": args.backoff_max,
        "max_retry_wait_s": args.max_retry_wait,
        "seed": args.seed,
        "progress": not args.no_progress,
        "save": args.save,
        "overwrite": args.overwrite,
        "run_id": args.run_id,
    }


def _run(args: argparse.Namespace) -> int:
    from llmlat.engine import sweep
    from llmlat.summary import brief

    warnings.formatwarning = _one_line_warning
    payload = args.prompt if args.payload is None else read_payload(args.payload)
    result = sweep(payload, **options_from_args(args))
    summary = result.summary()
    print(brief(summary).to_string(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-"))
    warn_client_bound(summary)
    if args.save is not None:
        print(f"saved {len(result.requests)} requests to {args.save}", file=sys.stderr)
    if result.meta.get("interrupted"):
        print("interrupted: the results above are partial", file=sys.stderr)
        return 130
    return 0


def warn_client_bound(summary: Any) -> None:
    """Print to stderr a warning for each level the engine's self-diagnosis flagged as client-bound.

    Parameters
    ----------
    summary : pandas.DataFrame
        A per-level summary (:meth:`SweepResult.summary`).
    """
    import pandas as pd

    if "client_bound" not in summary.columns:
        return
    for _, row in summary[summary["client_bound"].fillna(False).astype(bool)].iterrows():
        inflation, lag = row.get("inflation"), row.get("loop_lag_p99_s")
        by = "" if pd.isna(inflation) else f" by up to {inflation:.0%}"
        lag_text = "" if pd.isna(lag) else f", event-loop lag p99 {lag * 1e3:.3g} ms"
        print(
            f"warning: at level {row['level']:g} the client itself was busy (CPU or event-loop "
            f"lag{lag_text}): its latencies (TTFT, ITL first) may be inflated{by}",
            file=sys.stderr,
        )


def _one_line_warning(message: Warning | str, *args: Any, **kwargs: Any) -> str:
    return f"warning: {message}\n"
