#!/usr/bin/env python
"""The experiment behind docs/RESULTS.md's "A ladder measured 4x beyond its fit".

Five architectures (the Transformer++ study's winner, Transformer++, vanilla, the GLA and Hyena
hybrids) at the winner's shape narrowed to d_model 64 with heads of 16 (``experiments/spaces/
transfer.yaml``: its smallest member, d_model 32 x 4 layers, is then a quarter of it), trained under
``completep`` at sizes 0.125 to 16 (d_model 32 to 160, 1 to 10 layers; the winner from 0.25, where its
four distinct layers and grouped keys stop it shrinking) on the same tokens per non-embedding
parameter (about one: size 1 on 3.2e11 FLOPs, batch 8 x 128), two seeds at the fitted sizes and one
at the two largest, which the rollout check holds out (4x to 5x beyond the largest fitted size in
parameters).  Beside it, the same ladder under ``standard`` for the winner, vanilla and Transformer++
(its own search study, ``transfer_sp``: a ladder study never mixes two parametrizations).  Nothing
but ``run_search.py`` commands for the runs, resumable: a stopped stage continues where it stopped.

1. ``search``: record the one point of each search study (one trial each, seconds).
2. ``ladder``: the completep ladder (``transfer-ladder`` in ``experiments/runs/transfer/study.db``).
3. ``standard``: the standard ladder (``transfer_sp-ladder``).
4. ``report``: ``ladder --no-train --check rollout`` of both, with a shared E and without, pasted
   into RESULTS.md's generated section with the ladder's own report.

Run::

    .venv/bin/python experiments/ladder_transfer.py                  # every stage
    .venv/bin/python experiments/ladder_transfer.py --stage report
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

SPACE = "experiments/spaces/transfer.yaml"
#: search study -> (parametrization, baselines)
STUDIES = {
    "transfer": ("completep", ("examples/archs/vanilla.yaml", "examples/archs/transformer_pp.yaml",
                               "experiments/archs/probes/hybrid_gla.yaml",
                               "experiments/archs/probes/hybrid_hyena.yaml")),
    "transfer_sp": ("standard", ("examples/archs/vanilla.yaml", "examples/archs/transformer_pp.yaml")),
}  # fmt: skip
SIZES = "0.125,0.25,0.5,1,2,4,8,16"
SEEDS = "2,2,2,2,2,2,1,1"  # one seed at the two held-out sizes, the expensive ones
FLAGS = f"--top 1 --sizes {SIZES} --seeds {SEEDS} --tokens per-param --rungs 0.25,0.5"
REPORT = "docs/img/ladder_transfer.md"
SHARES = ("E", "none", "E,exponents")


def search_cmd(study: str) -> list[str]:
    param = STUDIES[study][0]
    return cli(
        *f"search --space {SPACE} --study {study} --runs-dir {RUNS} --recipe.parametrization {param} "
        f"--workers 1 --cpus-per-trial {THREADS} --no-tensorboard".split()
    )


def ladder_cmd(study: str, *extra: str) -> list[str]:
    baselines = "".join(f" --baseline {f}" for f in STUDIES[study][1])
    return cli(
        *f"ladder --study {study} --runs-dir {RUNS}{baselines} {FLAGS}".split(),
        # where runs train: with --no-train (a report) these flags would change nothing, and are refused
        *(
            []
            if "--no-train" in extra
            else f"--workers 2 --cpus-per-trial {THREADS} --no-tensorboard".split()
        ),
        *extra,
    )


def stage_search() -> None:
    import optuna

    for study in STUDIES:
        url = f"sqlite:///{ROOT / RUNS / study / 'study.db'}"
        names = (
            {s.study_name for s in optuna.get_all_study_summaries(url)}
            if (ROOT / RUNS / study).exists()
            else set()
        )
        if study not in names:  # one trial: a search of one point ends at once when it has it
            run(search_cmd(study))


def laddered(study: str) -> bool:
    """Whether the ladder of ``study`` has begun (a stage not yet run is left out of the report)."""
    import optuna

    url = f"sqlite:///{ROOT / RUNS / study / 'study.db'}"
    return f"{study}-ladder" in {s.study_name for s in optuna.get_all_study_summaries(url)}


def checked(study: str, share: str) -> dict[str, Any]:
    return json.loads(run(ladder_cmd(study, "--no-train", "--check", "rollout", "--share", share, "--json")))


def _f(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def summary_rows(outs: dict[tuple[str, str], dict[str, Any]]) -> list[list[str]]:
    """One row per ladder and share: the rollout over every fold, and its last fold (the largest fit)."""
    rows = []
    for (study, share), out in outs.items():
        c = out["check"]
        if not c:
            continue
        last_k = max(len(f["fitted_sizes"]) for f in c["folds"])
        last = [f for f in c["folds"] if len(f["fitted_sizes"]) == last_k]
        inside = sum(f["coverage"]["inside"] for f in last)
        points = sum(f["coverage"]["points"] for f in last)
        sp = {k: [f["rank_correlation"][k]["spearman"] for f in last if f["rank_correlation"][k]]
              for k in ("fit", "largest fitted size")}  # fmt: skip
        sp = {k: statistics.mean(v) if v else None for k, v in sp.items()}
        rows.append([
            STUDIES[study][0], share, len(out["families"]), len(c["folds"]),
            _f(c["mean_abs_error"]), _f(c["mean_seed_spread"]),
            f"{c['coverage']['inside']}/{c['coverage']['points']}",
            _f(c["mean_spearman"].get("fit"), "+.3f"),
            _f(c["mean_spearman"].get("largest fitted size"), "+.3f"),
            ", ".join(f"{s:g}" for s in last[0]["fitted_sizes"]),
            _f(statistics.mean(abs(r["error"]) for f in last for r in f["rows"])),
            f"{inside}/{points}", _f(sp["fit"], "+.3f"), _f(sp["largest fitted size"], "+.3f"),
            out["verdict"]["status"],
        ])  # fmt: skip
    return rows


def by_size(out: dict[str, Any]) -> str:
    """The mean end loss of each architecture at each size, with its parameters."""
    loss: dict[str, dict[float, list[float]]] = {}
    for r in out["runs"]["rows"]:
        if r["points"]:
            loss.setdefault(r["family"], {}).setdefault(r["size"], []).append(r["points"][-1]["val_loss"])
    sizes = out["sizes"]
    rows = [
        [f, *(f"{statistics.mean(by[s]):.4f}" if s in by else "-" for s in sizes)] for f, by in loss.items()
    ]
    return _doc.markdown_table(["architecture", *(f"size {s:g}" for s in sizes)], rows)


def stage_report() -> None:
    done = [study for study in STUDIES if laddered(study)]
    outs = {(study, share): checked(study, share) for study in done for share in SHARES}
    run(
        ladder_cmd(
            "transfer", "--no-train", "--check", "rollout", "--share", "E", "--report", REPORT, "--force"
        )
    )
    body = "\n".join([
        *("    " + shown(search_cmd(s)) for s in STUDIES),
        *("    " + shown(ladder_cmd(s)) for s in STUDIES),
        *("    " + shown(ladder_cmd(s, "--no-train", "--check", "rollout", "--share", share, "--json"))
          for s in STUDIES for share in SHARES),
        "",
        _doc.provenance(THREADS),
        "",
        "#### Rollout: every fold, and the last one (the largest fit, the two largest sizes held out)",
        "",
        _doc.markdown_table(
            ["parametrization", "share", "archs", "folds", "mean abs. error", "seed spread", "coverage",
             "Spearman: fit", "Spearman: largest fitted", "last fold fits sizes", "its error",
             "its coverage", "its Spearman: fit", "largest fitted", "verdict"],
            summary_rows(outs)),
        "",
        *(line for study in done for line in (
            f"#### The end loss at each size, {STUDIES[study][0]} (mean over seeds)", "",
            by_size(outs[(study, 'E')]), "")),
        pasted(ROOT / REPORT).replace("](ladder_", "](img/ladder_"),
    ])  # fmt: skip
    _doc.write_section("ladder-transfer", body, DOC)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stage", choices=("search", "ladder", "standard", "report"), default=None)
    args = p.parse_args()
    stages = {
        "search": stage_search,
        "ladder": lambda: run(ladder_cmd("transfer")),
        "standard": lambda: run(ladder_cmd("transfer_sp")),
        "report": stage_report,
    }
    for name, stage in stages.items():
        if args.stage in (None, name):
            stage()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
