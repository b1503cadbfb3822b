"""API flavours: how to build a request and how to read its answer, for each supported API.

Three flavours: ``"openai-chat"`` (``/v1/chat/completions``), ``"openai-completions"``
(``/v1/completions``) and ``"anthropic-messages"`` (``/v1/messages``). An :class:`Endpoint`
turns a payload into a request body and headers, and parses the answer: a server-sent-event
stream, fed network chunk by network chunk to a :class:`StreamParser`, or a JSON body read by
:meth:`Endpoint.parse_body`.

The stream parser sits on the measuring hot path. It splits lines itself and gives every event
the arrival time of the network chunk that completed it (coalesced events share one timestamp).
Generated content is text, reasoning or tool arguments; a role-only chunk is not content. The
first content event is checked with ``json.loads`` and becomes a template, so later plain
content events are recognised by comparing bytes; other events take a general path that runs
``json.loads`` only on usage and error events.

Nothing is guessed in a request: ``model`` and ``max_tokens`` are sent only when given
(Anthropic's API requires both; without them its 400 answer says so). OpenAI streams ask for
``stream_options.include_usage``, so token counts come from the server, not from counting.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "API_NAMES",
    "BodyResult",
    "Endpoint",
    "StreamParser",
    "clean_error",
    "get_endpoint",
    "make_payload",
]

#: The supported API flavours.
API_NAMES = ("openai-chat", "openai-completions", "anthropic-messages")

ANTHROPIC_VERSION = "2023-06-01"

_ERROR_CHARS = 160
_SECRETISH = re.compile(r"\b(sk-|sk_|key-|Bearer\s+)[A-Za-z0-9_*.\-]{4,}", re.IGNORECASE)
_SPACES = re.compile(r"\s+")
_OBJECT_SECOND = frozenset(bytes([c]) for c in b'" }\n\t\r')
_USAGE = re.compile(rb'"usage": ?\{')
_NEVER = b"\x00"  # a template prefix no line starts with


def clean_error(text: str, secret: str | None = None) -> str:
    """Make an error text short, one line and free of anything that looks like a key.

    Parameters
    ----------
    text : str
        The raw text (e.g. a server's error message).
    secret : str, optional
        A value to remove wherever it appears (the API key in use).

    Returns
    -------
    str
        At most 160 characters.
    """
    if secret:
        text = text.replace(secret, "***")
    text = _SECRETISH.sub(lambda m: m.group(1) + "***", _SPACES.sub(" ", text)).strip()
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 3] + "..."


def make_payload(payload: dict[str, Any] | str, api: str) -> dict[str, Any]:
    """Turn what the user gave into a request payload for ``api``.

    Parameters
    ----------
    payload : dict or str
        A request body (copied, not changed), or a plain prompt: a one-message user chat for
        ``"openai-chat"`` and ``"anthropic-messages"``, a ``prompt`` for ``"openai-completions"``.
    api : str
        One of :data:`API_NAMES`.

    Returns
    -------
    dict
        A new dict.

    Raises
    ------
    ValueError
        If ``api`` is unknown, or ``payload`` is neither a dict nor a string, or lacks the field
        the API needs (``messages`` or ``prompt``).
    """
    _check_api(api)
    key = "prompt" if api == "openai-completions" else "messages"
    if isinstance(payload, str):
        if key == "prompt":
            return {"prompt": payload}
        return {"messages": [{"role": "user", "content": payload}]}
    if not isinstance(payload, dict):
        raise ValueError(
            f"payload: expected a dict or a prompt string, got {type(payload).__name__}"
        )
    if key not in payload:
        raise ValueError(f"payload: a {api} request needs a {key!r} field")
    return dict(payload)


def _check_api(api: str) -> None:
    if api not in API_NAMES:
        raise ValueError(f"api: expected one of {', '.join(API_NAMES)}, got {api!r}")


class BodyResult:
    """What a non-streamed JSON answer said.

    Attributes
    ----------
    content : bool
        Whether it carried generated content.
    prompt_tokens, completion_tokens, cached_tokens : int or None
        Usage as reported by the server (None when not reported).
    error : str or None
        A short error text when the body was an error object or not a valid answer.
    error_kind : str or None
        ``"protocol"`` for a malformed body, else the kind the error object implies.
    """

    __slots__ = (
        "cached_tokens",
        "completion_tokens",
        "content",
        "error",
        "error_kind",
        "prompt_tokens",
    )

    def __init__(self) -> None:
        self.content = False
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.error: str | None = None
        self.error_kind: str | None = None


def _is_error(obj: dict[str, Any]) -> bool:
    # OpenAI: {"error": {...}}; Anthropic: {"type": "error", ...}; vLLM: {"object": "error", ...}
    return obj.get("error") is not None or "error" in (obj.get("type"), obj.get("object"))


def _error_of(obj: Any) -> tuple[str, str]:
    """(error_kind, message) for an error object sent with a 200 status or inside a stream."""
    err = obj.get("error") if isinstance(obj, dict) else None
    if err is None and isinstance(obj, dict) and obj.get("object") == "error":
        err = obj
    if not isinstance(err, dict):
        return "server_error", str(err or "error")
    kind = str(err.get("type") or "").lower()
    code = err.get("code")
    msg = str(err.get("message") or kind or "error")
    if "rate_limit" in kind or code == 429 or code == "rate_limit_exceeded":
        return "rate_limited", msg
    client = isinstance(code, int) and 400 <= code < 500
    if client or any(k in kind for k in ("invalid_request", "authentication", "permission")):
        return "client_error", msg
    return "server_error", msg


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class StreamParser:
    """Incremental parser of one server-sent-event stream.

    Feed it every network chunk with its arrival time; read the attributes afterwards.

    Every ``data:`` line is one event (LLM APIs never split an event over several lines).
    The first content event is checked with ``json.loads`` and becomes a template: a later line
    that is the template's bytes with only the (quote-free) text in between swapped is counted
    as content at once, without further parsing; any other event takes the general path (shape
    check, byte search for content, ``json.loads`` for usage and error events only).

    Attributes
    ----------
    times : list of int
        Arrival time (ns) of each event that carried generated content, in order.
    prompt_tokens, completion_tokens, cached_tokens : int or None
        Usage as reported by the server.
    done : bool
        Whether the stream said it was complete (``[DONE]``, a finish reason, ``message_stop``).
    error : str or None
        Short error text of an error event or a malformed event (parsing stops there).
    error_kind : str or None
        ``"protocol"`` for malformed data, else the kind the error event implies.
    """

    __slots__ = (
        "_buf",
        "_checked",
        "_pre",
        "_suf",
        "cached_tokens",
        "completion_tokens",
        "done",
        "error",
        "error_kind",
        "prompt_tokens",
        "times",
    )

    #: matches a key whose value is generated content, up to the value's first character
    #: (non-empty string values only); the quote before the key keeps escaped text from matching
    _CONTENT: re.Pattern[bytes] = re.compile(rb"(?!)")
    #: matches what marks the end of a complete answer
    _DONE: re.Pattern[bytes] = re.compile(rb"(?!)")

    def __init__(self) -> None:
        self._buf = b""
        self._checked = False  # a content event has passed json.loads
        self._pre = _NEVER  # template: a content line is _pre + text + _suf
        self._suf = b""
        self.times: list[int] = []
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.done = False
        self.error: str | None = None
        self.error_kind: str | None = None

    def feed(self, data: bytes, t_ns: int) -> None:
        """Parse one network chunk that arrived at ``t_ns`` (``perf_counter_ns``)."""
        if self._buf:
            data = self._buf + data
        lines = data.split(b"\n")
        self._buf = lines.pop()
        # this loop runs once per event: int membership and negative slices are the cheap ops
        pre, suf = self._pre, self._suf
        cut, tail = len(pre), -len(suf)
        append = self.times.append
        for line in lines:
            if not line:
                continue
            if line.startswith(pre) and line.endswith(suf):
                text = line[cut:tail]
                if text and 34 not in text and text[-1] != 92:  # no '"', no trailing '\\'
                    append(t_ns)
                    continue
            self._line(line, t_ns)
            if self.error is not None:
                return
            pre, suf = self._pre, self._suf
            cut, tail = len(pre), -len(suf)

    def close(self, t_ns: int) -> None:
        """Parse what is left after the stream ended (a last line without a newline)."""
        if self._buf and self.error is None:
            line, self._buf = self._buf, b""
            self._line(line, t_ns)

    def _line(self, line: bytes, t_ns: int) -> None:
        """General path for one line that did not match the template."""
        if line[:5] != b"data:":
            return  # event:, id:, retry: and : comment lines carry nothing we need
        d = line[5:].strip()
        if d[:1] != b"{" or d[-1:] != b"}" or d[1:2] not in _OBJECT_SECOND:
            if d == b"[DONE]":
                self.done = True
            elif d:
                self._fail("protocol", "malformed stream event (not a JSON object)")
            return
        content = self._CONTENT.search(d)
        usage = _USAGE.search(d) is not None
        if (content is not None and not self._checked) or usage or b"error" in d:
            try:
                obj = json.loads(d)
            except UnicodeDecodeError:
                self._fail("protocol", "malformed stream event (not UTF-8)")
                return
            except ValueError:
                self._fail("protocol", "malformed stream event (invalid JSON)")
                return
            if not isinstance(obj, dict):
                self._fail("protocol", "malformed stream event (not a JSON object)")
                return
            if _is_error(obj):
                self._fail(*_error_of(obj))
                return
            self._usage(obj)
        if content is not None:
            self._checked = True
            self.times.append(t_ns)
        if self._DONE.search(d) is not None:
            self.done = True
        elif content is not None and not usage:
            self._learn(line, d, content.end())

    def _learn(self, line: bytes, d: bytes, start: int) -> None:
        """Make this plain content line the template (text = the string value at ``start``)."""
        end = d.find(b'"', start)
        while end > 0 and (end - len(d[:end].rstrip(b"\\"))) % 2:  # an escaped quote
            end = d.find(b'"', end + 1)
        if end < 0:
            return
        raw = line[5:]
        lead = line[: 5 + len(raw) - len(raw.lstrip())]
        self._pre = lead + d[:start]
        self._suf = d[end:] + raw[len(raw.rstrip()) :]

    def _fail(self, kind: str, msg: str) -> None:
        self.error_kind = kind
        self.error = clean_error(msg)

    def _usage(self, obj: dict[str, Any]) -> None:
        raise NotImplementedError


class _OpenAIStream(StreamParser):
    __slots__ = ()
    _DONE = re.compile(rb'"finish_reason": ?"')

    def _usage(self, obj: dict[str, Any]) -> None:
        usage = obj.get("usage")
        if isinstance(usage, dict):
            _openai_usage(self, usage)


class _ChatStream(_OpenAIStream):
    __slots__ = ()
    _CONTENT = re.compile(rb'"(?:content|reasoning_content|reasoning|refusal|arguments)": ?"(?!")')


class _CompletionsStream(_OpenAIStream):
    __slots__ = ()
    _CONTENT = re.compile(rb'"text": ?"(?!")')


class _AnthropicStream(StreamParser):
    __slots__ = ()
    _CONTENT = re.compile(rb'"(?:text|thinking|partial_json)": ?"(?!")')
    _DONE = re.compile(rb'"message_stop"')

    def _usage(self, obj: dict[str, Any]) -> None:
        usage = obj.get("usage")
        if usage is None and isinstance(obj.get("message"), dict):
            usage = obj["message"].get("usage")
        if isinstance(usage, dict):
            _anthropic_usage(self, usage)


def _openai_usage(out: Any, usage: dict[str, Any]) -> None:
    out.prompt_tokens = _int(usage.get("prompt_tokens"))
    out.completion_tokens = _int(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        out.cached_tokens = _int(details.get("cached_tokens"))


def _anthropic_usage(out: Any, usage: dict[str, Any]) -> None:
    # Anthropic's input_tokens excludes cache reads and writes; prompt_tokens counts them all,
    # as OpenAI's does. output_tokens is cumulative, so the last report wins.
    inp = _int(usage.get("input_tokens"))
    if inp is not None:
        read = _int(usage.get("cache_read_input_tokens"))
        write = _int(usage.get("cache_creation_input_tokens")) or 0
        out.prompt_tokens = inp + (read or 0) + write
        if read is not None:
            out.cached_tokens = read
    completion = _int(usage.get("output_tokens"))
    if completion is not None:
        out.completion_tokens = completion


class Endpoint:
    """One API flavour: its path, request body, headers and answer parsing.

    Use :func:`get_endpoint` to get one.

    Attributes
    ----------
    api : str
        The flavour's name (one of :data:`API_NAMES`).
    path : str
        The request path, e.g. ``"/v1/chat/completions"``.
    """

    api = ""
    path = ""
    _parser: type[StreamParser] = StreamParser

    def url(self, base: str) -> str:
        """Full request URL from a base URL.

        ``http://host:port``, ``http://host:port/v1`` and the full endpoint URL all work.

        Parameters
        ----------
        base : str
            The target URL.

        Returns
        -------
        str
            The URL to POST to.
        """
        base = base.rstrip("/")
        if base.endswith(self.path):
            return base
        if base.endswith("/v1"):
            return base + self.path[3:]
        return base + self.path

    def body(
        self,
        payload: dict[str, Any],
        *,
        model: str | None = None,
        stream: bool = True,
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        """Request body for ``payload`` (as from :func:`make_payload`; it is not changed).

        Parameters
        ----------
        payload : dict
            The request fields.
        model : str, optional
            Sets ``model`` when given.
        stream : bool
            Whether to ask for a server-sent-event stream.
        max_tokens : int, optional
            Output token limit; overrides the payload's.

        Returns
        -------
        dict
            A new dict, ready for ``json.dumps``.
        """
        body = dict(payload)
        if model is not None:
            body["model"] = model
        body["stream"] = stream
        if max_tokens is not None:
            body[self._max_tokens_key(body)] = max_tokens
        return body

    def _max_tokens_key(self, body: dict[str, Any]) -> str:
        return "max_tokens"

    def headers(self, api_key: str | None) -> dict[str, str]:
        """Request headers, with authentication when ``api_key`` is given.

        Parameters
        ----------
        api_key : str or None
            The key's value (never stored by the endpoint).

        Returns
        -------
        dict of str to str
        """
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        return headers

    def stream_parser(self) -> StreamParser:
        """Make a fresh parser for one streamed answer.

        Returns
        -------
        StreamParser
        """
        return self._parser()

    def parse_body(self, raw: bytes) -> BodyResult:
        """Parse a non-streamed JSON answer.

        Parameters
        ----------
        raw : bytes
            The response body.

        Returns
        -------
        BodyResult
        """
        out = BodyResult()
        try:
            obj = json.loads(raw)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            out.error_kind, out.error = "protocol", "malformed response body (not a JSON object)"
            return out
        if _is_error(obj):
            out.error_kind, msg = _error_of(obj)
            out.error = clean_error(msg)
            return out
        try:
            out.content = self._body_content(obj)
        except (KeyError, IndexError, TypeError, AttributeError):
            out.error_kind, out.error = "protocol", f"response body is not a {self.api} answer"
            return out
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self._body_usage(out, usage)
        return out

    def _body_content(self, obj: dict[str, Any]) -> bool:
        raise NotImplementedError

    def _body_usage(self, out: BodyResult, usage: dict[str, Any]) -> None:
        _openai_usage(out, usage)

    def __repr__(self) -> str:
        return f"Endpoint({self.api!r}, path={self.path!r})"


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


class _ChatEndpoint(_OpenAIEndpoint):
    api = "openai-chat"
    path = "/v1/chat/completions"
    _parser = _ChatStream

    def _max_tokens_key(self, body: dict[str, Any]) -> str:
        # newer OpenAI models take only max_completion_tokens: keep it if the payload uses it
        return "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"

    def _body_content(self, obj: dict[str, Any]) -> bool:
        msg = obj["choices"][0]["message"]
        keys = ("content", "reasoning_content", "reasoning", "refusal", "tool_calls")
        return any(msg.get(k) for k in keys)


class _CompletionsEndpoint(_OpenAIEndpoint):
    api = "openai-completions"
    path = "/v1/completions"
    _parser = _CompletionsStream

    def _body_content(self, obj: dict[str, Any]) -> bool:
        return bool(obj["choices"][0]["text"])


class _AnthropicEndpoint(Endpoint):
    api = "anthropic-messages"
    path = "/v1/messages"
    _parser = _AnthropicStream

    def headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def _body_content(self, obj: dict[str, Any]) -> bool:
        blocks = obj["content"]
        return any(b.get("text") or b.get("thinking") or b.get("input") for b in blocks)

    def _body_usage(self, out: BodyResult, usage: dict[str, Any]) -> None:
        _anthropic_usage(out, usage)


_ENDPOINTS = {e.api: e for e in (_ChatEndpoint(), _CompletionsEndpoint(), _AnthropicEndpoint())}


def get_endpoint(api: str) -> Endpoint:
    """Get the :class:`Endpoint` of an API flavour.

    Parameters
    ----------
    api : str
        One of :data:`API_NAMES`.

    Returns
    -------
    Endpoint

    Raises
    ------
    ValueError
        If ``api`` is unknown.
    """
    _check_api(api)
    return _ENDPOINTS[api]
