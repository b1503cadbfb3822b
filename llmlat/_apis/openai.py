"""OpenAI's chat/completions and completions APIs (and the many servers that copy them).

A stream is a series of ``data: {chunk}`` events ended by ``data: [DONE]``; with
``stream_options.include_usage`` (always asked for) the usage comes in a last chunk before
``[DONE]``. Generated content is text, reasoning (``reasoning_content``, ``reasoning``), a
refusal or tool-call arguments; a role-only chunk is not content.
"""

from __future__ import annotations

from typing import Any

from llmlat._apis.base import BodyResult, Endpoint, StreamParser, as_int, reason_text

__all__ = ["ChatEndpoint", "CompletionsEndpoint"]

_DELTA_KEYS = ("content", "reasoning_content", "reasoning", "refusal")


def openai_usage(out: Any, usage: dict[str, Any]) -> None:
    """Copy OpenAI-style usage (prompt, completion, cached tokens) onto ``out``."""
    out.prompt_tokens = as_int(usage.get("prompt_tokens"))
    out.completion_tokens = as_int(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        out.cached_tokens = as_int(details.get("cached_tokens"))


class _OpenAIStream(StreamParser):
    __slots__ = ()
    #: where a choice's generated text is: ``choice[_part][_key]`` (``_part`` None: the choice)
    _part: str | None = None
    _key = ""

    def _non_json(self, data: bytes) -> bool:
        if data.strip() == b"[DONE]":
            self._end()
            return True
        return False

    def _event(self, obj: dict[str, Any]) -> bool:
        # runs once per token: a chunk is recognised by its choices, anything else may be an error
        choices = obj.get("choices")
        if choices is None and self._error(obj):
            return True
        if choices:
            content = False
            for choice in choices:
                if not content:
                    part = choice if self._part is None else choice.get(self._part)
                    if part:
                        text = part.get(self._key)
                        content = bool(text and type(text) is str) or self._other_content(part)
                if reason := choice.get("finish_reason"):
                    self.done = True
                    self.finish_reason = reason_text(reason)
            if content:
                self.times.append(self._t)
        usage = obj.get("usage")
        if usage:
            openai_usage(self, usage)
        return False

    def _other_content(self, part: dict[str, Any]) -> bool:
        """Whether a choice without text carries other generated content."""
        return False


class ChatStream(_OpenAIStream):
    """Stream parser of ``/v1/chat/completions``."""

    __slots__ = ()
    _what = "openai-chat chunk"
    _part = "delta"
    _key = "content"

    def _other_content(self, part: dict[str, Any]) -> bool:
        for key in _DELTA_KEYS:
            value = part.get(key)
            if value and isinstance(value, str):
                return True
        calls = part.get("tool_calls") or ()
        return any((c.get("function") or {}).get("arguments") for c in calls)


class CompletionsStream(_OpenAIStream):
    """Stream parser of ``/v1/completions``."""

    __slots__ = ()
    _what = "openai-completions chunk"
    _key = "text"


class _OpenAIEndpoint(Endpoint):
    def body(
        self,
        payload: dict[str, Any],
        *,
        model: str | None = None,
        stream: bool = True,
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        body = super().body(payload, model=model, stream=stream, max_tokens=max_tokens)
        if stream:
            # usage (prompt, completion, cached tokens) only comes in a stream when asked for
            options = body.get("stream_options")
            body["stream_options"] = {**(options if isinstance(options, dict) else {})}
            body["stream_options"]["include_usage"] = True
        else:
            body.pop("stream_options", None)  # the API rejects it without stream
        return body

    def _body_usage(self, out: BodyResult, usage: dict[str, Any]) -> None:
        openai_usage(out, usage)

    def _body_finish(self, obj: dict[str, Any]) -> Any:
        return obj["choices"][0].get("finish_reason")


class ChatEndpoint(_OpenAIEndpoint):
    """``openai-chat``: ``POST /v1/chat/completions``."""

    api = "openai-chat"
    path = "/v1/chat/completions"
    _parser = ChatStream

    def _max_tokens_key(self, body: dict[str, Any]) -> str:
        # newer OpenAI models take only max_completion_tokens: keep it if the payload uses it
        return "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"

    def _body_content(self, obj: dict[str, Any]) -> bool:
        msg = obj["choices"][0]["message"]
        return any(msg.get(k) for k in (*_DELTA_KEYS, "tool_calls"))


class CompletionsEndpoint(_OpenAIEndpoint):
    """``openai-completions``: ``POST /v1/completions``."""

    api = "openai-completions"
    path = "/v1/completions"
    _parser = CompletionsStream

    def _body_content(self, obj: dict[str, Any]) -> bool:
        return bool(obj["choices"][0]["text"])
