#!/usr/bin/env python
"""Hurdles (Primer's early stopping) against none: training compute spent and best loss reached.

The same search (``search_spaces/default.yaml``, NSGA-II on loss and FLOPs,
real training on the default corpus) runs with the same seed and the same
number of trials, once without hurdles and once per hurdle setting.  One
worker with two threads runs the trials one after the other, so each search
is deterministic: the trial sequence depends only on the seed and on what
the hurdles stopped.  For each search:

* compute: the sum of ``train_flops`` (FLOPs actually trained: a stopped
  trial counts up to its hurdle) over the trials that trained; a duplicate
  architecture reuses its twin's result and trains nothing;
* best loss: the lowest validation loss of a COMPLETE trial (a stopped trial
  never trained to the budget, so its loss does not compare);
* compute to reach the baseline's best: the compute spent, in trial order,
  until the search first completes a trial at or below the best loss of the
  run without hurdles (blank if it never does).

Run::

    .venv/bin/python benchmarks/hurdles.py [--seeds 0,1,2] [--trials 24] [--budget-flops 3e11] [--no-write]

It prints the table and replaces the ``hurdles`` section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _doc  # noqa: E402

SECTION = "hurdles"
SPACE = ROOT / "search_spaces" / "default.yaml"
#: label -> extra CLI flags
SETTINGS: dict[str, tuple[str, ...]] = {
    "no hurdles": (),
    "hurdles 0.25,0.5 (median)": ("--hurdles", "0.25,0.5"),
    "hurdles 0.1,0.3 (33rd percentile)": ("--hurdles", "0.1,0.3", "--hurdle-percentile", "33"),
    "hurdles 0.05,0.2 (25th percentile)": ("--hurdles", "0.05,0.2", "--hurdle-percentile", "25"),
}


def run_search(
    study: str, seed: int, flags: tuple[str, ...], trials: int, budget: float, runs: Path
) -> dict[str, Any]:
    """One search through the CLI; returns what the study recorded."""
    import optuna

    cmd = [sys.executable, str(ROOT / "run_search.py"), "search", "--space", str(SPACE),
           "--trials", str(trials), "--workers", "1", "--cpus-per-trial", "2", "--seed", str(seed),
           "--budget-flops", f"{budget:g}", "--no-tensorboard", "--runs-dir", str(runs),
           "--study", study, "--device", "cpu", *flags]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=6 * 3600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    st = optuna.load_study(study_name=study, storage=f"sqlite:///{runs / study / 'study.db'}")
    rows = []
    for t in sorted(st.trials, key=lambda t: t.number):
        u = t.user_attrs
        trained = "worker_pid" in u and "duplicate_of" not in u
        rows.append({
            "state": t.state.name,
            "flops": float(u.get("train_flops", 0.0)) if trained else 0.0,
            "loss": float(u["val_loss"]) if t.state.name == "COMPLETE" and "val_loss" in u else math.inf,
        })
    return {"trials": rows, "wall": wall}


def summarize(run: dict[str, Any], target: float | None) -> dict[str, Any]:
    spent, best, to_target, to_best = 0.0, math.inf, None, 0.0
    for t in run["trials"]:
        spent += t["flops"]
        if t["loss"] < best:
            best, to_best = t["loss"], spent
        if target is not None and to_target is None and t["loss"] <= target:
            to_target = spent
    states: dict[str, int] = {}
    for t in run["trials"]:
        states[t["state"]] = states.get(t["state"], 0) + 1
    return {"compute": spent, "best": best, "to_target": to_target, "to_best": to_best,
            "states": states, "wall": run["wall"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated search seeds (default 0,1,2)")
    parser.add_argument("--trials", type=int, default=24, help="trials per search (default 24)")
    parser.add_argument("--budget-flops", type=float, default=3e11,
                        help="training FLOPs per candidate (default 3e11)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = Path(tempfile.mkdtemp(prefix="nas-hurdles-"))
    labels = list(SETTINGS)
    raw: dict[tuple[int, str], dict[str, Any]] = {}
    for i, seed in enumerate(seeds):
        for label in _doc.rotated(labels, i):
            study = f"seed{seed}-setting{labels.index(label)}"
            raw[(seed, label)] = run_search(
                study, seed, SETTINGS[label], args.trials, args.budget_flops, runs
            )
            print(f"seed {seed} {label}: {raw[(seed, label)]['wall']:.0f} s", file=sys.stderr)

    rows, ratios, reached = [], {label: [] for label in labels}, {label: [] for label in labels}
    for seed in seeds:
        base = summarize(raw[(seed, "no hurdles")], None)
        for label in labels:
            s = summarize(raw[(seed, label)], base["best"])
            ratio = s["compute"] / base["compute"]
            ratios[label].append(ratio)
            reached[label].append(s["to_target"] is not None)
            rows.append([
                seed,
                label,
                f"{s['best']:.4f}",
                f"{s['best'] - base['best']:+.4f}",
                f"{s['compute']:.3g}",
                f"{ratio:.2f}",
                f"{s['to_target'] / base['compute']:.2f}" if s["to_target"] is not None else "never",
                f"{s['to_best']:.3g}",
                ", ".join(f"{v} {k.lower()}" for k, v in sorted(s["states"].items())),
                f"{s['wall']:.0f}",
            ])
    md = _doc.markdown_table(
        ["seed", "search", "best loss", "vs no hurdles", "compute (FLOPs)", "compute vs no hurdles",
         "compute to reach the no-hurdle best (fraction of its compute)", "compute until its own best",
         "trials", "wall (s)"],
        rows,
        "rlrrrrrrlr",
    )
    lines = []
    for label in labels[1:]:
        ok = [r <= 1 / 3 and hit for r, hit in zip(ratios[label], reached[label], strict=True)]
        lines.append(
            f"*{label}*: total compute {', '.join(f'{r:.2f}' for r in ratios[label])} of the run without "
            f"hurdles (seeds {args.seeds}); reached that run's best loss in {sum(reached[label])} of "
            f"{len(seeds)} seeds. Target (the same best loss for at most a third of the total compute): "
            f"met in {sum(ok)} of {len(seeds)} seeds."
        )
    verdict = "\n".join(f"- {line}" for line in lines)
    print(md)
    print(verdict)
    body = (
        "## Hurdles: compute against best loss (`benchmarks/hurdles.py`)\n\n"
        f"{_doc.provenance()}\n\n"
        f"The default space (`search_spaces/default.yaml`: d_model 64/96, 2-3 layers, five attention "
        f"blocks, max_len 64), NSGA-II on validation loss and FLOPs/token, {args.trials} trials per search, "
        f"each candidate trained for {args.budget_flops:g} FLOPs on the default corpus (real training, "
        "batch 16 x 64), one worker with two threads so that a search is deterministic. Each seed runs "
        "the same search without hurdles and with each hurdle setting. *compute* sums `train_flops` "
        "over the trials that trained (a stopped trial counts up to its hurdle; a duplicate trains "
        "nothing; the hurdle evaluations on the validation set are not counted); *best loss* is the "
        "lowest validation loss of a COMPLETE trial; *compute to reach the no-hurdle best* is the "
        "compute spent, in trial order, until the search first completes a trial at or below the best "
        "loss of the run without hurdles, as a fraction of that run's total compute.\n\n"
        f"{md}\n\n{verdict}\n\n"
        "Hurdles stop a candidate whose loss at a fraction of the budget is above a percentile of what "
        "earlier trials had there; they pay when early loss ranks candidates the way final loss does. "
        "A search run once per seed is a small sample: read the table per seed, not as a law.\n"
    )
    if not args.no_write:
        _doc.write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
