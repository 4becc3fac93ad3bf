"""``show``: one trial layer by layer, or (without ``--trial``) the study and the spec it keeps."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from nas.commands._study import add_study_args, open_study
from nas.commands.common import jsonable, non_negative_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "show",
        help="one trial's architecture layer by layer, or the study's spec",
        description="Show one trial (--trial N): its state, the architecture layer by layer with parameters "
        "and FLOPs per token of each layer, the measured metrics, the loss at each hurdle, and for evolved "
        "or duplicate trials the trial it came from.  Without --trial: the study's trial counts and the "
        "spec it keeps; with --spec, only the spec, as a file `search --space` reads back.",
    )
    add_study_args(p)
    p.add_argument("--trial", type=non_negative_int, default=None, help="trial number")
    p.add_argument("--spec", action="store_true",
                   help="print the study's resolved spec as YAML (search --space accepts it)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    study, url = open_study(args)
    if args.spec or args.trial is None:
        return _show_study(args, study)
    from nas.search.driver.context import tensorboard_dir
    from nas.search.reports.lookup import get_trial
    from nas.search.reports.trial import format_trial, trial_detail

    trial = get_trial(study, args.trial)
    detail = trial_detail(study, trial)
    tb = Path(tensorboard_dir(args.runs_dir, args.study, url)) / f"trial_{args.trial:05d}"
    detail["tensorboard"] = str(tb) if tb.is_dir() else None
    detail["weights"] = _kept_weights(trial, args.runs_dir, args.study, url)
    if args.json:
        print(json.dumps(jsonable(detail), indent=2))
    else:
        print(format_trial(detail))
    return 0


def _kept_weights(trial: Any, runs_dir: str, study: str, url: str) -> dict[str, Any] | None:
    """The trial's kept weights (``resources.keep_weights``) as recorded, with ``kept``: whether the
    file is still there as the search wrote it (it is deleted when the trial drops out of the best K)."""
    from nas.files.outputs import sha256_file
    from nas.search.driver.context import weights_dir
    from nas.search.driver.weights import kept_file, record_of

    rec = record_of(trial)
    if rec is None:
        return None
    path = kept_file(rec, weights_dir(runs_dir, study, url))
    return {**rec, "file": str(path), "kept": path.is_file() and sha256_file(path) == rec["sha256"]}


def _show_study(args: argparse.Namespace, study: Any) -> int:
    from nas.errors import UserError
    from nas.files.yamlsafe import dump_yaml
    from nas.search.reports.lookup import state_counts
    from nas.search.storage.records import SAMPLER, settings_of, stored_spec

    spec = stored_spec(study)
    if args.spec and spec is None:
        raise UserError(f"--study {args.study!r} keeps no spec (made before studies kept one, or not by "
                        "`search`); its recorded settings: `show --study S --json`")  # fmt: skip
    if args.spec:
        text = spec.to_dict()  # type: ignore[union-attr]
        print(
            json.dumps(jsonable(text), indent=2) if args.json else dump_yaml(text),
            end="" if not args.json else "\n",
        )
        return 0
    record = settings_of(study)
    summary = {
        "study": study.study_name,
        "trials": state_counts(study),
        "objectives": len(study.directions),
        "sampler": study.user_attrs.get(SAMPLER),
        "seed": record.get("seed") if spec is None else spec.seed,
        "settings": record,
        "spec": None if spec is None else spec.to_dict(),
    }
    if args.json:
        print(json.dumps(jsonable(summary), indent=2))
        return 0
    counts = ", ".join(f"{v} {k.lower()}" for k, v in sorted(summary["trials"].items())) or "no trials"
    print(f"study {study.study_name!r}: {counts}; sampler {summary['sampler']}, seed {summary['seed']}")
    if spec is not None:
        print(dump_yaml(spec.to_dict()), end="")
    print("(one trial: show --study S --trial N)")
    return 0
