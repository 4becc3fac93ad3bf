"""A pool without Ray: each trial runs in the driver's own process, one at a time.

``run_search.py search --local`` uses it.  It is for debugging (a breakpoint
or ``pdb`` inside a block works, Ctrl-C stops the trial at once) and for
tests that patch the code a trial runs, which a Ray worker process would not
see.  A trial runs on ``threads`` torch threads, as a Ray actor with that many
CPUs does, so its numbers match a Ray search's.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from nas.execution.pool import Finished, PoolBase
from nas.execution.worker import WEIGHTS, run_trial


class LocalPool(PoolBase):
    """The pool interface of ``RayPool``; ``wait`` runs the submitted trial to its end."""

    def __init__(self, threads: int = 1) -> None:
        self.threads = max(1, int(threads))
        self.queue: list[tuple[Any, dict[str, Any]]] = []

    def has_idle(self) -> bool:
        return not self.queue

    @property
    def n_running(self) -> int:
        return len(self.queue)

    def submit(self, tag: Any, payload: dict[str, Any], exclusive: bool = False) -> None:
        """Queue the one trial ``wait`` runs (it is always alone: ``exclusive`` changes nothing)."""
        if self.queue:
            raise RuntimeError("LocalPool runs one trial at a time; wait() for it first")
        self.queue.append((tag, payload))

    def wait(self, timeout: float) -> list[Finished]:
        if not self.queue:
            return []
        tag, payload = self.queue.pop(0)
        threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            result = run_trial(payload)  # catches every candidate fault; Ctrl-C still stops it
        finally:
            torch.set_num_threads(threads)
        result["node"] = "local"
        data = result.pop(WEIGHTS, None)  # in this process already: fetching it is handing it over
        return [Finished(tag, result, weights=None if data is None else lambda: data)]

    def busy_pids(self) -> list[int]:
        """Worker processes running a trial: none, the trial runs in the driver's own process."""
        return []

    def worker_pids(self) -> list[int]:
        return [os.getpid()]

    def shutdown(self) -> None:
        self.queue.clear()
