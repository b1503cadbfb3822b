"""HTTP transports: how the client's bytes reach the server and the answer's bytes come back.

:mod:`~llmlat.transport._http11` is the default: HTTP/1.1 on asyncio protocols with a keep-alive
pool, handing each network read to the caller with the time it arrived.
"""

from llmlat.transport._http11 import BadResponse, ConnectionFailed, Pool, Response

__all__ = ["BadResponse", "ConnectionFailed", "Pool", "Response"]
