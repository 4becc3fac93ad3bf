#!/usr/bin/env python
"""How well does loss at a fraction of the budget rank final loss?  Spearman's rho per fraction.

Hurdles stop a candidate on its loss at a fraction of the budget; they pay
only if that early loss ranks candidates as the final loss does.  This reads
the trials that already exist, no training: the COMPLETE, non-duplicate trials
of the committed studies ``experiments/runs/*/study.db`` (their
``intermediate`` user attribute holds the validation loss at each hurdle
fraction, their value the loss at the full budget), and the reference searches
of ``benchmarks/hurdles.py`` (``benchmarks/data/hurdle_searches.json``: every
candidate trained to the full budget, its loss recorded at six fractions).  For each fraction it
gives Spearman's rho with the final loss and a 95% bootstrap interval, and how
often a median hurdle at that fraction would have stopped one of the best
quarter of the candidates.  Run::

    .venv/bin/python benchmarks/hurdle_ranks.py [--no-write]

It prints the table and replaces the ``hurdle_ranks`` section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _doc  # noqa: E402
from _stats import spearman, spearman_ci  # noqa: E402

SECTION = "hurdle_ranks"
RUNS = ROOT / "experiments" / "runs"
SEARCHES = ROOT / "benchmarks" / "data" / "hurdle_searches.json"


def curves() -> list[tuple[str, list[tuple[dict[str, float], float]]]]:
    """(study, [(loss by fraction key, final loss)]) for each committed study."""
    import optuna

    from nas.confirm import CONFIRM_OF

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = []
    for db in sorted(RUNS.glob("*/study.db")):
        url = f"sqlite:///{db}"
        for summary in optuna.get_all_study_summaries(url):
            study = optuna.load_study(study_name=summary.study_name, storage=url)
            if CONFIRM_OF in study.user_attrs:  # a confirmation (`confirm`) re-trains, it does not search
                continue
            rows = [
                (dict(t.user_attrs["intermediate"]), float(t.values[0]))
                for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                if t.user_attrs.get("intermediate") and "duplicate_of" not in t.user_attrs
            ]
            out.append((f"`{db.relative_to(ROOT)}`", rows))
    stored = json.loads(SEARCHES.read_text()) if SEARCHES.exists() else {}
    for key in sorted(k for k in stored if k.startswith("reference/")):
        rows = [
            (t["intermediate"], t["loss"])
            for t in stored[key]["trials"]
            if t["intermediate"] and t["loss"] is not None
        ]
        out.append((f"`hurdles.py` reference, seed {key.split('/')[1]}", rows))
    return out


def stopped_of_best(early: list[float], final: list[float]) -> str:
    """Of the best quarter by final loss, how many a median hurdle (above the median early loss) stops."""
    n = len(final)
    best = sorted(range(n), key=lambda i: final[i])[: max(1, n // 4)]
    median = float(np.median(early))
    return f"{sum(early[i] > median for i in best)} of {len(best)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    rows = []
    for name, trials in curves():
        keys = sorted({k for inter, _ in trials for k in inter}, key=float)
        for key in keys:
            pairs = [(inter[key], final) for inter, final in trials if key in inter]
            early, final = [p[0] for p in pairs], [p[1] for p in pairs]
            lo, hi = spearman_ci(early, final)
            rows.append(
                [
                    name,
                    key,
                    len(pairs),
                    f"{spearman(early, final):+.2f}",
                    f"[{lo:+.2f}, {hi:+.2f}]",
                    stopped_of_best(early, final),
                ]
            )
    for row in rows:
        print(row, file=sys.stderr)
    md = _doc.markdown_table(
        [
            "study",
            "fraction of the budget",
            "trials",
            "Spearman rho with final loss",
            "95% bootstrap",
            "best quarter a median hurdle would stop",
        ],
        rows,
    )
    print(md)
    body = (
        "## Hurdles: does early loss rank final loss? (`benchmarks/hurdle_ranks.py`)\n\n"
        f"{_doc.provenance()}\n\n"
        "From trials that exist, no training. The committed studies in `experiments/runs/` (real CPU "
        "training on the default corpus; their hurdles recorded the validation loss at 0.25 and 0.5 of the "
        "budget): only trials that passed every hurdle reach the full budget, so these samples are the "
        "survivors, truncated from above at each hurdle, which lowers rho against what all candidates "
        "would show. The reference searches of `benchmarks/hurdles.py` (`benchmarks/spaces/small.yaml`, "
        "24 trials per seed, every candidate trained to the full budget with its loss recorded at six "
        "fractions): no truncation. Spearman's rho between the loss at a fraction and the loss at the full "
        "budget over the COMPLETE, non-duplicate trials, with a 95% bootstrap interval, and of the best "
        "quarter of those trials by final loss, how many a median hurdle at that fraction would have "
        "stopped.\n\n"
        f"{md}\n\n"
        "Reading: over every candidate of the six reference searches, loss at 0.05 of the budget ranks "
        "poorly and unevenly (rho +0.1 to +0.65; most candidates still sit on the same early plateau near "
        "3.4 nats, and which of them leaves it first is close to chance), from 0.1 on it ranks moderately "
        "to well (+0.4 to +0.9 at 0.1, +0.75 to +0.9 at 0.3, at least +0.88 at 0.5), and a median hurdle "
        "at 0.1 stops at most one of the best quarter. The earliest useful hurdle is therefore 0.1: a "
        "stopped candidate costs a tenth of a training, a passed one a full training. What hurdles at 0.1 "
        "and 0.3 buy under a search compute budget is in the `hurdles` section.\n"
    )
    if not args.no_write:
        _doc.write_section(SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
