"""Optuna storage URLs: checked before anything is opened, opened the same way everywhere.

SQLite (``sqlite:///path/study.db``, the default) and any database SQLAlchemy
reaches (``postgresql://...``).  Nothing here creates a file it was not asked
to, and an SQLite file that is not an Optuna database is never opened.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import time
import urllib.parse
from pathlib import Path
from typing import Any

import optuna
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from nas.errors import UserError

optuna.logging.set_verbosity(optuna.logging.WARNING)

#: errors that mean another process is creating the same database right now
_CREATION_RACE = ("UNIQUE constraint failed", "already exists", "database is locked", "duplicate key")


def default_storage(runs_dir: str | os.PathLike[str], study: str) -> str:
    """``sqlite:///RUNS_DIR/STUDY/study.db``: where a study lives unless ``--storage`` says otherwise.

    SQLAlchemy decodes ``%XX`` and cuts the path at ``?``: a directory name holding either is escaped.
    """
    return f"sqlite:///{_escaped(str(Path(runs_dir) / study / 'study.db'))}"


def _escaped(path: str) -> str:
    """``path`` as a SQLite URL spells it: SQLAlchemy decodes ``%XX`` and cuts the path at ``?``."""
    return path.replace("%", "%25").replace("?", "%3F")


def absolute_url(url: str) -> str:
    """``url`` as a record keeps it: a relative SQLite file (``sqlite:///runs/s/study.db``) made absolute,
    so the record names the same database from any directory (nas.files.paths); other URLs as they are."""
    path = sqlite_path(url)
    if path is None or path.is_absolute():
        return url
    # the rest of the URL is kept as written (escapes, a ?query); only the directory goes before it
    return f"sqlite:///{_escaped(os.getcwd())}/{url[len('sqlite:///') :]}"


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL as SQLAlchemy reads it (None for other databases and
    in-memory SQLite)."""
    if not url.startswith("sqlite:///"):
        return None
    try:
        path = make_url(url).database or ""
    except ArgumentError:
        path = url[len("sqlite:///") :]
    return Path(path) if path and path != ":memory:" else None


#: the first bytes of every SQLite database file
_MAGIC = b"SQLite format 3\x00"
#: tables every Optuna RDB schema (3.0 and later) has: a file without all of them is someone else's
_OPTUNA_TABLES = frozenset(
    {
        "studies",
        "study_directions",
        "study_user_attributes",
        "study_system_attributes",
        "trials",
        "trial_params",
        "trial_values",
        "trial_user_attributes",
        "trial_system_attributes",
        "trial_intermediate_values",
        "version_info",
        "alembic_version",
    }
)


#: (device, inode) of the files this process found to be Optuna databases.  Each is probed once: a
#: file read outside SQLite and closed drops every POSIX lock this process's SQLite connections hold
#: on it (fcntl locks belong to the process and the file, not the descriptor), and then a reader in
#: another process takes itself for the last connection when it closes and deletes the -wal under
#: the live writer, whose next commits no other process sees.  The first probe comes before any
#: connection: every storage is opened through ``open_storage``, which checks the file first.
_OPTUNA_FILES: set[tuple[int, int]] = set()


#: (device, inode) of study files that read fine but only in SQLite's immutable mode: the directory
#: cannot take the -shm file WAL mode needs (a read-only mount, a file-size limit, a full disk)
_NO_SHM: set[tuple[int, int]] = set()


def _immutable_kind(path: Path) -> str:
    """``sqlite_kind`` of ``path`` read in SQLite's immutable mode (no -shm, no -wal, no locks)."""
    try:
        uri = f"file:{urllib.parse.quote(str(path))}?mode=ro&immutable=1"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not _OPTUNA_TABLES <= tables:
                return "foreign"
            return "optuna" if db.execute("PRAGMA quick_check").fetchone()[0] == "ok" else "damaged"
    except sqlite3.DatabaseError:
        return "damaged"


def sqlite_kind(path: Path) -> str:
    """What the SQLite file ``path`` is: ``"optuna"``, ``"foreign"`` or ``"damaged"``; reads only.

    ``foreign``: not SQLite, or SQLite without Optuna's tables (someone else's file: a
    study must never be written into it).  ``damaged``: an SQLite file that cannot be read
    or fails SQLite's ``quick_check`` (truncated, overwritten).  A read-only connection to
    a WAL-mode file creates its ``-wal`` and ``-shm`` files and cannot remove them; a probe
    that refuses the file removes the ones it created, so a refusal leaves nothing behind.
    """
    st = path.stat()
    if (st.st_dev, st.st_ino) in _OPTUNA_FILES:
        return "optuna"
    with path.open("rb") as f:
        head = f.read(100)
    if not head.startswith(_MAGIC[: len(head)]) or not head:
        return "foreign"
    if len(head) < 100:
        return "damaged"
    new = [p for p in (Path(f"{path}-wal"), Path(f"{path}-shm")) if not p.exists()]
    try:
        uri = f"file:{urllib.parse.quote(str(path))}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=60)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not _OPTUNA_TABLES <= tables:
                kind = "foreign"
            else:  # reads every page's structure: ms for a study of thousands of trials
                kind = "optuna" if db.execute("PRAGMA quick_check").fetchone()[0] == "ok" else "damaged"
    except sqlite3.OperationalError as err:
        if "locked" in str(err):  # held longer than the 60 s timeout: busy, not damaged
            raise UserError(f"{path}: the study database is locked by another process; try again") from None
        # a WAL-mode file needs its -shm (and -wal) beside it even to be read: on a read-only mount, under
        # a file-size limit or a full disk, SQLite cannot make them, which says nothing of the file itself
        kind = _immutable_kind(path)
        if kind == "optuna":
            _NO_SHM.add((st.st_dev, st.st_ino))
            for p in new:  # what the failed probe began (a -shm it could not fill): never left behind
                p.unlink(missing_ok=True)
    except sqlite3.DatabaseError:
        kind = "damaged"
    if kind != "optuna":
        for p in new:
            p.unlink(missing_ok=True)
    else:
        _OPTUNA_FILES.add((st.st_dev, st.st_ino))
    return kind


def is_optuna_sqlite(path: Path) -> bool:
    """Whether ``path`` is a readable SQLite file holding Optuna's tables (read-only check)."""
    return sqlite_kind(path) == "optuna"


def is_memory_sqlite(url: str) -> bool:
    """Whether ``url`` is an SQLite database that lives in memory (``sqlite://``, ``sqlite:///:memory:``)."""
    if not url.startswith("sqlite:"):
        return False
    try:
        u = make_url(url)
    except ArgumentError:
        return False
    db = u.database or ""
    return db in ("", ":memory:") or db.startswith("file::memory:") or u.query.get("mode") == "memory"


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


def check_storage_url(url: str, read_only: bool = False) -> None:
    """Refuse a storage URL that cannot work, without opening (or creating) anything.

    An existing SQLite file that is not an Optuna database is refused (opening it would
    add Optuna's tables to someone else's file), and so is a damaged one.  ``read_only``:
    the database must already exist; its directory need not be writable.
    """
    if not isinstance(url, str) or "://" not in url:
        raise UserError(
            f"--storage {url!r} is not a database URL; valid: sqlite:///path/study.db, "
            "postgresql://user:password@host/db, mysql://user@host/db"
        )
    path = sqlite_path(url)
    if path is None:
        return
    if "?" in url or str(path).startswith(
        "file:"
    ):  # SQLite opens another file, or in another mode, than checked
        raise UserError(
            f"--storage {url!r}: SQLite URL options (?...) and file: URIs are not supported; "
            "valid: sqlite:///path/study.db"
        )
    escapes = set(re.findall(r"%[0-9A-Fa-f]{2}", url)) - {"%25", "%3F", "%3f"}
    if escapes:  # SQLAlchemy decodes %XX: the file opened would not be the one typed
        first = sorted(escapes)[0]
        raise UserError(
            f"--storage {url!r}: SQLite URLs decode {first} as {urllib.parse.unquote(first)!r}, so the file "
            f"would be {path}; write the file name as it is (only % and ? need %25 and %3F)"
        )
    if not read_only:
        _check_sqlite_path(url)
    if not path.exists():
        if read_only:
            raise UserError(f"--storage {url!r}: no such database file {path}")
        return
    if not path.is_file():
        raise UserError(f"--storage {url!r}: {path} is not a file")
    if path.stat().st_size == 0 and not read_only:
        return  # an empty file: a new study database
    try:
        kind = sqlite_kind(path)
    except OSError as err:  # no read permission (a study someone else made), a bad disk: was a traceback
        raise UserError(
            f"--storage {url!r}: cannot read {path} ({err.strerror or err}); valid: an Optuna study's SQLite "
            "file this user can read"
        ) from None
    if kind == "damaged":
        raise UserError(
            f"--storage {url!r}: {path} is damaged (truncated or overwritten: SQLite cannot read it); "
            "restore it from a backup or start a new study elsewhere"
        )
    if kind == "foreign":
        raise UserError(f"--storage {url!r}: {path} is not an Optuna study database")


def open_storage(
    url: str, create_dirs: bool = True, writer: bool = False, read_only: bool = False
) -> optuna.storages.RDBStorage:
    """An Optuna RDB storage for ``url`` (sqlite:///..., postgresql://...); see ``check_storage_url``.

    ``writer``: this is the driver's storage, so an SQLite file gets ``fast_sqlite_commits``.
    ``read_only``: for commands that only read; an SQLite file is opened so that SQLite
    itself refuses every write (and Optuna, finding its tables, tries none).
    """
    check_storage_url(url, read_only=read_only)
    path = sqlite_path(url)
    target = url  # what SQLAlchemy opens; messages keep the user's URL
    if read_only and path is not None:
        target = f"sqlite:///file:{urllib.parse.quote(str(path))}?mode=ro&uri=true"
        st = path.stat()
        if (st.st_dev, st.st_ino) in _NO_SHM:  # readable here only without its -shm: as the file is on disk
            wal = Path(f"{path}-wal")
            if wal.exists() and wal.stat().st_size > 0:
                raise UserError(
                    f"--storage {url!r}: the study is fine, but it cannot be read here: SQLite's WAL mode "
                    f"needs to write {path.name}-shm beside it (a read-only mount, a file-size limit or a "
                    f"full disk stops it), and {wal.name} holds changes not yet in {path.name}; read it "
                    "where its directory is writable, or copy the file with its -wal there"
                )
            target += "&immutable=1"  # no -wal content: the file on disk is the whole study
    if url.startswith("sqlite:///"):
        if create_dirs and not read_only and path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        # A reader (dashboard, `best`) may hold the file briefly: wait instead of failing.
        kwargs: dict[str, Any] = {"connect_args": {"timeout": 60}}
    else:
        kwargs = {"pool_pre_ping": True}
    fresh = path is not None and not read_only and not path.exists()
    try:
        storage = _create(url, target, kwargs)
    except BaseException:
        if fresh:  # Ctrl-C (or an error) while Optuna created the tables of a new file: no half-made file
            _remove_unfinished(path)  # type: ignore[arg-type]
        raise
    if writer:
        fast_sqlite_commits(storage)
    return storage


def _remove_unfinished(path: Path) -> None:
    """Delete the SQLite file ``path`` (and its journals) when Optuna's schema in it is unfinished:
    such a file holds nothing, and left there it would be refused for good as someone else's database."""
    if not path.exists():
        return
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)) as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            version = db.execute("SELECT 1 FROM alembic_version") if "alembic_version" in tables else None
            done = version is not None and version.fetchone() is not None
    except sqlite3.Error:
        done = False
    if done:
        return
    for p in (path, *(path.with_name(path.name + s) for s in ("-wal", "-shm", "-journal"))):
        with contextlib.suppress(OSError):
            p.unlink()


def _create(url: str, target: str, kwargs: dict[str, Any]) -> optuna.storages.RDBStorage:
    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(target, engine_kwargs=kwargs)
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
