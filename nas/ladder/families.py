"""A ladder's families: each architecture's measured points across its sizes, its fit and bootstrap, and
its prediction at a target compute (:mod:`nas.ladder.report` assembles them into the report;
:mod:`nas.ladder.check` refits them without their larger sizes)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import TrialState

from nas.confirm.plan import Entry, Run
from nas.confirm.runner import ARCHS, existing_runs
from nas.confirm.summary import own_flops
from nas.ladder.fit import (
    RESAMPLE_SIZES,
    CostCurve,
    Fit,
    Point,
    bootstrap,
    fit,
    optimal,
    percentile,
    resamples_vary,
)
from nas.ladder.joint import free_parameters, joint_bootstrap, joint_fit
from nas.ladder.plan import LadderPlan
from nas.models import ArchConfig
from nas.models.cost import compute
from nas.models.sizes import reached, resize

#: the interval: the 5th to 95th percentile of the bootstrap's predictions
LOW, HIGH = 0.05, 0.95
#: the fewest usable bootstrap draws behind an interval or a p(best): with fewer, no draw lies beyond the
#: 5th or 95th percentile (20 puts one in twenty beyond each), and p(best) moves in steps over 5%
MIN_DRAWS = 20
#: a family is fitted when its runs cover this many sizes (the form has five coefficients)
MIN_SIZES = 3
#: without --target-flops: this many times the most compute one measured point used
DEFAULT_TARGET_FACTOR = 10.0


def run_rows(study: optuna.Study, plan: LadderPlan, entries: dict[int, Entry]) -> list[dict[str, Any]]:
    """One row per planned run: its family, size, seed, state, and its points (rungs, then its end)."""
    have = existing_runs(study)
    rows = []
    for m in sorted(plan.members, key=lambda m: (m.family, m.size)):
        for seed in plan.seeds_of(m):
            t = have.get(Run(m.entry, m.scale, seed, plan.lr))
            row: dict[str, Any] = {
                "family": m.family,
                "size": m.size,
                "seed": seed,
                "arch_id": entries[m.entry].arch_id,
                "trial": None if t is None else t.number,
                "state": "MISSING" if t is None else t.state.name,
                "points": [],
            }
            if t is not None and t.state == TrialState.COMPLETE and t.values:
                a = t.user_attrs
                row["params"] = a.get("params")
                spent = own_flops(a)
                row["points"] = [
                    {
                        "tokens": r["tokens"],
                        "flops": r["flops"],
                        "val_loss": r["val_loss"],
                        "rung": r["fraction"],
                    }
                    for r in a.get("rungs") or ()
                ] + [{"tokens": a.get("tokens"), "flops": spent, "val_loss": float(t.values[0]), "rung": 1.0}]
            rows.append(row)
    return rows


def points_of(
    rows: Sequence[dict[str, Any]], family: str, sizes: Sequence[float] | None = None
) -> list[Point]:
    """The fit's points of one family (its finished runs at ``sizes``, every size when None)."""
    out = []
    for r in rows:
        if r["family"] != family or not r["points"] or (sizes is not None and r["size"] not in sizes):
            continue
        for p in r["points"]:
            if p["val_loss"] is not None and math.isfinite(p["val_loss"]) and p["tokens"]:
                out.append(
                    Point(
                        float(r["params"]),
                        float(p["tokens"]),
                        float(p["flops"]),
                        float(p["val_loss"]),
                        int(r["trial"]),
                    )
                )
    return out


