"""One driver per study: a lease with a heartbeat, kept in the study's own database.

A driver takes the lease before it touches a study's trials (before it fails
and re-queues the trials a dead driver left ``RUNNING``) and a thread renews
it every ``heartbeat`` seconds.  A second driver on the same study is refused
with one line naming the holder.  A lease whose holder is gone is taken over:
at once when the holder ran on this machine and its process no longer exists
(a driver killed and started again), otherwise once ``MISSED_BEATS``
heartbeats have been missed.  Read-only commands never look at it.

The lease is a row of its own table, ``nas_driver_lease`` (:data:`LEASE_TABLE`),
in the same database as the study (SQLite, PostgreSQL): Optuna's tables are
read through its public storage API and never written here.  The first driver
that takes a lease creates the table (``CREATE TABLE`` when missing); checks
that only read (:func:`live_holder`, :func:`refuse_if_held`) create nothing,
and a missing table means nobody holds any study.  One row per study name:

* ``study_name`` (primary key);
* ``study_id``: Optuna's id of the study the lease is on, or NULL while its
  holder is creating the study (it took the lease first, ``creating=True``,
  then :meth:`DriverLease.bind` ties it to the study it made);
* ``holder``: the :class:`Holder` as JSON (host, PID, the process's start
  time, a random token, the last heartbeat and the heartbeat interval).

A row whose ``study_id`` is not the id the study of that name has now is the
lease of a deleted study: it is ignored, and overwritten by the next driver,
so a study deleted and made again under the same name is not blocked by it.
(SQLite may give the new study the deleted one's id: a study re-created by
``search`` is created under a fresh lease and is never blocked, one re-created
outside nas waits, at most, until the old holder is gone as above.)  Release
deletes the row.

Studies run by an older version keep that version's lease as the study system
attribute ``nas:driver_lease``; it is never read, so a stale one blocks nothing.

Ages compare this machine's clock with the holder's; drivers on different
machines need clocks that agree to well within ``MISSED_BEATS * heartbeat``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError

from nas.errors import UserError

#: seconds between heartbeats; tests shorten it so that a dead driver's lease expires quickly
HEARTBEAT_ENV = "NAS_LEASE_HEARTBEAT"
DEFAULT_HEARTBEAT = 5.0
#: a lease whose holder missed this many heartbeats in a row has expired
MISSED_BEATS = 3

#: the leases' own table: a MetaData of its own, so Optuna's schema (and its migrations) never see it
LEASE_TABLE = sa.Table(
    "nas_driver_lease",
    sa.MetaData(),
    sa.Column("study_name", sa.String(512), primary_key=True),  # 512: Optuna's limit on a study name
    sa.Column("study_id", sa.Integer, nullable=True),  # NULL: the holder is creating the study
    sa.Column("holder", sa.Text, nullable=False),  # Holder.to_json()
)
#: times acquire() starts over after losing a race to insert the row (PostgreSQL)
_INSERT_RACES = 5


class LeaseHeld(UserError):
    """Another live driver holds the study's lease."""


class LeaseLost(UserError):
    """This driver's lease was taken over (it missed its heartbeats): it must stop touching the study."""


def _start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot; Linux): tells a reused PID apart."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int, started: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        pass
    now = _start_ticks(pid)
    return started is None or now is None or now == started


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds a lease, and when it last showed it is alive (``beat``, seconds since the epoch)."""

    host: str
    pid: int
    token: str
    beat: float
    heartbeat: float
    started: int | None = None  # the holder process's start time (``_start_ticks``)

    def age(self) -> float:
        return max(0.0, time.time() - self.beat)

    def gone(self) -> bool:
        """It can no longer renew: it missed its heartbeats, or its process on this machine is dead."""
        if self.age() > MISSED_BEATS * self.heartbeat:
            return True
        return self.host == socket.gethostname() and not _alive(self.pid, self.started)

    def describe(self) -> str:
        return f"host {self.host}, PID {self.pid}, last heartbeat {self.age():.0f} s ago"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, value: str) -> Holder | None:
        try:
            return cls(**json.loads(value))
        except (TypeError, ValueError):  # not a lease this code wrote: nobody holds it
            return None


def _current_id(storage: optuna.storages.RDBStorage, study_name: str) -> int | None:
    """The id the study ``study_name`` has now (None: there is none), through Optuna's public storage API."""
    try:
        return storage.get_study_id_from_name(study_name)
    except KeyError:
        return None


