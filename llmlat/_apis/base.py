"""What every API flavour shares: the endpoint interface, the stream parser, error objects.

A :class:`StreamParser` is fed network reads; its :class:`~llmlat._apis.sse.SSEDecoder` splits
them into events and every event is parsed as JSON (``orjson`` when installed: the ``fast``
extra), so a malformed event or invalid UTF-8 anywhere in the stream is a protocol error, never
content. Each event that carries generated content records the arrival time of the read that
completed it. The read ends at the protocol's end of message (``[DONE]``, ``message_stop``):
:meth:`StreamParser.feed` returns True there, and the transport stops waiting for the server
to close.
"""

from __future__ import annotations

from typing import Any

from llmlat._apis.sse import SSEDecoder, SSEError
from llmlat._redact import one_line

try:
    from orjson import loads
except ImportError:  # pragma: no cover - the plain json module is the fallback
    from json import loads  # type: ignore[assignment]  # orjson's signature is narrower

__all__ = ["BodyResult", "Endpoint", "StreamParser", "loads", "reason_text"]


class BodyResult:
    """What a non-streamed JSON answer said.

    Attributes
    ----------
    content : bool
        Whether it carried generated content.
    finish_reason : str or None
        Why the answer ended, as the server said (``stop``, ``length``, ``content_filter``...).
    prompt_tokens, completion_tokens, cached_tokens, cache_creation_tokens : int or None
        Usage as reported by the server (None when not reported).
    error : str or None
        A short error text when the body was an error object or not a valid answer.
    error_kind : str or None
        ``"protocol"`` for a malformed body, else the kind the error object implies.
    """

    __slots__ = (
        "cache_creation_tokens",
        "cached_tokens",
        "completion_tokens",
        "content",
        "error",
        "error_kind",
        "finish_reason",
        "prompt_tokens",
    )

    def __init__(self) -> None:
        self.content = False
        self.finish_reason: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.cache_creation_tokens: int | None = None
        self.error: str | None = None
        self.error_kind: str | None = None


def is_error(obj: dict[str, Any]) -> bool:
    """Whether a JSON object is an error (OpenAI, Anthropic and vLLM shapes)."""
    return obj.get("error") is not None or "error" in (obj.get("type"), obj.get("object"))


def error_of(obj: Any) -> tuple[str, str]:
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


def reason_text(value: Any) -> str | None:
    """Return a finish reason as short text (a server may send anything there), None if absent."""
    return None if value is None or value == "" else str(value)[:40]


def as_int(value: Any) -> int | None:
    """``value`` when it is an int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class StreamParser(SSEDecoder):
    """Incremental parser of one server-sent-event stream.

    Feed it every network read with its arrival time; read the attributes afterwards.

    Parameters
    ----------
    fast : bool
        Whether the event-stream decoder may take its fast path (False: the plain one alone).

    Attributes
    ----------
    times : list of int
        Arrival time (ns) of each event that carried generated content, in order.
    prompt_tokens, completion_tokens, cached_tokens, cache_creation_tokens : int or None
        Usage as reported by the server.
    done : bool
        Whether the stream said the answer was complete (end of message, or a finish reason).
    finish_reason : str or None
        Why the answer ended, as the stream said (``stop``, ``length``, ``content_filter``...).
    ended : bool
        Whether the protocol's end of message arrived (nothing more is read).
    error : str or None
        Short error text of an error event or a malformed event (parsing stops there).
    error_kind : str or None
        ``"protocol"`` for malformed data, else the kind the error event implies.
    """

    __slots__ = (
        "_t",
        "cache_creation_tokens",
        "cached_tokens",
        "completion_tokens",
        "done",
        "ended",
        "error",
        "error_kind",
        "finish_reason",
        "prompt_tokens",
        "times",
    )

    def __init__(self, *, fast: bool = True) -> None:
        super().__init__(fast=fast)
        self._t = 0
        self.times: list[int] = []
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.cache_creation_tokens: int | None = None
        self.done = False
        self.ended = False
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.error_kind: str | None = None

    def feed(self, data: bytes, t_ns: int) -> bool:
        """Parse one network read that arrived at ``t_ns`` (``perf_counter_ns``).

        Returns
        -------
        bool
            True once nothing more is to be read (end of message, or an error).
        """
        if self.ended or self.error is not None:
            return True
        self._t = t_ns
        try:
            self.decode(data)
        except SSEError as exc:
            self._fail("protocol", str(exc))
        return self.ended or self.error is not None

    def close(self, t_ns: int) -> None:
        """Mark the end of the stream (an event cut short by it is not dispatched: the spec)."""

    def on_event(self, data: bytes, event: bytes | None) -> bool:
        """Handle one event (its name is in its JSON too: not needed)."""
        return self.on_data((data,))

    def on_data(self, datas: list[bytes] | tuple[bytes]) -> bool:
        """Handle the data of events in order; True once nothing more is to be read."""
        if self.ended or self.error is not None:
            return True
        handle = self._event
        for data in datas:  # the hot loop: one turn per token
            if data[:1] != b"{" and self._non_json(data):  # [DONE]: no exception to raise
                if self.ended:
                    return True
                continue
            try:
                obj = loads(data)
            except ValueError:  # invalid JSON or UTF-8 (orjson and json both raise a ValueError)
                self._fail("protocol", "malformed stream event (invalid JSON or UTF-8)")
                return True
            if type(obj) is not dict:
                self._fail("protocol", "malformed stream event (not a JSON object)")
                return True
            try:
                if handle(obj):
                    return True
            except (KeyError, IndexError, TypeError, AttributeError):
                self._fail("protocol", f"stream event of an unexpected shape ({self._what})")
                return True
        return False

    #: what the stream should be, for error texts
    _what = "event"

    def _non_json(self, data: bytes) -> bool:
        """Handle an event whose data is not JSON; False when it is malformed."""
        return False

    def _event(self, obj: dict[str, Any]) -> bool:
        """Handle one parsed event (an error object included: see :meth:`_error`).

        Returns True once nothing more is to be read (:meth:`_end` or :meth:`_fail` was called).
        """
        raise NotImplementedError

    def _error(self, obj: dict[str, Any]) -> bool:
        """Fail with an error object's kind and message; False when ``obj`` is no error."""
        if not is_error(obj):
            return False
        self._fail(*error_of(obj))
        return True

    def _end(self) -> None:
        self.done = self.ended = True

    def _fail(self, kind: str, msg: str) -> None:
        self.error_kind = kind
        self.error = one_line(msg)