class Family:
    """One architecture's points, its cost curve and (after :func:`fit_families`) its fit and bootstrap."""

    def __init__(
        self,
        name: str,
        role: str,
        label: str,
        points: Sequence[Point],
        curve: CostCurve,
        arch: Any,
        seq_len: int,
    ) -> None:
        self.name, self.role, self.label = name, role, label
        self.points, self.curve, self.arch, self.seq_len = list(points), curve, arch, seq_len
        self.sizes = sorted({p.params for p in points})
        self.fit: Fit | None = None
        self.draws: list[Fit] = []

    @property
    def no_interval(self) -> str | None:
        """Why a fitted family has no interval (its bootstrap could not vary), else None."""
        if self.fit is not None and self.draws and len(self.draws) < MIN_DRAWS:
            return (
                f"{len(self.draws)} bootstrap draw(s) cannot place a 5th or 95th percentile (at least "
                f"{MIN_DRAWS}; --samples, default 200)"
            )
        if self.fit is None or self.draws:
            return None
        runs, kept = len({p.run for p in self.points}), min(RESAMPLE_SIZES, len(self.sizes))
        return (
            f"{runs} runs at {len(self.sizes)} sizes: every resample that keeps {kept} "
            "sizes is the same runs, so a bootstrap gives no interval (more --sizes or --seeds 2 give one)"
        )

    @property
    def why_not(self) -> str | None:
        if self.fit is not None:
            return None
        return f"runs at {len(self.sizes)} size(s); a fit needs {MIN_SIZES} or more"

    def n_range(self) -> tuple[float, float]:
        return (self.sizes[0] / 1e3, self.sizes[-1] * 1e6)

    def at_point(self, compute_flops: float) -> float:
        """The fitted loss at ``compute_flops``, compute-optimally allocated."""
        assert self.fit is not None
        return optimal(self.fit, self.curve, compute_flops, self.n_range())[0]

    def at(self, compute_flops: float, size: float | None) -> tuple[list[float], float, float, float]:
        """Predictions at ``compute_flops``: (one loss per bootstrap draw, loss, params, tokens) at the
        compute-optimal size of each fit, or at multiplier ``size`` of the size-1 architecture."""
        assert self.fit is not None
        if size is not None:
            c = compute(resize(self.arch, size), self.seq_len)
            n, d = float(c.params), compute_flops / c.train_flops_per_token
            return [float(f.loss(n, d)) for f in self.draws], float(self.fit.loss(n, d)), n, d
        loss, n, d = optimal(self.fit, self.curve, compute_flops, self.n_range())
        draws = [optimal(f, self.curve, compute_flops, self.n_range())[0] for f in self.draws]
        return draws, loss, n, d


def interval(draws: Sequence[float]) -> tuple[float | None, float | None]:
    """The LOW and HIGH percentiles of the bootstrap's ``draws``; (None, None) with fewer than
    :data:`MIN_DRAWS` finite draws (too few to place either percentile: no interval, rather than one of
    zero width that excludes its own prediction)."""
    usable = [d for d in draws if math.isfinite(d)]
    return (percentile(usable, LOW), percentile(usable, HIGH)) if len(usable) >= MIN_DRAWS else (None, None)


def _edge(n: float, n_range: tuple[float, float]) -> str | None:
    """``largest``/``smallest`` when the chosen size is an end of the sizes searched (the fitted loss still
    falls there: no compute-optimal size inside them), else None."""
    lo, hi = n_range
    if n >= hi * (1 - 1e-9):
        return "largest"
    return "smallest" if n <= lo * (1 + 1e-9) else None


def _prediction(fam: Family, target: float, size: float | None) -> dict[str, Any]:
    draws, loss, n, d = fam.at(target, size)
    flops = max(p.flops for p in fam.points)
    low, high = interval(draws)
    return {
        "loss": loss,
        "edge": None if size is not None else _edge(n, fam.n_range()),
        # --target-size: the multiplier the built member reaches (whole heads and layers)
        "size_reached": None if size is None else reached(fam.arch, resize(fam.arch, size)),
        "low": low,
        "high": high,
        "params": n,
        "tokens": d,
        "draws": draws,
        # how far beyond what was trained: >1 is extrapolated (by this factor), <1 inside the range
        "beyond": {
            "compute": target / flops,
            "params": n / max(p.params for p in fam.points),
            "tokens": d / max(p.tokens for p in fam.points),
        },
        # and below it: <1 is extrapolated downwards (a target under the smallest measured point)
        "below": {
            "compute": target / min(p.flops for p in fam.points),
            "params": n / min(p.params for p in fam.points),
            "tokens": d / min(p.tokens for p in fam.points),
        },
    }