def _create_table(engine: sa.Engine) -> None:
    """Create the lease table unless it exists (a writer's first use of a database)."""
    try:
        LEASE_TABLE.create(engine, checkfirst=True)
    except DBAPIError:  # another driver created it between the check and the CREATE
        if not sa.inspect(engine).has_table(LEASE_TABLE.name):
            raise


def _locked_row(conn: sa.Connection, study_name: str) -> Any:
    """The lease row of ``study_name`` (None: there is none), read under the lock that serializes leases.

    The transaction's first statement is a write, a no-op UPDATE of the row.  SQLite:
    Python's sqlite3 begins the transaction (deferred) before it and the UPDATE takes
    the database's write lock whether or not a row matches, so every other lease
    transaction waits for this one to commit (the busy timeout), and the row is read
    after the lock is held (a read first and a write later may fail with SQLITE_BUSY in
    WAL mode).  BEGIN IMMEDIATE would do the same, but only by changing how the engine,
    Optuna's, begins every transaction.  PostgreSQL (READ COMMITTED): the UPDATE and
    ``SELECT ... FOR UPDATE`` lock the row when there is one, and a concurrent lease
    transaction waits for this one, then reads the row as committed.  When there is no
    row, two transactions can both go on to INSERT it: the primary key makes the second
    wait for the first, then fail with IntegrityError, and ``acquire`` starts over.
    """
    t = LEASE_TABLE
    key = t.c.study_name == study_name
    conn.execute(sa.update(t).where(key).values(study_name=t.c.study_name))
    return conn.execute(sa.select(t.c.study_id, t.c.holder).where(key).with_for_update()).first()


def _holder_of(row: Any, study_id: int | None) -> Holder | None:
    """Who holds the study whose id is ``study_id`` now according to ``row`` (None: nobody)."""
    if row is None or (row.study_id is not None and row.study_id != study_id):
        return None  # no lease, or the lease of a deleted study of the same name
    return Holder.from_json(row.holder)


def _put(conn: sa.Connection, study_name: str, exists: bool, study_id: int | None, holder: Holder) -> None:
    t = LEASE_TABLE
    values = {"study_id": study_id, "holder": holder.to_json()}
    if exists:
        conn.execute(sa.update(t).where(t.c.study_name == study_name).values(**values))
    else:
        conn.execute(sa.insert(t).values(study_name=study_name, **values))


def any_holder(storage: optuna.storages.RDBStorage, study_name: str) -> Holder | None:
    """The driver whose lease is on ``study_name`` now, alive or gone (reads only; creates nothing)."""
    with storage.engine.connect() as conn:
        if not sa.inspect(conn).has_table(LEASE_TABLE.name):
            return None  # no driver of this version ever ran in this database
        t = LEASE_TABLE
        row = conn.execute(sa.select(t.c.study_id, t.c.holder).where(t.c.study_name == study_name)).first()
    return _holder_of(row, _current_id(storage, study_name))


def live_holder(storage: optuna.storages.RDBStorage, study_name: str) -> Holder | None:
    """The driver holding ``study_name`` now, if one does and is alive (reads only; creates nothing)."""
    holder = any_holder(storage, study_name)
    return None if holder is None or holder.gone() else holder


def refuse_if_held(storage: optuna.storages.RDBStorage, study_name: str) -> None:
    """Raise :class:`LeaseHeld` naming the holder when another live driver holds ``study_name``."""
    holder = live_holder(storage, study_name)
    if holder is not None:
        raise _held(study_name, holder)


def _held(study_name: str, holder: Holder) -> LeaseHeld:
    return LeaseHeld(
        f"--study {study_name!r} is being run by another driver ({holder.describe()}); "
        "wait for it to end or stop it first"
    )


