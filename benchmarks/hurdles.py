#!/usr/bin/env python
"""Hurdles (Primer's early stopping) under a search compute budget, against a search without them.

The reference is the search a user runs without hurdles: ``benchmarks/spaces/small.yaml``,
NSGA-II on loss and FLOPs, real training on the default corpus, 24 trials.  It
also records each candidate's validation loss at 0.05, 0.1, 0.2, 0.3, 0.5 and
0.75 of its budget (hurdles that never stop anything: the trials train exactly
as without them), which ``benchmarks/hurdle_ranks.py`` turns into the rank
correlation of early and final loss over every candidate.

Each hurdled search runs with the same seed under ``--max-flops``: a compute
budget for the whole search, a third of the reference's nominal compute (24
trials of the per-candidate budget), or less.  With a fixed trial count a
hurdled search explores the same number of candidates and can only save
compute; under a compute budget every candidate stopped early buys part of
another, which is how Primer's hurdles pay.  One worker with one thread runs
the trials one after the other (``--local``), so each search is deterministic:
the trial sequence depends only on the seed and on what the hurdles stopped.

For each search: *compute* sums ``train_flops`` over the trials that trained
(a stopped trial counts up to its hurdle; a duplicate architecture reuses its
twin's result and trains nothing); *best loss* is the lowest validation loss of
a COMPLETE trial; *compute to reach the reference's best* is the compute
spent, in trial order, until the search first completes a trial at or below
the reference's best loss.  The target: that, within a third of the
reference's total compute.

Run::

    .venv/bin/python benchmarks/hurdles.py [--run reference,h...] [--seeds 0,1,2] [--no-write]

Each search's trials are kept in ``benchmarks/data/hurdle_searches.json``
(``--run`` names the searches to (re)run; the others are read from there), and
the table replaces the ``hurdles`` section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
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
SPACE = ROOT / "benchmarks" / "spaces" / "small.yaml"
DATA = ROOT / "benchmarks" / "data" / "hurdle_searches.json"
BUDGET = 3e11  # training FLOPs per candidate
TRIALS = 24  # the reference's trials
#: the reference records its candidates' loss at these fractions of the budget (it stops none)
RECORD = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75)
#: name -> (what the table says, the search flags beyond the common ones)
SEARCHES: dict[str, tuple[str, tuple[str, ...]]] = {
    # NSGA-II named: it was the default sampler when these were measured (--sampler auto now runs TPE)
    "reference": (f"no hurdles, {TRIALS} trials", ("--trials", str(TRIALS), "--sampler", "nsga2")),
    # the same without hurdles under aging evolution: is it the sampler or the hurdles?
    "reference-evo": (
        f"no hurdles, {TRIALS} trials, aging evolution (--population 8)",
        ("--trials", str(TRIALS), "--sampler", "evolution", "--population", "8"),
    ),
    "h2": (
        "h2: hurdles 0.1,0.3 (15th percentile, from the first trial), --max-flops 2.2e12, --population 4",
        (
            "--max-flops",
            "2.2e12",
            "--sampler",
            "nsga2",
            "--population",
            "4",
            "--hurdles",
            "0.1,0.3",
            "--hurdle-percentile",
            "15",
            "--hurdle-min-trials",
            "1",
        ),
    ),
    "h4": (
        "h4: as h2, --population 8 (the reference's)",
        (
            "--max-flops",
            "2.2e12",
            "--sampler",
            "nsga2",
            "--population",
            "8",
            "--hurdles",
            "0.1,0.3",
            "--hurdle-percentile",
            "15",
            "--hurdle-min-trials",
            "1",
        ),
    ),
    "h5": (
        "h5: as h4, aging evolution (a stopped trial stays in its population)",
        (
            "--max-flops",
            "2.2e12",
            "--sampler",
            "evolution",
            "--population",
            "8",
            "--hurdles",
            "0.1,0.3",
            "--hurdle-percentile",
            "15",
            "--hurdle-min-trials",
            "1",
        ),
    ),
}

#: hurdled search -> the search without hurdles with the same sampler, for a second verdict
CONTROLS = {"h5": "reference-evo"}

READING = """\
Reading. With a trial count instead of a compute budget (the earlier form of this benchmark: every
search 24 trials) a hurdled search explores the same candidates as the reference and can only save
compute; it saved 0.21 to 0.72 of it and met the target in 0 or 1 of 3 seeds. Under `--max-flops`
every candidate stopped early buys part of another.

