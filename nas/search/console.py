"""What a search prints while it runs: one line per finished trial, for people and for logs."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import TextIO


class Reporter:
    """One line per finished trial and a closing summary; quiet enough for logs, clear for people."""

    def __init__(self, total: int | None, out: TextIO | None = None,
                 compute: Callable[[], str] | None = None) -> None:  # fmt: skip
        self.total = total  # None: no --trials, the search ends when --max-flops is spent
        self.compute = compute  # "2.1e+12 of 2.4e+12 FLOPs" under --max-flops, else ""
        self.out = out or sys.stdout
        self.started = time.monotonic()
        self.durations: list[float] = []
        self.counts = {"COMPLETE": 0, "PRUNED": 0, "FAIL": 0}
        self.best: float | None = None

    def line(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def finished(self, done: int, running: int, number: int, state: str, text: str, seconds: float,
                 workers: int, loss: float | None = None) -> None:
        """Trial ``number`` ended in ``state``: count it and print the progress line with an ETA."""
        self.counts[state] = self.counts.get(state, 0) + 1
        self.durations.append(seconds)
        if loss is not None and math.isfinite(loss) and (self.best is None or loss < self.best):
            self.best = loss
        left = 0 if self.total is None else max(0, self.total - done)
        eta = ""
        if left and self.durations:
            per = sum(self.durations) / len(self.durations)
            eta = f", ~{fmt_time(per * left / max(1, workers))} left"
        over = f" {self.counts['INFEASIBLE']} over cap" if self.counts.get("INFEASIBLE") else ""
        best = f"best {self.best:.4f}" if self.best is not None else "best -"
        spent = self.compute() if self.compute is not None else ""
        spent = f"{spent}, " if spent else ""
        count = f"{done:>3}" if self.total is None else f"{done:>3}/{self.total}"
        self.line(
            f"[{count}] trial {number:<4} {state:<8} {text}  | {best}, "
            f"{self.counts['COMPLETE']} done {self.counts['PRUNED']} pruned {self.counts['FAIL']} failed"
            f"{over}, "
            f"{running} running, {spent}{fmt_time(time.monotonic() - self.started)} elapsed{eta}"
        )


def fmt_time(s: float) -> str:
    """``75`` -> ``1m15s``; ``3700`` -> ``1h01m``."""
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
