"""Fault injection for the reliability tests and ``benchmarks/chaos.py``: kill busy workers at random.

Test-only code, kept out of the package (it lived in ``nas/execution/``).

:class:`WorkerKiller` is a thread that, every few seconds, picks a worker
process that is running a trial (``pool.busy_pids()``) and kills it with
SIGKILL, as the kernel's OOM killer or a crash would.  It kills only processes
whose command line says they are one of the pool's Ray trial actors, so a PID
reused by some other process is never touched.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any


def is_trial_worker(pid: int) -> bool:
    """Whether ``pid`` is a live Ray worker process of this project's trial actor."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return cmdline.startswith(b"ray::") and b"TrialActor" in cmdline


class WorkerKiller(threading.Thread):
    """Kills a random busy trial worker every ``every`` seconds (uniform in the range), ``max_kills`` times.

    ``pool`` is the pool or a callable returning it (None while it does not
    exist yet).  ``kills`` lists the PIDs killed.  Call :meth:`stop` when done.
    """

    def __init__(
        self,
        pool: Any | Callable[[], Any],
        every: tuple[float, float] = (1.0, 3.0),
        max_kills: int = 5,
        seed: int = 0,
    ) -> None:
        super().__init__(name="worker-killer", daemon=True)
        self._pool = pool if callable(pool) else (lambda: pool)
        self.every = every
        self.max_kills = max_kills
        self.rng = random.Random(seed)
        self.kills: list[int] = []
        self._stopped = threading.Event()

    def run(self) -> None:
        while len(self.kills) < self.max_kills and not self._stopped.wait(self.rng.uniform(*self.every)):
            pool = self._pool()
            if pool is None:
                continue
            try:
                pids = [p for p in pool.busy_pids() if is_trial_worker(p)]
            except Exception:  # noqa: BLE001 - the pool is being shut down; nothing to kill
                continue
            if not pids:
                continue
            pid = self.rng.choice(pids)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            self.kills.append(pid)

    def stop(self, timeout: float = 30.0) -> None:
        self._stopped.set()
        self.join(timeout)
