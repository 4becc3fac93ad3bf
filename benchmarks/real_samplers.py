#!/usr/bin/env python
"""The samplers' claims checked once on real training: the default against NSGA-II and random search.

``benchmarks/search_efficiency.py``, ``pareto_efficiency.py`` and
``constraints.py`` compare samplers on a stand-in objective over many seeds.
This script checks their two claims once on what a user runs: searches of
``benchmarks/spaces/small.yaml`` with its parameter cap lowered to the space's
median (165k, so about half of the space is over it), two objectives (loss
and FLOPs per token), real training on the default corpus for ``--budget-flops``
per candidate, one trial at a time in one process on one thread (deterministic;
on a loaded machine two threads ran far slower), the same seeds for every sampler.  Per search it reports

* the best validation loss after the search's trials, and how many trials the
  search needed to reach random search's best loss at the same seed;
* the share of proposals over the cap in the first and second half of the
  search (an over-cap candidate is never trained; the samplers learn the cap
  from the constraint values the driver records).

Run::

    .venv/bin/python benchmarks/real_samplers.py [--seeds 0,1,2] [--trials 24]
        [--budget-flops 3e11] [--no-write]

It prints the table and replaces the ``real_samplers`` section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _doc  # noqa: E402

SECTION = "real_samplers"
SPACE = ROOT / "benchmarks" / "spaces" / "small.yaml"
CAP = 165_000  # the median parameter count of the default space (benchmarks/constraints.py)
SAMPLERS = ("auto", "nsga2", "random")


def capped_space(tmp: Path) -> Path:
    raw = yaml.safe_load(SPACE.read_text())
    raw["constraints"] = {"max_params": CAP}
    raw["name"] = "default_capped"
    path = tmp / "default_capped.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def run_search(
    space: Path, sampler: str, seed: int, trials: int, budget: float, runs: Path
) -> dict[str, Any]:
    """One search through the CLI; returns, per trial in order, its loss (inf unless trained) and cap."""
    import optuna

    from nas.search.storage.records import is_infeasible

    study = f"{sampler}-{seed}"
    cmd = [sys.executable, str(ROOT / "run_search.py"), "search", "--space", str(space),
           "--trials", str(trials), "--local", "--cpus-per-trial", "1", "--seed", str(seed),
           "--budget-flops", f"{budget:g}", "--no-tensorboard", "--runs-dir", str(runs),
           "--study", study, "--device", "cpu", "--sampler", sampler]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=6 * 3600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    st = optuna.load_study(study_name=study, storage=f"sqlite:///{runs / study / 'study.db'}")
    losses, over = [], []
    for t in sorted(st.trials, key=lambda t: t.number):
        u = t.user_attrs
        over.append(is_infeasible(t))
        ok = (
            t.state.name == "COMPLETE"
            and isinstance(u.get("val_loss"), float)
            and math.isfinite(u["val_loss"])
        )
        losses.append(float(u["val_loss"]) if ok and not over[-1] else math.inf)
    return {"losses": losses, "over": over, "wall": wall, "sampler": st.user_attrs.get("sampler", sampler)}


def trials_to(losses: list[float], target: float) -> int | None:
    for i, loss in enumerate(losses, 1):
        if loss <= target:
            return i
    return None


def share(flags: list[bool]) -> str:
    return f"{100 * sum(flags) / len(flags):.0f}%" if flags else "-"


def table(results: dict[tuple[str, int], dict[str, Any]], seeds: list[int]) -> tuple[list[str], list[str]]:
    lines = [
        "| seed | sampler (as run) | best loss | trials to random's best | over the cap, first half | "
        "over the cap, second half | wall (s) |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    reached: dict[str, list[int | None]] = {s: [] for s in SAMPLERS}
    for seed in seeds:
        target = min(results[("random", seed)]["losses"])
        for sampler in SAMPLERS:
            r = results[(sampler, seed)]
            n, half = len(r["losses"]), len(r["losses"]) // 2
            hit = trials_to(r["losses"], target)
            reached[sampler].append(hit)
            name = sampler if r["sampler"] == sampler else f"{sampler} ({r['sampler']})"
            lines.append(
                f"| {seed} | {name} | {min(r['losses']):.4f} | {hit if hit else f'> {n}'} | "
                f"{share(r['over'][:half])} | {share(r['over'][half:])} | {r['wall']:.0f} |"
            )
    notes = []
    for sampler in SAMPLERS:
        hits = [h if h is not None else math.inf for h in reached[sampler]]
        best = [min(results[(sampler, s)]["losses"]) for s in seeds]
        notes.append(
            f"- *{sampler}*: trials to random's best per seed {', '.join(_n(h) for h in hits)} "
            f"(median {_n(statistics.median(hits))}); mean best loss {statistics.mean(best):.4f}."
        )
    return lines, notes


def _n(x: float) -> str:
    return "never" if math.isinf(x) else f"{x:g}"


def parse_args(doc: str) -> argparse.Namespace:
    """The searches' flags (shared with real_genes.py, which reruns the same searches)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--budget-flops", type=float, default=3e11)
    ap.add_argument("--no-write", action="store_true")
    return ap.parse_args()


def main() -> int:
    args = parse_args(__doc__)
    seeds = [int(s) for s in args.seeds.split(",")]
    results: dict[tuple[str, int], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        space = capped_space(Path(tmp))
        for seed in seeds:
            for sampler in SAMPLERS:
                results[(sampler, seed)] = run_search(
                    space, sampler, seed, args.trials, args.budget_flops, Path(tmp) / "runs"
                )
                print(
                    f"seed {seed} {sampler}: best {min(results[(sampler, seed)]['losses']):.4f}", flush=True
                )
    lines, notes = table(results, seeds)
    body = [
        f"## Samplers on real training (`benchmarks/{Path(__file__).name}`)",
        "",
        _doc.provenance(threads=1),
        "",
        f"`benchmarks/spaces/small.yaml` with `constraints.max_params` lowered to {CAP:,} (about half of the "
        f"space is over it), two objectives (validation loss and FLOPs per token), {args.trials} trials per "
        f"search, each candidate trained for {args.budget_flops:g} FLOPs on the default corpus, one trial "
        "at a time on one thread (`--local`), seeds "
        + ",".join(map(str, seeds))
        + ". *auto* is the default sampler (what it resolved "
        "to is in brackets). *trials to random's best*: the first trial at or below the best loss random "
        "search reached with the same seed and trial count. *over the cap*: the share of proposals the cap "
        "refused (never trained).",
        "",
        *lines,
        "",
        *notes,
        "",
        "Three seeds of one small search: this checks the direction of the stand-in benchmarks' claims on "
        "real training, not their size.",
    ]
    text = "\n".join(body)
    print(text)
    if not args.no_write:
        _doc.write_section(SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
