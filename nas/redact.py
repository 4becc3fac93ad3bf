"""Passwords in database URLs never reach the terminal, a log or a file the tool writes.

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

#: ``scheme://user:PASSWORD@``: the password of a URL, wherever it sits in a string
_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*:([^@/\s]+)@")
MASK = "***"

_secrets: set[str] = set()


def register(texts: Iterable[str]) -> None:
    """Remember the password of every URL in ``texts`` (command-line arguments), as given and decoded."""
    for text in texts:
        for match in _PASSWORD.finditer(str(text)):
            raw = match.group(1)
            _secrets.update(s for s in (raw, urllib.parse.unquote(raw)) if s and s != MASK)


def redact(text: str) -> str:
    """``text`` with every registered password, and every URL's password, replaced by ``***``."""
    text = _PASSWORD.sub(lambda m: m.group(0).replace(m.group(1), MASK), text)
    for secret in sorted(_secrets, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def mask_url(url: str) -> str:
    """``url`` with its password shown as ``***``, as SQLAlchemy renders it (other strings unchanged)."""
    return redact(url)


class _Redacting:
    """A text stream that redacts what is written to it, and passes everything else through."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text))
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
