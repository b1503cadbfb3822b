"""The provider APIs llmlat speaks: request bodies, answers and server-sent event streams.

Each API (OpenAI chat, OpenAI completions, Anthropic messages) is an
:class:`~llmlat.apis.endpoints.Endpoint` found by :func:`get_endpoint`.
"""

from llmlat.apis.endpoints import (
    API_NAMES,
    BodyResult,
    Endpoint,
    StreamParser,
    clean_error,
    get_endpoint,
    make_payload,
)

__all__ = [
    "API_NAMES",
    "BodyResult",
    "Endpoint",
    "StreamParser",
    "clean_error",
    "get_endpoint",
    "make_payload",
]
