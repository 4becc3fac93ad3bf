"""Ladders: each finalist and baseline trained at several sizes, fitted, and predicted at a larger compute.

``run_search.py ladder`` (:mod:`nas.commands.ladder`) takes a search's
finalists and baselines as ``confirm`` does, grows each by the size rule
(:func:`nas.models.sizes.resize`), trains one wsd run per size and seed whose
rungs give several token counts, fits ``L(N, D)`` per architecture in the
Chinchilla form with bootstrap intervals (:mod:`nas.ladder.fit`), and predicts
each one's loss at a target compute, with the probability that each is best
(:mod:`nas.ladder.report`).  The runs are a study beside the search's
(``STUDY-ladder``) run by the confirm machinery, so a stopped ladder continues
where it stopped.  Why and how: ``docs/ladder.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TextIO

import optuna

from nas.confirm.plan import Entry
from nas.confirm.runner import FLAGS, KeptPool, drive_queue, enqueue_missing, open_confirm_study
from nas.execution.pool import Pool
from nas.ladder.plan import LADDER, LadderPlan, ladder_study_name
from nas.search.driver.context import RunContext
from nas.search.driver.inflight import default_pool

__all__ = ["LADDER", "LadderPlan", "ladder_study_name", "run_ladder"]


def run_ladder(
    settings: RunContext,
    source: str,
    every: Sequence[Entry],
    plan: LadderPlan,
    pool_factory: Callable[[RunContext], Pool] | None = None,
    out: TextIO | None = None,
    flags: str = "",
) -> optuna.Study:
    """Train every run of ``plan`` the ladder study does not hold yet (a stopped ladder continues)."""
    settings.check_environment()  # before the study is created: a missing corpus leaves nothing behind
    study = open_confirm_study(settings, source, every)
    rerun_before = len(study.get_trials(deepcopy=False))  # failed runs of earlier ladders run again
    study.set_user_attr(LADDER, plan.to_dict())
    study.set_user_attr(FLAGS, flags)
    pools = KeptPool(pool_factory or default_pool)
    try:
        enqueue_missing(study, plan.runs(), {e.index: e for e in every}, rerun_before)
        drive_queue(settings, study, every, pools, out)
    finally:
        pools.close()
    return study
