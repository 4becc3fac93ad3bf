#!/usr/bin/env python
"""Conditional genes on real training: how often a search draws a block's own option at random.

``benchmarks/conditional_genes.py`` counts, on the stand-in objective, which
parameter values a sampler draws at random (``sample_independent``) instead
of from what it learned.  This runs the searches of ``benchmarks/real_samplers.py``
again (the same capped default space, seeds, trials and budget, real training,
one trial at a time on one thread: the same trial sequences) with the sampler
instrumented (``nas.search.samplers.nsga.record_random_draws``) and reports, after the
first ``population`` trials, the share of conditional genes
(``layers.N.attention.BLOCK.OPTION``) and of always-present genes drawn at
random.  Run::

    .venv/bin/python benchmarks/real_genes.py [--seeds 0,1,2] [--trials 24] [--budget-flops 3e11] [--no-write]
"""

from __future__ import annotations

import io
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _doc  # noqa: E402
from real_samplers import capped_space, parse_args  # noqa: E402

SECTION = "real_genes"
SAMPLERS = ("auto", "nsga2")


def kind_of(name: str) -> str:
    return "conditional" if ".attention." in name else "always present"


def run(
    space: Path, sampler: str, seed: int, trials: int, budget: float, runs: Path
) -> tuple[Counter, Counter, str]:
    """(drawn at random, all values) by kind of gene, over the trials after the start-up ones."""
    import nas.search.storage.study as study_mod
    from nas.cli import build_parser
    from nas.commands.search import build_run
    from nas.search.driver.loop import Driver
    from nas.search.samplers.build import default_population
    from nas.search.samplers.nsga import record_random_draws

    made: dict[str, Any] = {}
    original = study_mod.make_sampler

    def instrumented(*a: Any, **kw: Any) -> Any:
        sampler = original(*a, **kw)
        made["drawn"] = record_random_draws(sampler)
        return sampler

    study_mod.make_sampler = instrumented
    try:
        args = build_parser().parse_args([
            "search", "--space", str(space), "--local", "--cpus-per-trial", "1", "--seed", str(seed),
            "--trials", str(trials), "--budget-flops", f"{budget:g}", "--no-tensorboard", "--device", "cpu",
            "--runs-dir", str(runs), "--study", f"{sampler}-{seed}", "--sampler", sampler,
        ])  # fmt: skip
        study = Driver(build_run(args), out=io.StringIO()).run()
    finally:
        study_mod.make_sampler = original
    start = default_population(trials)
    drawn, total = Counter(), Counter()
    for t in study.trials:
        if t.number < start:
            continue
        for name in t.params:
            total[kind_of(name)] += 1
            drawn[kind_of(name)] += (t.number, name) in made["drawn"]
    return drawn, total, str(study.user_attrs.get("sampler", sampler))


def main() -> int:
    args = parse_args(__doc__)
    from nas.search.samplers.build import default_population

    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        space = capped_space(Path(tmp))
        for sampler in SAMPLERS:
            drawn, total, ran = Counter(), Counter(), sampler
            for seed in seeds:
                d, t, ran = run(space, sampler, seed, args.trials, args.budget_flops, Path(tmp) / "runs")
                drawn.update(d)
                total.update(t)
            cells = [f"{100 * drawn[k] / total[k]:.0f}% of {total[k]}" if total[k] else "-"
                     for k in ("always present", "conditional")]  # fmt: skip
            name = sampler if ran == sampler else f"{sampler} ({ran})"
            rows.append(f"| {name} | {cells[0]} | {cells[1]} |")
            print(rows[-1], flush=True)
    text = "\n".join(
        [
            f"## Conditional genes on real training (`benchmarks/{Path(__file__).name}`)",
            "",
            _doc.provenance(threads=1),
            "",
            "The searches of the `real_samplers` section again, with the sampler instrumented: over the "
            f"trials after the first {default_population(args.trials)} (the start-up or first generation), "
            "the share of parameter values drawn "
            "at random (`sample_independent`) rather than from what the sampler learned, by kind of gene "
            "(*conditional*: a block's own option, `layers.N.attention.BLOCK.OPTION`), pooled over seeds "
            + ",".join(map(str, seeds))
            + ".",
            "",
            "| sampler | always-present genes drawn at random | conditional genes drawn at random |",
            "| --- | ---: | ---: |",
            *rows,
        ]
    )
    print(text)
    if not args.no_write:
        _doc.write_section(SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
