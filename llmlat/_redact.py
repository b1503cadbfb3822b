"""The one place that keeps credentials out of every text llmlat shows or stores.

A client :func:`remember`-s the secrets it uses while it is open (the API key, the values of
credential headers such as ``Authorization``, ``api-key`` or ``x-api-key``), and :func:`redact`
replaces them in any text with ``***``:

- case-insensitively, so a server that re-cases the key does not get it through;
- as fragments: any run of 8 or more characters of a secret (a whole secret when it is
  shorter), so a key cut or split by a server is masked where it shows;
- plus what looks like a credential whatever its value: ``Bearer`` tokens, ``sk-...`` keys,
  user info and secret query parameters in URLs.

So the layers that never see the key (a saved dataset, a notebook message) mask it too. Use
:func:`one_line` for error texts that reach a table (short, one line, redacted).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "MASK",
    "credential_header",
    "forget",
    "one_line",
    "redact",
    "redact_url",
    "remember",
]

#: What a secret is replaced with.
MASK = "***"

_FRAGMENT = 8  # a run this long of a secret is masked wherever it shows
_MIN_SECRET = 4  # shorter values would mask ordinary text (and are no credential)
_ERROR_CHARS = 160

# header (or meta key) names whose values are credentials
_CREDENTIAL_NAME = re.compile(
    r"^(authorization|proxy-authorization|cookie|set-cookie|api[-_]?key|access[-_]?key)$"
    r"|secret|password|passwd|credential|signature|(^|[-_])auth|[-_]key$|token$",
    re.IGNORECASE,
)
_PATTERNS = (
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=\-]{8,}"), r"\1 " + MASK),
    (re.compile(r"(?i)\b(sk-|sk_|key-)[A-Za-z0-9_*.\-]{4,}"), r"\1" + MASK),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@:]*(:[^/\s@]*)?@"), r"\1"),
    (
        re.compile(r"(?i)([?&](?:api[-_]?key|key|token|access[-_]?token|sig|signature)=)[^&#\s]+"),
        r"\1" + MASK,
    ),
)
_SPACES = re.compile(r"\s+")

_remembered: Counter[str] = Counter()  # secret -> how many clients in use hold it


def credential_header(name: str) -> bool:
    """Whether a header (or a metadata entry) of this name carries a credential.

    Parameters
    ----------
    name : str
        E.g. ``"Authorization"``, ``"api-key"``, ``"x-api-key"``, ``"X-Auth-Token"``.

    Returns
    -------
    bool
    """
    return _CREDENTIAL_NAME.search(name) is not None


def remember(
    secrets: Iterable[str | None] = (), headers: Mapping[str, str] | None = None
) -> list[str]:
    """Add secrets to the ones :func:`redact` masks until they are :func:`forget`-ten.

    Parameters
    ----------
    secrets : iterable of str or None
        Values (None and values shorter than 4 characters are skipped).
    headers : mapping of str to str, optional
        Request headers: the values of credential headers (:func:`credential_header`), and each
        word of them (``Bearer KEY`` hides ``KEY`` alone), are secrets too.

    Returns
    -------
    list of str
        What was added: give it to :func:`forget` when the secrets are no longer in use.
    """
    values = [s for s in secrets if s]
    for name, value in (headers or {}).items():
        if credential_header(name):
            values += [value, *value.split()]
    added = [v for v in values if len(v) >= _MIN_SECRET]
    _remembered.update(added)
    return added


def forget(secrets: list[str]) -> None:
    """Undo one :func:`remember` (a secret another user still holds stays remembered).

    Parameters
    ----------
    secrets : list of str
        What :func:`remember` returned.
    """
    _remembered.subtract(secrets)
    for value in [v for v, n in _remembered.items() if n <= 0]:
        del _remembered[value]


class _Masker:
    """Masks given secrets (and fragments of them) and credential-like runs in a text."""

    __slots__ = ("_grams",)

    def __init__(self, values: Iterable[str]) -> None:
        grams = {
            v[i : i + min(_FRAGMENT, len(v))].lower()
            for v in values
            for i in range(len(v) - min(_FRAGMENT, len(v)) + 1)
        }
        self._grams = (
            re.compile("(?=(" + "|".join(map(re.escape, sorted(grams))) + "))", re.IGNORECASE)
            if grams
            else None
        )

    def __call__(self, text: str) -> str:
        if self._grams is not None:
            text = _mask_grams(text, self._grams)
        for pattern, repl in _PATTERNS:
            text = pattern.sub(repl, text)
        return text


def _mask_grams(text: str, grams: re.Pattern[str]) -> str:
    """Mask every span of ``text`` covered by an (overlapping) match of ``grams``."""
    spans: list[list[int]] = []
    for m in grams.finditer(text):
        start, end = m.start(), m.start() + len(m.group(1))
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    if not spans:
        return text
    out, pos = [], 0
    for start, end in spans:
        out += [text[pos:start], MASK]
        pos = end
    out.append(text[pos:])
    return "".join(out)


_process: tuple[frozenset[str], _Masker] = (frozenset(), _Masker(()))


def redact(text: str, extra: Iterable[str | None] = ()) -> str:
    """Mask every secret this process has seen (and ``extra``) in ``text``.

    Parameters
    ----------
    text : str
    extra : iterable of str or None, optional
        More values to mask.

    Returns
    -------
    str
    """
    global _process
    values = frozenset(_remembered) | {s for s in extra if s and len(s) >= _MIN_SECRET}
    if _process[0] != values:
        _process = (values, _Masker(values))
    return _process[1](text)


def one_line(text: str) -> str:
    """Make an error text short (at most 160 characters), one line and free of secrets.

    Parameters
    ----------
    text : str
        The raw text (a server's error message, a content type, ...).

    Returns
    -------
    str
    """
    text = redact(_SPACES.sub(" ", text).strip())
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 3] + "..."


def redact_url(url: str) -> str:
    """``url`` without credentials: user info and query values are replaced by ``***``.

    Parameters
    ----------
    url : str
        Any URL.

    Returns
    -------
    str
    """
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = MASK + "@" + netloc.rsplit("@", 1)[1]
    query = (
        "&".join(q.split("=", 1)[0] + "=" + MASK for q in parts.query.split("&"))
        if parts.query
        else ""
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