Where the hurdles stand: at the earliest fractions whose loss ranks the final loss (`hurdle_ranks`:
rho +0.1 to +0.65 at 0.05, where most candidates sit on the same plateau, +0.4 to +0.9 at 0.1,
+0.75 to +0.9 at 0.3), so 0.1 and 0.3; a strict 15th percentile; and from the first trial on
(`--hurdle-min-trials 1`: the default 3 would train the first three candidates in full, 40% of this
budget). A stopped candidate then costs a tenth of a training, and the budget buys about seven full
trainings: the hurdled searches ran 15 to 36 trials and trained 2 to 7 of them to the end.

The sampler decides the rest. NSGA-II's generations hold COMPLETE trials only. With a population of
4 (h2) it evolved from the few survivors: 1 of 3 seeds. With the reference's 8 (h4) its first
generation never filled, so it screened random candidates: 4 of 6. Aging evolution that keeps a
stopped trial in its population (h5; as in Primer, a stopped trial loses every tournament to a
COMPLETE one, and of two stopped ones the one that went further wins) evolves from its first
population on: 5 of 6 seeds, 2 of 3 of the issue's, missing seed 0 by 0.003 nats. Is it the
sampler? Aging evolution without hurdles (24 trials, population 8) reached the reference's best
within a third of the compute only where that best was among the first candidates (seeds 1, 4, 5),
as any search with the same first candidates would; h5 also did in seeds 2 and 3. Against that
evolution search's own best, h5 got there within a third of its compute in 4 of 6 seeds.

What it is not: a hurdled search at a third of the compute screens about as many candidates as the
reference trains, not three times as many; a candidate costs at least a tenth of a training and one
that passes costs a full one. Where the reference met its best among its first candidates (seeds
1, 4, 5: trials 4, 0 and 2, at 0.05 to 0.21 of its compute; trial 0 is the seeded vanilla) a
hurdled search meets the same candidate for less; where the reference found its best late by
evolution (seeds 0, 2, 3: at 0.48 to 0.89) the hurdled search has to find one as good by itself,
which h5 did in seeds 2 and 3 (the same architectures). In seed 3 the reference trained only 19
distinct candidates (5.69e12 FLOPs), so `--max-flops 2.2e12` is 0.34 of it there; h5 reached its
best at 0.26. Six seeds are few: read the table per seed.

Recorded before the driver reused a stopped architecture's result: in h2 seed 1 and h5 seeds 0, 2
and 4, 13 trials trained again an architecture a hurdle had stopped. 12 stopped again with the same
loss at every hurdle they reached (2 of them sooner: the threshold at 0.1 had fallen below their
loss), 1.4% to 11% of their search's compute (h5 seed 0: 7%, seed 4: 11%); one passed a threshold
that had risen and completed. A search now ends such a trial PRUNED without training it
(docs/search_spaces.md), so these searches would spend that compute on other candidates; they have
not been rerun.
"""


def run_search(name: str, seed: int, runs: Path) -> dict[str, Any]:
    """One search in this process (as the CLI builds it); returns its trials as plain data."""
    from nas.cli import build_parser
    from nas.commands.search import build_run
    from nas.search.driver.loop import Driver

    flags = SEARCHES[name][1]
    args = build_parser().parse_args(
        [
            "search",
            "--space",
            str(SPACE),
            "--local",
            "--workers",
            "1",
            "--cpus-per-trial",
            "1",
            "--seed",
            str(seed),
            "--budget-flops",
            f"{BUDGET:g}",
            "--no-tensorboard",
            "--device",
            "cpu",
            "--runs-dir",
            str(runs),
            "--study",
            f"{name}-seed{seed}",
            *flags,
        ]
    )
    settings = build_run(args)
    if "--max-flops" in flags:
        # bounded by compute alone, as measured: default.yaml now sets the demo's search.trials (12), which
        # would also end these searches, and no flag can unset a file's value
        settings = dataclasses.replace(settings, spec=settings.spec.replace(search={"trials": None}))
    if name.startswith("reference"):  # hurdles that record, never stop: no threshold ever becomes active
        search = {"hurdles": RECORD, "hurdle_min_trials": sys.maxsize}
        settings = dataclasses.replace(settings, spec=settings.spec.replace(search=search))
    t0 = time.perf_counter()
    study = Driver(settings, out=io.StringIO()).run()
    return record(study, flags, seed, time.perf_counter() - t0)


def record(study: Any, flags: tuple[str, ...], seed: int, wall: float) -> dict[str, Any]:
    """A finished search's trials as plain data."""
    rows = []
    for t in sorted(study.trials, key=lambda t: t.number):
        u = t.user_attrs
        trained = "worker_pid" in u and "duplicate_of" not in u
        rows.append(
            {
                "number": t.number,
                "state": "INFEASIBLE" if u.get("infeasible") else t.state.name,
                "summary": u.get("summary"),
                "flops": float(u.get("train_flops", 0.0)) if trained else 0.0,
                "loss": float(u["val_loss"]) if t.state.name == "COMPLETE" and "val_loss" in u else None,
                "intermediate": u.get("intermediate") if trained else None,
                "duplicate_of": u.get("duplicate_of"),
            }
        )
    return {"flags": list(flags), "seed": seed, "wall": wall, "trials": rows}


