"""From a confirm study's runs to what the report says: per-architecture statistics, ranks, fits, verdicts.

Everything here is plain data (``--json`` prints it as is): ``runs`` (one row
per finished run), ``summary`` (one row per architecture and scale),
``rank_correlation``, ``power_law`` and ``verdicts``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import TrialState

from nas.confirm.plan import Entry
from nas.confirm.runner import existing_runs
from nas.confirm.stats import crossing, fit_power_law, kendall, paired, spearman, spread
from nas.plural import plural

#: what each run row carries besides its loss (bits/byte and throughput: what docs/RESULTS.md tabulates)
RUN_KEYS = (
    "val_bpb",
    "train_flops",
    "rung_flops",  # the share of train_flops its wsd rungs' cooldown branches spent (not the run's own)
    "steps",
    "tokens",
    "tokens_per_s",
    "flops_per_token",
    "params",
    "threads",
    "seconds",
)


def collect_runs(study: optuna.Study, entries: Sequence[Entry]) -> list[dict[str, Any]]:
    """One row per finished run (COMPLETE or FAIL) of the entries, in trial order."""
    by_index = {e.index: e for e in entries}
    rows = []
    for run, t in sorted(existing_runs(study).items(), key=lambda kv: kv[1].number):
        e = by_index.get(run.arch)
        if e is None or t.state not in (TrialState.COMPLETE, TrialState.FAIL):
            continue
        row: dict[str, Any] = {
            "trial": t.number,
            "arch_id": e.arch_id,
            "name": e.name,
            "role": e.role,
            "scale": run.scale,
            "seed": run.seed,
            "lr": run.lr,
            "state": t.state.name,
            "val_loss": float(t.values[0]) if t.state == TrialState.COMPLETE else None,
        }
        row.update({k: t.user_attrs.get(k) for k in RUN_KEYS})
        if t.state == TrialState.FAIL:
            row["fail_reason"] = t.user_attrs.get("fail_reason")
        rows.append(row)
    return rows


def _losses(
    runs: Sequence[dict[str, Any]], arch_id: str, scale: float, seeds: Sequence[int]
) -> tuple[float | None, dict[int, float], list[dict[str, Any]]]:
    """The lr used for ``arch_id`` at ``scale`` (best at the first seed), its losses by seed, its runs."""
    mine = [r for r in runs if r["arch_id"] == arch_id and r["scale"] == scale and r["seed"] in seeds]
    first = [r for r in mine if r["seed"] == seeds[0] and r["val_loss"] is not None]
    if first:
        lr = min(first, key=lambda r: r["val_loss"])["lr"]
    else:
        lr = mine[0]["lr"] if mine else None
    at = [r for r in mine if r["lr"] == lr]
    return lr, {r["seed"]: r["val_loss"] for r in at if r["val_loss"] is not None}, at


def own_flops(attrs: Any) -> float:
    """A run's own training FLOPs: ``train_flops`` less what its wsd rungs' cooldown branches spent
    (``rung_flops``), which trained no part of the final model."""
    return float(attrs.get("train_flops") or 0.0) - float(attrs.get("rung_flops") or 0.0)


def _cost(done: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the finished runs ``done`` of one row cost and measured besides the loss, as means over seeds.

    ``bpb_mean``/``bpb_std``: bits per byte (None without bytes per token); ``params`` and
    ``flops_per_token`` are the architecture's (the same in every run); ``steps``, ``tokens_per_s`` and
    ``train_flops`` are means, since a run's steps follow from the budget and its throughput from the machine.
    ``train_flops`` is the compute the run's loss was reached with: the wsd rungs' cooldown branches
    (``rung_flops``) are spent beside it, not on the final model, and left out (as the ladder's points).
    """

    def mean(key: str) -> float | None:
        xs = [float(r[key]) for r in done if r.get(key) is not None]
        return sum(xs) / len(xs) if xs else None

    own = [own_flops(r) for r in done if r.get("train_flops")]

    bpb = [float(r["val_bpb"]) for r in done if r.get("val_bpb") is not None]
    s = spread(bpb) if bpb else None
    return {
        "train_flops": sum(own) / len(own) if own else None,
        "bpb_mean": s.mean if s else None,
        "bpb_std": s.std if s else None,
        "params": next((r["params"] for r in done if r.get("params") is not None), None),
        "flops_per_token": next((r["flops_per_token"] for r in done if r.get("flops_per_token")), None),
        "steps": mean("steps"),
        "tokens_per_s": mean("tokens_per_s"),
    }


