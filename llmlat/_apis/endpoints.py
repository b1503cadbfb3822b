"""The API flavours by name, and what a user's payload becomes for each.

Three flavours: ``"openai-chat"`` (``/v1/chat/completions``), ``"openai-completions"``
(``/v1/completions``) and ``"anthropic-messages"`` (``/v1/messages``). An
:class:`~llmlat._apis.base.Endpoint` turns a payload into a request body and headers, and parses
the answer: a server-sent-event stream fed read by read to a
:class:`~llmlat._apis.base.StreamParser`, or a JSON body.

Nothing is guessed in a request: ``model`` and ``max_tokens`` are sent only when given
(Anthropic's API requires both; without them its 400 answer says so). OpenAI streams ask for
``stream_options.include_usage``, so token counts come from the server, not from counting.
"""

from __future__ import annotations

from typing import Any

from llmlat._apis.anthropic import MessagesEndpoint
from llmlat._apis.base import Endpoint
from llmlat._apis.openai import ChatEndpoint, CompletionsEndpoint

__all__ = ["API_NAMES", "get_endpoint", "make_payload"]

#: The supported API flavours.
API_NAMES = ("openai-chat", "openai-completions", "anthropic-messages")

_ENDPOINTS: dict[str, Endpoint] = {
    e.api: e for e in (ChatEndpoint(), CompletionsEndpoint(), MessagesEndpoint())
}


def _check_api(api: str) -> None:
    if api not in API_NAMES:
        raise ValueError(f"api: expected one of {', '.join(API_NAMES)}, got {api!r}")


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


def get_endpoint(api: str) -> Endpoint:
    """Get the :class:`~llmlat._apis.base.Endpoint` of an API flavour.

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
