"""Confirming a search's winners: re-train the finalists and baselines over seeds, scales and learning rates.

A search ranks single-seed runs at one small budget, which rewards luck.
``run_search.py confirm`` (:mod:`nas.commands.confirm`) re-trains the top K
and the baselines on the search's pool and storage and reports paired
statistics, rank stability and power-law fits; ``export --confirmed`` exports
the confirmed winner.  Why and how: ``docs/confirming.md``.
"""

from __future__ import annotations

from typing import Any

import optuna

from nas.confirm.plan import Entry, Run
from nas.confirm.runner import ARCHS, CONFIRM_OF, PLAN, Plan, confirm_study_name
from nas.confirm.summary import collect_runs, power_laws, rank_correlation, summarize, verdicts
from nas.redact import mask_url
from nas.spec import Budget

__all__ = [
    "ARCHS",
    "CONFIRM_OF",
    "PLAN",
    "Entry",
    "Plan",
    "Run",
    "build_report",
    "confirm_study_name",
]


def build_report(study: optuna.Study, storage: str) -> dict[str, Any]:
    """Everything a confirmation reports, as plain data, from the confirm study and the plan it records."""
    entries = [Entry.from_dict(d) for d in study.user_attrs.get(ARCHS) or []]
    by_index = {e.index: e for e in entries}
    plan = Plan.from_dict(study.user_attrs.get(PLAN) or {})
    wanted = [by_index[i] for i in plan.wanted]
    baselines = [by_index[i] for i in plan.baselines]
    runs = collect_runs(study, wanted)
    summary = summarize(runs, wanted, baselines, plan.scales, plan.seeds)
    evaluator = _search_evaluator(study, storage)
    if evaluator != "lm":  # the search's value (a probe score, a proxy) is not a loss: no gap to it
        for row in summary:
            row["search_gap"] = None
    settings = study.user_attrs.get("settings") or {}
    return {
        "study": study.user_attrs.get(CONFIRM_OF),
        "confirm_study": study.study_name,
        "storage": mask_url(storage),
        "budget": str(Budget.from_dict(settings["budget"])) if settings.get("budget") else "0 steps",
        "scales": list(plan.scales),
        "seeds": list(plan.seeds),
        "lrs": list(plan.lrs),
        "baselines": list(dict.fromkeys(b.base_name for b in baselines)),
        "search_evaluator": evaluator,
        "runs": runs,
        "summary": summary,
        "rank_correlation": rank_correlation(summary, plan.scales),
        "power_law": power_laws(summary, wanted, baselines, plan.scales),
        "verdicts": verdicts(summary, wanted, baselines, plan.scales),
    }


def _search_evaluator(study: optuna.Study, storage: str) -> str:
    """The evaluator the confirmed search scored its trials with (``lm`` when it is not known)."""
    from nas.search.storage.records import evaluator_of

    try:
        search = optuna.load_study(study_name=str(study.user_attrs.get(CONFIRM_OF)), storage=storage)
    except KeyError:  # the search study is gone: its trials' losses were recorded in the plan
        return "lm"
    return evaluator_of(search)
