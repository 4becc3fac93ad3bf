"""``plot``: PNG pictures of a study (Pareto front, blocks by layer, optimization history)."""

from __future__ import annotations

import argparse
import json

from nas.commands._study import add_study_args, open_study
from nas.commands.common import positive_int
from nas.validate import check_writable_dir


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plot",
        help="save PNG plots of a study",
        description="Write pareto.png (validation loss vs FLOPs/token, Pareto front marked), "
        "blocks_by_layer.png (attention blocks and activations of the top trials, per layer) and "
        "history.png (loss per trial with the running best) into --out.",
    )
    add_study_args(p)
    p.add_argument("--out", required=True, help="directory for the PNG files (created if needed)")
    p.add_argument(
        "--top",
        type=positive_int,
        default=10,
        help="how many of the lowest-loss trials blocks_by_layer.png counts (default: 10)",
    )
    p.add_argument("--json", action="store_true", help="print the files written as a JSON list")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_writable_dir(args.out, "--out")
    study, _ = open_study(args)
    from nas.plots import plot_study  # matplotlib only when plotting

    paths = [str(p) for p in plot_study(study, args.out, args.top)]
    print(json.dumps(paths, indent=2) if args.json else "\n".join(paths))
    return 0
