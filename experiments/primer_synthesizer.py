#!/usr/bin/env python
"""The experiment behind docs/RESULTS.md: Primer-EZ and the Synthesizers against vanilla at equal compute.

Four stages, each a few ``run_search.py`` commands and each resumable (run the
script again and it goes on where it stopped; finished work is never redone):

1. ``search``: the shipped ``search_spaces/primer.yaml`` and
   ``search_spaces/synthesizer.yaml`` searches, every candidate trained for the
   same FLOPs (NSGA-II on validation loss and FLOPs/token, hurdles at a
   quarter and half of the budget).  Studies live in
   ``experiments/runs/<space>/study.db``.
2. ``export``: each search's lowest-loss trial to
   ``examples/archs/found_<space>.yaml``.
3. ``confirm``: per search, ``run_search.py confirm`` retrains its winner
   (``--top 1``) and fixed architectures (``--baseline examples/archs/*.yaml``)
   for the search's FLOPs on seeds 0, 1, 2, then a few of them at four times
   the FLOPs on seeds 0 and 1.  The runs live beside the search, as the study
   ``<space>-confirm`` in the same ``study.db``.
4. ``report``: the tables and plots of docs/RESULTS.md (its generated
   sections; the prose around them is written by hand), read from the studies
   only: it trains nothing.

Run::

    .venv/bin/python experiments/primer_synthesizer.py                # all stages
    .venv/bin/python experiments/primer_synthesizer.py --stage report  # tables and plots only
"""

from __future__ import annotations

import argparse
import functools
import json
import shlex
import statistics
import subprocess
import sys
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
#: the fixed runs of this page's first version (``run_search.py train``, on another CPU): kept only to
#: say how the confirm runs that replaced them differ (the ``rerun`` section)
OLD_RESULTS = ROOT / "experiments" / "results" / "baselines.jsonl"
#: ``train --json`` runs (plus their ``file``) made on the machine that made the confirm runs: the same
#: file, seed and threads must give the same loss as confirm's run
SAME_MACHINE = ROOT / "experiments" / "results" / "train_twins.jsonl"
ARCHS = ROOT / "examples" / "archs"

BUDGET = 5e12  # training FLOPs per candidate and per confirm run at scale 1
TRIALS = 24
HURDLES = "0.25,0.5"
SEEDS = (0, 1, 2)
#: every confirm run trains on 1 thread (same seed + threads = same loss), the two searches' confirmations
#: side by side: on a 2-core machine shared with other work two 1-thread runs lose far less time waiting
#: for a descheduled thread than one 2-thread run
THREADS = 1
SPACES = ("primer", "synthesizer")
#: a check at four times the budget, two seeds: does the ranking hold with more training?
LONGER_SCALE = 4
LONGER_BUDGET = BUDGET * LONGER_SCALE
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
#: per search: the files confirmed beside its winner at 1x, and those checked again at 4x (vanilla is in
#: both searches' confirmations, so every Δ pairs runs of one confirm study)
CONFIRM: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "primer": (
        ("vanilla.yaml", "mdha.yaml", "squared_relu.yaml", "primer_ez.yaml"),
        ("vanilla.yaml", "mdha.yaml", "primer_ez.yaml"),
    ),
    "synthesizer": (
        ("vanilla.yaml", "synth_dense.yaml", "synth_random.yaml", "synth_fixed_random.yaml",
         "synth_factorized_random.yaml", "synth_factorized_dense.yaml", "mixture.yaml", "multi_branch.yaml"),
        ("vanilla.yaml", "synth_random.yaml", "synth_factorized_dense.yaml"),
    ),
}  # fmt: skip


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def cli(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "run_search.py"), *args]


def shown(cmd: list[str]) -> str:
    """The command as a reader types it from the repository root."""
    words = ["python", "run_search.py", *cmd[2:]]
    return shlex.join(rel(Path(w)) if w.startswith(str(ROOT)) else w for w in words)


def search_cmd(space: str) -> list[str]:
    return cli(*f"search --space search_spaces/{space}.yaml --study {space} --runs-dir {rel(RUNS)} "
               f"--trials {TRIALS} --budget-flops {BUDGET:g} --hurdles {HURDLES} --seed 0 "
               "--no-tensorboard".split())  # fmt: skip


def export_cmd(space: str) -> list[str]:
    return cli(*f"export --study {space} --runs-dir {rel(RUNS)} --best "
               f"--out examples/archs/found_{space}.yaml --force".split())  # fmt: skip


