"""``export --confirmed``: the best confirmed architecture, with what the confirmation says about it."""

from __future__ import annotations

from typing import Any

import optuna

from nas.confirm import build_report, confirm_study_name
from nas.confirm.runner import scaled_budget
from nas.errors import UserError
from nas.program import prog_name
from nas.redact import mask_url
from nas.search.storage.records import load_study
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


def confirmed_winner(study: optuna.Study, url: str) -> dict[str, Any]:
    """The lowest mean loss at the largest scale with results: its rows, verdict and first-seed run."""
    report = build_report(study, url)
    done = [r for r in report["summary"] if r["mean"] is not None]
    if not done:
        failed = [r for r in report["runs"] if r["state"] == "FAIL"]
        if failed:
            raise UserError(
                f"every run of study {study.study_name!r} failed so far ({len(failed)}; the first: "
                f"{failed[0].get('fail_reason')}); fix that and run `confirm` again: it re-runs failed runs"
            )
        raise UserError(
            f"study {study.study_name!r} has no finished run yet; run `confirm` again to finish it"
        )
    scale = max(r["scale"] for r in done)
    best = min((r for r in done if r["scale"] == scale), key=lambda r: r["mean"])
    runs = [
        r
        for r in report["runs"]
        if r["arch_id"] == best["arch_id"]
        and r["scale"] == scale
        and r["lr"] == best["lr"]
        and r["val_loss"] is not None
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
