#!/usr/bin/env python
"""What a ladder costs: one wsd run with rungs against the same points as separate runs, and the fit.

Three measurements, written to the ``ladder-cost`` section of docs/BENCHMARKS.md:

1. **One size, measured**: ``train --arch ARCH --budget.steps N --recipe.schedule wsd --budget.rungs
   0.25,0.5`` against the three separate wsd runs that give the same points (N/4, N/2 and N steps,
   each with its warmup over the same steps as the rung's, so their losses equal the rungs'),
   one thread each: wall seconds (``seconds``, evaluation included) and training FLOPs.
2. **A whole ladder, from its study**: for every run of ``--study``'s ladder, its training FLOPs
   (the run and its rungs' cooldowns) against its largest point alone (the aim: at most 1.3x) and
   against every point as a separate run; the same for the wall seconds the runs took.
3. **The fit**: the seconds ``fit`` (4,500 starts) and ``bootstrap`` (200 draws) take per architecture
   on that study's points.

Run::

    .venv/bin/python benchmarks/ladder_cost.py --steps 200 --study modern --storage \\
        sqlite:///experiments/runs/modern/study.db
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _doc  # noqa: E402

RUNGS = (0.25, 0.5)


def train(arch: str, steps: int, *extra: str) -> dict[str, Any]:
    cmd = [sys.executable, str(ROOT / "run_search.py"), "train", "--arch", arch, "--budget.steps", str(steps),
           "--recipe.schedule", "wsd", "--json", "--threads", "1", *extra]  # fmt: skip
    out = subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def one_size(arch: str, steps: int) -> list[list[Any]]:
    warm = 0.05  # the recipe's default warmup_frac
    ladder = train(arch, steps, "--budget.rungs", ",".join(map(str, RUNGS)))
    separate = []
    for r in ladder["rungs"]:  # the independent run each rung equals: warmup over the same steps
        run = train(arch, r["steps"], "--recipe.warmup_frac", f"{warm * steps / r['steps']:.12g}")
        assert abs(run["val_loss"] - r["val_loss"]) < 1e-6, (run["val_loss"], r["val_loss"])
        separate.append(run)
    alone = train(arch, steps)  # the largest point without rungs
    sep_s = sum(r["seconds"] for r in separate) + alone["seconds"]
    sep_f = sum(r["train_flops"] for r in separate) + alone["train_flops"]

    def row(what: str, seconds: float, flops: float) -> list[Any]:
        return [what, f"{seconds:.1f}", f"{flops:.3g}", f"{seconds / alone['seconds']:.2f}",
                f"{flops / alone['train_flops']:.2f}"]  # fmt: skip

    return [
        row("largest point alone (no rungs)", alone["seconds"], alone["train_flops"]),
        row("one run with rungs 0.25, 0.5", ladder["seconds"], ladder["train_flops"]),
        row("the three points as separate runs", sep_s, sep_f),
    ]


def whole_ladder(study_name: str, storage: str) -> tuple[list[list[Any]], list[list[Any]]]:
    import optuna

    from nas.confirm.plan import Entry
    from nas.confirm.runner import ARCHS
    from nas.ladder.fit import bootstrap, fit
    from nas.ladder.plan import LADDER, LadderPlan
    from nas.ladder.report import points_of, run_rows

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=f"{study_name}-ladder", storage=storage)
    plan = LadderPlan.from_dict(study.user_attrs[LADDER])
    entries = {e.index: e for e in (Entry.from_dict(d) for d in study.user_attrs[ARCHS])}
    rows = run_rows(study, plan, entries)
    trials = {t.number: t for t in study.trials}
    by_size: dict[float, list[float]] = {}
    total = {"run": 0.0, "alone": 0.0, "points": 0.0, "s_run": 0.0, "s_rungs": 0.0}
    for r in rows:
        if not r["points"]:
            continue
        a = trials[r["trial"]].user_attrs
        spent = float(a["train_flops"])
        alone = spent - float(a.get("rung_flops") or 0.0)
        points = sum(p["flops"] for p in r["points"])
        by_size.setdefault(r["size"], []).append(spent / alone)
        total["run"] += spent
        total["alone"] += alone
        total["points"] += points
        total["s_run"] += float(a.get("seconds") or 0.0)
        total["s_rungs"] += sum(float(x.get("seconds") or 0.0) for x in a.get("rungs") or ())
    flops = [[f"size {s:g}", len(v), f"{statistics.mean(v):.3f}"] for s, v in sorted(by_size.items())]
    flops.append(["all runs", sum(len(v) for v in by_size.values()), f"{total['run'] / total['alone']:.3f}"])
    flops.append(["every point as a separate run", "", f"{total['points'] / total['alone']:.3f}"])
    fits = []
    for name, _, _ in plan.families:
        pts = points_of(rows, name)
        if len({p.params for p in pts}) < 3:
            continue
        t0 = time.perf_counter()
        _, starts = fit(pts)
        t1 = time.perf_counter()
        bootstrap(pts, starts, samples=200)
        t2 = time.perf_counter()
        fits.append([name, len(pts), f"{t1 - t0:.2f}", f"{t2 - t1:.2f}"])
    return flops, fits


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", default="vanilla")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--study", default=None, help="a search study whose ladder to cost")
    p.add_argument("--storage", default=None)
    args = p.parse_args()
    lines = [_doc.provenance(1), ""]
    rows = one_size(args.arch, args.steps)
    lines += [
        f"One size measured: `{args.arch}`, {args.steps} steps of wsd, rungs at 0.25 and 0.5 (each rung's "
        "loss checked equal to its separate run's, to 1e-6). Seconds are each run's wall time, evaluation "
        "included.",
        "",
        _doc.markdown_table(["what", "seconds", "training FLOPs", "seconds / alone", "FLOPs / alone"], rows),
    ]  # fmt: skip
    if args.study:
        flops, fits = whole_ladder(args.study, args.storage)
        lines += [
            "",
            f"The ladder of study `{args.study}` (its runs' recorded FLOPs): a run's training FLOPs (the run "
            "and its rungs' cooldowns) over its largest point alone, and every point as a separate run.",
            "",
            _doc.markdown_table(["runs", "n", "FLOPs / largest point alone"], flops),
            "",
            f"The fit's own time per architecture ({_threads()} torch threads, in this process):",
            "",
            _doc.markdown_table(["architecture", "points", "fit (s)", "bootstrap, 200 draws (s)"], fits),
        ]  # fmt: skip
    _doc.write_section("ladder-cost", "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
