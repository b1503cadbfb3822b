"""The built-in simulated LLM provider: a real HTTP server that knows the ground truth.

:class:`Simulator` serves the OpenAI chat/completions and Anthropic messages APIs on 127.0.0.1
in front of a model of one provider replica (:class:`SimConfig` holds every option):

- ``mode="batch"`` (default), continuous batching: at most ``slots`` sequences decode together;
  each step emits one token to every active sequence and lasts ``t0_s + t1_s * batch_size``,
  plus ``prefill_per_token_s`` per uncached prompt token it prefills (chunked prefill: at most
  ``prefill_chunk_tokens`` per step, so a long prompt slows a few steps a little, not one step
  by its whole prefill). A request that cannot join waits in a FIFO queue.
- ``mode="mmc"``: ``slots`` servers, FIFO queue, exponential service time of rate ``mu`` per
  server, tokens paced evenly over it: an exact M/M/c, to validate fitted models.
- Admission: a waiting-queue limit (``queue_limit``) and per-minute token buckets (``rpm``,
  ``tpm``, and Anthropic's separate ``itpm`` and ``otpm``; refilled continuously, holding
  ``limit_burst_s`` seconds of the limit); a refusal
  is a 429 with ``Retry-After`` (a full queue: its length over the service rate, the expected
  wait for a slot; a bucket: the real time until it holds the tokens) and the rate-limit
  headers of the API: OpenAI's ``x-ratelimit-*`` with the exact wait in ``retry-after-ms`` (as
  Azure OpenAI sends it), Anthropic's ``anthropic-ratelimit-*``.
- Limits as the providers apply them: a context window (``context_tokens``; longer requests get
  400 ``context_length_exceeded``), a body size limit (``max_body_bytes``; 413), JSON nested too
  deeply (400), and Anthropic requests without ``max_tokens`` (400, as the real API).
- A prompt cache as the providers describe theirs (:mod:`llmlat.sim.cache`): Anthropic's
  ``cache_control`` breakpoints and OpenAI's automatic prefixes, ``cache_min_tokens`` (1,024),
  a ``cache_ttl_s`` life (5 minutes) refreshed on use; a hit is not prefilled again, and the
  usage says ``cache_read_input_tokens`` / ``cache_creation_input_tokens`` (Anthropic) or
  ``prompt_tokens_details.cached_tokens`` (OpenAI).
- Faults with seeded probabilities: 500/503, a connection dropped mid-stream, a malformed
  event, a stall of ``stall_s``.
- Ground truth per request: arrival, admission or refusal, queue wait, service start, first and
  last token, tokens (:meth:`Simulator.truth`, ``GET /llmlat/truth``), in absolute
  ``time.perf_counter()`` seconds.

Time runs on the event loop's clock with ideal (non-drifting) step boundaries; every random draw
of request ``i`` comes from a generator seeded by ``(seed, i)``, so the same options and seed give
the same output lengths, service times and faults. ``PRESETS`` names ready-made replicas, among
them ``article`` (about 5 requests/s with a full batch of 32, a queue of 32, 429s beyond).

Examples
--------
>>> from llmlat.sim import Simulator
>>> with Simulator(preset="article") as sim:  # doctest: +SKIP
...     print(sim.url)  # POST {sim.url}/v1/chat/completions
"""

from typing import TYPE_CHECKING, Any

from llmlat.sim.config import PRESETS, SimConfig, config_from_options

if TYPE_CHECKING:  # pragma: no cover
    from llmlat.sim.simulator import Simulator

__all__ = ["PRESETS", "SimConfig", "Simulator", "config_from_options"]


def __getattr__(name: str) -> Any:
    # the server (aiohttp, pandas) loads on first use: `llmlat --help` and the option list
    # of `llmlat sim` / `%llmsim` need only the config
    if name == "Simulator":
        from llmlat.sim.simulator import Simulator

        return Simulator
    raise AttributeError(f"module 'llmlat.sim' has no attribute {name!r}")
