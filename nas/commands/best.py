"""``best``: the leaderboard (single objective) or the Pareto front (loss and FLOPs/token)."""

from __future__ import annotations

import argparse
import json

from nas.commands._study import add_study_args, open_study
from nas.commands.common import jsonable, positive_int
from nas.search.reports.tables import format_leaderboard, leaderboard


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "best",
        help="leaderboard or Pareto front of a study",
        description="Print the best trials of a study: lowest validation loss first for a "
        "single-objective study, the Pareto front of loss and FLOPs/token for a multi-objective one (and "
        "state bytes under --objective loss+flops+state); "
        "with --by-layer, the blocks the best trials chose per layer.",
    )
    add_study_args(p)
    p.add_argument(
        "--top",
        type=positive_int,
        default=None,
        help="show at most K trials (default: 10 for a leaderboard, the whole Pareto front; "
        "with --by-layer: count the K lowest-loss trials, default 10)",
    )
    p.add_argument(
        "--by-layer",
        action="store_true",
        help="instead of trials: which attention block and activation the top trials chose at each "
        "layer, against how often the sampler drew each at all",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list of rows instead of a table (with --by-layer: an object with the rows)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    study, _ = open_study(args)
    if args.by_layer:
        from nas.search.reports.layers import by_layer, format_by_layer

        table = by_layer(study, args.top or 10)
        print(json.dumps(table, indent=2) if args.json else format_by_layer(table))
        return 0
    top = args.top if args.top is not None else (None if len(study.directions) > 1 else 10)
    rows = leaderboard(study, top)
    if args.json:
        print(json.dumps(jsonable(rows), indent=2))
    else:
        print(format_leaderboard(study, rows))
    return 0
