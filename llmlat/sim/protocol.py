"""The wire formats the simulator speaks: request validation and response bytes (no I/O).

Three flavours: OpenAI ``/v1/chat/completions`` and ``/v1/completions``, and Anthropic
``/v1/messages``. :func:`parse_request` turns a JSON body into a :class:`Parsed` request or raises
:class:`BadRequest`; a :class:`Formatter` renders the stream events (pre-encoded per request, so a
token costs one bytes concatenation) and the non-streamed body.

Prompt tokens are counted as ``ceil(characters / 4)`` per text. Generated text is a fixed
cycle of short words, one word per token.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from llmlat.sim.cache import Prefix

__all__ = [
    "API_PATHS",
    "BadRequest",
    "Formatter",
    "Parsed",
    "count_tokens",
    "error_body",
    "parse_request",
]

#: API name -> URL path.
API_PATHS = {
    "openai-chat": "/v1/chat/completions",
    "openai-completions": "/v1/completions",
    "anthropic-messages": "/v1/messages",
}

_WORDS: tuple[str, ...]  # grows below
_WORDS = ("the", "replica", "answers", "each", "request", "with", "a", "steady", "stream")
_WORDS += (
    "of",
    "plain",
    "words",
    "while",
    "its",
    "queue",
    "decides",
    "how",
    "long",
    "one",
    "waits",
)
_TOKENS = tuple(f"{w} " for w in _WORDS)
_TOKEN_BYTES = tuple(t.encode() for t in _TOKENS)


class BadRequest(ValueError):
    """A request body the API would refuse with 400.

    Parameters
    ----------
    message : str
        What is wrong.
    param : str or None
        The offending field.
    code : str or None
        OpenAI's error ``code`` (e.g. ``"context_length_exceeded"``).
    """

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(slots=True)
class Parsed:
    """A validated generation request.

    Attributes
    ----------
    model : str
        Requested model name (echoed back).
    stream : bool
        Streamed (SSE) or one JSON body.
    include_usage : bool
        OpenAI ``stream_options.include_usage`` (Anthropic streams always carry usage).
    max_tokens : int or None
        Requested output length.
    prompt_tokens : int
        Input size in tokens.
    prefixes : list of Prefix
        The cacheable prompt prefixes, shortest first (:mod:`llmlat.sim.cache`): Anthropic's
        ``cache_control`` blocks, OpenAI's message boundaries.
    """

    model: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    prompt_tokens: int
    prefixes: list[Prefix] = field(default_factory=list)


def count_tokens(text: str) -> int:
    """Count the tokens of a text the way the simulator bills it: ``ceil(len / 4)``.

    Parameters
    ----------
    text : str

    Returns
    -------
    int
    """
    return (len(text) + 3) // 4


def _want(body: dict, name: str, kinds: type | tuple[type, ...], what: str) -> Any:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise BadRequest(f"'{name}' must be {what}", name)
    if not isinstance(value, kinds):
        raise BadRequest(f"'{name}' must be {what}", name)
    return value


def _content_text(content: Any, param: str) -> str:
    """Text of a message content: a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("text", ""), str):
                raise BadRequest(f"'{param}[{i}]' must be a content part object", param)
            texts.append(part.get("text", ""))
        return "".join(texts)
    raise BadRequest(f"'{param}' must be a string or a list of content parts", param)


def _messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if messages is None:
        raise BadRequest("'messages' is required", "messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array", "messages")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise BadRequest(f"'messages[{i}]' must be an object with a string 'role'", "messages")
        if "content" not in msg:
            raise BadRequest(f"'messages[{i}].content' is required", "messages")
    return messages


_MAX_CACHE_MARKS = 4


def _has_cache_mark(block: Any) -> bool:
    return isinstance(block, dict) and (block.get("cache_control") or {}).get("type") == "ephemeral"


