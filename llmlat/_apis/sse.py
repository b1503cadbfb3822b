r"""Server-sent events decoded as the HTML standard says, read by read.

Lines end in CRLF, LF or CR (a CRLF may be split between reads); a line that starts with ``:``
is a comment; ``data:`` lines are joined with ``\n`` into one event, dispatched at the blank
line that ends it; ``event:`` names it; ``id:``, ``retry:`` and unknown fields are ignored; a
leading byte-order mark is skipped; an event cut off by the end of the stream is never
dispatched.

The decoder works on bytes (the field names are ASCII) and hands each event's data over as
bytes, so the JSON parser reads them without a decode step.

Fast path: a read that starts and ends on an event boundary and holds only one-line ``data: ``
events (what every LLM API sends) is split with one ``bytes.split``; anything else takes the
plain path. ``tests/test_sse.py`` proves with hypothesis that both give the same events on
arbitrary streams cut at arbitrary places.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["MAX_LINE", "SSEDecoder", "SSEError"]

#: Longest line (bytes) accepted: a server that never ends a line must not fill the memory.
MAX_LINE = 8 << 20

_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class SSEError(ValueError):
    """The stream cannot be an event stream (a line longer than :data:`MAX_LINE`)."""


class SSEDecoder:
    r"""Incremental event-stream decoder.

    Parameters
    ----------
    on_event : callable
        ``on_event(data, event)`` for each dispatched event: its data (bytes, lines joined with
        ``\n``) and its ``event:`` name (bytes, or None when it has none). A true return value
        stops the decoding of the current read (the caller has what it needs).
    fast : bool
        Whether to use the fast path (False is the plain path alone, for tests).
    """

    __slots__ = ("_cr", "_data", "_event", "_fast", "_line", "_start", "on_event")

    def __init__(
        self, on_event: Callable[[bytes, bytes | None], object], *, fast: bool = True
    ) -> None:
        self.on_event = on_event
        self._fast = fast
        self._line = b""  # an unterminated line
        self._data: list[bytes] = []  # data lines of the event being read
        self._event: bytes | None = None
        self._cr = False  # the last read ended in CR: a LF first in the next one is its pair
        self._start = True

    def feed(self, chunk: bytes) -> None:
        """Decode one read.

        Raises
        ------
        SSEError
            For a line longer than :data:`MAX_LINE`.
        """
        if self._start:  # a byte-order mark may open the stream, maybe split over reads
            chunk, self._line = self._line + chunk, b""
            if len(chunk) < 3 and _BOM.startswith(chunk):
                self._line = chunk
                return
            self._start = False
            if chunk.startswith(_BOM):
                chunk = chunk[3:]
        if (
            self._fast
            and not (self._line or self._data or self._cr)
            and self._event is None
            and chunk[-2:] == b"\n\n"
            and b"\r" not in chunk
        ):
            events = chunk.split(b"\n\n")
            if events.pop() == b"":
                for e in events:
                    if e[:6] != b"data: " or b"\n" in e:
                        break
                else:
                    on_event = self.on_event
                    for e in events:
                        if on_event(e[6:], None):
                            return
                    return
        self._plain(chunk)

    def _plain(self, chunk: bytes) -> None:
        buf = self._line + chunk if self._line else chunk
        if self._cr and buf[:1] == b"\n":
            buf = buf[1:]
        self._cr = buf[-1:] == b"\r"
        lines = _EOL.split(buf)
        self._line = lines.pop()
        if len(self._line) > MAX_LINE:
            raise SSEError(f"an event-stream line longer than {MAX_LINE} bytes")
        for line in lines:
            if not line:
                if self._data:
                    data, event = b"\n".join(self._data), self._event
                    self._data, self._event = [], None
                    if self.on_event(data, event):
                        return
                else:
                    self._event = None
                continue
            if line[:1] == b":":
                continue
            name, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                self._data.append(value)
            elif name == b"event":
                self._event = value
            # id, retry and unknown fields change nothing llmlat measures
