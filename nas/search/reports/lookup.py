"""Finding a study and its trials in storage, for the read-only commands (best, show, plot, export).

Nothing here creates anything: a missing study is a UserError naming what exists.
"""

from __future__ import annotations

import os
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial

from nas.errors import UserError
from nas.program import prog_name
from nas.search.storage.records import load_study, state_name
from nas.search.storage.urls import default_storage, open_storage


def list_studies(runs_dir: str | os.PathLike[str]) -> list[str]:
    """Names of the studies with a default-storage database under ``runs_dir``."""
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/study.db") if p.is_file())


def open_existing_study(
    name: str, storage: str | None = None, runs_dir: str | os.PathLike[str] = "runs"
) -> tuple[optuna.Study, str]:
    """Load a study that must already exist, creating nothing (no directory, no database).

    ``storage`` defaults to ``sqlite:///<runs_dir>/<name>/study.db``.  Opening a
    missing SQLite file would create an empty database, so the file is checked first.
    Returns the study and the storage URL it came from.
    """
    url = storage or default_storage(runs_dir, name)
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") :])
        if not path.is_file():
            if path.exists():  # a directory or FIFO was reported as no such file
                what = "a directory" if path.is_dir() else "not a regular file"
                raise UserError(f"--storage {url!r}: {path} is {what}; valid: an Optuna study's SQLite file")
            if storage is None:
                found = list_studies(runs_dir)
                where = (
                    f"studies in {runs_dir}/: {', '.join(found)}"
                    if found
                    else (f"{runs_dir}/ holds no studies (start one with: {prog_name()} search --study NAME)")
                )
                raise UserError(f"--study {name!r} not found: no {path}; {where}")
            raise UserError(f"--storage {url!r}: no such database file {path}")
    return load_study(open_storage(url, read_only=True), name), url


def get_trial(study: optuna.Study, number: int) -> FrozenTrial:
    """Trial ``number`` of ``study``, or a UserError naming the valid range."""
    trials = study.get_trials(deepcopy=False)
    for t in trials:
        if t.number == number:
            return t
    have = f"trials 0..{trials[-1].number}" if trials else "no trials yet"
    raise UserError(f"--trial {number}: study {study.study_name!r} has {have}")


def state_counts(study: optuna.Study) -> dict[str, int]:
    """How many trials the study has in each state, by ``state_name``."""
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        name = state_name(t)
        counts[name] = counts.get(name, 0) + 1
    return counts
