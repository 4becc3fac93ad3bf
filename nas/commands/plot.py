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
        description="Write pareto.png (validation loss vs FLOPs/token, Pareto front marked; a second panel "
        "vs state bytes under --objective loss+flops+state), "
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
    p.add_argument(
        "--force", action="store_true", help="replace PNG files of those names that this tool did not write"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_writable_dir(args.out, "--out")
    from nas.search.reports.plots import plan_plots, plot_study  # matplotlib only when plotting

    targets = plan_plots(args.out, args.force)  # a user's own pareto.png is kept (nas.files.outputs)
    study, _ = open_study(args)
    from nas.files.outputs import recheck, recorded_inputs
    from nas.search.storage.records import settings_of

    recheck(targets, recorded_inputs(settings_of(study).get("data"), "the study's"))  # never into its corpus
    paths = [str(p) for p in plot_study(study, targets, args.top)]
    print(json.dumps(paths, indent=2) if args.json else "\n".join(paths))
    return 0
