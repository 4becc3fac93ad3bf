"""Flags and loading shared by the read-only commands (best, show, plot, export)."""

from __future__ import annotations

import argparse

import optuna

from nas.commands.common import non_empty
from nas.search.report import open_existing_study


def add_study_args(parser: argparse.ArgumentParser) -> None:
    """--study NAME, --storage URL, --runs-dir DIR (storage defaults to DIR/NAME/study.db)."""
    parser.add_argument("--study", required=True, help="study name")
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
    """The existing study the flags name, and its storage URL; creates nothing."""
    return open_existing_study(args.study, args.storage, args.runs_dir)
