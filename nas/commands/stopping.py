"""How a command that drives trials (``search``, ``confirm``) stops on SIGTERM."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from nas.interrupts import stop


@contextlib.contextmanager
def sigterm_stops_the_driver() -> Iterator[None]:
    """SIGTERM (a scheduler, ``kill``, ``timeout``) unwinds the driver like Ctrl-C, then exits 143.

    The handler raises ``SystemExit`` in the driver, which re-queues the running trials,
    shuts its workers down and releases the study's lease on the way out.  Then the
    process ends with ``os._exit(143)``: when the whole process group got the signal
    (``timeout``, a batch scheduler, ``kill -- -PGID``), the local Ray's own processes
    are dying at the same moment, and the normal interpreter teardown then ran into Ray's
    native code and ended in SIGABRT (or exit 1) instead of 143.  Everything worth
    keeping is in the study by then; stdout is flushed and stderr gets the line every other
    command ends a SIGTERM with (``terminated (SIGTERM)``, :mod:`nas.interrupts`).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def on_sigterm(signum: int, frame: Any) -> None:
        if received:  # a second SIGTERM must not interrupt the re-queuing the first one started
            return
        received.append(signum)
        stop(SystemExit(128 + signum))  # remembered: raised inside a weakref callback, it would be lost

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    except BaseException as exc:
        # The exception may not be ours: raised inside ray.wait, Ray turns it into SystemExit(1).
        # 15: Ray's own handler (ray.init installs it where the pool could not keep ours).
        if not received and not (isinstance(exc, SystemExit) and exc.code == signal.SIGTERM):
            raise
        received.append(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if received:
        sys.stdout.flush()
        print("terminated (SIGTERM)", file=sys.stderr, flush=True)  # the line nas.cli gives any other command
        os._exit(128 + signal.SIGTERM)
