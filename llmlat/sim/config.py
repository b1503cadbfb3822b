"""The simulator's options (:class:`SimConfig`), named presets, and option parsing from text.

Every option is a field of :class:`SimConfig` with a default and a one-line help text in its
metadata. The shell command (``llmlat sim --slots 8``), the Jupyter magic and
:func:`config_from_options` all derive their options from these fields, so there is one list.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MODES",
    "OUTPUT_DISTS",
    "PRESETS",
    "Option",
    "SimConfig",
    "config_from_options",
    "option_fields",
    "parse_option",
]

#: Values of :attr:`SimConfig.mode`.
MODES = ("batch", "mmc")
#: Values of :attr:`SimConfig.output_dist`.
OUTPUT_DISTS = ("fixed", "uniform", "geometric")


def _opt(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class SimConfig:
    """Every option of the simulated provider replica.

    Times are seconds and rates are per second unless the name says otherwise. ``None`` turns
    a limit off. Build one directly, from a preset (:meth:`from_preset`) or from text options
    (:func:`config_from_options`); invalid values raise ValueError naming the field.

    Attributes
    ----------
    mode : {"batch", "mmc"}
        ``batch``: continuous batching, every step emits one token to each active sequence and
        lasts ``t0_s + t1_s * batch_size`` (+ prefill of the sequences joining at that step).
        ``mmc``: ``slots`` parallel servers with exponential service times of rate ``mu``, FIFO
        queue, tokens paced evenly over the service time (an exact M/M/c).
    slots : int
        Batch cap (batch mode) or number of servers (mmc mode).
    t0_s, t1_s : float
        Fixed and per-sequence parts of one decode step (batch mode).
    prefill_per_token_s : float
        Prefill time per uncached prompt token, added to the steps that prefill it (batch
        mode; mmc service times stay purely exponential).
    prefill_chunk_tokens : int
        Chunked prefill (batch mode), as vLLM and SGLang do: a step prefills at most this
        many prompt tokens (shortest remaining prompt first), so a long prompt spreads its
        prefill over several steps and delays the other sequences' tokens by at most
        ``prefill_chunk_tokens * prefill_per_token_s`` per step. A sequence gets its first
        token at the end of the step that completes its prompt.
    context_tokens : int or None
        Context window: a request whose prompt plus ``max_tokens`` exceeds it gets the
        provider's 400 (OpenAI's ``context_length_exceeded``). ``None``: no limit.
    max_body_bytes : int
        Largest request body read; a larger one gets a 413 ``request_too_large`` (the
        Anthropic API's limit is 32 MB).
    mu : float
        Service rate of one server in requests per second (mmc mode).
    output_tokens : int
        Mean output length when a request does not set ``max_tokens``.
    output_dist : {"fixed", "uniform", "geometric"}
        Distribution of that length: always ``output_tokens``; uniform on
        ``[m - m // 2, m + m // 2]``; or geometric with mean ``m`` (memoryless, cv near 1).
    max_output_tokens : int
        Largest ``max_tokens`` accepted (larger is a 400) and cap of drawn lengths.
    queue_limit : int or None
        Most requests waiting for a slot; one more gets a 429. ``None``: unbounded.
    rpm, tpm : float or None
        Requests and tokens (prompt + output) per minute, enforced by token buckets refilled
        continuously at that rate; a refused request gets a 429 whose ``Retry-After`` (whole
        seconds, rounded up; on the OpenAI APIs also ``retry-after-ms``, the exact wait, as
        Azure OpenAI sends it) is the time until the bucket holds it.
    itpm, otpm : float or None
        Input (prompt) and output tokens per minute, Anthropic's separate limits, enforced as
        ``tpm`` is; the Anthropic API declares them in its ``anthropic-ratelimit-input-tokens-*``
        and ``-output-tokens-*`` headers (OpenAI's APIs have no header for them). Every prompt
        token counts, cache reads included (Anthropic leaves those out on most models).
    limit_burst_s : float
        Seconds of the ``rpm`` / ``tpm`` limits a bucket holds. 1 (the default): the limit
        enforced per second, as OpenAI and Anthropic say they may do ("60,000 requests per
        minute may be enforced as 1,000 requests per second"), so a load above the limit draws
        429s within a second; 60: a whole minute's allowance, so a burst of the full limit
        passes at once and a run shorter than a minute of overload may never see a 429 (10 s
        levels at 2-4 times an rpm of 600 saw none). A request larger than the bucket is
        admitted when it is full and leaves it in debt.
    p_500, p_503 : float
        Probability that an admitted request is answered at once with that status.
    p_drop : float
        Probability that the connection is closed mid-response (after half the tokens).
    p_malformed : float
        Probability that one SSE event (or the JSON body) is not valid JSON.
    p_stall : float
        Probability that a request hangs for ``stall_s`` before being served.
    stall_s : float
        Length of a stall.
    seed : int
        Seed of every random draw; request ``i`` (in arrival order) uses its own generator
        derived from ``(seed, i)``, so the same options and seed give the same draws.
    model : str
        Model name listed by ``GET /v1/models`` and echoed in responses.
    cache_min_tokens : int
        Shortest cacheable prompt prefix (Anthropic: 1,024 tokens for Sonnet and Opus, 2,048
        for Haiku; OpenAI: 1,024). Shorter prefixes are never cached (:mod:`llmlat.sim.cache`).
    cache_ttl_s : float
        Life of a cache entry after its last use (Anthropic's ephemeral cache: 5 minutes,
        refreshed on each hit); 0 turns the prompt cache off.
    truth_limit : int or None
        Most truth rows kept, the oldest dropped first (about 400 bytes each), so a simulator
        left running does not grow without bound. ``None``: keep every row.
    """

    mode: str = _opt("batch", "replica model: batch (continuous batching) or mmc (M/M/c)")
    slots: int = _opt(32, "batch cap (batch) or number of servers (mmc)")
    t0_s: float = _opt(0.02, "fixed part of one decode step, seconds (batch)")
    t1_s: float = _opt(0.0055, "per-sequence part of one decode step, seconds (batch)")
    prefill_per_token_s: float = _opt(5e-5, "prefill seconds per uncached prompt token (batch)")
    prefill_chunk_tokens: int = _opt(2048, "most prompt tokens prefilled per step (batch)")
    context_tokens: int | None = _opt(131_072, "context window, prompt + max_tokens (none: off)")
    max_body_bytes: int = _opt(32 * 1024**2, "largest request body, bytes (larger: 413)")
    mu: float = _opt(1.0, "service rate per server, requests/s (mmc)")
    output_tokens: int = _opt(32, "mean output tokens when max_tokens is not set")
    output_dist: str = _opt("uniform", "output length distribution: fixed, uniform, geometric")
    max_output_tokens: int = _opt(4096, "largest max_tokens accepted")
    queue_limit: int | None = _opt(None, "most waiting requests before 429 (none: unbounded)")
    rpm: float | None = _opt(None, "requests per minute bucket (none: off)")
    tpm: float | None = _opt(None, "tokens per minute bucket (none: off)")
    itpm: float | None = _opt(None, "input tokens per minute bucket (none: off)")
    otpm: float | None = _opt(None, "output tokens per minute bucket (none: off)")
    limit_burst_s: float = _opt(1.0, "seconds of the per-minute limits a bucket holds (burst)")
    p_500: float = _opt(0.0, "probability of an immediate 500")
    p_503: float = _opt(0.0, "probability of an immediate 503")
    p_drop: float = _opt(0.0, "probability of a connection dropped mid-response")
    p_malformed: float = _opt(0.0, "probability of a malformed SSE event / JSON body")
    p_stall: float = _opt(0.0, "probability of a stall of stall_s before service")
    stall_s: float = _opt(3600.0, "length of a stall, seconds")
    seed: int = _opt(0, "seed of every random draw")
    model: str = _opt("llmlat-sim", "model name served")
    cache_min_tokens: int = _opt(1024, "shortest cacheable prompt prefix, tokens")
    cache_ttl_s: float = _opt(300.0, "prompt cache entry life after last use, s (0: no cache)")
    truth_limit: int | None = _opt(200_000, "most truth rows kept, oldest dropped (none: all)")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _check(f.name, getattr(self, f.name)))
        if self.p_500 + self.p_503 + self.p_drop + self.p_malformed + self.p_stall > 1:
            raise ValueError("p_500 + p_503 + p_drop + p_malformed + p_stall: must be <= 1")

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> SimConfig:
        """Build the config of a named preset, with some fields replaced.

        Parameters
        ----------
        name : str
            A key of :data:`PRESETS`.
        **overrides
            Field values replacing the preset's.

        Returns
        -------
        SimConfig

        Raises
        ------
        ValueError
            Unknown preset or field, or an invalid value (the message names it).
        """
        if name not in PRESETS:
            raise ValueError(f"preset: unknown {name!r}; choose from {', '.join(PRESETS)}")
        unknown = sorted(set(overrides) - _FIELDS.keys())
        if unknown:
            raise ValueError(f"{unknown[0]}: not a simulator option")
        return cls(**{**PRESETS[name], **overrides})

    def replace(self, **changes: Any) -> SimConfig:
        """Return a copy with some fields changed (validated like the constructor).

        Parameters
        ----------
        **changes
            Field values to change.

        Returns
        -------
        SimConfig
        """
        unknown = sorted(set(changes) - _FIELDS.keys())
        if unknown:
            raise ValueError(f"{unknown[0]}: not a simulator option")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Return the options as a plain dict (JSON-serialisable, for dataset metadata).

        Returns
        -------
        dict
        """
        return dataclasses.asdict(self)


#: Named configurations: preset name -> field overrides of the :class:`SimConfig` defaults.
#:
#: ``article``
#:     The replica of the article: continuous batching capped at 32 sequences, a queue of 32,
#:     429 beyond. Output 16..48 tokens (mean 32), step ``0.02 + 0.0055 * batch`` s, so one
#:     request alone takes about 0.8 s, one in a full batch about 6.3 s, and the replica serves
#:     about 5 requests/s once the batch is full (32 / (32 * 0.196 s)). Latency grows with the
#:     batch up to 32 in flight, jumps when requests queue (33..64 in flight: a wait of up to
#:     one more full batch) and 429s start past 64: a 100-way level shows the cliff a 10-way
#:     one does not. A level of ``n`` requests at concurrency ``c`` takes about ``n / X(c)``
#:     seconds, X(1) ~ 1.2/s, X(10) ~ 4.3/s, X(>=32) ~ 5/s: levels 1, 2, 5, 10, 20, 50, 100
#:     with ``max(c, 5)`` requests each (429s not retried) took 40 s on the development machine.
#: ``mmc``
#:     An exact M/M/4 with ``mu = 2``/s per server and 16 tokens per request.
#: ``instant``
#:     Zero service time, 16-token responses, no limits: for benchmarks and protocol checks.
#: ``flaky``
#:     ``article`` plus 1% each of 500, 503, dropped connections, malformed events, and 0.5%
#:     stalls of 120 s.
PRESETS: dict[str, dict[str, Any]] = {
    "article": {"queue_limit": 32},
    "mmc": {"mode": "mmc", "slots": 4, "mu": 2.0, "output_tokens": 16, "output_dist": "fixed"},
    "instant": {
        "t0_s": 0.0,
        "t1_s": 0.0,
        "prefill_per_token_s": 0.0,
        "output_tokens": 16,
        "output_dist": "fixed",
    },
    "flaky": {
        "queue_limit": 32,
        "p_500": 0.01,
        "p_503": 0.01,
        "p_drop": 0.01,
        "p_malformed": 0.01,
        "p_stall": 0.005,
        "stall_s": 120.0,
    },
}

_FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(SimConfig)}
_TYPES: dict[str, Any] = typing.get_type_hints(SimConfig)
_CHOICES = {"mode": MODES, "output_dist": OUTPUT_DISTS}
_POSITIVE = {
    "slots",
    "mu",
    "output_tokens",
    "max_output_tokens",
    "rpm",
    "tpm",
    "itpm",
    "otpm",
    "limit_burst_s",
    "truth_limit",
    "prefill_chunk_tokens",
    "context_tokens",
    "max_body_bytes",
    "cache_min_tokens",
}


def _base_type(name: str) -> tuple[type, bool]:
    """Return the scalar type of a field and whether it accepts None."""
    hint = _TYPES[name]
    args = typing.get_args(hint)
    if args:
        return next(a for a in args if a is not type(None)), True
    return hint, False


def _check(name: str, value: Any) -> Any:
    """Validate (and normalise ints given as floats) one field value."""
    kind, nullable = _base_type(name)
    if value is None:
        if nullable:
            return None
        raise ValueError(f"{name}: must not be None")
    if kind is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name}: must be an integer, got {value!r}")
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{name}: must be a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"{name}: must be finite, got {value!r}")
    elif not isinstance(value, str) or not value:
        raise ValueError(f"{name}: must be a non-empty string, got {value!r}")
    if name in _CHOICES and value not in _CHOICES[name]:
        raise ValueError(f"{name}: must be one of {', '.join(_CHOICES[name])}, got {value!r}")
    if kind is not str:
        if name in _POSITIVE and value <= 0:
            raise ValueError(f"{name}: must be > 0, got {value!r}")
        if value < 0:
            raise ValueError(f"{name}: must be >= 0, got {value!r}")
        if name.startswith("p_") and value > 1:
            raise ValueError(f"{name}: must be a probability in [0, 1], got {value!r}")
    return value


class Option(typing.NamedTuple):
    """Description of one :class:`SimConfig` field, for building command lines and magics."""

    name: str
    type: type
    nullable: bool
    default: Any
    help: str
    choices: tuple[str, ...] | None


def option_fields() -> list[Option]:
    """Describe every option, for building command lines and magics.

    Returns
    -------
    list of Option
        One per :class:`SimConfig` field, in declaration order: name, scalar type, whether
        None is allowed, default, help text, and the allowed values of a choice field.
    """
    out = []
    for name, f in _FIELDS.items():
        kind, nullable = _base_type(name)
        out.append(Option(name, kind, nullable, f.default, f.metadata["help"], _CHOICES.get(name)))
    return out


def parse_option(name: str, value: Any) -> Any:
    """Convert one option value, possibly text, to the field's type.

    Parameters
    ----------
    name : str
        A :class:`SimConfig` field name (``-`` is read as ``_``).
    value : object
        The value; strings are parsed (``"none"`` means None for fields that allow it).

    Returns
    -------
    object
        The typed value (validated when the config is built).

    Raises
    ------
    ValueError
        Unknown option or unparsable value; the message names the option.
    """
    name = name.replace("-", "_")
    if name not in _FIELDS:
        raise ValueError(f"{name}: not a simulator option")
    if not isinstance(value, str):
        return value
    kind, nullable = _base_type(name)
    text = value.strip()
    if nullable and text.lower() in ("none", "off", ""):
        return None
    if kind is str:
        return text
    try:
        return int(text) if kind is int else float(text)
    except ValueError:
        raise ValueError(f"{name}: expected {kind.__name__}, got {value!r}") from None


def config_from_options(
    preset: str | SimConfig | dict[str, Any] | None = None, **options: Any
) -> SimConfig:
    """Build a :class:`SimConfig` from a preset and option values given as text or typed.

    Parameters
    ----------
    preset : str, SimConfig, dict or None
        Starting point: a preset name, a config, a dict of field values, or None for the
        defaults.
    **options
        Field values (text such as ``"8"`` or ``"none"`` is parsed); names may use ``-``.
        A value of None means "not given" and keeps the preset's value.

    Returns
    -------
    SimConfig

    Raises
    ------
    ValueError
        Unknown preset or option, or an invalid value; the message names it.

    Examples
    --------
    >>> config_from_options("article", slots="8", queue_limit="none").queue_limit is None
    True
    """
    given = {k.replace("-", "_"): parse_option(k, v) for k, v in options.items() if v is not None}
    if preset is None:
        return SimConfig().replace(**given)
    if isinstance(preset, SimConfig):
        return preset.replace(**given)
    if isinstance(preset, dict):
        base = {k.replace("-", "_"): parse_option(k, v) for k, v in preset.items()}
        return SimConfig().replace(**{**base, **given})
    if isinstance(preset, str):
        return SimConfig.from_preset(preset, **given)
    raise ValueError(f"preset: expected a name, SimConfig or dict, got {type(preset).__name__}")
