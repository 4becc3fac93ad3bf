"""Progress of a long pass over a corpus: a bar redrawn in place on a terminal, plain lines otherwise.

A log file or a CI job reads one line every :data:`EVERY_S` seconds rather than a line per redraw (a
carriage return is no line end there); a terminal gets the same facts, redrawn at most five times a
second.  Both end with one summary line.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

#: seconds between plain progress lines (not a terminal)
EVERY_S = 30.0
_REDRAW_S = 0.2
_WIDTH = 20


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    """Records, bytes (of ``total``), tokens per second and time left of one pass, on ``stream``."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.label, self.total = label, max(1, total)
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = self.last = time.monotonic()
        self.drawn = False

    def line(self, records: int, done: int, tokens: int) -> str:
        """What the pass has done, as one line (the bar's text and each plain line)."""
        elapsed = max(1e-9, time.monotonic() - self.start)
        share = min(1.0, done / self.total)
        left = f", {_clock(elapsed * (1 - share) / share)} left" if 0 < share < 1 else ""
        bar = ""
        if self.tty:
            filled = int(share * _WIDTH)
            bar = f"[{'#' * filled}{'.' * (_WIDTH - filled)}] "
        return (f"{self.label}: {bar}{records:,} records, {_size(done)} of {_size(self.total)}, "
                f"{tokens / elapsed:,.0f} tokens/s{left}")  # fmt: skip

    def update(self, records: int, done: int, tokens: int) -> None:
        """Show the pass's state if it is time to: a redraw on a terminal, else a line every EVERY_S s."""
        now = time.monotonic()
        if now - self.last < (_REDRAW_S if self.tty else EVERY_S):
            return
        self.last = now
        if self.tty:
            self.stream.write("\r" + self.line(records, done, tokens) + "\x1b[K")
            self.drawn = True
        else:
            self.stream.write(self.line(records, done, tokens) + "\n")
        self.stream.flush()

    def finish(self, records: int, tokens: int) -> None:
        """The summary line (the bar, if drawn, is replaced by it)."""
        elapsed = time.monotonic() - self.start
        head = "\r" if self.drawn else ""
        rate = tokens / max(elapsed, 1e-9)
        tail = "\x1b[K" if self.drawn else ""
        self.stream.write(f"{head}{self.label}: {records:,} records, {_size(self.total)}, {tokens:,} tokens "
                          f"in {elapsed:.1f} s ({rate:,.0f} tokens/s){tail}\n")  # fmt: skip
        self.stream.flush()

    def clear(self) -> None:
        """End a bar cut short (an error follows it on the next line, not over it)."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
