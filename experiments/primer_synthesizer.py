#!/usr/bin/env python
"""The experiment behind docs/RESULTS.md: Primer-EZ and the Synthesizers against vanilla at equal compute.

Five stages, each resumable (run the script again and it goes on where it
stopped; finished work is never redone):

1. ``search``: the shipped ``search_spaces/primer.yaml`` and
   ``search_spaces/synthesizer.yaml`` searches through the CLI, every
   candidate trained for the same FLOPs (NSGA-II on validation loss and
   FLOPs/token, hurdles at a quarter and half of the budget).  Studies live in
   ``experiments/runs/<space>/study.db``.
2. ``export``: each search's lowest-loss trial to
   ``examples/archs/found_<space>.yaml``.
3. ``baselines``: fixed architectures (``examples/archs/*.yaml`` and the two
   exported winners) retrained with ``run_search.py train`` for the same FLOPs,
   one run per seed; each run's JSON metrics are appended to
   ``experiments/results/baselines.jsonl``.
4. ``longer``: a few of them again at four times the FLOPs, seeds 0 and 1.
5. ``report``: the tables and plots of docs/RESULTS.md (its generated
   sections; the prose around them is written by hand).

Run::

    .venv/bin/python experiments/primer_synthesizer.py                # all stages
    .venv/bin/python experiments/primer_synthesizer.py --stage report  # tables and plots only
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _doc  # noqa: E402

DOC = ROOT / "docs" / "RESULTS.md"
IMG = ROOT / "docs" / "img"
RUNS = ROOT / "experiments" / "runs"
RESULTS = ROOT / "experiments" / "results" / "baselines.jsonl"
ARCHS = ROOT / "examples" / "archs"

BUDGET = 5e12  # training FLOPs per candidate and per baseline run
TRIALS = 24
HURDLES = "0.25,0.5"
SEEDS = (0, 1, 2)
THREADS = 2  # every baseline run trains on 2 threads: same seed + threads = same loss
SPACES = ("primer", "synthesizer")
#: a check at four times the budget, two seeds: does the ranking hold with more training?
LONGER_BUDGET = 2e13
LONGER_SEEDS = (0, 1)

#: label, file under examples/archs, what it stands for
BASELINES: tuple[tuple[str, str, str], ...] = (
    ("vanilla", "vanilla.yaml", "mha + ReLU"),
    ("mdha (ReLU)", "mdha.yaml", "Primer's attention change alone"),
    ("squared ReLU (mha)", "squared_relu.yaml", "Primer's FFN change alone"),
    ("Primer-EZ", "primer_ez.yaml", "mdha k3 + squared ReLU"),
    ("found: primer space", "found_primer.yaml", "the primer search's lowest-loss trial"),
    ("synth_dense", "synth_dense.yaml", "Dense Synthesizer"),
    ("synth_random", "synth_random.yaml", "Random Synthesizer (trained R)"),
    ("synth_fixed_random", "synth_fixed_random.yaml", "Random Synthesizer (fixed R)"),
    ("synth_factorized_random", "synth_factorized_random.yaml", "Factorized Random, rank 8"),
    ("synth_factorized_dense", "synth_factorized_dense.yaml", "Factorized Dense, a 16 b 8"),
    ("mixture mha+synth_random", "mixture.yaml", "learned mixture weights"),
    ("found: synthesizer space", "found_synthesizer.yaml", "the synthesizer search's lowest-loss trial"),
    ("multi_branch", "multi_branch.yaml", "Weighted Transformer"),
)
_LONGER_FILES = ("vanilla.yaml", "mdha.yaml", "primer_ez.yaml", "found_primer.yaml", "synth_random.yaml",
                 "synth_factorized_dense.yaml", "found_synthesizer.yaml")  # fmt: skip
LONGER = tuple(b for b in BASELINES if b[1] in _LONGER_FILES)


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def cli(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "run_search.py"), *args]


def shown(cmd: list[str]) -> str:
    """The command as a reader types it from the repository root."""
    words = ["python", "run_search.py", *cmd[2:]]
    return shlex.join(rel(Path(w)) if w.startswith(str(ROOT)) else w for w in words)


def search_cmd(space: str) -> list[str]:
    return cli(
        "search",
        "--space",
        f"search_spaces/{space}.yaml",
        "--study",
        space,
        "--runs-dir",
        rel(RUNS),
        "--trials",
        str(TRIALS),
        "--budget-flops",
        f"{BUDGET:g}",
        "--hurdles",
        HURDLES,
        "--seed",
        "0",
        "--no-tensorboard",
    )


def export_cmd(space: str) -> list[str]:
    return cli(
        "export",
        "--study",
        space,
        "--runs-dir",
        rel(RUNS),
        "--best",
        "--out",
        f"examples/archs/found_{space}.yaml",
        "--force",
    )


def train_cmd(file: str, seed: int, budget: float = BUDGET) -> list[str]:
    return cli(
        "train",
        "--arch",
        f"examples/archs/{file}",
        "--budget-flops",
        f"{budget:g}",
        "--seed",
        str(seed),
        "--threads",
        str(THREADS),
        "--json",
    )


def run(cmd: list[str]) -> str:
    print("$", shown(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{shown(cmd)}: exit status {proc.returncode}")
    return proc.stdout


# --------------------------------------------------------------------------- stages


def stage_search() -> None:
    for space in SPACES:
        run(search_cmd(space))  # continues the study up to TRIALS finished trials


def stage_export() -> None:
    for space in SPACES:
        run(export_cmd(space))


def load_results() -> list[dict[str, Any]]:
    if not RESULTS.exists():
        return []
    return [json.loads(line) for line in RESULTS.read_text().splitlines() if line.strip()]


def train_all(archs: tuple[tuple[str, str, str], ...], seeds: tuple[int, ...], budget: float) -> None:
    """Train each architecture at each seed for ``budget`` FLOPs, skipping the runs already recorded."""
    import nas

    done = {(r["file"], r["seed"], r["arch_id"]) for r in load_results() if r["budget"] == {"flops": budget}}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    for seed in seeds:  # seed-major: every architecture has a first seed before any has a third
        for label, file, _ in archs:
            arch_id = nas.load_arch(ARCHS / file).arch_id
            if (file, seed, arch_id) in done:
                continue
            t0 = time.perf_counter()
            metrics = json.loads(run(train_cmd(file, seed, budget)).strip().splitlines()[-1])
            record = {"label": label, "file": file, **metrics}
            with RESULTS.open("a") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")
            print(
                f"{label} seed {seed}: val_loss {metrics['val_loss']:.4f} ({time.perf_counter() - t0:.0f} s)",
                file=sys.stderr,
                flush=True,
            )


def stage_baselines() -> None:
    train_all(BASELINES, SEEDS, BUDGET)


def stage_longer() -> None:
    train_all(LONGER, LONGER_SEEDS, LONGER_BUDGET)


# --------------------------------------------------------------------------- report


def mean_sd(xs: list[float]) -> str:
    if len(xs) < 2:
        return f"{xs[0]:.4f}" if xs else "-"
    return f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs):.4f}"


def results_table(archs: tuple[tuple[str, str, str], ...], budget: float) -> str:
    """One row per architecture: its runs at ``budget`` (current arch only), paired with vanilla's."""
    by = runs_by_file(budget)
    vanilla = by.get("vanilla.yaml", {})
    out = []
    for label, file, what in archs:
        runs = by.get(file)
        if not runs:
            continue
        seeds = sorted(runs)
        loss = [runs[s]["val_loss"] for s in seeds]
        bpb = [runs[s]["val_bpb"] for s in seeds]
        paired = [runs[s]["val_loss"] - vanilla[s]["val_loss"] for s in seeds if s in vanilla]
        if file == "vanilla.yaml" or not paired:
            delta = "-"
        else:
            better = sum(d < 0 for d in paired)
            delta = (
                f"{statistics.mean(paired):+.4f} [{min(paired):+.4f}, {max(paired):+.4f}]; "
                f"lower in {better}/{len(paired)}"
            )
        first = runs[seeds[0]]
        out.append(
            [
                f"{label} (`{file}`)",
                what,
                ", ".join(map(str, seeds)),
                mean_sd(loss),
                mean_sd(bpb),
                delta,
                f"{first['flops_per_token'] / 1e6:.2f}M",
                f"{first['params'] / 1e6:.3f}M",
                f"{statistics.mean(r['steps'] for r in runs.values()):.0f}",
                f"{statistics.mean(r['tokens_per_s'] for r in runs.values()) / 1e3:.1f}k",
            ]
        )
    header = [
        "architecture",
        "what",
        "seeds",
        "val loss (mean ± sd)",
        "bits/byte (mean ± sd)",
        "Δ loss vs vanilla, paired by seed: mean [min, max]",
        "FLOPs/token (fwd)",
        "params",
        "steps",
        "tokens/s (CPU)",
    ]
    return _doc.markdown_table(header, out, "llrrrrrrrr")


