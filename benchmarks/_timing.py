"""A real search in this process with its phases timed (benchmarks/orchestration.py and scaling.py)."""

from __future__ import annotations

import io
import time
from typing import Any


def timed_search(argv: list[str]) -> tuple[Any, dict[str, float]]:
    """Run ``run_search.py`` ``argv`` (a ``search`` command) and return its study and clock marks.

    Marks (``time.perf_counter`` seconds): ``start`` before Ray starts; ``ready`` when every worker
    answers and the study exists (the search loop starts); ``last_told`` when the last trial has
    been told (the pool is shut down); ``shut`` when the pool's shutdown has returned.
    """
    from nas.cli import build_parser
    from nas.commands.search import build_run
    from nas.search.driver import loop as drv

    settings = build_run(build_parser().parse_args(argv))
    marks: dict[str, float] = {"start": time.perf_counter()}

    def pool_factory(s: Any) -> Any:
        pool = drv.default_pool(s)
        while len(pool.worker_pids()) < s.workers:  # every actor placed, started and answering
            pool.wait(0.05)
        marks["ready"] = time.perf_counter()  # overwritten below when the search loop starts
        shutdown = pool.shutdown

        def timed_shutdown() -> None:
            marks["last_told"] = time.perf_counter()
            shutdown()
            marks["shut"] = time.perf_counter()

        pool.shutdown = timed_shutdown
        return pool

    class TimedDriver(drv.Driver):
        def _search(self, *a: Any, **k: Any) -> Any:
            # The clock starts after the study is created (a new SQLite file takes up to a second:
            # a one-off cost per search, not per trial).
            marks["ready"] = time.perf_counter()
            return super()._search(*a, **k)

    study = TimedDriver(settings, pool_factory=pool_factory, out=io.StringIO()).run()
    return study, marks