class Endpoint:
    """One API flavour: its path, request body, headers and answer parsing.

    Use :func:`llmlat._apis.get_endpoint` to get one.

    Attributes
    ----------
    api : str
        The flavour's name (one of :data:`llmlat._apis.API_NAMES`).
    path : str
        The request path, e.g. ``"/v1/chat/completions"``.
    """

    api = ""
    path = ""
    _parser: type[StreamParser] = StreamParser

    def url(self, base: str, path: str | None = None) -> str:
        """Full request URL from a base URL.

        ``http://host:port``, ``http://host:port/v1`` and the full endpoint URL all work.

        Parameters
        ----------
        base : str
            The target URL.
        path : str, optional
            Another path of the API (``"/v1/models"``); the endpoint's own by default.

        Returns
        -------
        str
            The URL to send to.
        """
        base = base.rstrip("/")
        if base.endswith(self.path):
            base = base[: -len(self.path)]
        elif base.endswith("/v1"):
            base = base[:-3]
        return base + (path or self.path)

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
            A new dict, ready for JSON.
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
            obj = loads(raw)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            out.error_kind, out.error = "protocol", "malformed response body (not a JSON object)"
            return out
        if is_error(obj):
            kind, msg = error_of(obj)
            out.error_kind, out.error = kind, one_line(msg)
            return out
        try:
            out.content = self._body_content(obj)
            out.finish_reason = reason_text(self._body_finish(obj))
        except (KeyError, IndexError, TypeError, AttributeError):
            out.error_kind, out.error = "protocol", f"response body is not a {self.api} answer"
            return out
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self._body_usage(out, usage)
        return out

    def models(self, raw: bytes) -> list[str]:
        """Read the model ids of a ``GET /v1/models`` answer (``{"data": [{"id": ...}, ...]}``).

        Parameters
        ----------
        raw : bytes
            The response body.

        Returns
        -------
        list of str
            Empty when the body lists none.
        """
        try:
            data = loads(raw).get("data")
            return [str(m["id"]) for m in data if isinstance(m, dict) and m.get("id")]
        except (ValueError, AttributeError, TypeError):
            return []

    def _body_content(self, obj: dict[str, Any]) -> bool:
        raise NotImplementedError

    def _body_finish(self, obj: dict[str, Any]) -> Any:
        """Return the answer's finish reason as the server wrote it (None when it wrote none)."""
        raise NotImplementedError

    def _body_usage(self, out: BodyResult, usage: dict[str, Any]) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"Endpoint({self.api!r}, path={self.path!r})"
