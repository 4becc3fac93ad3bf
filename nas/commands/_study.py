"""Flags and loading shared by the read-only commands (best, show, plot, export)."""

from __future__ import annotations

import argparse
import sys

import optuna

from nas.commands.common import non_empty
from nas.program import prog_name
from nas.search.reports.lookup import open_existing_study


def add_study_args(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """--study NAME, --storage URL, --runs-dir DIR (storage defaults to DIR/NAME/study.db);
    ``required=False``: the command checks for --study itself (export's --checkpoint needs none)."""
    parser.add_argument("--study", required=required, help="study name")
    parser.add_argument(
        "--storage",
        type=non_empty,
        default=None,
        help="Optuna storage URL (default: sqlite:///RUNS_DIR/STUDY/study.db)",
    )
    parser.add_argument(
        "--runs-dir", type=non_empty, default="runs", help="where searches keep their studies (default: runs)"
    )


def open_study(args: argparse.Namespace) -> tuple[optuna.Study, str]:
    """The existing study the flags name, and its storage URL; creates nothing.

    A study that is not a search's is shown, with one line on stderr saying what it is, so
    that its rows are not read as a search's candidates (stdout stays for the data, --json).
    """
    study, url = open_existing_study(args.study, args.storage, args.runs_dir)
    note = study_kind_note(study)
    if note and args.command != "export":  # export refuses what it cannot export on its own terms
        print(f"note: {note}", file=sys.stderr)
    return study, url


def study_kind_note(study: optuna.Study) -> str | None:
    """What a study that is not a search's is (None: a search's)."""
    from nas.search.storage.records import CONFIRM_OF, SETTINGS, derived_kind

    attrs = study.user_attrs
    kind = derived_kind(study)
    if kind is not None and kind[1] == "ladder":
        return (
            f"study {study.study_name!r} is the ladder of study {attrs[CONFIRM_OF]!r}: each trial is one "
            f"ladder run (an architecture at a size and seed); `{prog_name()} ladder --study "
            f"{attrs[CONFIRM_OF]} --no-train` summarises them"
        )
    if kind is not None:
        return (
            f"study {study.study_name!r} is the confirmation of study {attrs[CONFIRM_OF]!r}: each trial is "
            f"one confirm run (an architecture at a scale and seed); `{prog_name()} confirm --study "
            f"{attrs[CONFIRM_OF]}` summarises them"
        )
    if SETTINGS not in attrs:
        return (
            f"study {study.study_name!r} was not made by this tool (it has no settings record): its "
            "trials are shown as they are, without the search's architecture records"
        )
    return None
