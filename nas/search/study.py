"""Optuna studies on disk: storage URLs, study settings, resuming after a crash.

The Optuna storage is the single record of a search.  The study's user
attributes hold what every trial must share (space fingerprint, objective,
budget, recipe, data, seed), so a second run continues the same experiment
or is refused with a clear line, never silently mixed.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import urllib.parse
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from nas.data import describe_record, same_data
from nas.errors import UserError

OBJECTIVES = {"loss": ("minimize",), "loss+flops": ("minimize", "minimize")}
REQUEUED = "requeued_as"  # user attr on a trial a dead driver left RUNNING

optuna.logging.set_verbosity(optuna.logging.WARNING)


def default_storage(runs_dir: str | os.PathLike[str], study: str) -> str:
    return f"sqlite:///{Path(runs_dir) / study / 'study.db'}"


def _check_sqlite_path(url: str) -> None:
    path = url[len("sqlite:///") :]
    if not path or path == ":memory:":
        return
    parent = Path(path).parent
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        raise UserError(f"--storage {url!r}: directory {probe} is not writable")


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (None for other databases and in-memory SQLite)."""
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///") :]
    return Path(path) if path and path != ":memory:" else None


def is_optuna_sqlite(path: Path) -> bool:
    """Whether ``path`` is an SQLite file holding Optuna's tables (read-only check)."""
    try:
        uri = f"file:{urllib.parse.quote(str(path))}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=60)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.Error:
        return False
    return {"studies", "trials"} <= tables


def storage_exists(url: str) -> bool:
    """False when ``url`` names an SQLite file that does not exist yet (opening it would create it)."""
    path = sqlite_path(url)
    return path is None or path.exists()


def check_storage_url(url: str) -> None:
    """Refuse a storage URL that cannot work, without opening (or creating) anything.

    An existing SQLite file that is not an Optuna database is refused too:
    opening it would add Optuna's tables to someone else's file.
    """
    if not isinstance(url, str) or "://" not in url:
        raise UserError(
            f"--storage {url!r} is not a database URL; valid: sqlite:///path/study.db, "
            "postgresql://user:password@host/db, mysql://user@host/db"
        )
    if url.startswith("sqlite:///"):
        _check_sqlite_path(url)
        path = sqlite_path(url)
        if path is not None and path.exists():
            if not path.is_file():
                raise UserError(f"--storage {url!r}: {path} is not a file")
            if path.stat().st_size > 0 and not is_optuna_sqlite(path):
                raise UserError(f"--storage {url!r}: {path} is not an Optuna study database")


def open_storage(url: str, create_dirs: bool = True) -> optuna.storages.BaseStorage:
    """An Optuna RDB storage for ``url`` (sqlite:///..., postgresql://...); see ``check_storage_url``."""
    check_storage_url(url)
    if url.startswith("sqlite:///"):
        if create_dirs:
            Path(url[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
        # A reader (dashboard, `best`) may hold the file briefly: wait instead of failing.
        kwargs: dict[str, Any] = {"connect_args": {"timeout": 60}}
    else:
        kwargs = {"pool_pre_ping": True}
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        except Exception as err:  # noqa: BLE001 - SQLAlchemy raises many kinds
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            # Two processes opening a new database at once (a search starting while a dashboard
            # or `best` polls the file) race to create Optuna's tables: the loser tries again.
            if attempt < 4 and any(m in first for m in _CREATION_RACE):
                time.sleep(0.5 * (attempt + 1))
                continue
            raise UserError(
                f"--storage {url!r}: cannot open it ({first}); valid: sqlite:///path/study.db, "
                "postgresql://user:password@host/db"
            ) from None
    raise AssertionError("unreachable")


#: errors that mean another process is creating the same database right now
_CREATION_RACE = ("UNIQUE constraint failed", "already exists", "database is locked", "duplicate key")


def study_exists(storage: optuna.storages.BaseStorage, name: str) -> bool:
    return any(s.study_name == name for s in storage.get_all_studies())


def load_study(storage: optuna.storages.BaseStorage, name: str) -> optuna.Study:
    if not study_exists(storage, name):
        names = [s.study_name for s in storage.get_all_studies()]
        raise UserError(f"--study {name!r} not found in this storage; studies there: {', '.join(names) or '(none)'}")
    return optuna.load_study(study_name=name, storage=storage)


def check_settings(study: optuna.Study, settings: dict[str, Any]) -> None:
    """Refuse to continue a study under different settings (the results would not compare)."""
    old = study.user_attrs.get("settings")
    if old is None:
        return
    for key in ("space_fingerprint", "objective", "budget", "recipe", "data", "seed", "evaluator"):
        if key == "space_fingerprint" and key in old and old[key] != settings.get(key):
            raise UserError(
                f"--study {study.study_name!r} was run with a different search space "
                f"({old.get('space_file', '?')}, fingerprint {old[key]}; now --space "
                f"{settings.get('space_file')}, fingerprint {settings.get(key)}); "
                "continue it with the same space or choose a new --study name"
            )
        if key == "data" and key in old:  # by content: same text elsewhere is fine, new text here is not
            if not same_data(old[key], settings[key]):
                raise UserError(
                    f"--study {study.study_name!r} was run on other data ({describe_record(old[key])}, "
                    f"now {describe_record(settings[key])}); continue it on the same data or choose a new "
                    "--study name"
                )
            continue
        if key in old and old[key] != settings.get(key):
            raise UserError(
                f"--study {study.study_name!r} was run with a different {key.replace('_', ' ')} "
                f"({old[key]!r}, now {settings.get(key)!r}); continue it with the same settings "
                "or choose a new --study name"
            )


def recover_stale(study: optuna.Study) -> list[int]:
    """Fail trials a dead driver left RUNNING and queue their parameters again.

    Only the driver writes the study, and one driver runs a study at a time, so a
    RUNNING trial at start-up belongs to a driver that is gone.
    """
    requeued = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        requeue(study, t, "driver stopped while it ran")
        requeued.append(t.number)
    return requeued


def requeue(study: optuna.Study, trial: optuna.trial.FrozenTrial, reason: str) -> None:
    """End a RUNNING trial FAIL with ``reason`` and queue its parameters to run again.

    The failed record is marked ``requeued_as`` so it does not count toward
    ``--trials``; the new trial carries ``requeued_from``.  A trial stopped
    while its parameters were being sampled re-queues the ones it had (the
    sampler fills in the rest).
    """
    study._storage.set_trial_user_attr(trial._trial_id, "fail_reason", reason)
    study._storage.set_trial_user_attr(trial._trial_id, REQUEUED, True)
    study.tell(trial.number, state=TrialState.FAIL)
    study.enqueue_trial(trial.params, user_attrs={"requeued_from": trial.number})


def count_done(study: optuna.Study) -> int:
    """Trials that count toward ``--trials``: finished, except failures that were re-queued."""
    n = 0
    for t in study.get_trials(deepcopy=False):
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
            n += 1
        elif t.state == TrialState.FAIL and not t.user_attrs.get(REQUEUED):
            n += 1
    return n
