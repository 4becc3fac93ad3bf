"""Leaderboards and Pareto fronts of a study, as rows and as a text table."""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState


def _row(t: FrozenTrial, pareto: bool) -> dict[str, Any]:
    ua = t.user_attrs
    loss = t.values[0] if t.values else ua.get("val_loss")
    return {
        "trial": t.number,
        "val_loss": loss,
        "val_ppl": math.exp(loss) if loss is not None else None,
        "val_bpb": loss / math.log(2) if loss is not None else None,
        "flops_per_token": ua.get("flops_per_token"),
        "params": ua.get("params"),
        "arch_id": ua.get("arch_id"),
        "summary": ua.get("summary", ""),
        "pareto": pareto,
        "parent": ua.get("parent"),
        "seed_arch": ua.get("seed_arch"),
    }


def leaderboard(study: optuna.Study, top: int | None = None) -> list[dict[str, Any]]:
    """The Pareto front (multi-objective) or the best trials by loss (single objective)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(study.directions) > 1:
        front = {t.number for t in study.best_trials}
        chosen = sorted((t for t in complete if t.number in front), key=lambda t: t.values[0])
        rows = [_row(t, True) for t in chosen]
    else:
        chosen = sorted(complete, key=lambda t: t.values[0])
        rows = [_row(t, False) for t in chosen]
    return rows[:top] if top else rows


def _human(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


def format_table(rows: list[dict[str, Any]]) -> str:
    head = f"{'trial':>5}  {'loss':>7}  {'ppl':>7}  {'bpb':>6}  {'FLOPs/tok':>9}  {'params':>8}  architecture"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['trial']:>5}  {r['val_loss']:>7.4f}  {r['val_ppl']:>7.2f}  {r['val_bpb']:>6.3f}  "
            f"{_human(r['flops_per_token']):>9}  {_human(r['params']):>8}  {r['summary']}"
        )
    return "\n".join(lines)


def state_counts(study: optuna.Study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    return counts
