"""Optuna storage URLs: checked before anything is opened, opened the same way everywhere.

SQLite (``sqlite:///path/study.db``, the default) and any database SQLAlchemy
reaches (``postgresql://...``).  Nothing here creates a file it was not asked
to, and an SQLite file that is not an Optuna database is never opened.
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
from sqlalchemy import event

from nas.errors import UserError

optuna.logging.set_verbosity(optuna.logging.WARNING)

#: errors that mean another process is creating the same database right now
_CREATION_RACE = ("UNIQUE constraint failed", "already exists", "database is locked", "duplicate key")


def default_storage(runs_dir: str | os.PathLike[str], study: str) -> str:
    """``sqlite:///RUNS_DIR/STUDY/study.db``: where a study lives unless ``--storage`` says otherwise."""
    return f"sqlite:///{Path(runs_dir) / study / 'study.db'}"


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


def _check_sqlite_path(url: str) -> None:
    path = sqlite_path(url)
    if path is None:
        return
    probe = path.parent
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        raise UserError(f"--storage {url!r}: directory {probe} is not writable")


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


def open_storage(url: str, create_dirs: bool = True, writer: bool = False) -> optuna.storages.RDBStorage:
    """An Optuna RDB storage for ``url`` (sqlite:///..., postgresql://...); see ``check_storage_url``.

    ``writer``: this is the driver's storage, so an SQLite file gets ``fast_sqlite_commits``.
    """
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
            storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
            break
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
    if writer:
        fast_sqlite_commits(storage)
    return storage


def fast_sqlite_commits(storage: optuna.storages.RDBStorage) -> None:
    """Put an SQLite storage in WAL mode with ``synchronous=NORMAL``: commits stop waiting for the disk.

    Speed: the driver commits about 40 times per trial (one per sampled parameter and
    per user attribute: Optuna's storage API has no batch write), and with SQLite's
    default rollback journal every commit waits for an fsync: 0.7 ms on an idle disk
    here, 5 to 13 ms when other jobs use it, which made the driver's per-trial overhead
    0.09 to 0.2 s (benchmarks/orchestration.py).  In WAL mode with synchronous=NORMAL a
    commit is an append to the -wal file (0.02 ms) and the disk is synced at checkpoints.
    Batching the user attributes in one transaction (through Optuna's private RDB
    helpers) saved only 2 ms per trial more under WAL, so it is not done.

    Durability: a driver that crashes or is killed loses nothing (the data is in the
    operating system's cache); only a power loss or OS crash may roll back the last
    commits, never corrupting the file: a trial lost that way was never seen finished
    and is sampled again.  WAL also lets readers (dashboard, ``best``) read while the
    driver writes.  The mode stays with the file; other databases are left alone.

    ``RDBStorage.engine`` is the SQLAlchemy engine Optuna built; a ``connect`` listener
    runs the pragmas on every new connection.  Optuna has already connected once (to
    create or check its tables), so the pool is emptied and later connections get them.
    """
    engine = storage.engine
    if engine.dialect.name != "sqlite" or engine.url.database in (None, "", ":memory:"):
        return

    def pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    event.listen(engine, "connect", pragmas)
    engine.dispose()
