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

A handler's exception is raised wherever the main thread is when the signal arrives; inside a weakref
callback or a ``__del__`` (the garbage collector runs them at any moment: Ray's object references have
them) Python prints it as "Exception ignored" and carries on, and the stop is lost: a search stopped by
a scheduler ran on to its last trial.  So every stop raised is remembered, and the loops a stop's
exception leaves for good (the driver's, the training loops') raise again one they find there
(:func:`raise_lost_stop`).
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


#: the stops raised while a command runs (:func:`stops_unwind`), for :func:`raise_lost_stop`
_raised: list[BaseException] = []


def stop(exc: BaseException) -> None:
    """Raise ``exc`` from a signal handler, remembered until the command ends (:func:`raise_lost_stop`)."""
    _raised.append(exc)
    raise exc


def _interrupt(signum: int, frame: Any) -> None:
    stop(KeyboardInterrupt())


def _terminate(signum: int, frame: Any) -> None:
    stop(Terminated(signum))


@contextlib.contextmanager
def stops_unwind() -> Iterator[None]:
    """While the block runs, Ctrl-C raises ``KeyboardInterrupt`` and SIGTERM :class:`Terminated` in the
    main thread, each remembered (the handlers in place before are put back afterwards).  A signal that
    was ignored when the process started stays ignored (``nohup``, a shell's background job), and
    nothing changes outside the main thread, where Python cannot set a handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ours = {
        signal.SIGINT: (signal.default_int_handler, _interrupt),
        signal.SIGTERM: (signal.SIG_DFL, _terminate),
    }
    previous = {s: signal.getsignal(s) for s in ours}
    for s, (default, handler) in ours.items():
        if previous[s] == default:
            signal.signal(s, handler)
    _raised.clear()
    try:
        yield
    finally:
        _raised.clear()
        for s, h in previous.items():
            if h is not None:
                signal.signal(s, h)


def raise_lost_stop() -> None:
    """Raise again a stop whose exception never unwound the command (raised inside a weakref callback
    or a ``__del__``: printed by Python as "Exception ignored", then dropped).  Call it only where a
    stop's exception, once raised, can never come back to: the top of the driver's loop, a training
    step."""
    if _raised:
        lost = _raised[-1]
        raise type(lost)(*lost.args)


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
