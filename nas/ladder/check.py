"""How well a ladder predicts itself: sizes held out, predicted from the smaller ones, and a verdict.

Two checks, both refitting the ladder without some of its sizes and predicting them:

* ``heldout``: fit every size but the largest, predict the largest;
* ``rollout`` (as OLMo-core validates its ladders, ``../shared/REFERENCES_TRANSFER.md`` §2): sort the
  sizes, fit the smallest ``k`` (``k`` from :data:`MIN_SIZES` to all but one), predict every larger size.

Per held-out size: each architecture's predicted and measured end loss (mean over seeds), the error
against the seed-to-seed spread, the coverage of the 5-95% intervals (the share of the held-out
points, every rung and end of every seed, inside their interval), how far it reaches beyond the
fitted sizes (in parameters and in compute), and Spearman and Kendall of the predicted order against
the measured one beside the orders that cost no fit (the largest fitted size's own loss, size 1's: the
search's scale, size 1's first rung, the parameter count).  :func:`verdict` turns a check into the
words the report leads with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna

from nas.confirm.stats import kendall, spearman
from nas.ladder.families import MIN_SIZES, Family, _families, interval
from nas.ladder.plan import LadderPlan

#: --check's kinds (``auto``: ``heldout`` where the ladder has sizes enough, else none)
CHECKS = ("heldout", "rollout", "none")
#: intervals that cover fewer held-out losses than this are too narrow to be believed (the nominal
#: 5-95% interval covers 90%; the slack is for ladders of a few held-out points)
MIN_COVERAGE = 0.8
#: E under this share of the lowest measured loss is at its bound: the fit has no loss floor
E_BOUND = 0.01


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _own(rows: Sequence[dict[str, Any]], family: str, size: float, rung: float = 1.0) -> float | None:
    """The mean over seeds of ``family``'s loss at ``size`` and ``rung`` (1: the end)."""
    return _mean(
        [
            p["val_loss"]
            for r in rows
            if r["family"] == family and r["size"] == size
            for p in r["points"]
            if p["rung"] == rung
        ]
    )


def held_out(
    fams: Sequence[Family], rows: Sequence[dict[str, Any]], held: float, fitted: Sequence[float]
) -> dict[str, Any] | None:
    """``fams`` (fitted on ``fitted`` sizes) against their measured runs at size ``held``."""
    out_rows, inside, total = [], 0, 0
    for fam in fams:
        runs = [r for r in rows if r["family"] == fam.name and r["size"] == held and r["points"]]
        if fam.fit is None or not runs:
            continue
        n, d = float(runs[0]["params"]), float(runs[0]["points"][-1]["tokens"])
        measured = [r["points"][-1]["val_loss"] for r in runs]
        low, high = interval([float(f.loss(n, d)) for f in fam.draws])
        for r in runs:  # every held-out point of every seed, inside its own interval or not
            for p in r["points"]:
                lo, hi = interval([float(f.loss(n, float(p["tokens"]))) for f in fam.draws])
                if lo is not None and hi is not None:
                    total += 1
                    inside += lo <= p["val_loss"] <= hi
        first_rung = min(
            (p["rung"] for r in rows if r["family"] == fam.name for p in r["points"]), default=1.0
        )
        predicted = float(fam.fit.loss(n, d))
        mean = sum(measured) / len(measured)
        out_rows.append(
            {
                "family": fam.name,
                "params": n,
                "tokens": d,
                "predicted": predicted,
                "low": low,
                "high": high,
                "no_interval": fam.no_interval,
                "measured": mean,
                "seed_spread": (max(measured) - min(measured)) if len(measured) > 1 else None,
                "error": predicted - mean,
                "beyond": {
                    "params": n / max(p.params for p in fam.points),
                    "compute": max(p["flops"] for r in runs for p in r["points"])
                    / max(p.flops for p in fam.points),
                },
                "by": {
                    "largest fitted size": _own(rows, fam.name, fitted[-1]),
                    "size 1": _own(rows, fam.name, 1.0) if 1.0 in fitted else None,
                    "size 1, first rung": _own(rows, fam.name, 1.0, first_rung) if 1.0 in fitted else None,
                    "parameter count": -n,
                },
            }
        )
    if not out_rows:
        return None
    measured = [r["measured"] for r in out_rows]
    ranks: dict[str, Any] = {}
    for key, values in [("fit", [r["predicted"] for r in out_rows])] + [
        (k, [r["by"][k] for r in out_rows]) for k in out_rows[0]["by"]
    ]:
        if any(v is None for v in values) or len(values) < 3:
            ranks[key] = None  # an order of two says nothing a correlation could
        else:
            ranks[key] = {"spearman": spearman(values, measured), "kendall": kendall(values, measured)}
    return {
        "held_out_size": held,
        "fitted_sizes": list(fitted),
        "rows": out_rows,
        "beyond": {k: _mean([r["beyond"][k] for r in out_rows]) for k in ("params", "compute")},
        "mean_abs_error": sum(abs(r["error"]) for r in out_rows) / len(out_rows),
        "mean_seed_spread": _mean([r["seed_spread"] for r in out_rows if r["seed_spread"] is not None]),
        "coverage": {"inside": inside, "points": total, "share": inside / total if total else None},
        "rank_correlation": ranks,
    }