def crossovers(families: Sequence[Family], lo: float, hi: float, steps: int = 121) -> list[dict[str, Any]]:
    """Every compute in [lo, hi] where a finalist's and a baseline's compute-optimal fitted losses cross."""
    grid = [lo * (hi / lo) ** (i / (steps - 1)) for i in range(steps)] if hi > lo else []
    curves = {f.name: [f.at_point(c) for c in grid] for f in families if f.fit is not None}
    out = []
    for f in families:
        for b in families:
            if f.role != "finalist" or b.role != "baseline" or f.name not in curves or b.name not in curves:
                continue
            if f.name == b.name:
                continue
            diff = [x - y for x, y in zip(curves[f.name], curves[b.name], strict=False)]
            for i in range(1, len(grid)):
                if (diff[i - 1] < 0) != (diff[i] < 0) and diff[i - 1] != 0:
                    w = diff[i - 1] / (diff[i - 1] - diff[i])
                    c = math.exp(math.log(grid[i - 1]) + w * (math.log(grid[i]) - math.log(grid[i - 1])))
                    ahead = f.name if diff[i] < 0 else b.name
                    out.append({"finalist": f.name, "baseline": b.name, "compute": c, "lower_after": ahead})
    return out


def _families(
    study: optuna.Study,
    plan: LadderPlan,
    rows: Sequence[dict[str, Any]],
    seq_len: int | None,
    form: str,
    samples: int,
    sizes: Sequence[float] | None = None,
    share: str = "none",
) -> list[Family]:
    """Every family of ``plan`` over its runs at ``sizes`` (every size when None), fitted."""
    entries = {e.index: e for e in (Entry.from_dict(d) for d in study.user_attrs.get(ARCHS) or [])}
    out = []
    for (name, role, label), arch in zip(plan.families, plan.bases, strict=False):
        mine = [m for m in plan.members if m.family == name and (sizes is None or m.size in sizes)]
        base = ArchConfig.from_dict(arch)
        T = seq_len or base.max_len
        pairs = []
        for m in mine:
            c = compute(entries[m.entry].arch, T)
            pairs.append((float(c.params), float(c.train_flops_per_token)))
        curve = CostCurve.through(pairs)
        out.append(Family(name, role, label, points_of(rows, name, sizes), curve, base, T))
    fit_families(out, form, share, samples)
    return out


def fit_families(fams: Sequence[Family], form: str, share: str, samples: int) -> None:
    """Fit every family with runs at :data:`MIN_SIZES` sizes or more, one by one (``share="none"``) or
    jointly sharing ``share`` (:mod:`nas.ladder.joint`), with their bootstrap draws (none for a family
    whose resamples cannot vary: see :meth:`Family.no_interval`)."""
    fitted = [f for f in fams if len(f.sizes) >= MIN_SIZES]
    if share == "none" or len(fitted) < 2:  # a share among one architecture is its own fit
        for f in fitted:
            f.fit, starts = fit(f.points, form)
            f.draws = bootstrap(f.points, starts, form, samples) if resamples_vary(f.points) else []
        return
    groups = [f.points for f in fitted]
    fits, starts = joint_fit(groups, form, share)
    draws = joint_bootstrap(groups, starts, form, share, samples)
    for f, best, own in zip(fitted, fits, draws, strict=True):
        f.fit, f.draws = best, own if resamples_vary(f.points) else []


def fit_summary(fams: Sequence[Family], form: str, share: str) -> dict[str, Any]:
    """The free parameters of the ladder's fits against the points they were fitted to, and the shared
    coefficients' values."""
    fitted = [f for f in fams if f.fit is not None]
    shared = share if len(fitted) > 1 else "none"
    values: dict[str, float] = {}
    if fitted and shared != "none":
        c = fitted[0].fit
        assert c is not None
        values = {"E": c.E} if shared == "E" else {"E": c.E, "alpha": c.alpha, "beta": c.beta}
    return {
        "share": share,
        "shared": values,
        "architectures": len(fitted),
        "free_parameters": free_parameters(len(fitted), form, shared),
        "points": sum(len(f.points) for f in fitted),
        "runs": sum(len({p.run for p in f.points}) for f in fitted),
    }
