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

__all__ = ["API_NAMES", "cacheable_system", "get_endpoint", "make_payload"]

_EPHEMERAL = {"type": "ephemeral"}

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


def cacheable_system(payload: dict[str, Any], api: str) -> dict[str, Any]:
    """Mark a payload's system prompt cacheable (the sweep option ``cache_system_prompt``).

    Anthropic caches only what a ``cache_control: {"type": "ephemeral"}`` block ends: the
    system prompt becomes a list of text blocks and its last one gets the mark. OpenAI caches
    prompts of 1,024+ tokens by itself: nothing is sent, the leading system (or developer)
    message is only checked, since a stable prefix is what it caches.

    Parameters
    ----------
    payload : dict
        A payload from :func:`make_payload` (not changed).
    api : str
        ``"anthropic-messages"`` or ``"openai-chat"``.

    Returns
    -------
    dict
        A new dict.

    Raises
    ------
    ValueError
        Naming ``cache_system_prompt`` when the payload has no system prompt, or the API has
        none (``openai-completions``).
    """
    body = dict(payload)
    if api == "anthropic-messages":
        system = body.get("system")
        if isinstance(system, str) and system:
            body["system"] = [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]
            return body
        if isinstance(system, list) and system and isinstance(system[-1], dict):
            body["system"] = [*system[:-1], {**system[-1], "cache_control": _EPHEMERAL}]
            return body
    elif api == "openai-chat":
        messages = body.get("messages")
        first = messages[0] if isinstance(messages, list) and messages else None
        if isinstance(first, dict) and first.get("role") in ("system", "developer"):
            return body
    else:
        raise ValueError(f"cache_system_prompt: {api} has no system prompt to cache")
    where = "a 'system' field" if api == "anthropic-messages" else "a first system message"
    raise ValueError(f"cache_system_prompt: the payload has no system prompt ({where})")


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
