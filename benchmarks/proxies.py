#!/usr/bin/env python
"""Do the proxies rank architectures as training does?  Spearman's rho with measured validation loss.

For every proxy the engine offers (``evaluators.proxies.PROXIES``: parameters,
non-embedding, i.e. decoder, parameters as Archai's Lightweight Transformer
Search uses, forward and training FLOPs per token), the Spearman rank
correlation between the proxy's score and the validation loss measured by
real training, with a 95% bootstrap interval, over:

- the 64 architectures drawn uniformly from ``benchmarks/spaces/small.yaml`` and
  trained for 6e11 FLOPs each (``benchmarks/data/default_space_losses.json``);
- a second, larger space: 40 architectures drawn uniformly from
  ``search_spaces/full.yaml`` (every block, d_model 128-256, 2-8 layers) and
  trained at a small budget, 3e11 FLOPs each
  (``benchmarks/data/full_space_losses.json``, written by ``--measure``:
  about 17 CPU minutes at 2 threads);
- the COMPLETE, non-duplicate trials of the committed studies
  ``experiments/runs/*/study.db`` (full-budget losses; chosen by a search,
  not drawn uniformly).

Without ``--measure`` it trains nothing: it reads measured data only.  Run::

    .venv/bin/python benchmarks/proxies.py [--no-write]
    .venv/bin/python benchmarks/proxies.py --measure   # re-train the full space's draws (slow)

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
from _measure import measure  # noqa: E402
from _stats import spearman, spearman_ci  # noqa: E402

SECTION = "proxies"
TABLE = ROOT / "benchmarks" / "data" / "default_space_losses.json"
#: the second, larger space: uniform draws of search_spaces/full.yaml trained at a small budget (--measure)
FULL_SPACE = ROOT / "search_spaces" / "full.yaml"
FULL_TABLE = ROOT / "benchmarks" / "data" / "full_space_losses.json"
RUNS = ROOT / "experiments" / "runs"


def datasets() -> list[tuple[str, list[dict], int | None]]:
    """(name, [{"arch": dict, "val_loss": float}], seq_len) for each set of measured architectures."""
    import optuna

    from nas.confirm import CONFIRM_OF

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = []
    for path in (TABLE, FULL_TABLE):
        if not path.exists():
            print(f"skipping {path.relative_to(ROOT)}: not measured (run with --measure)", file=sys.stderr)
            continue
        table = json.loads(path.read_text())
        name = f"`{path.relative_to(ROOT)}` (uniform draws)"
        out.append((name, table["archs"], table["recipe"].get("seq_len")))
    for db in sorted(RUNS.glob("*/study.db")):
        url = f"sqlite:///{db}"
        for summary in optuna.get_all_study_summaries(url):
            study = optuna.load_study(study_name=summary.study_name, storage=url)
            if CONFIRM_OF in study.user_attrs:  # a confirmation (`confirm`) re-trains, it does not search
                continue
            rows = [
                {"arch": t.user_attrs["arch"], "val_loss": t.values[0]}
                for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                if "arch" in t.user_attrs and "duplicate_of" not in t.user_attrs
            ]
            seq_len = (study.user_attrs.get("settings") or {}).get("recipe", {}).get("seq_len")
            out.append((f"study `{db.relative_to(ROOT)}` (search-chosen)", rows, seq_len))
    return out


def full_space_note() -> str:
    """What the full space's losses are: budget, range, steps, and the corpus's unigram loss to compare."""
    if not FULL_TABLE.exists():
        return "The full space has not been measured (`proxies.py --measure`)."
    import numpy as np

    from nas.data import load_corpus
    from nas.models import ArchConfig
    from nas.models.cost import compute

    table = json.loads(FULL_TABLE.read_text())
    flops = table["budget"]["flops"]
    losses = np.array([r["val_loss"] for r in table["archs"]])
    archs = [ArchConfig.from_dict(r["arch"]) for r in table["archs"]]
    tokens = table["recipe"]["batch_size"] * archs[0].max_len  # the space fixes max_len; seq_len is it
    steps = [flops / compute(a).train_flops_per_token / tokens for a in archs]
    corpus = load_corpus(None)
    # the loss of predicting every byte by its training-set frequency: what a model learns first
    counts = np.bincount(np.asarray(corpus.train), minlength=256) + 1e-9
    unigram = float(-np.mean(np.log((counts / counts.sum())[np.asarray(corpus.val)])))
    return (
        f"The second space: {len(losses)} architectures drawn uniformly (seed {table['draw_seed']}) from "
        f"`{table['space']}` (every block, d_model 128-256, 2-8 layers, T 128), each trained once for "
        f"{flops:g} FLOPs on the `{table['corpus']}` corpus ({table['threads']} threads, measured "
        f"{table['measured']}): {min(steps):.0f} to {max(steps):.0f} steps of {tokens} tokens. Validation "
        f"losses {losses.min():.2f} to {losses.max():.2f}, median {np.median(losses):.2f}; "
        f"{int((losses < unigram).sum())} of {len(losses)} are below the corpus's unigram loss "
        f"({unigram:.2f}: every byte predicted by its frequency). The budget is what a shared two-core CPU "
        "trains 40 such models on in about 17 CPU minutes; it is small, and ranks how fast a model starts "
        "to learn."
    )


def kept_of_best(scores: list[float], losses: list[float]) -> str:
    """Of the lowest-loss quarter, how many a pre-filter keeping the lowest-scoring half keeps."""
    n = len(losses)
    best = set(sorted(range(n), key=lambda i: losses[i])[: max(1, n // 4)])
    kept = set(sorted(range(n), key=lambda i: scores[i])[: n // 2])
    return f"{len(best & kept)} of {len(best)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--measure",
        action="store_true",
        help=f"train uniform draws of {FULL_SPACE.name}, write {FULL_TABLE.name} (slow)",
    )
    parser.add_argument("--n-archs", type=int, default=40, help="with --measure: architectures (default 40)")
    parser.add_argument(
        "--budget-flops",
        type=float,
        default=3e11,
        help="with --measure: training FLOPs per architecture (default 3e11)",
    )
    parser.add_argument("--threads", type=int, default=2, help="with --measure: torch threads (default 2)")
    args = parser.parse_args()
    if args.measure:
        measure(FULL_SPACE, FULL_TABLE, args.n_archs, args.budget_flops, args.threads, seed=2025)
        return 0
    from evaluators.proxies import PROXIES
    from nas.models import ArchConfig
    from nas.models.cost import compute

    rows = []
    for name, archs, seq_len in datasets():
        costs = [compute(ArchConfig.from_dict(r["arch"]), seq_len) for r in archs]
        losses = [r["val_loss"] for r in archs]
        for proxy, score in PROXIES.items():
            scores = [score(c) for c in costs]
            rho = spearman(scores, losses)
            lo, hi = spearman_ci(scores, losses)
            rows.append(
                [
                    name,
                    len(archs),
                    proxy,
                    f"{rho:+.2f}",
                    f"[{lo:+.2f}, {hi:+.2f}]",
                    kept_of_best(scores, losses),
                ]
            )
            print(rows[-1], file=sys.stderr)
    md = _doc.markdown_table(
        [
            "architectures",
            "n",
            "proxy",
            "Spearman rho with val loss",
            "95% bootstrap",
            "best quarter kept by the smaller half",
        ],
        rows,
    )
    print(md)
    body = (
        "## Proxies against measured loss (`benchmarks/proxies.py`)\n\n"
        f"{_doc.provenance()}\n\n"
        "Spearman rank correlation between each proxy of `evaluators/proxies.py` (the score it minimises) "
        "and validation loss measured by real training at a fixed FLOPs budget, with a 95% bootstrap "
        "interval (2000 resamples of the architectures). *non_embedding_params* is the decoder parameter "
        "count that Archai's Lightweight Transformer Search ranks by. A positive rho means a smaller score "
        "goes with a lower loss (what a pre-filter that keeps the smallest candidates assumes); a negative "
        "one means the opposite. Measured data only (the full space's draws by `proxies.py --measure`).\n\n"
        f"{full_space_note()}\n\n"
        f"{md}\n\n"
        "*best quarter kept by the smaller half*: of the quarter of architectures with the lowest loss, how "
        "many survive a pre-filter that keeps the half with the smallest score.\n\n"
        "Reading: over uniform draws of the default space (d_model 64/96, 2-3 layers) every size proxy "
        "ranks loss with rho about +0.6: at a fixed FLOPs budget a smaller model sees more tokens, and in "
        "this small-budget regime that wins. Over the full space at its small budget the same holds more "
        "strongly (rho about +0.9, the whole best quarter in the smaller half), for the same reason pushed "
        "further: a model there takes at most a few dozen steps and most end above the "
        "unigram loss, so the loss mostly counts the steps that the budget buys, i.e. FLOPs per token. "
        "Both are statements about model size at a small budget, not about the "
        "blocks: in the Primer and Synthesizer studies, where d_model and depth are fixed and only the "
        "blocks vary, the same proxies rank loss at rho -0.5 to +0.1 with intervals spanning zero. "
        "Conclusion: no proxy is offered as a pre-filter. Where it holds, the size signal is what the "
        "second objective (FLOPs per token) already gives the search, and filtering on it would throw "
        "away the larger models before a budget at which they could win; where the search question is "
        "which block to use, the proxies do not rank at all. The proxies remain fast stand-in evaluators "
        "for exercising the search machinery.\n"
    )
    if not args.no_write:
        _doc.write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
