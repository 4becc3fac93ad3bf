"""``export --confirmed``: the best confirmed architecture, with what the confirmation says about it."""

from __future__ import annotations

import sys
from typing import Any

import optuna
from optuna.trial import TrialState

from nas.confirm import build_report, confirm_study_name
from nas.confirm.plan import Entry, Run
from nas.confirm.runner import ARCHS, PLAN, Plan, existing_runs, planned_runs, scaled_budget, sweep_runs
from nas.errors import UserError
from nas.execution.worker import DIVERGED
from nas.program import prog_name
from nas.redact import mask_url
from nas.search.storage.records import load_study, settings_of
from nas.search.storage.urls import open_storage
from nas.spec.training import Budget


def open_confirmation(study: str, url: str) -> optuna.Study:
    """The confirm study of the search study ``study`` in storage ``url`` (read only)."""
    name = confirm_study_name(study)
    try:
        return load_study(open_storage(url, read_only=True), name)
    except UserError:
        raise UserError(
            f"--study {study!r} has no confirmation ({name!r} is not in {mask_url(url)}); run "
            f"`{prog_name()} confirm --study {study}` first"
        ) from None


def confirmed_winner(study: optuna.Study, url: str, finish: str) -> dict[str, Any]:
    """The lowest mean loss at the plan's largest scale: its rows, verdict and first-seed run.

    Only from a finished comparison: every run the plan asks for (each architecture at each scale
    and seed, and the lr sweep's) has a result, and the winner has a loss on every seed; otherwise
    a UserError says what is missing and that ``finish`` (the ``confirm`` command) finishes it.
    """
    report = build_report(study, url)
    plan = Plan.from_dict(study.user_attrs.get(PLAN) or {})
    if not plan.scales or not plan.seeds or not plan.wanted:
        raise UserError(f"study {study.study_name!r} records no confirmation plan; {finish} makes one")
    check_finished(study, plan, finish)
    scale = max(plan.scales)
    at_scale = [r for r in report["summary"] if r["scale"] == scale]
    full = [r for r in at_scale if r["mean"] is not None and r["seeds"] == sorted(plan.seeds)]
    short = [r for r in at_scale if r not in full]  # diverged on some seed (finished runs with no loss)
    if not full:
        raise UserError(
            f"no architecture of study {study.study_name!r} has a loss on every seed at {scale:g}x "
            f"(diverged: {', '.join(r['name'] for r in short)}); nothing can be named the winner"
        )
    for r in short:
        print(
            f"note: {r['name']} diverged at {scale:g}x on seed(s) "
            f"{', '.join(str(s) for s in plan.seeds if s not in r['seeds'])}; it is not a candidate",
            file=sys.stderr,
        )
    best = min(full, key=lambda r: r["mean"])
    runs = [
        r
        for r in report["runs"]
        if r["arch_id"] == best["arch_id"]
        and r["scale"] == scale
        and r["lr"] == best["lr"]
        and r["val_loss"] is not None
        and r["seed"] in plan.seeds
    ]
    run = min(runs, key=lambda r: r["seed"])
    trial = next(t for t in study.get_trials(deepcopy=False) if t.number == run["trial"])
    rows = [
        {k: r[k] for k in ("scale", "lr", "seeds", "mean", "std", "min", "max", "lower_on")}
        | {
            "delta_vs_baseline": {
                b: {k: v for k, v in d.items() if k != "deltas"} for b, d in r["delta_vs_baseline"].items()
            }
        }
        for r in report["summary"]
        if r["arch_id"] == best["arch_id"]
    ]
    return {
        "report": report,
        "best": best,
        "run": run,
        "trial": trial,
        "rows": rows,
        "verdict": report["verdicts"].get(best["name"]),
    }


def header_lines(w: dict[str, Any]) -> str:
    """The comment block at the top of the exported file: the confirmation in a few lines."""
    best, rep = w["best"], w["report"]
    lines = [
        f"Confirmed winner of study {rep['study']!r}: {best['name']} "
        f"({best['role']}, arch {best['arch_id']})",
        f"lowest mean validation loss at {best['scale']:g}x the search's budget over seeds "
        f"{', '.join(map(str, best['seeds']))} (study {rep['confirm_study']!r})",
    ]
    if w["verdict"]:
        lines.append(f"verdict: {w['verdict']}")
    for r in w["rows"]:
        if r["mean"] is None:
            continue
        deltas = "; ".join(
            f"vs {b} {d['mean']:+.4f} [{d['min']:+.4f}, {d['max']:+.4f}] lower on {d['lower_on']}/{d['n']}"
            for b, d in r["delta_vs_baseline"].items()
        )
        lines.append(
            f"{r['scale']:g}x: {r['mean']:.4f} ± {r['std']:.4f} [{r['min']:.4f}, {r['max']:.4f}]"
            + (f"; {deltas}" if deltas else "")
        )
    return "\n".join(lines)


def recipe_and_budget(settings: dict[str, Any], run: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The study's recipe with the run's seed and learning rate, and its budget at the run's scale."""
    recipe = {**(settings.get("recipe") or {}), "seed": run["seed"], "lr": run["lr"]}
    budget = scaled_budget(Budget.from_dict(settings["budget"]), run["scale"]).to_dict()
    return recipe, budget


def check_finished(study: optuna.Study, plan: Plan, finish: str) -> None:
    """Refuse a confirmation whose plan still has runs without a result (a diverged run has one: it is
    never run again); the UserError counts them by scale and names the command that finishes them."""
    by_index = {e.index: e for e in (Entry.from_dict(d) for d in study.user_attrs.get(ARCHS) or [])}
    wanted = [by_index[i] for i in plan.wanted if i in by_index]
    lr = float((settings_of(study).get("recipe") or {}).get("lr", 0.0))
    have = existing_runs(study)

    def done(run: Run) -> bool:
        t = have.get(run)
        return t is not None and (
            t.state == TrialState.COMPLETE
            or (t.state == TrialState.FAIL and t.user_attrs.get("fail_reason") == DIVERGED)
        )

    runs = (sweep_runs(plan, wanted) if plan.lrs else []) + planned_runs(study, plan, wanted, lr)
    missing = [r for r in dict.fromkeys(runs) if not done(r)]
    if not missing:
        return
    by_scale = {sc: sum(r.scale == sc for r in missing) for sc in plan.scales}
    where = ", ".join(f"{n} at {sc:g}x" for sc, n in by_scale.items() if n)
    failed = [have[r] for r in missing if r in have and have[r].state == TrialState.FAIL]
    why = ""
    if failed:
        why = (
            f"; {len(failed)} of them failed (the first: {failed[0].user_attrs.get('fail_reason')}), and "
            "confirm re-runs failed runs"
        )
    raise UserError(
        f"the confirmation of study {study.user_attrs.get('confirm_of')!r} is not finished: {len(missing)} "
        f"run(s) have no result ({where}){why}; no winner is named from an unfinished "
        f"comparison; {finish} finishes it"
    )
