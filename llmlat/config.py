"""The sweep's options model: one frozen :class:`SweepConfig`, the single list of every option.

Everything that takes sweep options is generated from, or checked against, the fields of
:class:`SweepConfig`: the signatures and docstrings of :func:`llmlat.sweep` and
:func:`llmlat.asweep`, the flags of ``llmlat sweep``, the options of ``%%llmsweep`` and the
``%config LLMSweep.*`` traits, and the options recorded in a dataset's metadata.

An option has one name: ``snake_case`` in Python and ``%config``, ``--kebab-case`` on the command
line and in the magic (``timeout_s`` <-> ``--timeout-s``; nothing else changes). It has one
default (the field's) and one validation, done when the config is built:

- the target's fields (``url``, ``api``, ``model``, ``api_key_env``, ``headers``, ``timeout_s``,
  ``stream``, ``max_tokens``) by :class:`~llmlat._client.Target`;
- the load shape and level lengths by :func:`llmlat._loadshapes.plan_levels`;
- the retry policy by :class:`~llmlat._client.RetryPolicy`, the fallback rules by
  :class:`~llmlat._client.Failover`;
- the run settings here.

A :class:`ValueError` names the option in its Python spelling (``"timeout_s: ..."``); the
command line and the magic show it as ``--timeout-s: ...``.

Adding an option: add a field to :class:`SweepConfig` with :func:`_option` (default, help text,
group), validate it in the owner listed above (or in :meth:`SweepConfig._check_run`), and read
it in the engine as ``config.<name>``. The signatures, the CLI, the magic and the metadata
follow by themselves (``tests/test_api.py`` checks).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import json
import math
import os
import textwrap
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from llmlat._apis import API_NAMES
from llmlat._client import Failover, RetryPolicy, Target
from llmlat._loadshapes import ARRIVALS, DEFAULT_LENGTH_TEXT, LevelPlan, plan_levels
from llmlat._redact import redact_url
from llmlat._traces import read_trace
from llmlat._transport import TRANSPORTS  # the values of SweepConfig.transport

__all__ = [
    "CLUSTERS",
    "GROUPS",
    "TRANSPORTS",
    "OptionSpec",
    "RetryPolicy",
    "SweepConfig",
    "Target",
    "option_specs",
    "with_options",
]

#: Option groups, in the order help lists them, with their titles.
GROUPS = {
    "target": "target: what to measure",
    "load": "load shape: closed loop (--concurrency), open loop (--rate) or a trace (--trace)",
    "auto": "adaptive sweeps (--concurrency auto, --rate auto): where to stop and what to spend",
    "length": "level length: per level, one value or a comma-separated list",
    "retry": "retries of 429, 5xx and connection errors",
    "run": "run settings",
}

#: Values of :attr:`SweepConfig.cluster`: where the shards of a sharded sweep run.
CLUSTERS = ("local", "ray")

#: The value of ``concurrency`` or ``rate`` that asks for an adaptive sweep.
AUTO = "auto"
#: Defaults of the adaptive sweep's limits (see :mod:`llmlat._adaptive`).
AUTO_MAX_CONCURRENCY = 256
AUTO_START_RATE = 1.0
AUTO_FIRST_REQUESTS = 20
AUTO_MAX_429_RATE = 0.05

_PLACEHOLDER_URL = "http://127.0.0.1"  # validates the target's options before the URL is known


def _option(
    default: Any,
    help: str,
    *,
    group: str,
    kind: type = str,
    metavar: str | None = None,
    choices: tuple[str, ...] | None = None,
    levels: bool = False,
) -> Any:
    """Declare a :class:`SweepConfig` field with what the CLI, the magic and the docs show.

    ``kind`` is the scalar type of a value given as text; ``levels`` allows one value per level
    (a sequence in Python, ``5,10,20`` as text).
    """
    meta = {
        "help": help,
        "group": group,
        "kind": kind,
        "metavar": metavar,
        "choices": choices,
        "levels": levels,
    }
    return field(default=default, metadata=meta)


@dataclass(frozen=True, eq=False)
class SweepConfig:
    """Every option of a sweep: the target, the load shape and level lengths, retries, the run.

    Build it with keywords (``SweepConfig(concurrency=[1, 10], url=...)``) or from a base with
    :meth:`replace`; it validates everything when built. Sequences are kept as tuples.

    Parameters
    ----------
    {options}

    Raises
    ------
    ValueError
        Naming the first invalid option.
    """

    # -- target
    url: str | Sequence[str] | None = _option(
        None,
        "Base URL of the endpoint to measure (http://host:port or .../v1); without it the "
        "built-in simulator is started for the run. Several (a list, or comma-separated): the "
        "first is the primary, the others fallbacks tried in order (see fallback_on).",
        group="target",
        metavar="URL[,FALLBACK,...]",
    )
    api: str = _option(
        "openai-chat", "API flavour of the endpoint.", group="target", choices=API_NAMES
    )
    model: str | None = _option(
        None,
        "Model name sent in each request (the simulator's when measuring it).",
        group="target",
        metavar="NAME",
    )
    api_key_env: str | None = _option(
        None,
        "Name of the environment variable holding the API key (the key is never stored or shown).",
        group="target",
        metavar="VAR",
    )
    headers: dict[str, str] | None = _option(  # noqa: RUF009 (a field)
        None,
        "Extra request headers; on the command line 'Name: value', repeatable.",
        group="target",
        kind=dict,
        metavar="'NAME: VALUE'",
    )
    timeout_s: float = _option(
        60.0, "Limit of one attempt, send to last byte, seconds.", group="target", kind=float
    )
    stream: bool = _option(
        True,
        "Ask for streamed answers (needed for TTFT and inter-token latency).",
        group="target",
        kind=bool,
    )
    max_tokens: int | None = _option(
        None,
        "Output token limit sent in each request (overrides the payload's).",
        group="target",
        kind=int,
        metavar="N",
    )
    cache_system_prompt: bool = _option(
        False,
        "Mark the payload's system prompt cacheable: Anthropic gets cache_control ephemeral on "
        "its last system block; OpenAI caches prompts of 1,024+ tokens by itself (nothing is "
        "sent; the system message is the stable prefix). Records keep cached_tokens and "
        "cache_creation_tokens as the server reports them.",
        group="target",
        kind=bool,
    )
    simulator: Any = _option(  # noqa: RUF009 (a field)
        None,
        "Without url: the built-in simulator to measure, a preset name (e.g. article), a "
        "SimConfig or a dict of its options.",
        group="target",
        metavar="PRESET",
    )
    simulator_process: bool = _option(
        True,
        "Run the built-in simulator in a child process, so it never shares the client's event "
        "loop or GIL; off serves it from the sweep's own loop (for tests).",
        group="target",
        kind=bool,
    )
    # -- load shape
    concurrency: int | Sequence[int] | str | None = _option(
        None,
        "Closed-loop levels: requests in flight (workers), e.g. 1,10,100; auto: grow from 1 "
        "until throughput levels off, then add levels around the knee (on a batching server, "
        "around where throughput levels off: its slot cap).",
        group="load",
        kind=int,
        metavar="N,N,...",
        levels=True,
    )
    rate: float | Sequence[float] | str | None = _option(
        None,
        "Open-loop levels: requests sent per second, e.g. 1,2,4; auto: grow from start_rate "
        "until throughput levels off, then add levels below the capacity found.",
        group="load",
        kind=float,
        metavar="R,R,...",
        levels=True,
    )
    trace: Any = _option(  # noqa: RUF009 (a field)
        None,
        "A trace to replay as one level: a CSV, parquet or JSON-lines file (or in Python a table "
        "or a list) of send times, with optional token counts; llmlat's columns, an Azure LLM "
        "inference trace's (TIMESTAMP, ContextTokens, GeneratedTokens) or Mooncake's "
        "(timestamp ms, input_length, output_length, hash_ids).",
        group="load",
        metavar="FILE",
    )
    trace_speed: float = _option(
        1.0,
        "Replay the trace this many times faster than recorded (0.5: at half the rate).",
        group="load",
        kind=float,
        metavar="X",
    )
    think_time_s: float = _option(
        0.0,
        "Closed loop: pause of a worker between an answer and its next request, seconds.",
        group="load",
        kind=float,
    )
    arrival: str = _option(
        "poisson",
        "Open loop: the arrival process (gaps exponential, equal, or gamma with CV^2 = "
        "burstiness).",
        group="load",
        choices=ARRIVALS,
    )
    burstiness: float = _option(
        1.0,
        "Open loop, arrival gamma: squared coefficient of variation of the gaps (> 1 burstier "
        "than Poisson).",
        group="load",
        kind=float,
        metavar="CV2",
    )
    max_in_flight: int | None = _option(
        None,
        "Open loop and trace: cap on requests in flight (a send waits for a slot; the wait "
        "shows as lag).",
        group="load",
        kind=int,
        metavar="N",
    )
    # -- adaptive sweeps (llmlat._adaptive)
    max_concurrency: int | None = _option(
        None,
        f"Concurrency auto: the largest level the search may try (default {AUTO_MAX_CONCURRENCY}).",
        group="auto",
        kind=int,
        metavar="N",
    )
    start_rate: float | None = _option(
        None,
        f"Rate auto: the first, light rate, requests/s (default {AUTO_START_RATE:g}); without "
        f"requests or duration_s it sends {AUTO_FIRST_REQUESTS} requests, enough to time one "
        "request alone.",
        group="auto",
        kind=float,
        metavar="R",
    )
    max_rate: float | None = _option(
        None,
        "Rate auto: the largest rate the search may try, requests/s (default: none).",
        group="auto",
        kind=float,
        metavar="R",
    )
    max_requests: int | None = _option(
        None,
        "Auto sweeps: most requests sent in all; a level that would pass it is not started.",
        group="auto",
        kind=int,
        metavar="N",
    )
    max_time_s: float | None = _option(
        None,
        "Auto sweeps: most seconds in all; a level expected to end past it is not started.",
        group="auto",
        kind=float,
    )
    max_p95_s: float | None = _option(
        None,
        "Auto sweeps: stop growing once a level's p95 latency exceeds this, seconds, and place "
        "no level at or past that one (default: no limit).",
        group="auto",
        kind=float,
    )
    max_429_rate: float | None = _option(
        None,
        "Auto sweeps: stop growing once a level has more 429s than this per request (final "
        f"or retried), and place no level at or past it (default {AUTO_MAX_429_RATE:g}).",
        group="auto",
        kind=float,
        metavar="SHARE",
    )
    # -- level length
    requests: int | Sequence[int] | None = _option(
        None,
        "Measured requests per level, after the warmup (default: enough for a steady state: "
        f"{DEFAULT_LENGTH_TEXT}).",
        group="length",
        kind=int,
        metavar="N[,N,...]",
        levels=True,
    )
    duration_s: float | Sequence[float] | None = _option(
        None,
        "Measured seconds per level, after the warmup (instead of requests; default open loop: "
        "max(10, 20 / rate)).",
        group="length",
        kind=float,
        metavar="S[,S,...]",
        levels=True,
    )
    warmup: int = _option(
        0,
        "Warmup requests per level (kept as rows with phase warmup).",
        group="length",
        kind=int,
        metavar="N",
    )
    warmup_s: float = _option(
        0.0,
        "Warmup seconds per level (requests sent in them are warmup).",
        group="length",
        kind=float,
    )
    pause_s: float = _option(0.0, "Pause between levels, seconds.", group="length", kind=float)
    # -- retries
    retries: int = _option(
        3,
        "Further attempts after the first for 429, 5xx and connection errors (0 measures raw "
        "refusals).",
        group="retry",
        kind=int,
        metavar="N",
    )
    backoff_base_s: float = _option(
        0.5, "Scale of the exponential backoff (full jitter), seconds.", group="retry", kind=float
    )
    backoff_max_s: float = _option(
        30.0, "Largest backoff before jitter, seconds.", group="retry", kind=float
    )
    max_retry_wait_s: float = _option(
        60.0, "Cap on a server's Retry-After hint, seconds.", group="retry", kind=float
    )
    backoff_jitter: bool = _option(
        True,
        "Full jitter: each backoff drawn uniformly below its exponential bound (off: the bound "
        "itself, plain exponential backoff).",
        group="retry",
        kind=bool,
    )
    honour_retry_after: bool = _option(
        True,
        "Wait at least the server's Retry-After hint before a retry.",
        group="retry",
        kind=bool,
    )
    client_rpm: float | None = _option(
        None,
        "Client-side token bucket: at most this many attempts (retries too) per minute, evenly "
        "spaced (shared out across shards); the wait shows as send lag or retry wait.",
        group="retry",
        kind=float,
        metavar="RPM",
    )
    fallback_on: str | Sequence[str] = _option(
        "429,5xx,timeout,connection",
        "With several URLs: the errors that send an attempt on at once to the next URL (some "
        "of 429, 5xx, timeout, connection), without a backoff or a retry spent.",
        group="retry",
        metavar="429,5xx,...",
    )
    failover_max_s: float = _option(
        30.0,
        "Failover budget: no failover to the next URL once this many seconds have passed since "
        "the request's first send.",
        group="retry",
        kind=float,
    )
    # -- run settings
    slo: dict[str, float] | None = _option(  # noqa: RUF009 (a field)
        None,
        "Service-level objective: bounds in seconds on ttft_s, itl_s (mean inter-token "
        "latency) and latency_s; each request gets meets_slo and the summary SLO attainment "
        "and goodput (requests meeting it per second); on the command line 'ttft_s: 0.5', "
        "repeatable.",
        group="run",
        kind=dict,
        metavar="'KEY: SECONDS'",
    )
    prices: dict[str, float] | None = _option(  # noqa: RUF009 (a field)
        None,
        "Token prices in USD per million (input, output, cache_read, cache_write; see "
        "llmlat.Prices): the summary adds cost per request, per 1,000 requests and per hour "
        "at each level's throughput; on the command line 'input: 3', repeatable.",
        group="run",
        kind=dict,
        metavar="'NAME: USD'",
    )
    seed: int = _option(
        0, "Seed of every random choice (schedules, retry jitter).", group="run", kind=int
    )
    progress: bool = _option(
        True,
        "Show a progress bar (level, done/total, ok rate, p95 so far).",
        group="run",
        kind=bool,
    )
    save: str | os.PathLike | None = _option(  # noqa: RUF009 (a field)
        None,
        "Dataset to write, row by row as the sweep runs (readable any time with llmlat.read).",
        group="run",
        kind=Path,
        metavar="OUT.parquet",
    )
    overwrite: bool = _option(
        False, "Let save replace an existing dataset and its journal.", group="run", kind=bool
    )
    run_id: str | None = _option(
        None, "Identifies the run in every row (default: time stamp + random).", group="run"
    )
    preconnect: bool = _option(
        True,
        "Open a level's connections before its clock starts (connect time stays out of the "
        "first requests' latency).",
        group="run",
        kind=bool,
    )
    transport: str = _option(
        "http11",
        "HTTP client: llmlat's HTTP/1.1 pool, or aiohttp (honours HTTP(S)_PROXY / NO_PROXY).",
        group="run",
        choices=TRANSPORTS,
    )
    # -- shards (llmlat._shard): past one core and one machine
    workers: int | None = _option(
        None,
        "Run the sweep as this many shards, each with its own event loop and client, in local "
        "processes or Ray actors (default: one in-process engine; with cluster ray: one per CPU "
        "of the cluster). Open-loop schedules are split by index, concurrency as evenly as "
        "possible.",
        group="run",
        kind=int,
        metavar="K",
    )
    cluster: str | None = _option(
        None,
        "Where shards run: local processes, or actors on a Ray cluster (default: ray when "
        "ray_address is given, else local).",
        group="run",
        choices=CLUSTERS,
    )
    ray_address: str | None = _option(
        None,
        "Ray cluster to run shards on: auto (the running cluster) or ray://host:port; implies "
        "cluster ray (without it cluster ray starts a local Ray).",
        group="run",
        metavar="ADDRESS",
    )

    def __post_init__(self) -> None:
        if isinstance(self.url, str) and "," in self.url:
            object.__setattr__(self, "url", tuple(u.strip() for u in self.url.split(",")))
        elif isinstance(self.url, Sequence) and not isinstance(self.url, str):
            object.__setattr__(self, "url", tuple(self.url))
        if isinstance(self.fallback_on, Sequence) and not isinstance(self.fallback_on, str):
            object.__setattr__(self, "fallback_on", tuple(self.fallback_on))
        for name in ("concurrency", "rate", "requests", "duration_s"):
            value = getattr(self, name)
            if isinstance(value, Sequence | np.ndarray) and not isinstance(value, str):
                object.__setattr__(self, name, tuple(value))
        if self.headers is not None and isinstance(self.headers, dict):
            object.__setattr__(self, "headers", dict(self.headers))
        if self.slo is not None:
            from llmlat.stats import check_slo  # lazy: loads pandas

            object.__setattr__(self, "slo", check_slo(self.slo))
        if self.prices is not None:
            from llmlat.cost import check_prices  # lazy: loads pandas

            object.__setattr__(self, "prices", check_prices(self.prices))
        self.target()  # validates the target's fields
        for url in self.urls()[1:]:
            Target(url)  # validates each fallback's URL
        self.retry_policy()
        self.failover()
        self._check_run()
        trace = read_trace(self.trace) if isinstance(self.trace, str | os.PathLike) else self.trace
        object.__setattr__(self, "_plans", _plan(self, trace))

    # ------------------------------------------------------------------ building

    def replace(self, **options: Any) -> SweepConfig:
        """Return a copy with some options changed (validated again).

        Parameters
        ----------
        **options
            Option values by name.

        Returns
        -------
        SweepConfig

        Raises
        ------
        TypeError
            For an unknown option name (suggesting the nearest one).
        ValueError
            Naming the first invalid option.
        """
        check_names(options)
        return dataclasses.replace(self, **options)

    @classmethod
    def from_options(cls, config: SweepConfig | None = None, **options: Any) -> SweepConfig:
        """Build a config from an optional base and option values.

        Parameters
        ----------
        config : SweepConfig, optional
            The base; the defaults when None.
        **options
            Option values by name, replacing the base's.

        Returns
        -------
        SweepConfig
        """
        if config is None:
            check_names(options)
            return cls(**options)
        if not isinstance(config, SweepConfig):
            raise TypeError(f"config: expected a SweepConfig, got {type(config).__name__}")
        return config.replace(**options) if options else config

    # ------------------------------------------------------------------ views

    def target(self, url: str | None = None) -> Target:
        """Return the :class:`~llmlat._client.Target` of the run.

        Parameters
        ----------
        url : str, optional
            The URL to use instead of :attr:`url` (the simulator's, when :attr:`url` is None).

        Returns
        -------
        Target
        """
        return Target(
            url or (self.urls() or [_PLACEHOLDER_URL])[0],
            api=self.api,
            model=self.model,
            api_key_env=self.api_key_env,
            headers=self.headers,
            timeout_s=self.timeout_s,
            stream=self.stream,
            max_tokens=self.max_tokens,
        )

    def urls(self) -> list[str]:
        """Return the URLs to measure: the primary first, then the fallbacks (empty: none given).

        Returns
        -------
        list of str
        """
        if self.url is None:
            return []
        return [self.url] if isinstance(self.url, str) else list(self.url)

    def failover(self) -> Failover:
        """Return the :class:`~llmlat._client.Failover` rules of a run with fallback URLs.

        Returns
        -------
        Failover
        """
        on = self.fallback_on if isinstance(self.fallback_on, str) else tuple(self.fallback_on)
        return Failover(on=on, max_s=self.failover_max_s)

    def retry_policy(self) -> RetryPolicy:
        """Return the :class:`~llmlat._client.RetryPolicy` of the run.

        Returns
        -------
        RetryPolicy
        """
        return RetryPolicy(
            retries=self.retries,
            backoff_base_s=self.backoff_base_s,
            backoff_max_s=self.backoff_max_s,
            max_retry_wait_s=self.max_retry_wait_s,
            backoff_jitter=self.backoff_jitter,
            honour_retry_after=self.honour_retry_after,
        )

    def plans(self, **levels: Any) -> list[LevelPlan]:
        """Return the planned levels, in order (see :func:`llmlat._loadshapes.plan_levels`).

        An adaptive sweep's config plans its first level; :mod:`llmlat._adaptive` plans the
        next ones from it with ``levels``.

        Parameters
        ----------
        **levels
            ``concurrency=[...]`` or ``rate=[...]`` (and per-level ``requests``): plan these
            levels with the other options.

        Returns
        -------
        list of LevelPlan
        """
        if levels:
            return _plan(self, None, **levels)
        return list(self._plans)  # type: ignore[attr-defined]

    def sim_config(self) -> Any:
        """Return the built-in simulator's :class:`~llmlat.sim.SimConfig` (for ``url=None``).

        Returns
        -------
        SimConfig
        """
        from llmlat.sim.config import config_from_options

        return config_from_options(self.simulator)

    def options(self) -> dict[str, Any]:
        """Return every option's value, by name, in declaration order.

        Returns
        -------
        dict
        """
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_meta(self) -> dict[str, Any]:
        """Return the options as recorded in a dataset's metadata: JSON values, no secrets.

        The URL loses its credentials, headers keep their names only, a trace is summarised
        and a simulator given as a :class:`~llmlat.sim.SimConfig` becomes its options.

        Returns
        -------
        dict
        """
        meta = self.options()
        urls = [redact_url(u) for u in self.urls()]
        meta["url"] = urls if len(urls) > 1 else urls[0] if urls else None
        meta["headers"] = None if self.headers is None else sorted(self.headers)
        if self.trace is not None:
            sends = self._plans[0].total()  # type: ignore[attr-defined]
            source = self.trace if isinstance(self.trace, str | os.PathLike) else "table"
            meta["trace"] = f"{source}: {sends} sends"
        if dataclasses.is_dataclass(self.simulator):
            meta["simulator"] = dataclasses.asdict(self.simulator)  # type: ignore[arg-type]
        return jsonable(meta)

    def __repr__(self) -> str:
        # the options that differ from their defaults, as the metadata shows them (no secrets)
        meta = self.to_meta()
        changed = [f"{k}={v!r}" for k, v in meta.items() if v != jsonable(_FIELDS[k].default)]
        return f"SweepConfig({', '.join(changed)})"

    # ------------------------------------------------------------------ checks

    def _check_run(self) -> None:
        for name in (
            "simulator_process",
            "progress",
            "overwrite",
            "preconnect",
            "cache_system_prompt",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: expected True or False, got {getattr(self, name)!r}")
        if not (
            isinstance(self.pause_s, int | float)
            and not isinstance(self.pause_s, bool)
            and math.isfinite(self.pause_s)
            and self.pause_s >= 0
        ):
            raise ValueError(f"pause_s: {self.pause_s!r} is not allowed (seconds >= 0)")
        if not all(isinstance(u, str) for u in self.urls()) or (
            self.url is not None and not self.urls()
        ):
            raise ValueError(f"url: expected a URL or a list of URLs, got {self.url!r}")
        if self.client_rpm is not None and not (
            isinstance(self.client_rpm, int | float)
            and not isinstance(self.client_rpm, bool)
            and 0 < self.client_rpm < math.inf
        ):
            raise ValueError(f"client_rpm: {self.client_rpm!r} is not allowed (a number > 0)")
        if self.url is not None and self.simulator is not None:
            raise ValueError("simulator: only used without url (measure one or the other)")
        if self.simulator is not None:
            from llmlat.sim.config import config_from_options

            try:
                config_from_options(self.simulator)
            except ValueError as exc:
                raise ValueError(f"simulator: {_without_name(exc)}") from None
        if self.run_id is not None and (
            not isinstance(self.run_id, str) or not self.run_id or "/" in self.run_id
        ):
            raise ValueError(f"run_id: {self.run_id!r} is not allowed (a name without '/')")
        if self.save is not None and not isinstance(self.save, str | os.PathLike):
            raise ValueError(f"save: expected a file path, got {type(self.save).__name__}")
        self._check_shards()
        self._check_auto()
        if self.transport not in TRANSPORTS:
            raise ValueError(
                f"transport: {self.transport!r} is not allowed (one of {', '.join(TRANSPORTS)})"
            )

    def _check_shards(self) -> None:
        workers = self.workers
        if workers is not None and (
            not isinstance(workers, int | np.integer) or isinstance(workers, bool) or workers < 1
        ):
            raise ValueError(f"workers: {workers!r} is not allowed (an integer >= 1)")
        if self.cluster is not None and self.cluster not in CLUSTERS:
            raise ValueError(
                f"cluster: {self.cluster!r} is not allowed (one of {', '.join(CLUSTERS)})"
            )
        if self.ray_address is not None:
            if not isinstance(self.ray_address, str) or not self.ray_address.strip():
                raise ValueError(
                    f"ray_address: {self.ray_address!r} is not allowed (auto or ray://host:port)"
                )
            if self.cluster == "local":
                raise ValueError("ray_address: only with cluster ray (shards on a Ray cluster)")

    def _check_auto(self) -> None:
        for name in ("concurrency", "rate"):
            value = getattr(self, name)
            if isinstance(value, str) and value != AUTO:
                raise ValueError(f"{name}: {value!r} is not allowed (numbers, or {AUTO!r})")
        auto = self.auto()
        limits = {
            "max_concurrency": ("concurrency", int, 1),
            "start_rate": ("rate", float, 0),
            "max_rate": ("rate", float, 0),
            "max_requests": (None, int, 1),
            "max_time_s": (None, float, 0),
            "max_p95_s": (None, float, 0),
            "max_429_rate": (None, float, 0),
        }
        for name, (kind, number, low) in limits.items():
            value = getattr(self, name)
            if value is None:
                continue
            if auto is None or kind not in (None, auto):
                needs = f"{kind}={AUTO!r}" if kind else f"concurrency or rate {AUTO!r}"
                raise ValueError(f"{name}: only used by an adaptive sweep ({needs})")
            ok = isinstance(value, int | np.integer if number is int else int | float | np.number)
            ok = ok and not isinstance(value, bool) and math.isfinite(value)
            ok = ok and (value >= low if number is int else value > low)
            if name == "max_429_rate":
                ok = ok and value < 1
            if not ok:
                what = f"an integer >= {low}" if number is int else "a number > 0"
                raise ValueError(f"{name}: {value!r} is not allowed ({what})")
        if auto is None:
            return
        start, top = self.start_rate, self.max_rate
        if start is not None and top is not None and start > top:
            raise ValueError(f"start_rate: {start!r} is above max_rate {top!r}")
        for name in ("requests", "duration_s"):
            if isinstance(getattr(self, name), tuple):
                raise ValueError(
                    f"{name}: an adaptive sweep chooses its levels; give one value for all"
                )
        if self.shard_cluster() is not None:
            raise ValueError(
                f"{auto}: {AUTO!r} chooses each level from the last one, in one engine; a "
                "sharded sweep (workers, cluster, ray_address) needs its levels up front"
            )

    def auto(self) -> str | None:
        """Return ``"concurrency"`` or ``"rate"`` for an adaptive sweep, else None.

        Returns
        -------
        str or None
        """
        for name in ("concurrency", "rate"):
            if getattr(self, name) == AUTO:
                return name
        return None

    def shard_cluster(self) -> str | None:
        """Return where the shards run: ``"local"``, ``"ray"``, or None for one in-process engine.

        Returns
        -------
        str or None
        """
        cluster = self.cluster or ("ray" if self.ray_address is not None else None)
        if cluster is None and self.workers is not None:
            cluster = "local"
        return cluster


_FIELDS = {f.name: f for f in dataclasses.fields(SweepConfig)}


class OptionSpec(NamedTuple):
    """How one :class:`SweepConfig` option is shown: for command lines, magics, traits, docs.

    Attributes
    ----------
    name : str
        The Python name (``timeout_s``).
    flag : str
        The command-line spelling (``--timeout-s``).
    default : object
        The default.
    annotation : object
        The field's type.
    help : str
        One or two sentences.
    group : str
        A key of :data:`GROUPS`.
    kind : type
        Scalar type of a value given as text: str, int, float, bool, dict (headers) or Path.
    metavar : str or None
        Placeholder of the value in help.
    choices : tuple of str or None
        The allowed values.
    levels : bool
        Whether a value per level is allowed (``5,10,20``).
    """

    name: str
    flag: str
    default: Any
    annotation: Any
    help: str
    group: str
    kind: type
    metavar: str | None
    choices: tuple[str, ...] | None
    levels: bool


def option_specs() -> list[OptionSpec]:
    """Describe every option of :class:`SweepConfig`, in declaration order.

    Returns
    -------
    list of OptionSpec
    """
    hints = typing.get_type_hints(SweepConfig)
    return [
        OptionSpec(name, flag_of(name), f.default, hints[name], **f.metadata)
        for name, f in _FIELDS.items()
    ]


def with_options(func: Callable) -> Callable:
    """Give a function taking ``**options`` the explicit signature and docs of every option.

    The signature (``help()``, ``inspect.signature``, IPython's completion) lists each
    :class:`SweepConfig` option as a keyword-only parameter with its type and default, after
    the function's own parameters; ``{options}`` in the docstring becomes the numpydoc entry of
    each option. The function still receives them as ``**options`` (only those given).

    Parameters
    ----------
    func : callable
        A function whose last parameter is ``**options``.

    Returns
    -------
    callable
        ``func`` itself, with ``__signature__`` and ``__doc__`` set.
    """
    signature = inspect.signature(func)
    hints = _resolved_annotations(func)
    own = [
        p.replace(annotation=hints.get(p.name, p.annotation))
        for p in list(signature.parameters.values())[:-1]
    ]
    keyword = inspect.Parameter.KEYWORD_ONLY
    options = [
        inspect.Parameter(o.name, keyword, default=o.default, annotation=o.annotation)
        for o in option_specs()
    ]
    func.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*own, *options],
        return_annotation=hints.get("return", signature.return_annotation),
    )
    func.__doc__ = _with_options_doc(func.__doc__)
    return func


def _resolved_annotations(func: Callable) -> dict[str, Any]:
    """Resolve the function's string annotations.

    A name its module imports only for type checking stays a string (the engine's
    ``SweepResult``: importing it would load pandas).
    """
    hints: dict[str, Any] = {}
    for name, value in func.__annotations__.items():
        try:  # what typing.get_type_hints does, one annotation at a time
            hints[name] = eval(value, func.__globals__) if isinstance(value, str) else value
        except NameError:
            hints[name] = value
    return hints


def _with_options_doc(doc: str | None) -> str:
    """``doc`` with its ``{options}`` line replaced by the entries of every option."""
    return (doc or "").replace("{options}", options_doc(indent=4).lstrip())


def options_doc(indent: int = 0) -> str:
    """Return the numpydoc ``Parameters`` entries of every option.

    Parameters
    ----------
    indent : int
        Spaces before each entry.

    Returns
    -------
    str
    """
    pad = " " * indent
    lines = []
    for o in option_specs():
        kind = inspect.formatannotation(o.annotation)
        lines.append(f"{pad}{o.name} : {kind}, default {o.default!r}")
        lines += textwrap.wrap(
            o.help, 92 - indent, initial_indent=pad + "    ", subsequent_indent=pad + "    "
        )
    return "\n".join(lines)


def flag_of(name: str) -> str:
    """Return the command-line spelling of an option: ``timeout_s`` -> ``--timeout-s``.

    Parameters
    ----------
    name : str

    Returns
    -------
    str
    """
    return "--" + name.replace("_", "-")


def check_names(options: dict[str, Any]) -> None:
    """Raise TypeError for an option name :class:`SweepConfig` does not have.

    Parameters
    ----------
    options : dict
        Options by name.

    Raises
    ------
    TypeError
        Naming the first unknown option and the nearest known one.
    """
    for name in options:
        if name not in _FIELDS:
            raise TypeError(f"unexpected option {name!r}{did_you_mean(name, _FIELDS)}")


def did_you_mean(word: str, choices: Any) -> str:
    """Return ``" (did you mean X?)"`` for the nearest of ``choices``, or ``""``.

    Parameters
    ----------
    word : str
    choices : iterable of str

    Returns
    -------
    str
    """
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def jsonable(obj: Any) -> Any:
    """Make ``obj`` JSON-serialisable (numpy scalars and arrays, tuples, paths).

    Parameters
    ----------
    obj : object

    Returns
    -------
    object
    """
    return json.loads(json.dumps(obj, default=_json_default))


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def _without_name(exc: ValueError) -> str:
    text = str(exc)
    name, sep, rest = text.partition(": ")
    return rest if sep and name.isidentifier() else text


def _plan(config: SweepConfig, trace: Any, **overrides: Any) -> list[LevelPlan]:
    """Plan the levels of ``config``; ``overrides`` replace options of :func:`plan_levels`.

    An adaptive sweep is planned one level at a time (:mod:`llmlat._adaptive`, with the levels
    so far as overrides); its config plans its first level.
    """
    auto = config.auto()
    if auto is not None and not overrides:
        first = 1 if auto == "concurrency" else (config.start_rate or AUTO_START_RATE)
        overrides = {auto: [first]}
    options = {
        "concurrency": config.concurrency,
        "rate": config.rate,
        "trace": trace,
        "think_time_s": config.think_time_s,
        "arrival": config.arrival,
        "burstiness": config.burstiness,
        "max_in_flight": config.max_in_flight,
        "requests": config.requests,
        "duration_s": config.duration_s,
        "warmup": config.warmup,
        "warmup_s": config.warmup_s,
        "seed": config.seed,
        "trace_speed": config.trace_speed,
    }
    return plan_levels(**{**options, **overrides})


SweepConfig.__doc__ = _with_options_doc(SweepConfig.__doc__)
