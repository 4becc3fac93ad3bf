"""Leaderboards and Pareto fronts of a study, as rows and as a text table.

The storage look-ups (``nas.search.reports.lookup``) and the one-trial report
(``nas.search.reports.trial``) live beside it.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import FrozenTrial

from evaluators.result import Measure, perplexity
from evaluators.result import measure_of as result_measure
from nas.errors import UserError
from nas.plural import plural
from nas.search.reports.lookup import get_trial, state_counts
from nas.search.reports.trial import (
    origin,
)
from nas.search.storage.records import measure_of, settings_of, trained
from nas.spec import Budget


def _row(t: FrozenTrial, pareto: bool, measure: Measure) -> dict[str, Any]:
    """One trial as a row.  Its value under the name of what it is: a language model's loss with its
    perplexity and bits per byte, or (``measure.key``) a probe score or a proxy's value alone, whose
    perplexity and bits per byte would mean nothing."""
    ua = t.user_attrs
    loss = t.values[0] if t.values else ua.get("val_loss")
    if measure.lm:
        value = {
            "val_loss": loss,
            "val_ppl": perplexity(loss) if loss is not None else None,
            # as the trainer measured it, with the corpus's bytes per token (loss / ln 2 is bits per *token*)
            "val_bpb": ua.get("val_bpb"),
        }
    else:
        value = {measure.key: measure.shown(loss) if loss is not None else None}
    return {
        "trial": t.number,
        **value,
        "flops_per_token": ua.get("flops_per_token"),
        "state_bytes": ua.get("state_bytes"),
        "params": ua.get("params"),
        "arch_id": ua.get("arch_id"),
        "summary": ua.get("summary", ""),
        "pareto": pareto,
        "parent": ua.get("parent"),
        "mutated": ua.get("mutated"),
        "seed_arch": ua.get("seed_arch"),
        "duplicate_of": ua.get("duplicate_of"),
        "origin": origin(t),
    }


def leaderboard(study: optuna.Study, top: int | None = None) -> list[dict[str, Any]]:
    """The Pareto front (multi-objective) or the best trials by loss (single objective).

    One row per measurement: trials of the same architecture with the same values (a duplicate
    reuses the first result; a retrain with the same seed gets it again) are listed in the first
    one's ``also``, as the plots draw them as one point.
    """
    complete = trained(study)  # a candidate over the caps has no result to rank
    multi = len(study.directions) > 1
    measure = measure_of(study)
    if multi:
        # Optuna's best_trials leaves infeasible trials out of constrained studies already.
        front = {t.number for t in study.best_trials}
        complete = [t for t in complete if t.number in front]
    rows: dict[Any, dict[str, Any]] = {}
    for t in sorted(complete, key=lambda t: (t.values[0], t.number)):
        key = (t.user_attrs.get("arch_id") or ("trial", t.number), tuple(t.values))
        if key in rows:
            rows[key]["also"].append(t.number)
        else:
            rows[key] = {**_row(t, multi, measure), "also": []}
    out = list(rows.values())
    return out[:top] if top else out


def _human(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


def _num(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def format_table(
    rows: list[dict[str, Any]],
    with_origin: bool = False,
    with_state: bool = False,
    measure: Measure | None = None,
) -> str:
    """Rows of ``leaderboard`` as a text table; ``with_origin`` adds where each architecture came from,
    ``with_state`` the bytes a sequence keeps while generating (a study with the state objective);
    ``measure`` (default: a loss) is what the rows' value is: only a loss has ppl and bpb columns."""
    measure = measure or result_measure("lm")
    width = max([len("origin")] + [len(r.get("origin") or "-") for r in rows]) if with_origin else 0
    mid = f"  {'origin':<{width}}" if with_origin else ""
    state = f"  {'state B':>8}" if with_state else ""
    vw = max(7, len(measure.column))
    derived = f"  {'ppl':>7}  {'bpb':>6}" if measure.lm else ""
    head = (
        f"{'trial':>5}  {measure.column:>{vw}}{derived}  {'FLOPs/tok':>9}{state}  {'params':>8}{mid}  "
        "architecture"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        mid = f"  {r.get('origin') or '-':<{width}}" if with_origin else ""
        state = f"  {_human(r.get('state_bytes')):>8}" if with_state else ""
        also = f"  (also trial {', '.join(map(str, r['also']))})" if r.get("also") else ""
        derived = f"  {_num(r['val_ppl'], '.2f'):>7}  {_num(r['val_bpb'], '.3f'):>6}" if measure.lm else ""
        lines.append(
            f"{r['trial']:>5}  {_num(r[measure.key], '.4f'):>{vw}}{derived}  "
            f"{_human(r['flops_per_token']):>9}{state}  {_human(r['params']):>8}{mid}  {r['summary']}{also}"
        )
    return "\n".join(lines)


def best_trial(study: optuna.Study) -> FrozenTrial:
    """Lowest loss among COMPLETE trials (multi-objective: lowest loss on the Pareto front)."""
    rows = leaderboard(study, 1)
    if not rows:
        counts = ", ".join(f"{n} {s}" for s, n in state_counts(study).items()) or "no trials"
        raise UserError(f"--study {study.study_name!r} has no COMPLETE trial to choose from ({counts})")
    return get_trial(study, rows[0]["trial"])


def format_leaderboard(study: optuna.Study, rows: list[dict[str, Any]]) -> str:
    """A heading that says what the rows are, then the table (with an origin column)."""
    settings = settings_of(study)
    counts = state_counts(study)
    total = sum(counts.values())
    order = ("COMPLETE", "PRUNED", "FAIL", "INFEASIBLE", "REQUEUED", "RUNNING", "WAITING")
    shown = {"REQUEUED": "interrupted and run again"}
    states = ", ".join(f"{counts[s]} {shown.get(s, s.lower())}" for s in order if counts.get(s))
    facts = [f"{plural(total, 'trial')} ({states or 'none finished'})"]
    if settings.get("objective"):
        facts.append(f"objective {settings['objective']}")
    measure = measure_of(study)
    if not measure.lm:  # the probes train by their own protocol and a proxy not at all
        facts.append(f"evaluator {measure.evaluator} (no budget used)")
    elif settings.get("budget"):
        # a wsd study's budget also records its rungs: the text is the Budget's own
        facts.append(f"budget {Budget.from_dict(settings['budget'])} per trial")
    lines = [f"study {study.study_name!r}: " + ", ".join(facts)]
    value = measure.name
    first = "lowest loss" if measure.lm else f"{measure.better} {measure.column}"
    if len(study.directions) > 1:
        what = "FLOPs/token" + (" and state" if len(study.directions) > 2 else "")
        lines.append(f"Pareto front ({value} vs {what}): {len(rows)} architecture(s), {first} first")
    else:
        lines.append(f"best {len(rows)} architecture(s) by {value}:")
    if not rows:
        lines.append("(no completed trial yet)")
        return "\n".join(lines)
    lines.append(format_table(rows, with_origin=True, with_state=len(study.directions) > 2, measure=measure))
    return "\n".join(lines)
