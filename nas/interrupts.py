"""How a command stops when asked to: Ctrl-C (SIGINT) and SIGTERM (``kill``, a scheduler, ``timeout``).

Both unwind the command as an exception, so every ``finally`` runs: a temporary file is removed, a
half-made study deleted, a lock released.  Ctrl-C is Python's ``KeyboardInterrupt``; SIGTERM raises
:class:`Terminated`, a ``KeyboardInterrupt`` too, so every cleanup written for Ctrl-C serves both.
(Left to its default action, SIGTERM ended the process on the spot: a temporary file stayed beside
the user's output.)  The CLI ends the first with status 130, the second with 143 (128 + the signal),
one line each.  The commands that drive trials put their own SIGTERM handler over this one
(:mod:`nas.commands.stopping`).

:func:`held` keeps both signals waiting while a few steps must happen together (a finished file
moved into place and recorded, the imports of torch and NumPy, which an exception half-way through
leaves unusable); the signal takes effect as soon as the block ends.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

#: the signals a command answers by unwinding (SIGKILL cannot be answered; SIGHUP keeps its default)
STOPS = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwinds as Ctrl-C does; the process then ends with 128 + ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """While the block runs, SIGTERM raises :class:`Terminated` in the main thread (the handler in place
    before is put back afterwards).  A SIGTERM that was ignored when the process started stays ignored,
    and so does everything outside the main thread, where Python cannot set a handler."""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)
    ):
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Ctrl-C and SIGTERM arriving inside the block take effect when it ends (the first one, through
    the handler that was in place).  Only Python-level handlers can wait: a signal left to its default
    action (or ignored) is not touched, nor is anything outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def wait(signum: int, frame: Any) -> None:
        arrived.append(signum)

    previous = {s: signal.getsignal(s) for s in STOPS}
    waiting = {s: h for s, h in previous.items() if callable(h)}
    for s in waiting:
        signal.signal(s, wait)
    try:
        yield
    finally:
        for s, h in waiting.items():
            signal.signal(s, h)
        if arrived:
            signal.raise_signal(arrived[0])  # runs the restored handler now, as if it had just arrived
