#!/usr/bin/env python
"""Issue 15's measurements for docs/RESULTS.md: the Weighted Transformer's two fixes, and weight
decay per parameter kind.

Same recipe as ``experiments/primer_synthesizer.py`` (5e12 training FLOPs, the default corpus,
``run_search.py train ... --threads 2 --json``, seeds 0, 1, 2), but every run of a comparison is
made on the machine that makes the others, so that the differences pair by seed (the same seed on
another CPU differs in the last digits, and through 400 steps by a few thousandths of a nat).

Two stages:

1. ``run``: each architecture file at each seed, skipping the runs already recorded in
   ``experiments/results/seeds_followup.jsonl`` (one JSON line per run, the ``train --json``
   metrics plus the file).  Seed 0 of every comparison comes first.
2. ``report``: the tables of the ``weighted`` and ``decay`` sections of docs/RESULTS.md.

Run::

    .venv/bin/python experiments/seeds_followup.py                 # both stages
    .venv/bin/python experiments/seeds_followup.py --stage report  # tables only
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import primer_synthesizer as ps  # noqa: E402  (its recipe and command line)
from _doc import markdown_table, write_section  # noqa: E402

RESULTS = ps.ROOT / "experiments" / "results" / "seeds_followup.jsonl"
THREADS = 2  # what every recorded run used (primer_synthesizer's confirm runs use 1 since)
E, X = "examples/archs", "experiments/archs"

#: label, file, what, the file it is paired with (None: vanilla only)
WEIGHTED: tuple[tuple[str, str, str, str | None], ...] = (
    ("vanilla", f"{E}/vanilla.yaml", "mha + ReLU", None),
    ("multi_branch", f"{E}/multi_branch.yaml", "the seed's form", None),
    (
        "+ branch norm",
        f"{E}/multi_branch_norm.yaml",
        "LayerNorm_i(z_i + FFN_i(z_i))",
        f"{E}/multi_branch.yaml",
    ),
    (
        "+ scaled init",
        f"{E}/multi_branch_scaled.yaml",
        "update at init about vanilla's",
        f"{E}/multi_branch.yaml",
    ),
    ("+ both", f"{E}/multi_branch_norm_scaled.yaml", "branch norm and scaled init", f"{E}/multi_branch.yaml"),
)
DECAY: tuple[tuple[str, str, str, str | None], ...] = (
    ("mdha", f"{E}/mdha.yaml", "decay: matrices (default)", None),
    ("mdha", f"{X}/mdha_weights_only.yaml", "decay: weights_only", f"{E}/mdha.yaml"),
    ("synth_random", f"{E}/synth_random.yaml", "decay: matrices (default)", None),
    ("synth_random", f"{X}/synth_random_weights_only.yaml", "decay: weights_only", f"{E}/synth_random.yaml"),
)
#: the order runs are made in: what the comparisons need first
ORDER = (
    f"{E}/multi_branch_norm.yaml", f"{E}/multi_branch_scaled.yaml", f"{E}/multi_branch_norm_scaled.yaml",
    f"{X}/mdha_weights_only.yaml", f"{E}/mdha.yaml", f"{X}/synth_random_weights_only.yaml",
    f"{E}/synth_random.yaml", f"{E}/multi_branch.yaml", f"{E}/vanilla.yaml",
)  # fmt: skip


def load() -> dict[str, dict[int, dict[str, Any]]]:
    """file -> seed -> metrics of the recorded runs."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    if RESULTS.exists():
        for line in RESULTS.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                out.setdefault(r["file"], {})[r["seed"]] = r
    return out


def stage_run() -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    for seed in ps.SEEDS:
        for file in ORDER:
            if seed in load().get(file, {}):
                continue
            cmd = ps.cli("train", "--arch", file, "--budget-flops", f"{ps.BUDGET:g}", "--seed", str(seed),
                         "--threads", str(THREADS), "--json")  # fmt: skip
            metrics = json.loads(ps.run(cmd).strip().splitlines()[-1])
            with RESULTS.open("a") as f:
                f.write(json.dumps({**metrics, "file": file}, sort_keys=True) + "\n")


def mean_sd(xs: list[float]) -> str:
    return f"{xs[0]:.4f}" if len(xs) < 2 else f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs):.4f}"


def paired(runs: dict[int, dict[str, Any]], ref: dict[int, dict[str, Any]]) -> str:
    deltas = [runs[s]["val_loss"] - ref[s]["val_loss"] for s in sorted(runs) if s in ref]
    if not deltas:
        return "-"
    lower = sum(d < 0 for d in deltas)
    spread = f"[{min(deltas):+.4f}, {max(deltas):+.4f}]"
    return f"{statistics.mean(deltas):+.4f} {spread}; lower in {lower}/{len(deltas)}"


def table(rows: tuple[tuple[str, str, str, str | None], ...], vanilla: str | None) -> str:
    by = load()
    out = []
    for label, file, what, ref in rows:
        runs = by.get(file)
        if not runs:
            continue
        seeds = sorted(runs)
        cells = [
            f"{label} (`{file}`)",
            what,
            ", ".join(map(str, seeds)),
            mean_sd([runs[s]["val_loss"] for s in seeds]),
        ]
        if vanilla is not None:
            cells.append("-" if file == vanilla else paired(runs, by.get(vanilla, {})))
        cells += [
            paired(runs, by.get(ref, {})) if ref else "-",
            f"{runs[seeds[0]]['params'] / 1e6:.3f}M",
            f"{statistics.mean(r['steps'] for r in runs.values()):.0f}",
        ]
        out.append(cells)
    header = ["architecture", "what", "seeds", "val loss (mean ± sd)"]
    header += ["Δ vs vanilla, paired: mean [min, max]"] if vanilla is not None else []
    header += ["Δ vs the seed's form / the default rule, paired", "params", "steps"]
    return markdown_table(header, out, "lll" + "r" * (len(header) - 3))


def stage_report() -> None:
    write_section(
        "weighted",
        "### The Weighted Transformer's fixes (5e12 FLOPs, one machine)\n\n"
        + table(WEIGHTED, f"{E}/vanilla.yaml"),
        ps.DOC,
    )
    write_section(
        "decay",
        "### Weight decay per parameter kind (5e12 FLOPs, one machine)\n\n" + table(DECAY, None),
        ps.DOC,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", choices=("run", "report"), default=None, help="one stage (default: both)")
    args = parser.parse_args()
    if args.stage in (None, "run"):
        stage_run()
    if args.stage in (None, "report"):
        stage_report()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
