"""The provider APIs llmlat speaks: request bodies, answers and server-sent event streams.

Each API (OpenAI chat, OpenAI completions, Anthropic messages) is an
:class:`~llmlat._apis.base.Endpoint` found by :func:`get_endpoint`; :mod:`~llmlat._apis.sse`
decodes event streams by the spec.
"""

from llmlat._apis.base import BodyResult, Endpoint, StreamParser
from llmlat._apis.endpoints import API_NAMES, cacheable_system, get_endpoint, make_payload

__all__ = [
    "API_NAMES",
    "BodyResult",
    "Endpoint",
    "StreamParser",
    "cacheable_system",
    "get_endpoint",
    "make_payload",
]
