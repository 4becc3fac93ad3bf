"""What a search prints while it runs: one line per finished trial, for people and for logs."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import TextIO

from evaluators.result import measure_of

# what is left of a run: the work of each trial not started yet, (work, seconds so far) of each running one
Pending = Callable[[], tuple[list[float], list[tuple[float, float]]]]


class Reporter:
    """One line per finished trial and a closing summary; quiet enough for logs, clear for people."""

    def __init__(self, total: int | None, out: TextIO | None = None,
                 compute: Callable[[], str] | None = None,
                 pending: Pending | None = None) -> None:  # fmt: skip
        self.total = total  # None: no --trials, the search ends when --max-flops is spent
        self.compute = compute  # "2.1e+12 of 2.4e+12 FLOPs" under --max-flops, else ""
        # A trial's work is its relative cost (1 in a search; scale x FLOPs in a
        # confirmation, whose long runs come last), so the time left is not the mean trial x count.
        self.pending = pending
        self.out = out or sys.stdout
        self.started = time.monotonic()
        self.durations: list[float] = []
        self.work: list[float] = []
        # of the study, as the line's position [done/total] is: seeded by the driver with earlier runs' trials
        self.counts = {"COMPLETE": 0, "PRUNED": 0, "FAIL": 0}
        self.best: float | None = None  # of the study, not of this run: seeded by the driver
        self.measure = measure_of("lm")  # what the values are (a search by another evaluator sets its own)

    def line(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def seen(self, loss: float | None) -> None:
        """A loss the study holds (earlier runs included): the progress line's best is the study's."""
        if loss is not None and math.isfinite(loss) and (self.best is None or loss < self.best):
            self.best = loss

    def earlier(self, state: str) -> None:
        """A trial an earlier run finished (``state`` as :func:`state_name` says it): counted, so that a
        continued search's line says ``5/6 ... 4 done 1 pruned``, not this run's ``0 done 1 pruned``."""
        if state in ("COMPLETE", "PRUNED", "FAIL", "INFEASIBLE"):  # what count_done counts; not REQUEUED
            self.counts[state] = self.counts.get(state, 0) + 1

    def time_left(self, left: int, workers: int) -> float | None:
        """Seconds until the last of ``left`` trials ends on ``workers`` workers; None before any measure."""
        if not left or not self.durations or sum(self.work) <= 0:
            return None
        rate = sum(self.durations) / sum(self.work)  # seconds per unit of work
        if self.pending is not None:
            queued, running = self.pending()
        else:
            queued, running = [sum(self.work) / len(self.work)] * left, []
        seconds = rate * sum(queued) + sum(max(0.0, rate * w - spent) for w, spent in running)
        # the trials left run side by side on at most as many workers as there are trials
        return seconds / max(1, min(workers, len(queued) + len(running)))

    def finished(
        self,
        done: int,
        running: int,
        number: int,
        state: str,
        text: str,
        seconds: float,
        workers: int,
        loss: float | None = None,
        work: float = 1.0,
    ) -> None:
        """Trial ``number`` ended in ``state``: count it and print the progress line with an ETA."""
        self.counts[state] = self.counts.get(state, 0) + 1
        self.durations.append(seconds)
        self.work.append(work)
        self.seen(loss)
        left = 0 if self.total is None else max(0, self.total - done)
        seconds_left = self.time_left(left, workers)
        eta = "" if seconds_left is None else f", ~{fmt_time(seconds_left)} left"
        over = f" {self.counts['INFEASIBLE']} over cap" if self.counts.get("INFEASIBLE") else ""
        best = f"best {self.measure.shown(self.best):.4f}" if self.best is not None else "best -"
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
