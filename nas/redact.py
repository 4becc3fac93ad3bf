"""Passwords in database URLs never reach the terminal, a log or a file the tool writes; nor do
control characters (a terminal escape in a corpus's or a study's name reaches the terminal escaped).

A storage URL such as ``postgresql://user:secret@host/db`` is echoed by many
lines (errors, the ``study:`` and ``next:`` lines, hints; SQLAlchemy's own
error texts quote it too).  Rather than trusting every one of them to mask it,
:func:`main` registers each password found on the command line and wraps
``sys.stdout`` and ``sys.stderr`` so that every line printed goes through
:func:`redact`; :func:`mask_url` is the same masking SQLAlchemy does
(``user:***@host``), for the places that write a URL on purpose.
"""

from __future__ import annotations

import contextlib
import re
import sys
import urllib.parse
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

#: ``scheme://user:``: where a URL's password starts.  The password then runs to the first ``@`` on the
#: line, as SQLAlchemy's URL grammar reads it (``username [^:/]*``, then ``:password [^@]*``, then ``@``):
#: a ``/``, a ``:`` or a space inside it is still the password (``u:pa/ss@``, ``u:pa ss@``).
_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:")
#: ``password=VALUE`` in a URL's query (libpq and psycopg take one there) or a libpq connection string
_KEYWORD = re.compile(r"(?i)(?<![A-Za-z0-9_])password=([^&@\s'\"]+)")
MASK = "***"
#: a password shorter than this is masked only where it stands as a password (in a URL, after
#: ``password=``): masked everywhere, a one-letter password would hide that letter in every line
MIN_ANYWHERE = 4

_secrets: set[str] = set()


def _password_spans(text: str) -> list[tuple[int, int]]:
    """Where the passwords of the URLs (and ``password=`` values) in ``text`` lie, as (start, end)."""
    spans = []
    urls = list(_USERINFO.finditer(text))
    for i, match in enumerate(urls):
        start = match.end()
        at = text.find("@", start)
        line_end = text.find("\n", start)
        # an `@` past another URL that stands as a word of its own (after a space) is that URL's (`'foo://':
        # ...; valid: postgresql://user:***@host`): this one has no password, and the text between is no
        # secret (it used to be masked whole, the error with it)
        later = any(start < m.start() < at and text[m.start() - 1].isspace() for m in urls[i + 1 :])
        if at > start and (line_end == -1 or at < line_end) and not later:
            spans.append((start, at))
    spans += [m.span(1) for m in _KEYWORD.finditer(text)]
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):  # one mask for spans that overlap (u:password=x@h)
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _passwords(text: str) -> list[str]:
    return [text[a:b] for a, b in _password_spans(text)]


def register(texts: Iterable[str]) -> None:
    """Remember the password of every URL in ``texts`` (command-line arguments), as given and decoded."""
    for text in texts:
        for raw in _passwords(str(text)):
            _secrets.update(s for s in (raw, urllib.parse.unquote(raw)) if s and s != MASK)


def redact(text: str) -> str:
    """``text`` with every URL's password (and ``password=`` value) replaced by ``***``, and every
    registered password of at least :data:`MIN_ANYWHERE` characters wherever it appears."""
    for start, end in sorted(_password_spans(text), reverse=True):
        text = text[:start] + MASK + text[end:]
    for secret in sorted(_secrets, key=len, reverse=True):
        if len(secret) >= MIN_ANYWHERE:
            text = text.replace(secret, MASK)
    return text


def mask_url(url: str) -> str:
    """``url`` with its password shown as ``***``, as SQLAlchemy renders it (other strings unchanged)."""
    return redact(url)


#: control characters other than newline and tab (C0, DEL, C1): a name read from a file or a corpus
#: could carry a terminal escape sequence; printed, it would move the cursor or rewrite the screen
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with every control character but newline and tab shown as an escape (``\\x1b``)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


def one_line(text: str) -> str:
    """``text`` with every control character shown as an escape, newline and tab included: a name that
    must stay on its line (a corpus's, read from a file)."""
    return printable(text).replace("\n", "\\n").replace("\t", "\\t")


class _Redacting:
    """A text stream that redacts what is written to it and shows control characters as escapes
    (:func:`printable`), and passes everything else through."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(printable(redact(text)))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def redacted_output(argv: Iterable[str]) -> Iterator[None]:
    """Within: the passwords of the URLs in ``argv`` never reach ``sys.stdout`` or ``sys.stderr``."""
    register(argv)
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Redacting(out), _Redacting(err)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