def baseline_section() -> str:
    cmds = "\n".join(f"    {shown(train_cmd('vanilla.yaml', s))}" for s in SEEDS)
    return (
        "## Fixed architectures at equal compute\n\n"
        f"Every row trained for {BUDGET:g} FLOPs (forward + backward, analytic) on the default corpus, "
        f"batch 16 x 128 bytes, lr 3e-3 with warm-up and cosine decay, {THREADS} CPU threads, seeds "
        f"{', '.join(map(str, SEEDS))}. A cheaper architecture takes more steps for the same "
        "FLOPs. Validation loss is nats per byte on the held-out plays; bits/byte = loss / ln 2. "
        "The Δ column subtracts vanilla's loss at the same seed (same initialisation stream and batch "
        "order), so it is less noisy than comparing means. The vanilla rows are rerun by\n\n"
        f"{cmds}\n\n"
        "and every other row by the same command with its file (`--stage baselines` runs them all; each "
        "run is appended to `experiments/results/baselines.jsonl`, which `--stage report` turns into "
        "this table).\n\n" + results_table(BASELINES, BUDGET)
    )


def longer_section() -> str:
    cmd = shown(train_cmd("vanilla.yaml", LONGER_SEEDS[0], LONGER_BUDGET))
    return (
        f"## The same at four times the compute ({LONGER_BUDGET:g} FLOPs, seeds "
        f"{', '.join(map(str, LONGER_SEEDS))})\n\n"
        "Small models trained briefly favour built-in locality; does the order hold when every model "
        f"trains four times longer? Same recipe, {LONGER_BUDGET:g} FLOPs (`--stage longer`), e.g.\n\n"
        f"    {cmd}\n\n" + results_table(LONGER, LONGER_BUDGET)
    )


