"""From a ladder study's runs to what the ladder reports: fits, predictions with intervals, crossovers.

Everything here is plain data (``ladder --json`` prints it).  Per family (an
architecture across its sizes): the measured points (each run's rungs and its
end), the Chinchilla fit (:mod:`nas.ladder.fit`), and the prediction at the
target: ``loss``, ``low``/``high`` (the 5th and 95th percentiles of the
bootstrap), ``p_best`` (the share of bootstrap draws in which it is the lowest;
draw ``i`` of every family is one joint draw: independent draws, or one joint
refit under ``--share``), the compute-optimal parameters and tokens, and how far
each is beyond what was trained.  ``check`` (:mod:`nas.ladder.check`) refits
without the larger sizes and predicts them: how well such predictions hold,
measured on the ladder itself, and the ``verdict`` the report leads with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import optuna
import torch

from nas.confirm.plan import Entry
from nas.confirm.runner import ARCHS
from nas.ladder.families import (  # noqa: F401 (re-exported: the report's names, as before the split)
    DEFAULT_TARGET_FACTOR,
    HIGH,
    LOW,
    MIN_DRAWS,
    MIN_SIZES,
    Family,
    _edge,
    _families,
    _prediction,
    crossovers,
    fit_families,
    fit_summary,
    interval,
    points_of,
    run_rows,
)
from nas.ladder.fit import optimal
from nas.ladder.plan import LADDER, LadderPlan


def _p_best(fams: Sequence[Family], preds: dict[str, dict[str, Any]]) -> None:
    """Each family's share of the joint bootstrap draws in which its prediction is the lowest; None for
    all when one of them has no draws (a share among the others would leave it out of the contest)."""
    names = [f.name for f in fams if f.name in preds]
    if not names:
        return
    if any(len(preds[k]["draws"]) < MIN_DRAWS for k in names):  # too few to say a share of draws
        for k in names:
            preds[k]["p_best"] = None
        return
    n = min(len(preds[k]["draws"]) for k in names)
    table = torch.tensor([preds[k]["draws"][:n] for k in names], dtype=torch.float64)
    table = torch.where(torch.isfinite(table), table, torch.full_like(table, math.inf))
    wins = torch.bincount(torch.argmin(table, dim=0), minlength=len(names))
    for k, w in zip(names, wins.tolist(), strict=False):
        preds[k]["p_best"] = w / n if n else None


def build_report(
    study: optuna.Study,
    source: str,
    seq_len: int | None,
    target_flops: float | None = None,
    target_size: float | None = None,
    form: str = "chinchilla",
    samples: int = 200,
    check: str | None = None,
    share: str = "none",
) -> dict[str, Any]:
    """Everything a ladder reports, as plain data, from the ladder study and the plan it records.

    ``check``: ``heldout`` or ``rollout`` (:mod:`nas.ladder.check`), or None; either gives the report a
    verdict on its own predictions."""
    from nas.ladder.check import run_check, verdict

    plan = LadderPlan.from_dict(study.user_attrs.get(LADDER) or {})
    entries = {e.index: e for e in (Entry.from_dict(d) for d in study.user_attrs.get(ARCHS) or [])}
    rows = run_rows(study, plan, entries)
    fams = _families(study, plan, rows, seq_len, form, samples, share=share)
    measured = [p.flops for f in fams for p in f.points]
    target = target_flops or (DEFAULT_TARGET_FACTOR * max(measured) if measured else None)
    preds: dict[str, dict[str, Any]] = {}
    if target is not None:
        for f in fams:
            if f.fit is not None:
                preds[f.name] = _prediction(f, target, target_size)
        _p_best(fams, preds)
    families = []
    for f in fams:
        pred = preds.get(f.name)
        families.append(
            {
                "name": f.name,
                "role": f.role,
                "label": f.label,
                "runs": len({p.run for p in f.points}),
                "points": len(f.points),
                "sizes": len(f.sizes),
                "fit": f.fit.to_dict() if f.fit is not None else None,
                "why_not": f.why_not,
                "no_interval": f.no_interval,
                "prediction": {k: v for k, v in pred.items() if k != "draws"} if pred else None,
                "measured": [
                    {"params": p.params, "tokens": p.tokens, "flops": p.flops, "loss": p.loss}
                    for p in f.points
                ],
                "curve": _curve(f, min(measured), target)
                if f.fit is not None and measured and target
                else None,
            }
        )
    ranking = sorted(preds, key=lambda k: preds[k]["loss"])
    done = sum(r["state"] == "COMPLETE" for r in rows)
    kind = check if check in ("heldout", "rollout") else None
    checked = run_check(kind, study, plan, rows, seq_len, form, samples, share) if kind else None
    v = verdict(kind, checked, families)
    for f in families:  # each prediction carries the verdict beside its p(best)
        if f["prediction"] is not None:
            f["prediction"]["verdict"] = v["status"]
    return {
        "verdict": v,
        "study": source,
        "ladder_study": study.study_name,
        "form": form,
        "fit": fit_summary(fams, form, share),
        "samples": samples,
        "interval": [LOW, HIGH],
        "sizes": plan.sizes(),
        "seeds": list(plan.seeds),
        "fewer_seeds": plan.uneven_seeds(),  # e.g. "size 8, 16: seed 0" (--seeds 2,2,2,1,1)
        "scale": plan.scale,
        "tokens": plan.tokens,
        "parametrization": trained_under(study),
        "target": {
            "flops": target,
            "size": target_size,
            "given": target_flops is not None,
            "allocation": "at size" if target_size is not None else "compute-optimal per fit",
        },
        "runs": {"planned": len(rows), "complete": done, "rows": rows},
        "members": members(plan, entries),
        "families": families,
        "ranking": ranking,
        "crossovers": crossovers(fams, min(measured), target) if measured and target else [],
        "check_kind": kind,
        "check": checked,
    }


def members(plan: LadderPlan, entries: dict[int, Entry]) -> list[dict[str, Any]]:
    """What each size of each architecture is: its shape and its layers (ArchConfig.summary)."""
    out = []
    for m in sorted(plan.members, key=lambda m: (m.family, m.size)):
        arch = entries[m.entry].arch
        out.append({"family": m.family, "size": m.size, "arch_id": arch.arch_id, "layers": arch.summary()})
    return out


def _curve(f: Family, lo: float, hi: float, steps: int = 25) -> dict[str, Any]:
    """The compute-optimal fitted loss from ``lo`` to ``hi`` FLOPs, and its bootstrap band (``low`` and
    ``high`` None without one)."""
    top = max(hi, max(p.flops for p in f.points))
    grid = [lo * (top / lo) ** (i / (steps - 1)) for i in range(steps)]
    loss, low, high = [], [], []
    for c in grid:
        loss.append(optimal(f.fit, f.curve, c, f.n_range())[0])  # type: ignore[arg-type]
        low_c, high_c = interval([optimal(d, f.curve, c, f.n_range())[0] for d in f.draws])
        low.append(low_c)
        high.append(high_c)
    band = bool(f.draws)
    return {"flops": grid, "loss": loss, "low": low if band else None, "high": high if band else None}


def trained_under(study: optuna.Study) -> str:
    """The parametrization every run of the ladder study trained under (its recorded recipe's)."""
    from nas.search.storage.records import SPEC

    return ((study.user_attrs.get(SPEC) or {}).get("recipe") or {}).get("parametrization", "standard")
