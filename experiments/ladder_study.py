#!/usr/bin/env python
"""The experiment behind docs/RESULTS.md's ladder section: does a ladder predict the larger size?

The Transformer++ study's winner (trial 11) and eight baselines at its shape (vanilla, Primer-EZ,
Transformer++, Transformer++ with Primer's changes, the Hyena and GLA hybrids, the dense and the
fixed random Synthesizer), each at four sizes (0.125, 0.35, 1 and 2.4 times its parameters: d_model
64 to 160, 2 to 5 layers), two seeds, one wsd run per size and seed with rungs at a quarter and
half of it, on the default corpus.  Nothing but ``run_search.py`` commands for the runs, resumable:

1. ``ladder``: ``ladder --study modern`` in ``experiments/runs/modern/study.db`` (the study
   ``modern-ladder``); a stopped run continues where it stopped.
2. ``report``: ``ladder --no-train --check`` (fit without the largest size, predict it) as the
   ladder's own report, and the variants (both fit forms, with and without the rungs' points), and
   the rankings by the cheap predictors at the held-out point: the search-scale loss (the confirmed
   1x loss, seed 0, 5e12 FLOPs, from the probe experiment's confirm studies), the largest fitted
   size's loss, size 1's loss and its first rung (a hurdle), the probe score and the parameter count,
   pasted into RESULTS.md's generated section.

Run::

    .venv/bin/python experiments/ladder_study.py                 # both stages
    .venv/bin/python experiments/ladder_study.py --stage report
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "experiments"))

import _doc  # noqa: E402
from primer_synthesizer import DOC, RUNS, THREADS, cli, pasted, run, shown  # noqa: E402

from nas.confirm.stats import kendall, spearman  # noqa: E402

STUDY = "modern"
BASELINES = (
    "examples/archs/vanilla.yaml",
    "examples/archs/primer_ez.yaml",
    "examples/archs/transformer_pp.yaml",
    "examples/archs/transformer_pp_primer.yaml",
    "experiments/archs/probes/hybrid_hyena.yaml",
    "experiments/archs/probes/hybrid_gla.yaml",
    "examples/archs/synth_fixed_random.yaml",
    "examples/archs/synth_dense.yaml",
)
FLAGS = "--top 1 --sizes 0.125,0.35,1,2.4 --seeds 2 --scale 0.5 --tokens same --rungs 0.25,0.5"
REPORT = "docs/img/ladder_modern.md"
#: the ladder's family names -> the probe experiment's names (docs/RESULTS.md's probe table)
PROBE_NAME = {"trial 11": "modern winner (trial 11)"}


def ladder_cmd(*extra: str) -> list[str]:
    baselines = "".join(f" --baseline {f}" for f in BASELINES)
    return cli(
        *f"ladder --study {STUDY} --runs-dir {RUNS}{baselines} {FLAGS}".split(),
        # where runs train: with --no-train (a report) these flags would change nothing, and are refused
        *(
            []
            if "--no-train" in extra
            else f"--workers 2 --cpus-per-trial {THREADS} --no-tensorboard".split()
        ),
        *extra,
    )


def stage_ladder(args: argparse.Namespace) -> None:
    run(ladder_cmd())


def variants(storage: str) -> list[dict[str, Any]]:
    """The held-out prediction under every variant tried: both fit forms, with the rungs' points and
    with the runs' end points only."""
    import optuna

    from nas.confirm.plan import Entry
    from nas.confirm.runner import ARCHS
    from nas.ladder.fit import Point, fit
    from nas.ladder.plan import LADDER, LadderPlan
    from nas.ladder.report import run_rows

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=f"{STUDY}-ladder", storage=storage)
    plan = LadderPlan.from_dict(study.user_attrs[LADDER])
    entries = {e.index: e for e in (Entry.from_dict(d) for d in study.user_attrs[ARCHS])}
    rows = run_rows(study, plan, entries)
    held = plan.sizes()[-1]
    out = []
    for form in ("chinchilla", "shared"):
        for which in ("rungs and ends", "ends only"):
            predicted, measured = {}, {}
            for name, _, _ in plan.families:
                pts = [
                    Point(float(r["params"]), float(p["tokens"]), float(p["flops"]), float(p["val_loss"]),
                          int(r["trial"]))
                    for r in rows if r["family"] == name and r["size"] != held and r["points"]
                    for p in r["points"] if which == "rungs and ends" or p["rung"] == 1.0
                ]  # fmt: skip
                ends = [r for r in rows if r["family"] == name and r["size"] == held and r["points"]]
                if len({p.params for p in pts}) < 3 or not ends:
                    continue
                f, _ = fit(pts, form)
                end = ends[0]["points"][-1]
                predicted[name] = float(f.loss(float(ends[0]["params"]), float(end["tokens"])))
                measured[name] = statistics.mean(r["points"][-1]["val_loss"] for r in ends)
            names = sorted(predicted)
            x, y = [predicted[n] for n in names], [measured[n] for n in names]
            out.append({
                "form": form,
                "points": which,
                "n": len(names),
                "mae": statistics.mean(abs(a - b) for a, b in zip(x, y, strict=True)),
                "spearman": spearman(x, y),
                "kendall": kendall(x, y),
            })  # fmt: skip
    return out


