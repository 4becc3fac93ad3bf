"""``show``: one trial layer by layer, with its metrics, hurdles and where it came from."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nas.commands._study import add_study_args, open_study
from nas.commands.common import jsonable, non_negative_int
from nas.search.report import format_trial, get_trial, trial_detail


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "show",
        help="one trial's architecture layer by layer, metrics and history",
        description="Show one trial: its state, the architecture layer by layer with parameters and "
        "FLOPs per token of each layer, the measured metrics, the loss at each hurdle, and for "
        "evolved or duplicate trials the trial it came from.",
    )
    add_study_args(p)
    p.add_argument("--trial", type=non_negative_int, required=True, help="trial number")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    study, _ = open_study(args)
    detail = trial_detail(study, get_trial(study, args.trial))
    if args.storage is None:  # the search's default layout keeps TensorBoard runs beside the study
        tb = Path(args.runs_dir) / args.study / "tb" / f"trial_{args.trial:05d}"
        detail["tensorboard"] = str(tb) if tb.is_dir() else None
    if args.json:
        print(json.dumps(jsonable(detail), indent=2))
    else:
        print(format_trial(detail))
    return 0