def _att(layer: dict[str, Any]) -> str:
    """The block's type (a mixture names its components); options are in the Pareto table."""
    att = layer["attention"]
    if att["type"] == "mixture":
        return "mixture(" + "+".join(c["type"] for c in att.get("components", [])) + ")"
    return att["type"]


def search_section(space: str) -> str:
    import optuna
    from optuna.trial import TrialState

    from nas.plots import plot_blocks, plot_history, plot_pareto
    from nas.search.report import format_table, leaderboard

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    db = RUNS / space / "study.db"
    if not db.exists():
        return f"## Search: `{space}.yaml`\n\nNot run yet."
    study = optuna.load_study(study_name=space, storage=f"sqlite:///{db}")
    states = Counter(t.state.name.lower() for t in study.trials)
    complete = sorted(
        study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=lambda t: t.values[0]
    )
    trained = [t for t in study.trials if "worker_pid" in t.user_attrs and "duplicate_of" not in t.user_attrs]
    compute = sum(float(t.user_attrs.get("train_flops", 0.0)) for t in trained)
    seconds = sum(float(t.user_attrs.get("seconds", 0.0)) for t in trained)
    IMG.mkdir(parents=True, exist_ok=True)
    plots = [
        plot_pareto(study, IMG / f"results_{space}_pareto.png"),
        plot_blocks(study, IMG / f"results_{space}_blocks_by_layer.png", top=8),
        plot_history(study, IMG / f"results_{space}_history.png"),
    ]

    # per-layer preference: the top 8 by loss against every COMPLETE trial (the base rate)
    top = complete[:8]

    def layer_counts(trials: list[Any], key: str) -> list[Counter[str]]:
        depth = max(len(t.user_attrs["arch"]["layers"]) for t in trials)
        counts: list[Counter[str]] = [Counter() for _ in range(depth)]
        for t in trials:
            for i, layer in enumerate(t.user_attrs["arch"]["layers"]):
                counts[i][_att(layer) if key == "attention" else layer["ffn"]["activation"]] += 1
        return counts

    sampled = [t for t in study.trials if "arch" in t.user_attrs]  # complete, pruned and failed alike
    pref_rows = []
    keys = ["attention"] + (["activation"] if space == "primer" else [])
    for key in keys:
        top_c, all_c = layer_counts(top, key), layer_counts(sampled, key)
        for i, (tc, ac) in enumerate(zip(top_c, all_c, strict=True)):
            pref_rows.append(
                [
                    key,
                    i,
                    ", ".join(f"{n} {c}" for n, c in tc.most_common()),
                    ", ".join(f"{n} {c}" for n, c in ac.most_common()),
                ]
            )
    prefs = _doc.markdown_table(
        ["gene", "layer", f"top {len(top)} by loss", f"all {len(sampled)} sampled"], pref_rows, "lrll"
    )
    front = format_table(leaderboard(study))
    seeded = [
        t.user_attrs["seed_arch"]
        for t in sorted(study.trials, key=lambda t: t.number)
        if t.user_attrs.get("seed_arch")
    ]
    firsts = (
        (
            f"{' and '.join(seeded)} {'is' if len(seeded) == 1 else 'are'} the first "
            f"{'trial' if len(seeded) == 1 else f'{len(seeded)} trials'}"
        )
        if seeded
        else "no seed architectures"
    )
    return (
        f"## Search: `search_spaces/{space}.yaml`\n\n"
        f"    {shown(search_cmd(space))}\n    {shown(export_cmd(space))}\n\n"
        f"Trials: {', '.join(f'{n} {s}' for s, n in sorted(states.items()))}. Training compute spent: "
        f"{compute:.3g} FLOPs ({compute / (TRIALS * BUDGET):.2f} of {TRIALS} full trials), "
        f"{seconds / 60:.0f} worker-minutes. NSGA-II (seed 0) on validation loss and forward FLOPs/token; "
        f"{firsts}.\n\n"
        "Pareto front (validation loss, nats/byte, against forward FLOPs/token):\n\n"
        f"```\n{front}\n```\n\n"
        f"![Pareto front of the {space} search]({rel(plots[0]).removeprefix('docs/')})\n\n"
        f"Which blocks the best complete trials chose, per layer, against how often each was sampled at all "
        f"(complete, pruned or failed: the sampler's base rate):\n\n{prefs}\n\n"
        f"![blocks by layer]({rel(plots[1]).removeprefix('docs/')})\n"
        f"![history]({rel(plots[2]).removeprefix('docs/')})"
    )