def by_size(out: dict[str, Any]) -> tuple[str, list[str]]:
    """The mean end loss of each architecture at each size (a table), and the pairs whose order reversed
    between consecutive sizes and between the smallest and the largest."""
    sizes = out["sizes"]
    loss: dict[str, dict[float, list[float]]] = {}
    for r in out["runs"]["rows"]:
        if r["points"]:
            loss.setdefault(r["family"], {}).setdefault(r["size"], []).append(r["points"][-1]["val_loss"])
    mean = {f: {s: statistics.mean(v) for s, v in by.items()} for f, by in loss.items()}
    names = sorted(mean, key=lambda f: mean[f].get(sizes[-1], float("inf")))
    rows = [[f, *(f"{mean[f][s]:.4f}" if s in mean[f] else "-" for s in sizes)] for f in names]
    table = _doc.markdown_table(["architecture", *(f"size {s:g}" for s in sizes)], rows)
    notes = []
    for a, b in [(sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1)] + [(sizes[0], sizes[-1])]:
        flips = [
            f"{x} / {y}"
            for i, x in enumerate(names)
            for y in names[i + 1 :]
            if all(s in mean[x] and s in mean[y] for s in (a, b))
            and (mean[x][a] < mean[y][a]) != (mean[x][b] < mean[y][b])
        ]
        common = [f for f in names if a in mean[f] and b in mean[f]]
        tau = kendall([mean[f][a] for f in common], [mean[f][b] for f in common])
        notes.append(f"size {a:g} -> {b:g}: Kendall {tau:+.3f}; {len(flips)} pair(s) reversed"
                     + (f" ({', '.join(flips)})" if flips else ""))  # fmt: skip
    return table, notes


def cheap_predictors(check: dict[str, Any]) -> list[tuple[str, dict[str, float]]]:
    """The search-scale (confirmed 1x) loss and the probe score of each held-out architecture, from the
    probe experiment (a higher score predicts a lower loss, so it is negated)."""
    import probe_study

    truth = probe_study.confirmed()
    probes = {r["name"]: r for r in probe_study.probed() if r["probe_steps"] == 250}
    search_scale, probe = {}, {}
    for r in check["rows"]:
        name = PROBE_NAME.get(r["family"], r["family"])
        if 0 in truth.get(name, {}).get(1.0, {}):
            search_scale[r["family"]] = truth[name][1.0][0]
        if name in probes:
            probe[r["family"]] = -probes[name]["probe_score"]
    return [("search-scale loss (confirmed 1x, 5e12 FLOPs, seed 0)", search_scale),
            ("probe score (six tasks, 250 steps per task)", probe)]  # fmt: skip


def stage_report(args: argparse.Namespace) -> None:
    storage = f"sqlite:///{RUNS}/{STUDY}/study.db"
    out = json.loads(run(ladder_cmd("--no-train", "--check", "--json")))
    run(ladder_cmd("--no-train", "--check", "--report", REPORT, "--force"))
    check = out["check"]
    measured = {r["family"]: r["measured"] for r in check["rows"]}
    names = sorted(measured)
    ranks = [(k, v) for k, v in check["rank_correlation"].items()]
    for label, pred in cheap_predictors(check):
        common = [n for n in names if n in pred]
        x, y = [pred[n] for n in common], [measured[n] for n in common]
        ranks.append(
            (label, {"spearman": spearman(x, y), "kendall": kendall(x, y)} if len(common) > 2 else None)
        )
    rank_rows = [
        [k, "-" if v is None else f"{v['spearman']:+.3f}", "-" if v is None else f"{v['kendall']:+.3f}"]
        for k, v in ranks
    ]
    var_rows = [
        [v["form"], v["points"], v["n"], f"{v['mae']:.4f}", f"{v['spearman']:+.3f}", f"{v['kendall']:+.3f}"]
        for v in variants(storage)
    ]
    size_table, reversals = by_size(out)
    body = "\n".join([
        "    " + shown(ladder_cmd()),
        "    " + shown(ladder_cmd("--no-train", "--check", "--report", REPORT)),
        "",
        _doc.provenance(THREADS),
        "",
        "#### Ranking the held-out size: Spearman and Kendall against the measured loss",
        "",
        "Positive means the predictor ranks the architectures as their measured loss at the held-out "
        "size does (the parameter count: more parameters predicting a lower loss).",
        "",
        _doc.markdown_table(["predictor", "Spearman", "Kendall"], rank_rows),
        "",
        "#### The end loss at each size (mean over seeds), and the rankings that reversed",
        "",
        size_table,
        "",
        *(f"- {line}" for line in reversals),
        "",
        "#### Every variant tried (the held-out size's end point)",
        "",
        _doc.markdown_table(["fit form", "points fitted", "n", "mean abs. error", "Spearman", "Kendall"],
                            var_rows),
        "",
        pasted(ROOT / REPORT).replace("](ladder_", "](img/ladder_"),
    ])  # fmt: skip
    _doc.write_section("ladder-modern", body, DOC)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stage", choices=("ladder", "report"), default=None)
    args = p.parse_args()
    for stage in ("ladder", "report"):
        if args.stage in (None, stage):
            {"ladder": stage_ladder, "report": stage_report}[stage](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