class DriverLease:
    """This driver's lease on one study: ``acquire``, renewed by a thread, ``release`` on every exit.

    ``creating``: the lease is taken to create the study (or replace one whose creation
    was interrupted), so it covers whatever study of that name exists until :meth:`bind`
    ties it to the one created.
    """

    def __init__(
        self,
        storage: optuna.storages.RDBStorage,
        study_name: str,
        heartbeat: float | None = None,
        *,
        creating: bool = False,
    ) -> None:
        self.storage = storage
        self.study_name = study_name
        self.study_id = None if creating else storage.get_study_id_from_name(study_name)
        self.heartbeat = float(heartbeat or os.environ.get(HEARTBEAT_ENV) or DEFAULT_HEARTBEAT)
        pid = os.getpid()
        self.me = Holder(socket.gethostname(), pid, uuid.uuid4().hex, 0.0, self.heartbeat, _start_ticks(pid))
        self.lost: str | None = None  # who took the lease over (Holder.describe), once that happened
        self._renewed = 0.0  # time.monotonic() of the last renewal
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> Holder | None:
        """Take the lease and start renewing it; returns the gone holder it replaced, if any.

        Raises :class:`LeaseHeld` when a live driver holds it.
        """
        _create_table(self.storage.engine)
        for attempt in range(_INSERT_RACES):
            try:
                holder = self._take()
                break
            except IntegrityError:  # another driver inserted the row first (PostgreSQL): look again
                if attempt == _INSERT_RACES - 1:
                    raise
        self._renewed = time.monotonic()
        self._thread = threading.Thread(target=self._renew, name="nas-lease", daemon=True)
        self._thread.start()
        return holder

    def _take(self) -> Holder | None:
        with self.storage.engine.begin() as conn:
            row = _locked_row(conn, self.study_name)
            # read under the lock: a driver deletes a study only while it holds the lease
            holder = _holder_of(row, _current_id(self.storage, self.study_name))
            if holder is not None and holder.token != self.me.token and not holder.gone():
                raise _held(self.study_name, holder)
            _put(conn, self.study_name, row is not None, self.study_id, self._beating())
        return holder if holder is not None and holder.token != self.me.token else None

    def _beating(self) -> Holder:
        return dataclasses.replace(self.me, beat=time.time())

    def bind(self) -> None:
        """Tie a lease taken with ``creating=True`` to the study created since (it ends with that study).

        Raises :class:`LeaseLost` if another driver has taken the lease over meanwhile.
        """
        self.study_id = self.storage.get_study_id_from_name(self.study_name)
        self.beat()
        self.confirm()

    def beat(self) -> bool:
        """Renew the lease now; False (and ``lost`` set) when another driver has taken it over."""
        with self.storage.engine.begin() as conn:
            row = _locked_row(conn, self.study_name)
            holder = None if row is None else Holder.from_json(row.holder)
            if holder is None or holder.token != self.me.token:
                self.lost = holder.describe() if holder is not None else "it has ended since"
                return False
            _put(conn, self.study_name, True, self.study_id, self._beating())
        self._renewed = time.monotonic()
        return True

    def confirm(self) -> None:
        """Raise :class:`LeaseLost` if another driver has taken the lease over.

        Called before the driver writes a result: when the last renewal is older than
        one and a half heartbeats (this process was stopped or starved), the lease is
        checked in the storage first, so a driver resumed after ``SIGSTOP`` finds out
        before it tells a trial the new holder has already re-queued.
        """
        if self.lost is None and time.monotonic() - self._renewed > 1.5 * self.heartbeat:
            try:
                self.beat()
            except Exception:  # noqa: BLE001 - cannot tell now; the heartbeat thread keeps trying
                pass
        if self.lost is not None:
            raise LeaseLost(
                f"--study {self.study_name!r}: this driver missed its heartbeats and another driver took "
                f"the study over ({self.lost}); stopped without touching its trials"
            )

    def _renew(self) -> None:
        while not self._stop.wait(self.heartbeat):
            try:
                if not self.beat():
                    return
            except Exception:  # noqa: BLE001 - the database may be briefly away; the next beat tries again
                continue

    def release(self) -> None:
        """Stop renewing and delete the lease's row, unless another driver has taken it over."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            with self.storage.engine.begin() as conn:
                row = _locked_row(conn, self.study_name)
                holder = None if row is None else Holder.from_json(row.holder)
                if holder is not None and holder.token == self.me.token:
                    conn.execute(sa.delete(LEASE_TABLE).where(LEASE_TABLE.c.study_name == self.study_name))
        except Exception:  # noqa: BLE001 - storage gone: the lease expires by itself
            pass