def run_check(
    kind: str,
    study: optuna.Study,
    plan: LadderPlan,
    rows: Sequence[dict[str, Any]],
    seq_len: int | None,
    form: str,
    samples: int,
    share: str = "none",
) -> dict[str, Any] | None:
    """``heldout``: fit every size but the largest, predict the largest (:func:`held_out`'s result).
    ``rollout``: fit the smallest k sizes (every k from MIN_SIZES to all but one), predict every larger
    size: one :func:`held_out` per (k, held-out size) in ``folds``, and the error, spread and coverage over
    all of them.  None when the ladder has too few sizes to hold one out."""
    sizes = plan.sizes()
    if len(sizes) < MIN_SIZES + 1:
        return None
    folds = []
    for k in [len(sizes) - 1] if kind == "heldout" else range(MIN_SIZES, len(sizes)):
        fams = _families(study, plan, rows, seq_len, form, samples, sizes[:k], share)
        for held in sizes[k:]:
            one = held_out(fams, rows, held, sizes[:k])
            if one is not None:
                folds.append(one)
    if kind == "heldout":
        return folds[0] if folds else None
    if not folds:
        return None
    inside = sum(f["coverage"]["inside"] for f in folds)
    points = sum(f["coverage"]["points"] for f in folds)
    every = [r for f in folds for r in f["rows"]]
    return {
        "folds": folds,
        "mean_abs_error": sum(abs(r["error"]) for r in every) / len(every),
        "mean_seed_spread": _mean([r["seed_spread"] for r in every if r["seed_spread"] is not None]),
        "coverage": {"inside": inside, "points": points, "share": inside / points if points else None},
        # the mean over folds of each predictor's Spearman, where it has one
        "mean_spearman": {
            key: _mean([f["rank_correlation"][key]["spearman"] for f in folds if f["rank_correlation"][key]])
            for key in folds[0]["rank_correlation"]
        },
    }


