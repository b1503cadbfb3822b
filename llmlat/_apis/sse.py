r"""Server-sent events decoded as the HTML standard says, read by read.

Lines end in CRLF, LF or CR (a CRLF may be split between reads); a line that starts with ``:``
is a comment; ``data:`` lines are joined with ``\n`` into one event, dispatched at the blank
line that ends it; ``event:`` names it; ``id:``, ``retry:`` and unknown fields are ignored; a
leading byte-order mark is skipped; an event cut off by the end of the stream is never
dispatched.

The decoder works on bytes (the field names are ASCII) and hands each event's data over as
bytes, so the JSON parser reads them without a decode step.

Fast path: a read that starts and ends on an event boundary and holds only one-line ``data: ``
events (what every LLM API sends) is checked and split by a few calls of ``bytes`` methods (no
Python step per event) and handed over as one list; anything else takes the plain path.
``tests/test_sse.py`` proves with hypothesis that both give the same events on arbitrary streams
cut at arbitrary places.
"""

from __future__ import annotations

import re

__all__ = ["MAX_LINE", "SSEDecoder", "SSEError"]

#: Longest line (bytes) accepted: a server that never ends a line must not fill the memory.
MAX_LINE = 8 << 20

_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class SSEError(ValueError):
    """The stream cannot be an event stream (a line longer than :data:`MAX_LINE`)."""


class SSEDecoder:
    r"""Incremental event-stream decoder: a subclass handles the events.

    A subclass defines :meth:`on_event`, and may define :meth:`on_data` to take the events of a
    fast-path read in one call. (Subclassing, not callbacks: a decoder holding its owner's bound
    methods would be a reference cycle per stream, for the garbage collector to find.)

    Parameters
    ----------
    fast : bool
        Whether to use the fast path (False is the plain path alone, for tests).
    """

    __slots__ = ("_between", "_cr", "_fast", "_line", "_lines", "_name", "_start")

    def __init__(self, *, fast: bool = True) -> None:
        self._fast = fast
        self._between = False  # the fast path may run: between events, nothing held over
        self._line = b""  # an unterminated line
        self._lines: list[bytes] = []  # data lines of the event being read
        self._name: bytes | None = None  # its event name
        self._cr = False  # the last read ended in CR: a LF first in the next one is its pair
        self._start = True

    def on_event(self, data: bytes, event: bytes | None) -> bool:
        r"""Handle one dispatched event.

        Parameters
        ----------
        data : bytes
            Its data lines joined with ``\n``.
        event : bytes or None
            Its ``event:`` name, None when it has none.

        Returns
        -------
        bool
            True stops the decoding of the current read (the caller has what it needs).
        """
        raise NotImplementedError

    def on_data(self, datas: list[bytes]) -> bool:
        """Handle the events of a read that took the fast path, in order (none has a name).

        Each goes to :meth:`on_event` by default.

        Returns
        -------
        bool
            As for :meth:`on_event`.
        """
        on_event = self.on_event
        return any(on_event(data, None) for data in datas)

    def decode(self, chunk: bytes) -> None:
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
            self._between = self._fast
            if chunk.startswith(_BOM):
                chunk = chunk[3:]
        if (
            self._between
            and chunk.startswith(b"data: ")
            and chunk.endswith(b"\n\n")
            and b"\r" not in chunk
        ):
            datas = chunk[6:-2].split(b"\n\ndata: ")
            # every LF is one of the two that end an event: no event has another line
            if chunk.count(b"\n") == 2 * len(datas):
                self.on_data(datas)
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
                if self._lines:
                    data, event = b"\n".join(self._lines), self._name
                    self._lines, self._name = [], None
                    if self.on_event(data, event):
                        break
                else:
                    self._name = None
                continue
            if line[:1] == b":":
                continue
            name, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                self._lines.append(value)
            elif name == b"event":
                self._name = value
            # id, retry and unknown fields change nothing llmlat measures
        held = self._line or self._lines or self._cr or self._name is not None
        self._between = self._fast and not held