def parse_request(
    api: str, raw: bytes, max_output_tokens: int, context_tokens: int | None = None
) -> Parsed:
    """Validate a request body of one API flavour.

    Parameters
    ----------
    api : str
        A key of :data:`API_PATHS`.
    raw : bytes
        The HTTP body.
    max_output_tokens : int
        Largest ``max_tokens`` accepted.
    context_tokens : int or None
        Context window: prompt + ``max_tokens`` beyond it is refused as the provider does.

    Returns
    -------
    Parsed

    Raises
    ------
    BadRequest
        Malformed or too deeply nested JSON, a missing or mistyped field (Anthropic requires
        ``max_tokens``), or a request longer than the context window.
    """
    try:
        body = json.loads(raw.decode())
    except ValueError:  # UnicodeDecodeError is one
        raise BadRequest("the body is not valid JSON") from None
    except RecursionError:  # the decoder recurses per nesting level
        raise BadRequest("the body's JSON is nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required and must be a non-empty string", "model")
    stream = _want(body, "stream", bool, "a boolean") or False
    max_name = "max_tokens"
    max_tokens = _want(body, "max_tokens", int, "an integer")
    if api == "anthropic-messages" and max_tokens is None:
        raise BadRequest("max_tokens: Field required", "max_tokens")  # the real API's words
    if api == "openai-chat" and max_tokens is None:
        max_name = "max_completion_tokens"
        max_tokens = _want(body, max_name, int, "an integer")
    if max_tokens is not None and not 1 <= max_tokens <= max_output_tokens:
        raise BadRequest(f"'{max_name}' must be between 1 and {max_output_tokens}", max_name)
    options = _want(body, "stream_options", dict, "an object") or {}
    include_usage = options.get("include_usage") is True
    parsed = Parsed(model, stream, include_usage, max_tokens, 0)
    if api == "openai-chat":
        messages = _messages(body)
        texts = [
            _content_text(m["content"], f"messages[{i}].content") for i, m in enumerate(messages)
        ]
        parsed.prompt_tokens = max(1, sum(map(count_tokens, texts)))
        # automatic prefix caching: every message boundary is a prefix
        roles = [m["role"] for m in messages]
        parsed.prefixes = _prefixes("openai", texts, range(len(texts)), roles)
    elif api == "openai-completions":
        prompt = body.get("prompt")
        if prompt is None:
            raise BadRequest("'prompt' is required", "prompt")
        if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
            prompt = "".join(prompt)
        if not isinstance(prompt, str):
            raise BadRequest("'prompt' must be a string or an array of strings", "prompt")
        parsed.prompt_tokens = max(1, count_tokens(prompt))
        parsed.prefixes = _prefixes("openai", [prompt], [0])
    else:
        _parse_anthropic(body, parsed)
    if context_tokens is not None:
        _check_context(api, parsed, context_tokens)
    return parsed


def _check_context(api: str, parsed: Parsed, context_tokens: int) -> None:
    """Refuse a request longer than the context window, in the provider's words."""
    prompt, completion = parsed.prompt_tokens, parsed.max_tokens or 0
    if prompt + completion <= context_tokens:
        return
    if api == "anthropic-messages":
        if prompt > context_tokens:
            message = f"prompt is too long: {prompt} tokens > {context_tokens} maximum"
        else:
            message = (
                f"input length and `max_tokens` exceed context limit: {prompt} + {completion} "
                f"> {context_tokens}, decrease input length or `max_tokens` and try again"
            )
    else:
        message = (
            f"This model's maximum context length is {context_tokens} tokens. However, you "
            f"requested {prompt + completion} tokens ({prompt} in the messages, {completion} "
            "in the completion). Please reduce the length of the messages or completion."
        )
    field = "prompt" if api == "openai-completions" else "messages"
    raise BadRequest(message, field, "context_length_exceeded")


def _parse_anthropic(body: dict, parsed: Parsed) -> None:
    """Count an Anthropic prompt; the prefix up to the last ``cache_control`` block caches."""
    system = body.get("system")
    blocks: list[Any] = []
    if isinstance(system, str):
        blocks.append(system)
    elif isinstance(system, list):
        blocks.extend(system)
    elif system is not None:
        raise BadRequest("'system' must be a string or a list of text blocks", "system")
    for msg in _messages(body):
        content = msg["content"]
        if isinstance(content, str):
            blocks.append(content)
        elif isinstance(content, list):
            blocks.extend(content)
        else:
            raise BadRequest("'content' must be a string or a list of content blocks", "messages")
    texts: list[str] = []
    marks: list[int] = []
    for i, block in enumerate(blocks):
        if isinstance(block, str):
            texts.append(block)
        elif isinstance(block, dict) and isinstance(block.get("text", ""), str):
            texts.append(block.get("text", ""))
            if _has_cache_mark(block):
                marks.append(i)
        else:
            raise BadRequest("content blocks must be objects with a string 'text'", "messages")
    if len(marks) > _MAX_CACHE_MARKS:  # the real API's rule and words
        raise BadRequest(
            f"A maximum of {_MAX_CACHE_MARKS} blocks with cache_control may be provided. "
            f"Found {len(marks)}.",
            "messages",
        )
    parsed.prompt_tokens = max(1, sum(map(count_tokens, texts)))
    parsed.prefixes = _prefixes("anthropic", texts, marks)


