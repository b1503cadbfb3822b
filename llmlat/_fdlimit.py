"""Room for the sockets of a level: the soft open-file limit, raised when it is too low.

Each request in flight holds a socket (two with the in-process simulator, which holds the
other end). Past the soft ``RLIMIT_NOFILE`` every new connection fails with "Too many open
files", which would be recorded as thousands of failed requests. So before a sweep sends
anything the soft limit is raised up to the hard one when that is enough, and otherwise the
sweep is refused with the number to set.
"""

from __future__ import annotations

import os

try:
    import resource
except ImportError:  # pragma: no cover - Windows has no RLIMIT_NOFILE
    resource = None  # type: ignore[assignment]

__all__ = ["ensure_open_files"]

_SPARE = 64  # files beyond the sockets: imports, the journal, pipes, the loop's own
_UNBOUNDED_TARGET = 65536  # what an open loop without a cap asks for, when the hard limit allows


def _open_now() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux
        return _SPARE


def ensure_open_files(in_flight: int | None, per_request: int, name: str) -> None:
    """Make sure this process may open enough files for ``in_flight`` requests at once.

    Parameters
    ----------
    in_flight : int or None
        Most requests in flight; None when unbounded (an open loop without a cap): the soft
        limit is then raised as far as the hard limit allows, and nothing is refused.
    per_request : int
        Open files per request in flight (1, or 2 when this process also serves them).
    name : str
        The option that sets ``in_flight``, named in the error.

    Raises
    ------
    ValueError
        If the hard limit is too low; the message says what to run (``ulimit -n N``).
    """
    if resource is None:  # pragma: no cover
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = hard == resource.RLIM_INFINITY
    if in_flight is None:
        need = min(hard, _UNBOUNDED_TARGET) if not unlimited else _UNBOUNDED_TARGET
    else:
        need = _open_now() + per_request * in_flight + _SPARE
    if soft != resource.RLIM_INFINITY and soft < need:
        if unlimited or need <= hard:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
                return
            except (ValueError, OSError):  # e.g. macOS caps the soft limit below "unlimited"
                pass
        if in_flight is not None:
            raise ValueError(
                f"{name}: {in_flight} requests in flight need about {need} open files, but "
                f"this process may open {soft} (hard limit {hard}); run `ulimit -n {need}` "
                "in the shell that starts it, or lower the concurrency"
            )
