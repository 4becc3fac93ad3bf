#!/usr/bin/env python
"""Do the proxies rank architectures as training does?  Spearman's rho with measured validation loss.

For every proxy the engine offers (``evaluators.proxies.PROXIES``: parameters,
non-embedding, i.e. decoder, parameters as Archai's Lightweight Transformer
Search uses, forward and training FLOPs per token), the Spearman rank
correlation between the proxy's score and the validation loss measured by
real training, with a 95% bootstrap interval, over:

- the 64 architectures drawn uniformly from ``search_spaces/default.yaml`` and
  trained for 6e11 FLOPs each (``benchmarks/data/default_space_losses.json``);
- the COMPLETE, non-duplicate trials of the committed studies
  ``experiments/runs/*/study.db`` (full-budget losses; chosen by a search,
  not drawn uniformly).

No training: it reads measured data only.  Run::

    .venv/bin/python benchmarks/proxies.py [--no-write]

It prints the table and replaces the ``proxies`` section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _doc  # noqa: E402
from _stats import spearman, spearman_ci  # noqa: E402

SECTION = "proxies"
TABLE = ROOT / "benchmarks" / "data" / "default_space_losses.json"
RUNS = ROOT / "experiments" / "runs"


def datasets() -> list[tuple[str, list[dict], int | None]]:
    """(name, [{"arch": dict, "val_loss": float}], seq_len) for each set of measured architectures."""
    import optuna

    from nas.confirm import CONFIRM_OF

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    table = json.loads(TABLE.read_text())
    out = [(f"`{TABLE.relative_to(ROOT)}` (uniform draws)", table["archs"], table["recipe"].get("seq_len"))]
    for db in sorted(RUNS.glob("*/study.db")):
        url = f"sqlite:///{db}"
        for summary in optuna.get_all_study_summaries(url):
            study = optuna.load_study(study_name=summary.study_name, storage=url)
            if CONFIRM_OF in study.user_attrs:  # a confirmation (`confirm`) re-trains, it does not search
                continue
            rows = [{"arch": t.user_attrs["arch"], "val_loss": t.values[0]}
                    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                    if "arch" in t.user_attrs and "duplicate_of" not in t.user_attrs]
            seq_len = (study.user_attrs.get("settings") or {}).get("recipe", {}).get("seq_len")
            out.append((f"study `{db.relative_to(ROOT)}` (search-chosen)", rows, seq_len))
    return out


def kept_of_best(scores: list[float], losses: list[float]) -> str:
    """Of the lowest-loss quarter, how many a pre-filter keeping the lowest-scoring half keeps."""
    n = len(losses)
    best = set(sorted(range(n), key=lambda i: losses[i])[: max(1, n // 4)])
    kept = set(sorted(range(n), key=lambda i: scores[i])[: n // 2])
    return f"{len(best & kept)} of {len(best)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from evaluators.proxies import PROXIES
    from nas.compute import compute
    from nas.models import ArchConfig

    rows = []
    for name, archs, seq_len in datasets():
        costs = [compute(ArchConfig.from_dict(r["arch"]), seq_len) for r in archs]
        losses = [r["val_loss"] for r in archs]
        for proxy, score in PROXIES.items():
            scores = [score(c) for c in costs]
            rho = spearman(scores, losses)
            lo, hi = spearman_ci(scores, losses)
            rows.append([name, len(archs), proxy, f"{rho:+.2f}", f"[{lo:+.2f}, {hi:+.2f}]",
                         kept_of_best(scores, losses)])
            print(rows[-1], file=sys.stderr)
    md = _doc.markdown_table(["architectures", "n", "proxy", "Spearman rho with val loss", "95% bootstrap",
                              "best quarter kept by the smaller half"], rows)
    print(md)
    body = (
        "## Proxies against measured loss (`benchmarks/proxies.py`)\n\n"
        f"{_doc.provenance()}\n\n"
        "Spearman rank correlation between each proxy of `evaluators/proxies.py` (the score it minimises) "
        "and validation loss measured by real training at a fixed FLOPs budget, with a 95% bootstrap "
        "interval (2000 resamples of the architectures). *non_embedding_params* is the decoder parameter "
        "count that Archai's Lightweight Transformer Search ranks by. A positive rho means a smaller score "
        "goes with a lower loss (what a pre-filter that keeps the smallest candidates assumes); a negative "
        "one means the opposite. Measured data only; the second, larger space sampled at a small budget "
        "that the issue asks for needs new CPU training and was not run.\n\n"
        f"{md}\n\n"
        "*best quarter kept by the smaller half*: of the quarter of architectures with the lowest loss, how "
        "many survive a pre-filter that keeps the half with the smallest score.\n\n"
        "Reading: over uniform draws of the default space (d_model 64/96, 2-3 layers) every size proxy "
        "ranks loss with rho about +0.6: at a fixed FLOPs budget a smaller model sees more tokens, and in "
        "this small-budget regime that wins. It is a statement about model size, not about the blocks: in "
        "the Primer and Synthesizer studies, where d_model and depth are fixed and only the blocks vary, "
        "the same proxies rank loss at rho -0.5 to +0.1 with intervals spanning zero. Conclusion: no proxy "
        "is offered as a pre-filter. Where it holds, the size signal is what the second objective "
        "(FLOPs per token) already gives the search, and where the search question is which block to "
        "use, the proxies do not rank at all; filtering on them would drop good candidates. The proxies "
        "remain fast stand-in evaluators for exercising the search machinery.\n"
    )
    if not args.no_write:
        _doc.write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
