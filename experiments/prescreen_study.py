#!/usr/bin/env python
"""The pre-screen experiment of docs/RESULTS.md: does a probe-screened search reach a plain search's
confirmed best loss for less compute?

Per seed, searches of ``experiments/spaces/prescreen.yaml`` (mixers per layer at the RESULTS shape,
5e12 FLOPs per candidate) under the same search compute (``--max-flops``, which counts the screen's
FLOPs too): a plain one, and ones with ``--prescreen`` (the probe sets in ``KINDS``) at the median.
Then ``confirm`` retrains each search's best at 1x on three seeds (the search's and the next two),
and the report compares the confirmed bests and the FLOPs each search spent to find them.  Nothing
but ``run_search.py`` commands, each resumable (finished work is never redone).

Run::

    .venv/bin/python experiments/prescreen_study.py --stage run --seed 0     # one seed's searches + confirms
    .venv/bin/python experiments/prescreen_study.py --stage run --kind recall
    .venv/bin/python experiments/prescreen_study.py --stage report
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "experiments"))

import _doc  # noqa: E402
from primer_synthesizer import DOC, RUNS, THREADS, cli, run  # noqa: E402

SPACE = "experiments/spaces/prescreen.yaml"
RUNS_DIR = f"{RUNS}/prescreen"
#: search compute per search: ten candidates' worth at 5e12 FLOPs each
MAX_FLOPS = 5e13
SEEDS = (0, 1, 2)
#: each search kind and its screen: none; the two tasks that ranked best alone in the probe study
#: (RESULTS.md), at the default 250 steps; and, after those two saturated at this space's shape (1.0 for
#: nearly every candidate), in-context recall alone, the task whose accuracy varied most there
KINDS: dict[str, str | None] = {
    "plain": None,
    "screened": "probes:compression,memorization",
    "recall": "probes:in_context_recall",
}


def study(kind: str, seed: int) -> str:
    return f"{kind}-s{seed}"


def search_cmd(kind: str, seed: int) -> list[str]:
    screen = f" --prescreen {KINDS[kind]} --hurdle-min-trials 3" if KINDS[kind] else ""
    return cli(
        *f"search --space {SPACE} --study {study(kind, seed)} --runs-dir {RUNS_DIR} --seed {seed} "
        f"--max-flops {MAX_FLOPS:g} --workers 2 --cpus-per-trial {THREADS}{screen}".split()
    )


def confirm_cmd(kind: str, seed: int) -> list[str]:
    # seeds start at the search's seed (the same three for every kind of one search seed: paired), and
    # confirm's default baseline, Transformer++, trains on them beside the best
    return cli(
        *f"confirm --study {study(kind, seed)} --runs-dir {RUNS_DIR} --top 1 --seeds 3 --scales 1 "
        f"--workers 2 --cpus-per-trial {THREADS} --no-tensorboard".split()
    )


def stage_run(args: argparse.Namespace) -> None:
    for seed in args.seed or SEEDS:
        for kind in args.kind or KINDS:
            run(search_cmd(kind, seed))
            run(confirm_cmd(kind, seed))


def _load(kind: str, seed: int, suffix: str = ""):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not (ROOT / RUNS_DIR / study(kind, seed) / "study.db").exists():
        return None
    try:
        return optuna.load_study(
            study_name=study(kind, seed) + suffix,
            storage=f"sqlite:///{RUNS_DIR}/{study(kind, seed)}/study.db",
        )
    except KeyError:
        return None


def outcome(kind: str, seed: int) -> dict[str, float] | None:
    """What one search spent and found: FLOPs (training + screen), trials trained, screened out, and the
    confirmed mean losses at 1x of its best and of the baseline beside it (None while it has not run)."""
    import optuna

    from nas.search.driver.allowance import spent_flops

    searched, confirm = _load(kind, seed), _load(kind, seed, "-confirm")
    if searched is None or confirm is None:
        return None
    losses: dict[str, list[float]] = {"finalist": [], "baseline": []}
    for t in confirm.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        losses.setdefault(str(t.user_attrs.get("role")), []).append(t.user_attrs["val_loss"])
    if not losses["finalist"]:
        return None
    trials = searched.get_trials(deepcopy=False)
    best = searched.best_trial
    return {
        "flops": spent_flops(trials),
        "screen_flops": sum(
            float(t.user_attrs.get("prescreen_flops") or 0.0)
            for t in trials
            if "duplicate_of" not in t.user_attrs
        ),
        "trained": sum(1 for t in trials if float(t.user_attrs.get("train_flops") or 0.0) > 0),
        "screened_out": sum(1 for t in trials if t.user_attrs.get("pruned_at") == 0.0),
        # what the search had spent when its best finished (trials in the order they started)
        "to_best": spent_flops(t for t in trials if t.number <= best.number),
        "best": statistics.mean(losses["finalist"]),
        "baseline": statistics.mean(losses["baseline"]) if losses["baseline"] else float("nan"),
        "arch": str(best.user_attrs.get("arch_id", ""))[:8],
    }


def stage_report(args: argparse.Namespace) -> None:
    rows = []
    for seed in SEEDS:
        for kind in KINDS:
            o = outcome(kind, seed)
            if o is None:
                continue
            gap = "-" if math.isnan(o["baseline"]) else f"{o['best'] - o['baseline']:+.4f}"
            rows.append([str(seed), kind, f"`{o['arch']}`", f"{o['best']:.4f}", gap, f"{o['flops']:.3g}",
                         f"{o['to_best']:.3g}", f"{o['screen_flops']:.3g}", str(o["trained"]),
                         str(o["screened_out"])])  # fmt: skip
    table = _doc.markdown_table(["search seed", "search", "its best", "confirmed best (1x, 3 seeds)",
                                 "vs Transformer++ (same seeds)", "FLOPs spent", "spent by its best",
                                 "of which screening", "trained", "screened out"], rows)  # fmt: skip
    body = (
        f"    python experiments/prescreen_study.py --stage report\n\n"
        f"`{SPACE}`, `--max-flops {MAX_FLOPS:g}` per search; screens at the median: "
        + ", ".join(f"{k} `{v}`" for k, v in KINDS.items() if v)
        + ". Confirm seeds are the search seed "
        "and the next two, the same for every search of one seed; Transformer++ trains on them in "
        f"each confirm.\n\n{table}\n"
    )
    _doc.write_section("prescreen-study", body, DOC)


STAGES = {"run": stage_run, "report": stage_report}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", choices=tuple(STAGES), action="append", help="one stage (default: both)")
    parser.add_argument("--seed", type=int, action="append", help="search seeds to run (default 0, 1, 2)")
    parser.add_argument("--kind", choices=tuple(KINDS), action="append", help="searches to run (default all)")
    args = parser.parse_args()
    for stage in args.stage or tuple(STAGES):
        STAGES[stage](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
