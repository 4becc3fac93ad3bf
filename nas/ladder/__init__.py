"""Ladders: each finalist and baseline trained at several sizes, fitted, and predicted at a larger compute.

``run_search.py ladder`` (:mod:`nas.commands.ladder`) takes a search's
finalists and baselines as ``confirm`` does, grows each by the size rule
(:func:`nas.models.sizes.resize`), trains one wsd run per size and seed whose
rungs give several token counts, fits ``L(N, D)`` per architecture in the
Chinchilla form with bootstrap intervals (:mod:`nas.ladder.fit`), and predicts
each one's loss at a target compute, with the probability that each is best
(:mod:`nas.ladder.report`).  The runs are a study beside the search's
(``STUDY-ladder``) run by the one runner of lists of runs
(:func:`nas.confirm.runner.run_lists`), so a stopped ladder continues where it
stopped.  Why and how: ``docs/ladder.md``.
"""

from __future__ import annotations

from nas.ladder.plan import LADDER, LadderPlan, ladder_study_name

__all__ = ["LADDER", "LadderPlan", "ladder_study_name"]