def matched(e: Entry, baselines: Sequence[Entry]) -> dict[str, Entry]:
    """Per baseline name, the baseline ``e`` is compared with: the one at ``e``'s shape (baselines built
    at each finalist's shape), else the name's only entry (baselines at their own shape)."""
    out: dict[str, Entry] = {}
    for label in dict.fromkeys(b.base_name for b in baselines):
        each = [b for b in baselines if b.base_name == label]
        same = [b for b in each if b.shape == e.shape]
        if same or len(each) == 1:
            out[label] = (same or each)[0]
    return out


def summarize(
    runs: Sequence[dict[str, Any]],
    wanted: Sequence[Entry],
    baselines: Sequence[Entry],
    scales: Sequence[float],
    seeds: Sequence[int],
) -> list[dict[str, Any]]:
    """One row per architecture and scale: spread over seeds, paired deltas to each baseline, search gap."""
    base_losses = {
        (b.arch_id, sc): _losses(runs, b.arch_id, sc, seeds)[1] for b in baselines for sc in scales
    }
    base_ids = {b.arch_id for b in baselines}
    rows = []
    for sc in scales:
        for e in wanted:
            lr, losses, at = _losses(runs, e.arch_id, sc, seeds)
            role = "finalist, baseline" if e.role == "finalist" and e.arch_id in base_ids else e.role
            row: dict[str, Any] = {
                "arch_id": e.arch_id,
                "name": e.name,
                "role": role,
                "scale": sc,
                "lr": lr,
                "seeds": sorted(losses),
                "failed": sum(r["state"] == "FAIL" for r in at),
                "search_trial": e.search_trial,
                "search_loss": e.search_loss,
            }
            if losses:
                s = spread([losses[k] for k in sorted(losses)])
                row.update(n=s.n, mean=s.mean, std=s.std, min=s.min, max=s.max)
            else:
                row.update(n=0, mean=None, std=None, min=None, max=None)
            row.update(_cost([r for r in at if r["val_loss"] is not None]))
            # the winner's curse: the single-seed search score against the mean of the same budget
            row["search_gap"] = (
                row["mean"] - e.search_loss
                if sc == 1 and row["mean"] is not None and e.search_loss is not None
                else None
            )
            deltas, lower = {}, {}
            for label, b in matched(e, baselines).items():
                p = None if b.arch_id == e.arch_id else paired(losses, base_losses[(b.arch_id, sc)])
                if p is not None:
                    deltas[label] = {
                        "mean": p.mean,
                        "min": p.min,
                        "max": p.max,
                        "lower_on": p.lower,
                        "n": p.n,
                        "deltas": list(p.deltas),
                    }
                    lower[label] = f"{p.lower}/{p.n}"
            row["delta_vs_baseline"], row["lower_on"] = deltas, lower
            rows.append(row)
    return rows


def _corr(x: list[float], y: list[float]) -> dict[str, Any]:
    return {"n": len(x), "spearman": spearman(x, y), "kendall": kendall(x, y)}