def warnings(families: Sequence[dict[str, Any]]) -> list[str]:
    """What a reader of the predictions should know of the fits themselves: E at its bound (no loss
    floor), an exponent at a bound, a compute-optimal size at the edge of the sizes searched.  Families
    with the same fault and value (a shared E) are named together, in one line."""
    from nas.ladder.fit import MAX_EXPONENT

    said: dict[str, list[str]] = {}
    for f in families:
        c, p = f.get("fit"), f.get("prediction")
        if not c:
            continue
        faults = []
        low = min((m["loss"] for m in f.get("measured") or ()), default=None)
        if low is not None and c["E"] < E_BOUND * low:
            faults.append(
                f"E at its bound ({c['E']:.3g}, under {E_BOUND:.0%} of the lowest loss): the fit has no loss "
                "floor, and its predictions fall without limit"
            )
        for k in ("alpha", "beta"):
            if c[k] <= 1e-6 or c[k] >= MAX_EXPONENT - 1e-6:
                faults.append(f"{k} at its bound ({c[k]:.3g}; kept in [0, {MAX_EXPONENT:g}])")
        if p and p.get("edge"):
            faults.append(
                f"the compute-optimal size is at the {p['edge']} edge of the sizes searched (the grid's "
                "edge): no optimum inside them"
            )
        for fault in faults:
            said.setdefault(fault, []).append(f["name"])
    return [f"{', '.join(names)}: {fault}" for fault, names in said.items()]


def verdict(
    kind: str | None, check: dict[str, Any] | None, families: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Whether the ladder's own check supports its predictions, in words.

    ``not supported`` when the held-out error exceeds the seed-to-seed spread, or the 5-95% intervals
    cover fewer than :data:`MIN_COVERAGE` of the held-out losses; ``supported`` when the check could test
    one of them and neither failed; ``unchecked`` when no check ran or it could test neither."""
    warn = warnings(families)
    if kind is None or check is None:
        why = "no check ran" if kind is None else "too few sizes to hold one out"
        return {"status": "unchecked", "check": kind, "reasons": [why], "warnings": warn}
    reasons, tested = [], 0
    error, spread = check["mean_abs_error"], check["mean_seed_spread"]
    if spread is not None:
        tested += 1
        if error > spread:
            reasons.append(
                f"the held-out error ({error:.4f}, mean absolute) exceeds the seed-to-seed spread "
                f"({spread:.4f})"
            )
    cov = check["coverage"]
    if cov["share"] is not None:
        tested += 1
        if cov["share"] < MIN_COVERAGE:
            reasons.append(
                f"the 5-95% intervals cover {cov['inside']} of {cov['points']} held-out losses "
                f"({cov['share']:.0%}; at least {MIN_COVERAGE:.0%} wanted)"
            )
    if reasons:
        status = "not supported"
    elif tested:
        status = "supported"
        reasons = [
            f"held-out error {error:.4f}"
            + (f" within the seed spread {spread:.4f}" if spread is not None else " (one seed: no spread)")
            + (
                f"; intervals cover {cov['share']:.0%} of the held-out losses"
                if cov["share"] is not None
                else ""
            )
        ]
    else:
        status = "unchecked"
        reasons = ["one seed and no intervals: the check can compare the error with neither a seed spread "
                   "nor an interval (--seeds 2 gives both)"]  # fmt: skip
    ranks = check.get("mean_spearman") or {
        k: (v or {}).get("spearman") for k, v in check.get("rank_correlation", {}).items()
    }
    fit_rho, own_rho = ranks.get("fit"), ranks.get("largest fitted size")
    if fit_rho is not None and own_rho is not None and fit_rho <= own_rho:
        warn.append(
            f"the fit ranks the held-out sizes no better than the largest fitted size's own order (Spearman "
            f"{fit_rho:.2f} against {own_rho:.2f}): the fit adds no order the last measured size did not give"
        )
    return {"status": status, "check": kind, "reasons": reasons, "warnings": warn}


def line(v: dict[str, Any]) -> str:
    """The verdict in one line (the console's, the report's first)."""
    if v["status"] == "not supported":
        return f"prediction NOT SUPPORTED by this ladder ({v['check']} check): {'; '.join(v['reasons'])}"
    if v["status"] == "supported":
        return f"prediction supported by this ladder's {v['check']} check: {'; '.join(v['reasons'])}"
    return f"prediction not checked: {'; '.join(v['reasons'])}"