def summarize(run: dict[str, Any], target: float | None) -> dict[str, Any]:
    spent, best, to_target, to_best = 0.0, math.inf, None, 0.0
    states: dict[str, int] = {}
    for t in run["trials"]:
        spent += t["flops"]
        loss = math.inf if t["loss"] is None else t["loss"]
        if loss < best:
            best, to_best = loss, spent
        if target is not None and to_target is None and loss <= target:
            to_target = spent
        states[t["state"]] = states.get(t["state"], 0) + 1
    return {
        "compute": spent,
        "best": best,
        "to_target": to_target,
        "to_best": to_best,
        "states": states,
        "wall": run["wall"],
        "trials": len(run["trials"]),
    }


def load() -> dict[str, Any]:
    return json.loads(DATA.read_text()) if DATA.exists() else {}


def table(data: dict[str, Any], seeds: list[int]) -> tuple[str, str]:
    """The markdown table and one verdict line per hurdled search (over the seeds it was run with)."""
    rows = []
    met: dict[str, dict[int, bool]] = {n: {} for n in SEARCHES if n != "reference"}
    for seed in seeds:
        ref = summarize(data[f"reference/{seed}"], None)
        for name in [n for n in SEARCHES if f"{n}/{seed}" in data]:
            s = summarize(data[f"{name}/{seed}"], ref["best"])
            frac = None if s["to_target"] is None else s["to_target"] / ref["compute"]
            if name in met:
                met[name][seed] = frac is not None and frac <= 1 / 3
            rows.append(
                [
                    seed,
                    SEARCHES[name][0],
                    s["trials"],
                    f"{s['best']:.4f}",
                    f"{s['best'] - ref['best']:+.4f}",
                    f"{s['compute']:.3g}",
                    f"{s['compute'] / ref['compute']:.2f}",
                    "never" if frac is None else f"{frac:.2f}",
                    f"{s['to_best'] / ref['compute']:.2f}",
                    ", ".join(f"{v} {k.lower()}" for k, v in sorted(s["states"].items())),
                    f"{s['wall']:.0f}",
                ]
            )
    md = _doc.markdown_table(
        [
            "seed",
            "search",
            "trials",
            "best loss",
            "vs reference",
            "compute (FLOPs)",
            "compute vs reference",
            "compute to reach the reference's best (fraction of its compute)",
            "compute until its own best (same)",
            "trials by state",
            "wall (s)",
        ],
        rows,
        "rlrrrrrrrlr",
    )
    lines = []
    for name, by_seed in met.items():
        if by_seed:
            lines.append(
                f"- *{SEARCHES[name][0]}*: reached the reference's best loss within a third of its compute "
                f"in {sum(by_seed.values())} of {len(by_seed)} seeds "
                f"({', '.join(f'seed {k}: ' + ('yes' if v else 'no') for k, v in by_seed.items())})."
            )
    for name, control in CONTROLS.items():  # a hurdled search against the same sampler without hurdles
        pairs = [
            (seed, data[f"{name}/{seed}"], data[f"{control}/{seed}"])
            for seed in seeds
            if f"{name}/{seed}" in data and f"{control}/{seed}" in data
        ]
        if pairs:
            ok = {}
            for seed, run, ref_run in pairs:
                ref = summarize(ref_run, None)
                hit = summarize(run, ref["best"])["to_target"]
                ok[seed] = hit is not None and hit <= ref["compute"] / 3
            lines.append(
                f"- *{SEARCHES[name][0]}* against *{SEARCHES[control][0]}*: reached that search's best loss "
                f"within a third of its compute in {sum(ok.values())} of {len(ok)} seeds "
                f"({', '.join(f'seed {k}: ' + ('yes' if v else 'no') for k, v in ok.items())})."
            )
    return md, "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--run",
        default="",
        help="searches to (re)run, comma-separated: "
        f"{', '.join(SEARCHES)} or all (default: none, the table from the stored searches)",
    )
    parser.add_argument(
        "--seeds", default="0,1,2,3,4,5", help="comma-separated search seeds (default 0,1,2,3,4,5)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    names = list(SEARCHES) if args.run == "all" else [n for n in args.run.split(",") if n]
    unknown = [n for n in names if n not in SEARCHES]
    if unknown:
        parser.error(f"--run {','.join(unknown)}: unknown; valid: {', '.join(SEARCHES)}, all")
    runs = Path(tempfile.mkdtemp(prefix="nas-hurdles-"))
    for name in names:
        for seed in seeds:
            result = run_search(name, seed, runs)
            data = load()  # re-read: another invocation may have stored other searches meanwhile
            data[f"{name}/{seed}"] = result
            DATA.write_text(json.dumps(data, indent=1) + "\n")
            print(f"{name} seed {seed}: {result['wall']:.0f} s", file=sys.stderr)
    data = load()
    if not all(f"reference/{s}" in data for s in seeds):
        print(
            f"no reference search stored for every seed of {args.seeds}: run --run reference", file=sys.stderr
        )
        return 1
    md, verdict = table(data, seeds)
    print(md)
    print(verdict)
    body = (
        "## Hurdles under a search compute budget (`benchmarks/hurdles.py`)\n\n"
        f"{_doc.provenance(threads=1)} The searches were run with `--run all` and are stored in "
        "`benchmarks/data/hurdle_searches.json`.\n\n"
        f"The default space (`benchmarks/spaces/small.yaml`), each candidate trained for {BUDGET:g} FLOPs on "
        "the default corpus (real training, batch 16 x 64), one worker with one thread (`--local`), so that "
        "a search is deterministic: an architecture trains to the same loss in every search of the same seed "
        "(on this shared two-core machine two threads per trial ran ten times slower than one). The "
        f"reference is the default search without hurdles: NSGA-II on validation loss and FLOPs/token, "
        f"{TRIALS} trials (it also records every candidate's loss at six fractions of its budget, for "
        "`hurdle_ranks`). Each hurdled search has the same seed and `--max-flops 2.2e12`: a compute budget "
        f"for the whole search, under a third of the reference's nominal {TRIALS} x {BUDGET:g} = "
        f"{TRIALS * BUDGET:.2g} FLOPs (with a FLOPs budget per candidate a search never passes it). "
        "*compute* sums `train_flops` over the trials that trained (a stopped trial counts up to its "
        "hurdle; a duplicate trains nothing; validation at the hurdles is not counted); *best loss* is "
        "the lowest validation loss of a COMPLETE trial; *compute to reach the reference's best* is the "
        "compute spent, in trial order, until the search first completes a trial at or below the "
        "reference's best loss, as a fraction of the reference's total compute. Target: at most a third. "
        "Seeds 0 to 2 are the issue's; 3 to 5 were added to see whether the result holds.\n\n"
        f"{md}\n\n{verdict}\n\n{READING}"
    )
    if not args.no_write:
        _doc.write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