def confirm_cmd(space: str, scale: int = 1) -> list[str]:
    """The search's winner (``--top 1``) and its fixed architectures at ``scale`` times its budget.

    ``--local``: one run at a time in the command's own process, on ``THREADS`` torch threads.
    """
    base, longer = CONFIRM[space]
    files, seeds = (base, SEEDS) if scale == 1 else (longer, LONGER_SEEDS)
    baselines = "".join(f" --baseline examples/archs/{f}" for f in files)
    return cli(*f"confirm --study {space} --runs-dir {rel(RUNS)} --top 1 --seeds {len(seeds)} "
               f"--scales {scale:g}{baselines} --local --cpus-per-trial {THREADS} "
               "--no-tensorboard --json".split())  # fmt: skip


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


def stage_confirm() -> None:
    for scale in (1, LONGER_SCALE):  # every search's 1x runs before any 4x run
        procs = []
        for space in SPACES:  # the two searches' confirmations at once: each study has its own file
            cmd = confirm_cmd(space, scale)  # adds only the runs its study does not hold yet
            print("$", shown(cmd), file=sys.stderr, flush=True)
            procs.append((cmd, subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL)))
        codes = [proc.wait() for _, proc in procs]  # both end before either failure is reported
        for (cmd, _), code in zip(procs, codes, strict=True):
            if code != 0:
                raise SystemExit(f"{shown(cmd)}: exit status {code}")


# --------------------------------------------------------------------------- report


def mean_sd(xs: list[float]) -> str:
    if len(xs) < 2:
        return f"{xs[0]:.4f}" if xs else "-"
    return f"{statistics.mean(xs):.4f} ± {statistics.stdev(xs):.4f}"


@functools.cache
def arch_id(file: str) -> str:
    import nas

    return nas.load_arch(ARCHS / file).arch_id


@functools.cache
def confirm_runs(space: str) -> tuple[list[Any], list[dict[str, Any]]]:
    """The entries of the search's confirm study and its finished runs (confirm's own rows), or nothing."""
    import optuna

    from nas.confirm import ARCHS as ENTRIES
    from nas.confirm import Entry, confirm_study_name
    from nas.confirm.summary import collect_runs
    from nas.search.study import open_storage, study_exists

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    db, name = RUNS / space / "study.db", confirm_study_name(space)
    storage = open_storage(f"sqlite:///{db}", read_only=True) if db.exists() else None
    if storage is None or not study_exists(storage, name):
        return [], []
    study = optuna.load_study(study_name=name, storage=storage)
    entries = [Entry.from_dict(d) for d in study.user_attrs.get(ENTRIES) or []]
    return entries, [r for r in collect_runs(study, entries) if r["val_loss"] is not None]


@functools.cache
def confirmed(scale: int) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """arch id -> (confirm's summary row at ``scale``, its runs), from the first search holding it.

    The statistics are confirm's own (:func:`nas.confirm.summary.summarize`), with vanilla as the one
    baseline, over the seeds this experiment asks for at ``scale``.
    """
    from nas.confirm.summary import summarize

    seeds = SEEDS if scale == 1 else LONGER_SEEDS
    out: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for space in SPACES:
        entries, every = confirm_runs(space)
        vanilla = [e for e in entries if e.arch_id == arch_id("vanilla.yaml")]
        runs = [r for r in every if r["scale"] == scale]
        for row in summarize(runs, entries, vanilla, [scale], seeds):
            mine = [r for r in runs if r["arch_id"] == row["arch_id"] and r["seed"] in row["seeds"]]
            if row["n"] and row["arch_id"] not in out:
                out[row["arch_id"]] = (row, sorted(mine, key=lambda r: r["seed"]))
    return out


