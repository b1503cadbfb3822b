"""Anthropic's messages API.

A stream is a series of typed events (``message_start``, ``content_block_delta``, ``ping``,
``message_delta``, ``message_stop``, ``error``); the answer ends at ``message_stop``. Generated
content is a delta of text, thinking or tool input (``partial_json``). ``input_tokens`` excludes
cache reads and writes; ``prompt_tokens`` counts them all, as OpenAI's does, and
``cached_tokens`` / ``cache_creation_tokens`` keep ``cache_read_input_tokens`` /
``cache_creation_input_tokens`` as reported.
"""

from __future__ import annotations

from typing import Any

from llmlat._apis.base import BodyResult, Endpoint, StreamParser, as_int, reason_text

__all__ = ["ANTHROPIC_VERSION", "MessagesEndpoint"]

ANTHROPIC_VERSION = "2023-06-01"

_DELTA_KEYS = ("text", "thinking", "partial_json")


def anthropic_usage(out: Any, usage: dict[str, Any]) -> None:
    """Copy Anthropic usage onto ``out`` (``output_tokens`` is cumulative: the last wins)."""
    inp = as_int(usage.get("input_tokens"))
    if inp is not None:
        read = as_int(usage.get("cache_read_input_tokens"))
        write = as_int(usage.get("cache_creation_input_tokens"))
        out.prompt_tokens = inp + (read or 0) + (write or 0)
        if read is not None:
            out.cached_tokens = read
        if write is not None:
            out.cache_creation_tokens = write
    completion = as_int(usage.get("output_tokens"))
    if completion is not None:
        out.completion_tokens = completion


class MessagesStream(StreamParser):
    """Stream parser of ``/v1/messages``."""

    __slots__ = ()
    _what = "anthropic-messages event"

    def _event(self, obj: dict[str, Any]) -> bool:
        kind = obj.get("type")
        if kind == "content_block_delta":
            delta = obj["delta"]
            for key in _DELTA_KEYS:
                value = delta.get(key)
                if value and isinstance(value, str):
                    self.times.append(self._t)
                    break
        elif kind == "message_stop":
            self._end()
            return True
        elif self._error(obj):
            return True
        else:
            if kind == "message_delta" and isinstance(obj.get("delta"), dict):
                self.finish_reason = reason_text(obj["delta"].get("stop_reason"))
            usage = obj.get("usage")
            if usage is None and isinstance(obj.get("message"), dict):
                usage = obj["message"].get("usage")
            if isinstance(usage, dict):
                anthropic_usage(self, usage)
        return False


class MessagesEndpoint(Endpoint):
    """``anthropic-messages``: ``POST /v1/messages``."""

    api = "anthropic-messages"
    path = "/v1/messages"
    _parser = MessagesStream

    def headers(self, api_key: str | None) -> dict[str, str]:
        """Request headers: ``anthropic-version``, and ``x-api-key`` when a key is given."""
        headers = {"Content-Type": "application/json", "anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def _body_content(self, obj: dict[str, Any]) -> bool:
        blocks = obj["content"]
        return any(b.get("text") or b.get("thinking") or b.get("input") for b in blocks)

    def _body_usage(self, out: BodyResult, usage: dict[str, Any]) -> None:
        anthropic_usage(out, usage)

    def _body_finish(self, obj: dict[str, Any]) -> Any:
        return obj.get("stop_reason")