def rank_correlation(summary: Sequence[dict[str, Any]], scales: Sequence[float]) -> dict[str, Any]:
    """Spearman and Kendall: search score vs confirmed mean at each scale, and between scales."""
    mean = {(r["arch_id"], r["scale"]): r["mean"] for r in summary if r["mean"] is not None}
    search = {r["arch_id"]: r["search_loss"] for r in summary if r["search_loss"] is not None}
    ids = list(dict.fromkeys(r["arch_id"] for r in summary))
    out: dict[str, Any] = {"search_vs_confirmed": {}, "between_scales": {}}
    for sc in scales:
        both = [a for a in ids if a in search and (a, sc) in mean]
        out["search_vs_confirmed"][f"{sc:g}x"] = _corr(
            [search[a] for a in both], [mean[(a, sc)] for a in both]
        )
    for s1, s2 in itertools.combinations(scales, 2):
        both = [a for a in ids if (a, s1) in mean and (a, s2) in mean]
        out["between_scales"][f"{s1:g}x-{s2:g}x"] = _corr(
            [mean[(a, s1)] for a in both], [mean[(a, s2)] for a in both]
        )
    return out


def power_laws(
    summary: Sequence[dict[str, Any]],
    wanted: Sequence[Entry],
    baselines: Sequence[Entry],
    scales: Sequence[float],
) -> dict[str, Any] | None:
    """With three scales or more: L = a * C^-b per architecture, and where finalists cross each baseline."""
    if len(scales) < 3:
        return None
    fits = {}
    for e in wanted:
        pts = [
            (r["train_flops"], r["mean"])
            for r in summary
            if r["arch_id"] == e.arch_id and r["mean"] is not None and r["train_flops"]
        ]
        f = fit_power_law([c for c, _ in pts], [v for _, v in pts]) if len(pts) >= 3 else None
        if f is not None:
            fits[e.name] = f
    crossings = []
    for e in wanted:
        for b in matched(e, baselines).values():
            if e.role != "finalist" or e.arch_id == b.arch_id or e.name not in fits or b.name not in fits:
                continue
            f, g = fits[e.name], fits[b.name]
            c = crossing(f, g)
            inside = c is not None and max(f.compute_min, g.compute_min) <= c <= min(
                f.compute_max, g.compute_max
            )
            crossings.append(
                {"finalist": e.name, "baseline": b.name, "compute": c, "within_measured": inside}
            )
    return {
        "model": "loss = a * train_flops^-b (least squares in log space, no floor)",
        "fits": {
            k: {"a": f.a, "b": f.b, "compute_min": f.compute_min, "compute_max": f.compute_max}
            for k, f in fits.items()
        },
        "crossings": crossings,
    }


def _judge(d: dict[str, Any] | None) -> tuple[str, str]:
    """("beats" | "loses to" | "within noise of", the count) for one paired comparison."""
    if d is None:
        return "not compared with", ""
    k, n = d["lower_on"], d["n"]
    if k == n and d["max"] < 0:
        return "beats", f"on {k}/{plural(n, 'seed')}"
    if k == 0 and d["min"] > 0:
        return "loses to", f"on {n}/{plural(n, 'seed')}"
    return "within noise of", f"(lower on {k}/{plural(n, 'seed')})"


def verdicts(
    summary: Sequence[dict[str, Any]],
    wanted: Sequence[Entry],
    baselines: Sequence[Entry],
    scales: Sequence[float],
) -> dict[str, str]:
    """A sentence per finalist, e.g. "beats vanilla on 3/3 seeds at 1x and 4x; within noise of ... at 16x"."""
    out = {}
    rows = {(r["arch_id"], r["scale"]): r for r in summary}
    for e in wanted:
        if e.role != "finalist":
            continue
        clauses = []
        for label, b in matched(e, baselines).items():
            if b.arch_id == e.arch_id:
                continue
            groups: list[tuple[tuple[str, str], list[float]]] = []
            for sc in scales:
                word = _judge(rows[(e.arch_id, sc)]["delta_vs_baseline"].get(label))
                if groups and groups[-1][0] == word:
                    groups[-1][1].append(sc)
                else:
                    groups.append((word, [sc]))
            for (verb, count), scs in groups:
                names = [f"{s:g}x" for s in scs]
                at = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
                clauses.append(f"{verb} {label} {count} at {at}".replace("  ", " "))
        out[e.name] = "; ".join(clauses) if clauses else "no baseline to compare with"
    return out