def delta_text(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    return f"{d['mean']:+.4f} [{d['min']:+.4f}, {d['max']:+.4f}]; lower in {d['lower_on']}/{d['n']}"


def results_table(files: tuple[str, ...], scale: int) -> str:
    """One row per architecture: confirm's runs at ``scale``, paired with vanilla's of the same study."""
    stats = confirmed(scale)
    out, missing = [], []
    for label, file, what in BASELINES:
        have = stats[arch_id(file)][0]["seeds"] if arch_id(file) in stats else []
        lacking = [s for s in (SEEDS if scale == 1 else LONGER_SEEDS) if s not in have]
        if file in files and lacking:
            missing.append(f"{label} (seed{'s' if len(lacking) > 1 else ''} {', '.join(map(str, lacking))})")
        if file not in files or not have:
            continue
        row, runs = stats[arch_id(file)]
        first = runs[0]
        out.append(
            [
                f"{label} (`{file}`)",
                what,
                ", ".join(map(str, row["seeds"])),
                mean_sd([r["val_loss"] for r in runs]),
                mean_sd([r["val_bpb"] for r in runs]),
                delta_text(row["delta_vs_baseline"].get("vanilla")),
                f"{first['flops_per_token'] / 1e6:.2f}M",
                f"{first['params'] / 1e6:.3f}M",
                f"{statistics.mean(r['steps'] for r in runs):.0f}",
                f"{statistics.mean(r['tokens_per_s'] for r in runs) / 1e3:.1f}k",
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
    note = f"\n\n**Not measured yet** (`--stage confirm` adds them): {'; '.join(missing)}." if missing else ""
    return _doc.markdown_table(header, out, "llrrrrrrrr") + note


def commands(scale: int) -> str:
    return "\n".join(f"    {shown(confirm_cmd(space, scale))}" for space in SPACES)


def baseline_section() -> str:
    files = tuple(f for _, f, _ in BASELINES)
    return (
        "## Fixed architectures at equal compute\n\n"
        f"Every row trained for {BUDGET:g} FLOPs (forward + backward, analytic) on the default corpus, "
        f"batch 16 x 128 bytes, lr 3e-3 with warm-up and cosine decay, {THREADS} CPU thread(s) per run, "
        "seeds "
        f"{', '.join(map(str, SEEDS))}. A cheaper architecture takes more steps for the same "
        "FLOPs. Validation loss is nats per byte on the held-out plays; bits/byte = loss / ln 2. "
        "The Δ column subtracts vanilla's loss at the same seed (same initialisation stream and batch "
        "order), so it is less noisy than comparing means. Each search's winner (`--top 1`) and its fixed "
        "architectures are retrained by\n\n"
        f"{commands(1)}\n\n"
        "(`--stage confirm` runs them, and the 4x check below; the runs are the studies `primer-confirm` and "
        "`synthesizer-confirm` beside the searches, which `--stage report` turns into this table; vanilla "
        "is in both, and each Δ pairs runs of one study).\n\n" + results_table(files, 1)
    )


def longer_section() -> str:
    files = tuple(f for space in SPACES for f in (*CONFIRM[space][1], f"found_{space}.yaml"))
    return (
        f"## The same at four times the compute ({LONGER_BUDGET:g} FLOPs, seeds "
        f"{', '.join(map(str, LONGER_SEEDS))})\n\n"
        "Small models trained briefly favour built-in locality; does the order hold when every model "
        f"trains four times longer? Same recipe, {LONGER_BUDGET:g} FLOPs:\n\n"
        f"{commands(LONGER_SCALE)}\n\n" + results_table(files, LONGER_SCALE)
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


def annotate_found(space: str) -> None:
    """Head ``examples/archs/found_<space>.yaml`` with where it came from and its confirmed losses."""
    path = ARCHS / f"found_{space}.yaml"
    if not path.exists():
        return
    base, longer = confirmed(1), confirmed(LONGER_SCALE)
    mine, van = base.get(arch_id(path.name)), base.get(arch_id("vanilla.yaml"))
    if mine is None:
        return
    row, runs = mine
    body = "".join(line for line in path.read_text().splitlines(keepends=True) if not line.startswith("#"))
    head = [
        f"# The lowest-loss trial of the `{space}` search in docs/RESULTS.md (search_spaces/{space}.yaml,",
        f"# {TRIALS} trials of {BUDGET:g} training FLOPs each); `metrics` below is that trial's run.",
        f"# Confirmed for the same FLOPs on {THREADS} thread(s), seeds {', '.join(map(str, row['seeds']))}: "
        f"val loss {mean_sd([r['val_loss'] for r in runs])}, "
        f"bits/byte {mean_sd([r['val_bpb'] for r in runs])}",
    ]
    if van:
        head.append(f"# (vanilla.yaml at the same seeds: {mean_sd([r['val_loss'] for r in van[1]])}).")
    four, van4 = longer.get(arch_id(path.name)), longer.get(arch_id("vanilla.yaml"))
    if four and van4:
        head.append(
            f"# At {LONGER_BUDGET:g} FLOPs, seeds {', '.join(map(str, four[0]['seeds']))}: "
            f"{mean_sd([r['val_loss'] for r in four[1]])} "
            f"(vanilla.yaml: {mean_sd([r['val_loss'] for r in van4[1]])})."
        )
    head.append(f"#   {shown(confirm_cmd(space))}")
    path.write_text("\n".join(head) + "\n" + body)


def old_runs(path: Path, budget: float, threads: int) -> dict[tuple[str, int], float]:
    """(arch id, seed) -> val loss of the ``train`` runs on ``threads`` threads recorded in ``path``."""
    out = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        r = json.loads(line) if line.strip() else None
        if r and r["budget"] == {"flops": budget} and r.get("threads") == threads:
            out[(r["arch_id"], r["seed"])] = r["val_loss"]
    return out


def paired_text(mine: dict[int, float], ref: dict[int, float]) -> str:
    """``mine - ref`` seed by seed: mean [min, max]; lower in k/n (``-`` when no seed is in both)."""
    d = [mine[s] - ref[s] for s in sorted(mine) if s in ref]
    if not d:
        return "-"
    return (
        f"{statistics.mean(d):+.4f} [{min(d):+.4f}, {max(d):+.4f}]; lower in {sum(x < 0 for x in d)}/{len(d)}"
    )


def small(x: float) -> str:
    """``x`` to 4 decimals, or its order of magnitude where 4 decimals would say 0."""
    return f"{x:+.4f}" if abs(x) >= 5e-5 else f"{x:+.0e}"


def rerun_table(scale: int) -> str:
    """Every row of the first version (``train``, 2 threads, AMD EPYC) beside confirm's runs of it."""
    budget = BUDGET * scale
    old, new = old_runs(OLD_RESULTS, budget, threads=2), confirmed(scale)
    van = arch_id("vanilla.yaml")
    van_old = {s: v for (a, s), v in old.items() if a == van}
    rows = []
    for label, file, _ in BASELINES:
        before = {s: v for (a, s), v in old.items() if a == arch_id(file)}
        if not before:
            continue
        now = {r["seed"]: r["val_loss"] for r in new.get(arch_id(file), (None, []))[1]}
        delta = new[arch_id(file)][0]["delta_vs_baseline"].get("vanilla") if now else None
        rows.append([
            f"{label} (`{file}`)", ", ".join(map(str, sorted(before))), mean_sd(list(before.values())),
            "-" if file == "vanilla.yaml" else paired_text(before, van_old),
            ", ".join(map(str, sorted(now))) or "not yet", mean_sd(list(now.values())), delta_text(delta),
            ", ".join(small(now[k] - before[k]) for k in sorted(now) if k in before) or "-",
        ])  # fmt: skip
    header = [f"{budget:g} FLOPs", "seeds", "before: `train` (mean ± sd)", "Δ vs vanilla before",
              "seeds", "now: `confirm` (mean ± sd)", "Δ vs vanilla now",
              "now - before, seed by seed"]  # fmt: skip
    return _doc.markdown_table(header, rows, "llrrlrrr")


def same_machine_check() -> str:
    """Does confirm reproduce itself (vanilla in both studies) and `train` (twins from the same machine)?"""
    van = arch_id("vanilla.yaml")
    both = [
        {(r["scale"], r["seed"]): r["val_loss"] for r in confirm_runs(sp)[1] if r["arch_id"] == van}
        for sp in SPACES
    ]
    common = sorted(set(both[0]) & set(both[1]))
    twins = old_runs(SAME_MACHINE, BUDGET, THREADS)
    pairs = [
        (twins[(a, r["seed"])], r["val_loss"])
        for a, (_, runs) in confirmed(1).items()
        for r in runs
        if (a, r["seed"]) in twins
    ]

    def same(diffs: list[float]) -> str:
        worst = max(diffs)
        return "identical" if worst == 0 else f"within {worst:.2g} nats"

    out = []
    if common:
        diffs = [abs(both[0][k] - both[1][k]) for k in common]
        out.append(
            f"Vanilla is trained by both confirmations: where both have a run of the same scale and seed "
            f"({len(common)} pair(s)), the losses are {same(diffs)}."
        )
    if pairs:
        out.append(
            f"{len(pairs)} confirm run(s) have a `train --threads {THREADS}` twin of the same file and "
            f"seed made on the same machine (`{rel(SAME_MACHINE)}`): the losses are "
            f"{same([abs(n - o) for o, n in pairs])}."
        )
    return " ".join(out)


def rerun_section() -> str:
    """The reproducibility checks, then every first-version row beside confirm's runs of it."""
    return f"{same_machine_check()}\n\n" + rerun_table(1) + "\n\n" + rerun_table(LONGER_SCALE)


def stage_report() -> None:
    for space in SPACES:
        annotate_found(space)
    _doc.write_section("baselines", baseline_section(), DOC)
    _doc.write_section("longer", longer_section(), DOC)
    _doc.write_section("rerun", rerun_section(), DOC)
    for space in SPACES:
        _doc.write_section(f"search-{space}", search_section(space), DOC)


STAGES = {
    "search": stage_search,
    "export": stage_export,
    "confirm": stage_confirm,
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