def _prefixes(
    family: str, texts: list[str], ends: Any, roles: list[str] | None = None
) -> list[Prefix]:
    """Return the prefixes ending at blocks ``ends`` (ascending), keyed by all before."""
    out, key, tokens, start = [], hash(family), 0, 0
    for end in ends:
        for i in range(start, end + 1):
            key = hash((key, roles[i] if roles else "", texts[i]))
            tokens += count_tokens(texts[i])
        start = end + 1
        out.append(Prefix(key, tokens))
    return out


def error_body(
    api: str, status: int, message: str, param: str | None = None, code: str | None = None
) -> dict:
    """Return the JSON error body of a flavour.

    Parameters
    ----------
    api : str
        API flavour; Anthropic's shape for "anthropic-messages", OpenAI's otherwise.
    status : int
        HTTP status.
    message : str
        Human-readable message.
    param : str or None
        Offending field (OpenAI only).
    code : str or None
        OpenAI's error code; the status's usual one when None.

    Returns
    -------
    dict
    """
    if api == "anthropic-messages":
        kind = {
            400: "invalid_request_error",
            404: "not_found_error",
            413: "request_too_large",
            429: "rate_limit_error",
            503: "overloaded_error",
        }.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = {
        400: "invalid_request_error",
        404: "invalid_request_error",
        413: "invalid_request_error",
        429: "requests",
    }.get(status, "server_error")
    code = code or {429: "rate_limit_exceeded", 404: "not_found", 413: "request_too_large"}.get(
        status
    )
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()  # default separators: the C encoder's fast path


@functools.lru_cache(maxsize=4096)
def _text(n_tokens: int) -> str:
    return "".join(_TOKENS[i % len(_TOKENS)] for i in range(n_tokens))


