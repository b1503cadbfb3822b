"""The simulator's prompt cache, as the providers describe theirs (no I/O, no HTTP).

A request offers its cacheable prefixes (:class:`Prefix`: a key and a token count, shortest
first), built by :mod:`llmlat.sim.protocol`:

- Anthropic: one prefix per ``cache_control: {"type": "ephemeral"}`` block (at most 4), the
  prompt up to and including that block. Only marked prefixes cache.
- OpenAI: automatic; one prefix per message boundary (the whole prompt for completions).

:meth:`PrefixCache.lookup` finds the longest prefix already cached and ready, and writes the
longer ones:

- A prefix shorter than ``min_tokens`` (Anthropic: 1,024 for Sonnet and Opus; OpenAI: 1,024) is
  never cached, marked or not.
- An entry lives ``ttl_s`` (5 minutes) after its last use: a hit refreshes it.
- An entry is readable only once a request that wrote it has finished prefilling: requests
  sent together all miss and all write, as on the real APIs ("the cache entry becomes
  available once the first response begins").
- OpenAI reports ``cached_tokens`` in steps of 128 past the first 1,024; Anthropic reports the
  marked prefix exactly. The tokens read are not prefilled again: a hit makes prefill cheaper.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CacheUse", "Prefix", "PrefixCache"]

_MAX_ENTRIES = 10_000
_OPENAI_STEP = 128  # OpenAI's cache hits grow in 128-token increments past the minimum


@dataclass(frozen=True, slots=True)
class Prefix:
    """A cacheable prompt prefix.

    Attributes
    ----------
    key : int
        Hash of the prefix's text blocks.
    tokens : int
        Its length in tokens.
    """

    key: int
    tokens: int


@dataclass(slots=True)
class CacheUse:
    """What one request did with the cache.

    Attributes
    ----------
    read_tokens : int
        Prompt tokens served from the cache (not prefilled).
    write_tokens : int
        Tokens written beyond them (Anthropic's ``cache_creation_input_tokens``; OpenAI
        reports no writes, the server sends 0 there).
    writes : list of int
        Keys this request writes, to mark ready once it has prefilled (:meth:`PrefixCache.wrote`).
    """

    read_tokens: int = 0
    write_tokens: int = 0
    writes: list[int] = field(default_factory=list)


@dataclass(slots=True)
class _Entry:
    tokens: int
    expires: float
    ready: bool = False
    writers: list[Any] = field(default_factory=list)  # Sequences still prefilling it


def _prefilled(seq: Any) -> bool:
    return seq.emitted > 0  # its first token: the end of the step that finished its prompt


class PrefixCache:
    """A replica's prefix cache, on the event loop's clock.

    Parameters
    ----------
    min_tokens : int
        Shortest cacheable prefix.
    ttl_s : float
        Life of an entry after its last use, seconds.
    """

    def __init__(self, min_tokens: int, ttl_s: float) -> None:
        self.min_tokens = min_tokens
        self.ttl_s = ttl_s
        self._entries: OrderedDict[int, _Entry] = OrderedDict()

    def lookup(self, api: str, prefixes: list[Prefix], now: float) -> CacheUse:
        """Read the longest ready prefix and write the longer ones.

        Parameters
        ----------
        api : str
            The flavour: Anthropic reports the prefix exactly, OpenAI in 128-token steps.
        prefixes : list of Prefix
            The request's cacheable prefixes, shortest first.
        now : float
            The loop's time.

        Returns
        -------
        CacheUse
        """
        use = CacheUse()
        cacheable = [p for p in prefixes if p.tokens >= self.min_tokens]
        hit = -1
        for i, prefix in enumerate(cacheable):
            entry = self._live(prefix.key, now)
            if entry is not None and entry.ready:
                hit = i
        if hit >= 0:
            matched = cacheable[hit].tokens
            if api == "anthropic-messages":
                use.read_tokens = matched
            else:
                extra = (matched - self.min_tokens) // _OPENAI_STEP * _OPENAI_STEP
                use.read_tokens = self.min_tokens + extra
            for prefix in cacheable[: hit + 1]:  # a use refreshes the prefix and what it holds
                if prefix.key in self._entries:
                    self._touch(prefix.key, now)
        longer = cacheable[hit + 1 :]
        if longer:
            use.writes = [p.key for p in longer]
            if api == "anthropic-messages":
                use.write_tokens = longer[-1].tokens - (cacheable[hit].tokens if hit >= 0 else 0)
        return use

    def wrote(self, use: CacheUse, seq: Any, prefixes: list[Prefix], now: float) -> None:
        """Register ``seq`` as the writer of the entries ``use`` writes.

        Parameters
        ----------
        use : CacheUse
            From :meth:`lookup`.
        seq : Sequence
            The admitted request; its entries become readable once it has prefilled.
        prefixes : list of Prefix
            The same prefixes as given to :meth:`lookup`.
        now : float
            The loop's time.
        """
        tokens = {p.key: p.tokens for p in prefixes}
        for key in use.writes:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(tokens[key], now + self.ttl_s)
                if len(self._entries) > _MAX_ENTRIES:
                    self._entries.popitem(last=False)
            entry.writers = [*[w for w in entry.writers if not w.finished][-63:], seq]
            self._touch(key, now)

    def _live(self, key: int, now: float) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires <= now:
            del self._entries[key]
            return None
        if not entry.ready and any(_prefilled(w) for w in entry.writers):
            entry.ready, entry.writers = True, []
        return entry

    def _touch(self, key: int, now: float) -> None:
        entry = self._entries[key]
        entry.expires = now + self.ttl_s
        self._entries.move_to_end(key)