def runs_by_file(budget: float = BUDGET) -> dict[str, dict[int, dict[str, Any]]]:
    """file -> seed -> metrics, for runs at ``budget`` of the file's current architecture."""
    import nas

    by: dict[str, dict[int, dict[str, Any]]] = {}
    current: dict[str, str] = {}  # file -> arch_id now, read once per file
    for r in load_results():
        if r["file"] not in current:
            current[r["file"]] = nas.load_arch(ARCHS / r["file"]).arch_id
        if r["budget"] == {"flops": budget} and r["arch_id"] == current[r["file"]]:
            by.setdefault(r["file"], {})[r["seed"]] = r
    return by


def annotate_found(space: str) -> None:
    """Head ``examples/archs/found_<space>.yaml`` with where it came from and its retrained losses."""
    path = ARCHS / f"found_{space}.yaml"
    base, longer_runs = runs_by_file(), runs_by_file(LONGER_BUDGET)
    runs = base.get(path.name)
    if not path.exists() or not runs:
        return
    seeds = sorted(runs)
    body = "".join(line for line in path.read_text().splitlines(keepends=True) if not line.startswith("#"))
    loss = [runs[s]["val_loss"] for s in seeds]
    bpb = [runs[s]["val_bpb"] for s in seeds]
    van = base.get("vanilla.yaml", {})
    head = [
        f"# The lowest-loss trial of the `{space}` search in docs/RESULTS.md (search_spaces/{space}.yaml,",
        f"# {TRIALS} trials of {BUDGET:g} training FLOPs each); `metrics` below is that trial's run.",
        f"# Retrained for the same FLOPs on {THREADS} threads, seeds {', '.join(map(str, seeds))}: "
        f"val loss {mean_sd(loss)}, bits/byte {mean_sd(bpb)}",
    ]
    if van:
        head.append(
            f"# (vanilla.yaml at the same seeds: {mean_sd([van[s]['val_loss'] for s in sorted(van)])})."
        )
    longer, van4 = longer_runs.get(path.name), longer_runs.get("vanilla.yaml")
    if longer and van4:
        head.append(
            f"# At {LONGER_BUDGET:g} FLOPs, seeds {', '.join(map(str, sorted(longer)))}: "
            f"{mean_sd([r['val_loss'] for r in longer.values()])} (vanilla.yaml: "
            f"{mean_sd([r['val_loss'] for r in van4.values()])})."
        )
    head.append(f"#   {shown(train_cmd(path.name, seeds[0]))}")
    path.write_text("\n".join(head) + "\n" + body)


def stage_report() -> None:
    for space in SPACES:
        annotate_found(space)
    _doc.write_section("baselines", baseline_section(), DOC)
    _doc.write_section("longer", longer_section(), DOC)
    for space in SPACES:
        _doc.write_section(f"search-{space}", search_section(space), DOC)


STAGES = {
    "search": stage_search,
    "export": stage_export,
    "baselines": stage_baselines,
    "longer": stage_longer,
    "report": stage_report,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", choices=[*STAGES, "all"], default="all")
    args = parser.parse_args()
    for name, fn in STAGES.items():
        if args.stage in (name, "all"):
            fn()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
