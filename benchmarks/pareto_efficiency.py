#!/usr/bin/env python
"""Sample efficiency on the default two objectives: loss and FLOPs per token, per sampler.

The default search (``--objective loss+flops``) minimises two objectives; the
``search_efficiency`` benchmark measures one.  This one runs the same
searches (``search_efficiency.search``: the stand-in loss fitted to real
losses, the space's seed architectures first, duplicates given their twin's
values) on two objectives, the stand-in loss and the candidate's analytic
forward FLOPs per token, as the driver tells them, and reports per sampler,
over seeds 0..K-1 (medians; 60 seeds by default: over seeds 0-19 alone the
Optuna TPE peer needs fewer trials to the loss target than our ``tpe``, over
seeds 0-59 ours needs fewer, so 20 seeds do not separate them):

* the trials it needs to reach random search's best-of-N *loss* (the same
  target as ``search_efficiency``: random search ignores the objectives);
* the hypervolume of its Pareto front after N trials, and the trials it needs
  to reach random search's median hypervolume after N trials (over the
  reference seeds 1000-1024).  The hypervolume is the area the front
  dominates up to a fixed reference point: the worst measured loss and the
  largest FLOPs per token of the architectures in
  ``benchmarks/data/default_space_losses.json`` (uniform draws of the space),
  with FLOPs per token divided by that largest value, so the area is in loss
  x (fraction of the reference FLOPs).

Samplers: ours (``make_sampler``: ``tpe`` is Optuna's TPE grouped, which with
two objectives is MOTPE; ``nsga2``; ``evolution``), random, and Optuna's
TPE with grouping and its own defaults (``_peers.tpe``).  Syne Tune's REA is
single-objective and has no column here.  Run::

    .venv/bin/python benchmarks/pareto_efficiency.py [--trials 20,50] [--seeds 60] [--no-write]

It prints the table and replaces the ``pareto_efficiency`` section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _doc  # noqa: E402
import search_efficiency as se  # noqa: E402

from nas.search.samplers.build import resolve_sampler  # noqa: E402

SECTION = "pareto_efficiency"
SAMPLERS = ("random", "evolution", "nsga2", "tpe", "optuna_tpe")
OURS = ("evolution", "nsga2", "tpe")
#: what the CLI's default (``--sampler auto``) runs in the default two-objective study
DEFAULT = resolve_sampler("auto", 2)


def hypervolume(points: Sequence[tuple[float, float]], ref: tuple[float, float]) -> float:
    """Area dominated by ``points`` (both objectives minimised) inside the box below ``ref``."""
    inside = sorted(p for p in points if p[0] < ref[0] and p[1] < ref[1])
    area, lowest = 0.0, ref[1]
    # By the first objective: a point below every earlier one on the second adds the strip
    # between its second value and the lowest so far, from its first value to the reference.
    for x, y in inside:
        if y < lowest:
            area += (ref[0] - x) * (lowest - y)
            lowest = y
    return area


def reference(table: dict[str, Any]) -> tuple[float, float]:
    """(worst measured loss, largest FLOPs per token) of the measured architectures."""
    from nas.models import ArchConfig
    from nas.models.cost import compute

    flops = [compute(ArchConfig.from_dict(r["arch"])).fwd_flops_per_token for r in table["archs"]]
    return max(r["val_loss"] for r in table["archs"]), float(max(flops))


def hv_curve(points: list[tuple[float, float] | None], ref: tuple[float, float]) -> list[float]:
    """The hypervolume of the front after each trial (None: a trial with no result)."""
    out, seen = [], []
    for p in points:
        if p is not None:
            seen.append((p[0], p[1] / ref[1]))
        out.append(hypervolume(seen, (ref[0], 1.0)))
    return out


def run(
    sampler: str, seed: int, n: int, objective: se.StandIn, ref: tuple[float, float]
) -> tuple[list[float], list[float]]:
    """(best-so-far loss, hypervolume) after each of 4N trials of one two-objective search."""
    points: list[tuple[float, float] | None] = []
    curve = se.search(sampler, seed, n, 4 * n, objective, n_objectives=2, points=points)
    return curve, hv_curve(points, ref)


def first_at_least(curve: list[float], target: float) -> int | None:
    return next((i + 1 for i, v in enumerate(curve) if v >= target), None)


def verdict(n: int, measures: dict[str, dict[str, list[float]]]) -> str:
    """Per measure, which samplers the default beats (median over the seeds), and the best one."""
    parts = []
    for what, sign in (
        ("trials to the loss target", 1.0),
        ("trials to the hypervolume target", 1.0),
        ("hypervolume after N", -1.0),
    ):  # sign: lower is better for +1
        med = {s: float(np.median(m[what])) for s, m in measures.items()}
        best = min(med, key=lambda s: sign * med[s])
        others = [s for s in med if s != DEFAULT]
        beaten = [s for s in others if sign * med[DEFAULT] < sign * med[s]]
        who = "every other sampler" if beaten == others else ", ".join(beaten) or "no other sampler"
        parts.append(f"{what}, it beats {who} (best: {best}, {med[best]:.4g})")
    return f"N = {n}, the default ({DEFAULT}): " + "; ".join(parts) + "."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", default="20,50", help="N values: random's budget (default 20,50)")
    parser.add_argument("--seeds", type=int, default=60, help="search seeds 0..K-1 (default 60)")
    parser.add_argument("--samplers", default=",".join(SAMPLERS), help=f"default {','.join(SAMPLERS)}")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    args = parser.parse_args()
    samplers = [s for s in args.samplers.split(",") if s]
    unknown = sorted(set(samplers) - set(SAMPLERS))
    if unknown:
        parser.error(f"--samplers: unknown {', '.join(unknown)}; valid: {', '.join(SAMPLERS)}")
    table = json.loads(se.TABLE.read_text())
    objective = se.StandIn(table)
    ref = reference(table)
    ns = [int(x) for x in args.trials.split(",")]
    rows, lines = [], []
    for n in ns:
        reference_runs = [run("random", s, n, objective, ref) for s in se.REFERENCE_SEEDS]
        loss_target = float(np.median([c[n - 1] for c, _ in reference_runs]))
        hv_target = float(np.median([h[n - 1] for _, h in reference_runs]))
        lines.append(f"N = {n}: targets: loss {loss_target:.4f}, hypervolume {hv_target:.4f}")
        measures: dict[str, dict[str, list[float]]] = {}
        for s in samplers:
            runs = [run(s, seed, n, objective, ref) for seed in range(args.seeds)]
            to_loss = [se.trials_to_reach(c, loss_target) or 4 * n + 1 for c, _ in runs]
            to_hv = [first_at_least(h, hv_target) or 4 * n + 1 for _, h in runs]
            hv_n = [h[n - 1] for _, h in runs]
            measures[s] = {
                "trials to the loss target": to_loss,
                "trials to the hypervolume target": to_hv,
                "hypervolume after N": hv_n,
            }
            rows.append(
                [
                    n,
                    s,
                    f"{np.median(to_loss):g}",
                    f"{np.median(to_hv):g}",
                    f"{np.median(hv_n):.4f}",
                    f"{np.median([c[n - 1] for c, _ in runs]):.4f}",
                ]
            )
            print(*rows[-1], file=sys.stderr)
            lines.append(
                f"N = {n}, {s}: trials to the loss target per seed: {' '.join(map(str, to_loss))}; "
                f"to the hypervolume target: {' '.join(map(str, to_hv))}"
            )
        if DEFAULT in measures:
            lines.append(verdict(n, measures))
    md = _doc.markdown_table(
        [
            "N",
            "sampler",
            "median trials to random's best-of-N loss",
            "median trials to random's hypervolume after N",
            "median hypervolume after N",
            "median best loss after N",
        ],
        rows,
    )
    print(md)
    print("\n".join(lines))
    if not args.no_write:
        _doc.write_section(SECTION, body(md, lines, ref, args.seeds))
    return 0


def body(md: str, lines: list[str], ref: tuple[float, float], n_seeds: int) -> str:
    """The docs/BENCHMARKS.md section."""
    return (
        "## Search efficiency on two objectives: loss and FLOPs per token "
        "(`benchmarks/pareto_efficiency.py`)\n\n"
        f"{_doc.provenance()}\n\n"
        "The searches of the search_efficiency section (same stand-in loss, seed architectures first, "
        "duplicates given their twin's values) on the default two objectives, the stand-in loss and "
        "analytic forward FLOPs per token, as `--objective loss+flops` tells them. Hypervolume: the "
        f"area the Pareto front dominates up to the reference point (loss {ref[0]:.4f}, the worst "
        f"measured; FLOPs per token {ref[1]:,.0f}, the largest measured), FLOPs divided by that "
        "largest value. The targets are random search's median best-of-N loss and median hypervolume "
        f"after N over 25 random searches (seeds 1000-1024); each sampler searches with seeds "
        f"0-{n_seeds - 1}, up to 4N trials (4N+1: never reached). *tpe* is ours "
        "(`make_sampler('tpe')`: grouped, multivariate, constant liar, min(10, population) start-up "
        "trials; with two objectives Optuna's TPE is MOTPE), *optuna_tpe* the peer "
        "`TPESampler(multivariate=True, group=True)`, which differs from ours only in its ten start-up "
        "trials; Syne Tune's REA is single-objective. The hypervolume is what a two-objective search "
        "improves; the loss target reads its first objective only, which it trades against FLOPs.\n\n"
        f"{md}\n\n" + "\n".join(f"- {line}" for line in lines) + "\n"
    )


if __name__ == "__main__":
    sys.exit(main())