class Formatter:
    """Renders one response of a flavour: SSE events and the non-streamed body.

    Parameters
    ----------
    api : str
        API flavour.
    request_id : int
        Used to build the response id.
    model : str
        Model name to echo.
    created : int
        Unix time of the response.
    usage : dict
        ``prompt_tokens``, ``completion_tokens``, ``cached_tokens``, ``cache_creation_tokens``.
    max_tokens_set : bool
        Whether the request fixed the length (finish reason "length" / "max_tokens").
    include_usage : bool
        OpenAI: send the usage chunk at the end of a stream.
    """

    def __init__(
        self,
        api: str,
        request_id: int,
        model: str,
        created: int,
        usage: dict[str, int],
        max_tokens_set: bool,
        include_usage: bool,
    ) -> None:
        self.api = api
        self.model = model
        self.usage = usage
        self.include_usage = include_usage
        self.id = {"openai-chat": "chatcmpl-", "openai-completions": "cmpl-"}.get(api, "msg_")
        self.id += f"llmlat{request_id}"
        self.created = created
        if api == "anthropic-messages":
            self.finish = "max_tokens" if max_tokens_set else "end_turn"
        else:
            self.finish = "length" if max_tokens_set else "stop"
        model_json = json.dumps(model)
        if api == "openai-chat":
            head = (
                f'data: {{"id":"{self.id}","object":"chat.completion.chunk","created":{created},'
                f'"model":{model_json},"choices":[{{"index":0,"delta":'
            )
            self._pre = (head + '{"content":"').encode()
            self._post = b'"},"logprobs":null,"finish_reason":null}]}\n\n'
            self._head = head
        elif api == "openai-completions":
            head = (
                f'data: {{"id":"{self.id}","object":"text_completion","created":{created},'
                f'"model":{model_json},"choices":[{{"index":0,'
            )
            self._pre = (head + '"text":"').encode()
            self._post = b'","logprobs":null,"finish_reason":null}]}\n\n'
            self._head = head
        else:
            self._pre = (
                b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
                b'"delta":{"type":"text_delta","text":"'
            )
            self._post = b'"}}\n\n'

    def start(self) -> bytes:
        """Return the events sent when service starts (role chunk / message_start)."""
        if self.api == "openai-chat":
            return (
                self._head + '{"role":"assistant","content":""},"logprobs":null,'
                '"finish_reason":null}]}\n\n'
            ).encode()
        if self.api == "openai-completions":
            return b""
        u = self.usage
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": u["prompt_tokens"]
                - u["cached_tokens"]
                - u["cache_creation_tokens"],
                "cache_creation_input_tokens": u["cache_creation_tokens"],
                "cache_read_input_tokens": u["cached_tokens"],
                "output_tokens": 1,
            },
        }
        return (
            b"event: message_start\ndata: "
            + _dumps({"type": "message_start", "message": message})
            + b'\n\nevent: content_block_start\ndata: {"type":"content_block_start","index":0,'
            b'"content_block":{"type":"text","text":""}}\n\n'
        )

    def tokens(self, first: int, stop: int, malformed_at: int = -1) -> bytes:
        """Return the events of tokens ``first .. stop - 1`` (one event each).

        Parameters
        ----------
        first, stop : int
            Token index range.
        malformed_at : int
            Index of a token whose event is rendered as invalid JSON (fault), or -1.

        Returns
        -------
        bytes
        """
        words = [_TOKEN_BYTES[i % len(_TOKEN_BYTES)] for i in range(first, stop)]
        if not words:
            return b""
        if first <= malformed_at < stop:
            prefix = b"event: content_block_delta\n" if self.api == "anthropic-messages" else b""
            bad = prefix + b'data: {"id": "' + self.id.encode() + b'", [\n\n'
            return self.tokens(first, malformed_at) + bad + self.tokens(malformed_at + 1, stop)
        return self._pre + (self._post + self._pre).join(words) + self._post

    def end(self) -> bytes:
        """Return the events that close a stream (finish reason, usage, ``[DONE]``)."""
        u = self.usage
        if self.api == "anthropic-messages":
            delta = {
                "type": "message_delta",
                "delta": {"stop_reason": self.finish, "stop_sequence": None},
                "usage": {"output_tokens": u["completion_tokens"]},
            }
            return (
                b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
                b"event: message_delta\ndata: " + _dumps(delta) + b"\n\n"
                b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
            )
        if self.api == "openai-chat":
            out = self._head + f'{{}},"logprobs":null,"finish_reason":"{self.finish}"}}]}}\n\n'
        else:
            out = self._head + f'"text":"","logprobs":null,"finish_reason":"{self.finish}"}}]}}\n\n'
        if self.include_usage:
            obj = "chat.completion.chunk" if self.api == "openai-chat" else "text_completion"
            chunk = {
                "id": self.id,
                "object": obj,
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": self._openai_usage(),
            }
            out += "data: " + json.dumps(chunk) + "\n\n"
        return (out + "data: [DONE]\n\n").encode()

    def _openai_usage(self) -> dict[str, Any]:
        u = self.usage
        return {
            "prompt_tokens": u["prompt_tokens"],
            "completion_tokens": u["completion_tokens"],
            "total_tokens": u["prompt_tokens"] + u["completion_tokens"],
            "prompt_tokens_details": {"cached_tokens": u["cached_tokens"]},
        }

    def body(self) -> bytes:
        """Return the non-streamed JSON body of the whole response."""
        u = self.usage
        text = _text(u["completion_tokens"])
        if self.api == "anthropic-messages":
            obj: dict[str, Any] = {
                "id": self.id,
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": self.finish,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": u["prompt_tokens"]
                    - u["cached_tokens"]
                    - u["cache_creation_tokens"],
                    "cache_creation_input_tokens": u["cache_creation_tokens"],
                    "cache_read_input_tokens": u["cached_tokens"],
                    "output_tokens": u["completion_tokens"],
                },
            }
        elif self.api == "openai-chat":
            obj = {
                "id": self.id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": None,
                        "finish_reason": self.finish,
                    }
                ],
                "usage": self._openai_usage(),
            }
        else:
            obj = {
                "id": self.id,
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "choices": [
                    {"index": 0, "text": text, "logprobs": None, "finish_reason": self.finish}
                ],
                "usage": self._openai_usage(),
            }
        return _dumps(obj)
