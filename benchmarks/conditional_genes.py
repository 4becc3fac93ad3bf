#!/usr/bin/env python
"""Which genes NSGA-II passes on: share of each child's values drawn at random, by kind of gene.

A search of ``search_spaces/primer.yaml`` (four layers, each ``mha`` or
``mdha`` with kernel 3/5/7, and one of four activations) on the default two
objectives: the stand-in loss of ``benchmarks/search_efficiency.py`` and the
candidate's analytic FLOPs per token.  Every value a sampler draws at random
goes through ``sample_independent``; the script counts, over the children
(trials of generation 1 and later), the share of values drawn there rather
than inherited from parents, separately for the genes every trial has
(``layers.N.attention``, ``layers.N.ffn.activation``) and the conditional ones
(``layers.N.attention.mdha.kernel``, present only where the layer chose mdha).
With inheritance working, a child's value is drawn at random only when it is
mutated (about one gene in n); Optuna's own NSGA-II draws every gene outside
the intersection search space at random.  Run::

    .venv/bin/python benchmarks/conditional_genes.py [--trials 150] [--seeds 0,1,2,3,4] [--no-write]

It prints the table and replaces the ``conditional_genes`` section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _doc  # noqa: E402
from search_efficiency import TABLE, StandIn  # noqa: E402

SECTION = "conditional_genes"
SPACE = ROOT / "search_spaces" / "primer.yaml"


def make(kind: str, population: int, seed: int) -> Any:
    import optuna

    from nas.search.samplers.nsga import UnionNSGAIISampler

    if kind == "optuna":
        return optuna.samplers.NSGAIISampler(population_size=population, seed=seed)
    return UnionNSGAIISampler(population_size=population, seed=seed)


def kind_of(name: str) -> str:
    return "conditional" if ".attention." in name else "always present"


def run(kind: str, seed: int, trials: int, objective: StandIn) -> tuple[Counter[str], Counter[str], float]:
    """(values drawn at random, values in all, best loss) over the children of one search."""
    import optuna

    from nas.models.cost import compute
    from nas.search.samplers.build import default_population
    from nas.search.samplers.nsga import record_random_draws
    from nas.search.space.load import load_space

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = load_space(SPACE)
    sampler = make(kind, default_population(trials), seed)
    drawn = record_random_draws(sampler)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    for _ in range(trials):
        trial = study.ask()
        arch = space.suggest(trial)
        study.tell(trial, [objective(arch), float(compute(arch).fwd_flops_per_token)])
    random_, total = Counter[str](), Counter[str]()
    key = sampler._get_generation_key()
    for t in study.trials:
        if t.system_attrs.get(key, 0) < 1:
            continue
        for name in t.params:
            total[kind_of(name)] += 1
            random_[kind_of(name)] += (t.number, name) in drawn
    return random_, total, min(t.values[0] for t in study.trials)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=150)
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    objective = StandIn(json.loads(TABLE.read_text()))
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    for kind, label in (
        ("optuna", "Optuna's NSGAIISampler"),
        ("union", "UnionNSGAIISampler (ours, `--sampler nsga2`)"),
    ):
        rnd, tot, best = Counter[str](), Counter[str](), []
        for seed in seeds:
            r, t, b = run(kind, seed, args.trials, objective)
            rnd.update(r)
            tot.update(t)
            best.append(b)
        row = [label]
        for k in ("always present", "conditional"):
            row.append(f"{rnd[k] / tot[k]:.1%} of {tot[k]}")
        row.append(f"{sum(best) / len(best):.4f}")
        rows.append(row)
        print(row, file=sys.stderr)
    md = _doc.markdown_table(
        [
            "sampler",
            "always-present genes drawn at random",
            "conditional genes drawn at random",
            "mean best stand-in loss",
        ],
        rows,
    )
    print(md)
    body = (
        "## Conditional genes under NSGA-II (`benchmarks/conditional_genes.py`)\n\n"
        f"{_doc.provenance()}\n\n"
        f"`search_spaces/primer.yaml` (per layer: `mha` or `mdha` with kernel 3/5/7, four activations), "
        f"two objectives (the stand-in loss of the search_efficiency section, analytic FLOPs per token), "
        f"{args.trials} trials per search, the default population for that many trials, seeds "
        f"{args.seeds}. Counted over the children (generation 1 and later): the share of their parameter "
        "values drawn at random (`sample_independent`: a mutation, or a gene the crossover did not "
        "cover) instead of inherited from a parent. *Always present*: `layers.N.attention`, "
        "`layers.N.ffn.activation`; *conditional*: `layers.N.attention.mdha.kernel`.\n\n"
        f"{md}\n\n"
        "Optuna's NSGA-II crosses over the intersection search space only, so a conditional gene is "
        "redrawn at random in every child: selection never acts on the kernel. Ours crosses over the "
        "union of the parents' genes and redraws a gene only when it mutates it (one gene in n) or when "
        "neither parent has it. The default, `--sampler auto`, runs TPE with grouping on two objectives "
        "(the pareto_efficiency section): it has no children, and models a conditional gene jointly "
        "with the genes it occurs with; `tests/search/test_nsga.py` checks that it learns the kernel.\n"
    )
    if not args.no_write:
        _doc.write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
