#!/usr/bin/env python
"""The experiment behind docs/RESULTS.md's probe section: do the capability probes rank architectures?

Every architecture the Primer, Synthesizer and Transformer++ experiments confirmed (same shape:
d_model 128, 4 heads, 4 layers, T 128; same data, recipe and FLOPs), plus eight more that span the
new mixers (``gated_linear``, ``hyena``, ``sliding_window``, hybrids with one ``mha`` layer, rope),
is scored by ``probe`` and compared with its confirmed validation loss at 1x and 4x of the
experiments' compute.  Nothing but ``run_search.py`` commands, each resumable:

1. ``confirm``: the eight new architectures, and four confirmed only at 1x so far, as baselines of
   a copy of the Transformer++ study (``experiments/runs/probes/study.db``, made with
   ``sqlite3 .backup`` from ``experiments/runs/modern/study.db``; the runs already there are reused,
   not retrained): 1x and 4x, seed 0.
2. ``probe``: ``probe --arch FILE --json --threads 1`` per architecture (and per ``--steps`` budget),
   each result one line of ``experiments/results/probes.jsonl``; an architecture already there at
   that budget is skipped.
3. ``report``: the probe table per architecture and the rank correlations (Spearman, Kendall) of the
   probe score, of each task, of the variants tried and of the parameter-count proxy with the
   confirmed losses, pasted into RESULTS.md's generated section.

``experiments/results/probes_v1.jsonl`` keeps the results of the first protocol (before issue 36
made ``compression`` MAD's bottleneck task and scored recall above its no-recall plateau), which
docs/RESULTS.md's probe table still shows, marked stale; ``probes.jsonl`` holds the re-measurement.

Run::

    .venv/bin/python experiments/probe_study.py                      # all stages
    .venv/bin/python experiments/probe_study.py --stage probe --steps 250
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "experiments"))

import _doc  # noqa: E402
from primer_synthesizer import DOC, RUNS, THREADS, cli, run  # noqa: E402

from evaluators.probes import TASKS  # noqa: E402
from nas.confirm.stats import kendall, spearman  # noqa: E402

RESULTS = ROOT / "experiments" / "results" / "probes.jsonl"
STORAGE = f"sqlite:///{RUNS}/probes/study.db"
#: the confirm studies whose runs are the ground truth: (storage, confirm study)
CONFIRMED = (
    (f"sqlite:///{RUNS}/primer/study.db", "primer-confirm"),
    (f"sqlite:///{RUNS}/synthesizer/study.db", "synthesizer-confirm"),
    (STORAGE, "modern-confirm"),
)
E, P = "examples/archs", "experiments/archs/probes"
#: name in the confirm studies -> the architecture file the probe scores
ARCHS = {
    "vanilla": f"{E}/vanilla.yaml",
    "mdha": f"{E}/mdha.yaml",
    "squared_relu": f"{E}/squared_relu.yaml",
    "primer_ez": f"{E}/primer_ez.yaml",
    "synth_dense": f"{E}/synth_dense.yaml",
    "synth_random": f"{E}/synth_random.yaml",
    "synth_fixed_random": f"{E}/synth_fixed_random.yaml",
    "synth_factorized_random": f"{E}/synth_factorized_random.yaml",
    "synth_factorized_dense": f"{E}/synth_factorized_dense.yaml",
    "mixture": f"{E}/mixture.yaml",
    "multi_branch": f"{E}/multi_branch.yaml",
    "transformer_pp": f"{E}/transformer_pp.yaml",
    "transformer_pp_primer": f"{E}/transformer_pp_primer.yaml",
    "primer winner (trial 16)": f"{E}/found_primer.yaml",
    "synthesizer winner (trial 19)": f"{E}/found_synthesizer.yaml",
    "modern winner (trial 11)": f"{E}/found_modern.yaml",
    "gated_linear": f"{E}/gated_linear.yaml",
    "retnet": f"{P}/retnet.yaml",
    "hyena": f"{E}/hyena.yaml",
    "sliding_window": f"{P}/sliding_window.yaml",
    "rope": f"{P}/rope.yaml",
    "hybrid_gla": f"{P}/hybrid_gla.yaml",
    "hybrid_hyena": f"{P}/hybrid_hyena.yaml",
    "hybrid_fixed_random": f"{P}/hybrid_fixed_random.yaml",
}
#: confirm names a finalist "trial N" within its own study
FINALISTS = {
    ("primer-confirm", "trial 16"): "primer winner (trial 16)",
    ("synthesizer-confirm", "trial 19"): "synthesizer winner (trial 19)",
    ("modern-confirm", "trial 11"): "modern winner (trial 11)",
}
NEW = ("gated_linear", "retnet", "hyena", "sliding_window", "rope", "hybrid_gla", "hybrid_hyena",
       "hybrid_fixed_random")  # fmt: skip
#: confirmed at 1x only by the earlier experiments
MISSING_4X = ("squared_relu", "synth_dense", "synth_fixed_random", "mixture")
BUDGET = 5e12  # training FLOPs of a 1x confirm run
RECALL = ("in_context_recall", "noisy_in_context_recall", "fuzzy_in_context_recall")


def confirm_cmd(scale: int) -> list[str]:
    names = NEW + (MISSING_4X if scale == 4 else ())
    baselines = "".join(f" --baseline {ARCHS[n]}" for n in names)
    return cli(
        *f"confirm --study modern --storage {STORAGE} --top 1 --seeds 1 --scales {scale}{baselines} "
        f"--resources.workers 2 --resources.cpus_per_trial {THREADS} --no-tensorboard".split()
    )


def stage_confirm(args: argparse.Namespace) -> None:
    if not (ROOT / RUNS / "probes" / "study.db").exists():
        raise SystemExit(
            f"make the copy first: sqlite3 {RUNS}/modern/study.db '.backup {RUNS}/probes/study.db'"
        )
    for scale in (1, 4):
        run(confirm_cmd(scale))


def probed() -> list[dict[str, Any]]:
    if not RESULTS.exists():
        return []
    return [json.loads(line) for line in RESULTS.read_text().splitlines() if line.strip()]


def variants(main_steps: int) -> dict[tuple[int, str], dict[str, dict[str, Any]]]:
    """(steps, tasks) -> name -> probe result, for every probe budget but the main six-task one."""
    out: dict[tuple[int, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in probed():
        if (r["probe_steps"], r["probe_tasks"]) != (main_steps, ",".join(TASKS)):
            out[(r["probe_steps"], r["probe_tasks"])][r["name"]] = r
    return out


def stage_probe(args: argparse.Namespace) -> None:
    tasks = ",".join(TASKS) if args.tasks is None else args.tasks
    done = {(r["name"], r["probe_steps"], r["probe_tasks"]) for r in probed()}
    names = args.only.split(",") if args.only else list(ARCHS)
    for steps in args.steps:
        for name in names:
            if (name, steps, tasks) in done:
                continue
            out = run(cli("probe", "--arch", ARCHS[name], "--json", "--threads", str(THREADS), "--steps",
                          str(steps), "--tasks", tasks))  # fmt: skip
            metrics = json.loads(out.strip().splitlines()[-1])
            with RESULTS.open("a") as f:
                f.write(json.dumps({"name": name, "file": ARCHS[name], **metrics}) + "\n")


def lm_arch_id(name: str) -> str:
    """The arch_id of ``name``'s file as the confirm runs trained it (the corpus's vocabulary, T 128)."""
    import dataclasses

    from nas.files.archfile import load_arch_file
    from nas.models import ArchConfig

    arch = load_arch_file(ROOT / ARCHS[name])["arch"]
    arch = arch if isinstance(arch, ArchConfig) else ArchConfig.from_dict(arch)
    return dataclasses.replace(arch, vocab_size=256, max_len=128).arch_id


def confirmed() -> dict[str, dict[float, dict[int, float]]]:
    """name -> scale -> seed -> validation loss, pooled over the confirm studies (a run of one
    architecture at one scale and seed found in several studies is averaged)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pooled: dict[str, dict[float, dict[int, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for storage, study_name in CONFIRMED:
        study = optuna.load_study(study_name=study_name, storage=storage)
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            a = t.user_attrs
            name = FINALISTS.get((study_name, a.get("name")), a.get("name"))
            if name in ARCHS and a.get("val_loss") is not None:
                pooled[name][float(a["scale"])][int(a["seed"])].append(float(a["val_loss"]))
                if a.get("arch_id") != lm_arch_id(name):  # the file probed must be the architecture confirmed
                    raise SystemExit(
                        f"{name}: {ARCHS[name]} is arch {lm_arch_id(name)}, but {study_name} "
                        f"confirmed arch {a.get('arch_id')} under that name"
                    )
    return {
        n: {s: {seed: statistics.mean(v) for seed, v in by_seed.items()} for s, by_seed in by_scale.items()}
        for n, by_scale in pooled.items()
    }


def agreement(
    pred: dict[str, float], loss: dict[str, float], names: list[str]
) -> tuple[float | None, float | None]:
    """Spearman and Kendall of a predictor (higher = predicted better) with the negated loss over
    ``names``."""
    x = [pred[n] for n in names]
    y = [-loss[n] for n in names]
    return spearman(x, y), kendall(x, y)


def held_out(
    acc: dict[str, dict[str, float]], loss: dict[str, float], names: list[str], splits: int = 200
) -> dict[str, list[float]]:
    """Two ways of fitting the task mix on a random half of ``names`` and ranking the other half, as
    test-half Spearman over ``splits`` random halves: ``weighted`` scores by the tasks' accuracies
    weighted by their training-half Spearman with -loss (negative ones dropped); ``best task`` uses the
    one task with the best training-half Spearman."""
    rng = random.Random(0)
    out: dict[str, list[float]] = {"weighted": [], "best task": []}
    for _ in range(splits):
        shuffled = rng.sample(names, len(names))
        train, test = shuffled[: len(names) // 2], shuffled[len(names) // 2 :]
        rho = {t: agreement({n: acc[n][t] for n in names}, loss, train)[0] or 0.0 for t in TASKS}
        weights = {t: max(r, 0.0) for t, r in rho.items()}
        best = max(TASKS, key=lambda t: rho[t])
        if sum(weights.values()) > 0:
            score = {n: sum(w * acc[n][t] for t, w in weights.items()) for n in test}
            out["weighted"].append(agreement(score, loss, test)[0] or 0.0)
        out["best task"].append(agreement({n: acc[n][best] for n in test}, loss, test)[0] or 0.0)
    return out


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:+.3f}"


def stage_report(args: argparse.Namespace) -> None:
    truth = confirmed()
    loss = {s: {n: truth[n][s][0] for n in truth if 0 in truth[n].get(s, {})} for s in (1.0, 4.0)}
    six = ",".join(TASKS)
    rows = {
        r["name"]: r
        for r in probed()
        if r["probe_steps"] == args.steps[0] and r["probe_tasks"] == six and r["name"] in loss[1.0]
    }
    names = sorted(rows, key=lambda n: loss[1.0][n])
    acc = {n: {t: rows[n][f"probe_{t}"] for t in TASKS} for n in names}
    flops1 = statistics.median(rows[n]["train_flops"] for n in names)

    table = []
    for n in names:
        r = rows[n]
        l4 = loss[4.0].get(n)
        table.append(
            [
                n,
                f"{r['params'] / 1e3:.0f}k",
                *(f"{acc[n][t]:.3f}" for t in TASKS),
                f"{r['probe_score']:.3f}",
                f"{loss[1.0][n]:.4f}",
                "-" if l4 is None else f"{l4:.4f}",
            ]
        )
    short = {"in_context_recall": "recall", "noisy_in_context_recall": "noisy recall",
             "fuzzy_in_context_recall": "fuzzy recall", "selective_copying": "sel. copy",
             "compression": "compress", "memorization": "memorize"}  # fmt: skip
    probe_table = _doc.markdown_table(
        ["architecture", "params", *(short[t] for t in TASKS), "score", "val loss 1x", "val loss 4x"], table
    )

    cost = {n: rows[n]["train_flops"] / BUDGET for n in names}  # a probe run's FLOPs, in 1x LM runs
    # a subset of the tasks is costed at an even share of the whole run per task (the tasks' lengths differ
    # a little: memorization trains on length 32, the others on 62-64)
    share = {n: statistics.mean(acc[n][t] for t in TASKS if t not in RECALL) for n in names}
    no_recall = {n: cost[n] * (len(TASKS) - len(RECALL)) / len(TASKS) for n in names}
    predictors: list[tuple[str, dict[str, float], dict[str, float]]] = [
        ("probe score (mean of the six tasks)", {n: rows[n]["probe_score"] for n in names}, cost),
        ("probe score without the three recall tasks", share, no_recall),
        *(
            (f"{t} alone", {n: acc[n][t] for n in names}, {n: cost[n] / len(TASKS) for n in names})
            for t in TASKS
        ),
    ]
    for (steps, tasks), other in sorted(variants(args.steps[0]).items()):
        have = [n for n in names if n in other]
        label = f"probe score at {steps} steps per task" + ("" if tasks == six else f" ({tasks})")
        predictors.append(
            (
                label,
                {n: other[n]["probe_score"] for n in have},
                {n: other[n]["train_flops"] / BUDGET for n in have},
            )
        )
    zero = {n: 0.0 for n in names}
    predictors += [
        ("parameter count (the proxy to beat)", {n: float(rows[n]["params"]) for n in names}, zero),
        ("non-embedding parameter count", {n: float(rows[n]["non_embedding_params"]) for n in names}, zero),
    ]
    corr = []
    for label, pred, spent in predictors:
        cells = [label, f"{statistics.median(spent.values()):.2g}"]
        for s in (1.0, 4.0):
            have = [n for n in names if n in loss[s] and n in pred]
            rho, tau = agreement(pred, loss[s], have)
            cells += [fmt(rho), fmt(tau), str(len(have))]
        corr.append(cells)
    have4 = [n for n in names if n in loss[4.0]]
    rho, tau = agreement({n: -loss[1.0][n] for n in have4}, loss[4.0], have4)
    corr.append(
        ["val loss at 1x (the cheap LM run)", "1", "-", "-", "-", fmt(rho), fmt(tau), str(len(have4))]
    )
    corr_table = _doc.markdown_table(["predictor", "cost (1x LM runs)", "Spearman 1x", "Kendall 1x", "n",
                                      "Spearman 4x", "Kendall 4x", "n"], corr)  # fmt: skip

    fitted = []
    for s in (1.0, 4.0):
        have = [n for n in names if n in loss[s]]
        if len(have) < 8:  # halves of 4 or more
            continue
        for how, values in held_out(acc, loss[s], have).items():
            fitted.append([f"{how}, fitted on a random half", f"{s:g}x", f"{statistics.mean(values):+.3f}",
                           f"{statistics.stdev(values):.3f}", f"{min(values):+.3f}", f"{max(values):+.3f}",
                           str(len(values))])  # fmt: skip
    fitted_table = _doc.markdown_table(
        ["variant", "scale", "test-half Spearman mean", "sd", "min", "max", "splits"], fitted
    )
    steps = args.steps[0]
    body = (
        f"    python experiments/probe_study.py --stage report --steps {steps}\n\n"
        f"Probes at {steps} steps per task (seed 0, one thread); validation loss of seed 0 at 1x "
        "(5e12 FLOPs) and 4x (2e13), from the confirm studies; architectures ordered by their 1x loss.  "
        f"One probe run costs {flops1:.2g} training FLOPs (median), {flops1 / 5e12:.1f}x a 1x LM run.\n\n"
        f"{probe_table}\n\n#### Rank agreement with the confirmed loss\n\n"
        "Positive means the predictor ranks the architectures as their validation loss does (higher score, "
        "or more parameters, predicts lower loss).\n\n"
        f"{corr_table}\n\n#### Task weights fitted on half of the architectures, tested on the other half\n\n"
        f"{fitted_table}\n"
    )
    _doc.write_section("probe-study", body, DOC)


STAGES = {"confirm": stage_confirm, "probe": stage_probe, "report": stage_report}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--stage", choices=tuple(STAGES), action="append", help="one stage (repeatable; default: all)"
    )
    parser.add_argument(
        "--steps", type=int, action="append", help="probe steps per task (repeatable; default 250)"
    )
    parser.add_argument("--only", default=None, help="probe these architectures only (comma-separated names)")
    parser.add_argument(
        "--tasks", default=None, help="probe these tasks only (comma-separated; default all six)"
    )
    args = parser.parse_args()
    args.steps = args.steps or [250]
    for stage in args.stage or tuple(STAGES):
        STAGES[stage](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
