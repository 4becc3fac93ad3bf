"""One driver per study: a lease with a heartbeat, kept in the study's own storage.

A driver takes the lease before it touches a study's trials (before it fails
and re-queues the trials a dead driver left ``RUNNING``) and a thread renews
it every ``heartbeat`` seconds.  A second driver on the same study is refused
with one line naming the holder.  A lease whose holder is gone is taken over:
at once when the holder ran on this machine and its process no longer exists
(a driver killed and started again), otherwise once ``MISSED_BEATS``
heartbeats have been missed.  Read-only commands never look at it.

The lease is a study system attribute (``LEASE_KEY``), so it lives wherever
the study lives (SQLite, PostgreSQL) and disappears with it.  Optuna's storage
API has no compare-and-set, so the lease is read and written here in one SQL
transaction on Optuna's own tables whose first statement is a no-op UPDATE of
the study's row: that takes the write lock (SQLite's database lock, a row lock
in PostgreSQL), so two drivers starting at the same moment are serialized and
exactly one of them gets the lease.

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
from sqlalchemy import text

from nas.errors import UserError

LEASE_KEY = "nas:driver_lease"
#: seconds between heartbeats; tests shorten it so that a dead driver's lease expires quickly
HEARTBEAT_ENV = "NAS_LEASE_HEARTBEAT"
DEFAULT_HEARTBEAT = 5.0
#: a lease whose holder missed this many heartbeats in a row has expired
MISSED_BEATS = 3


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


def _study_id(storage: optuna.storages.RDBStorage, study_name: str) -> int:
    return storage.get_study_id_from_name(study_name)


def _read(conn: Any, study_id: int) -> tuple[bool, Holder | None]:
    row = conn.execute(
        text("SELECT value_json FROM study_system_attributes WHERE study_id = :sid AND key = :key"),
        {"sid": study_id, "key": LEASE_KEY},
    ).first()
    return row is not None, (None if row is None else Holder.from_json(json.loads(row[0])))


def _lock(conn: Any, study_id: int) -> None:
    # A write as the transaction's first statement: concurrent lease updates wait for this one.
    conn.execute(text("UPDATE studies SET study_name = study_name WHERE study_id = :sid"), {"sid": study_id})


def _write(conn: Any, study_id: int, exists: bool, holder: Holder) -> None:
    value = json.dumps(holder.to_json())  # Optuna keeps every attribute JSON-encoded
    if exists:
        sql = "UPDATE study_system_attributes SET value_json = :v WHERE study_id = :sid AND key = :key"
    else:
        sql = "INSERT INTO study_system_attributes (study_id, key, value_json) VALUES (:sid, :key, :v)"
    conn.execute(text(sql), {"sid": study_id, "key": LEASE_KEY, "v": value})


def live_holder(storage: optuna.storages.RDBStorage, study_name: str) -> Holder | None:
    """The driver holding ``study_name`` now, if one does and is alive (reads only)."""
    with storage.engine.connect() as conn:
        _, holder = _read(conn, _study_id(storage, study_name))
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
    """This driver's lease on one study: ``acquire``, renewed by a thread, ``release`` on every exit."""

    def __init__(
        self, storage: optuna.storages.RDBStorage, study_name: str, heartbeat: float | None = None
    ) -> None:
        self.storage = storage
        self.study_name = study_name
        self.study_id = _study_id(storage, study_name)
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
        with self.storage.engine.begin() as conn:
            _lock(conn, self.study_id)
            exists, holder = _read(conn, self.study_id)
            if holder is not None and holder.token != self.me.token and not holder.gone():
                raise _held(self.study_name, holder)
            _write(conn, self.study_id, exists, dataclasses.replace(self.me, beat=time.time()))
        self._renewed = time.monotonic()
        self._thread = threading.Thread(target=self._renew, name="nas-lease", daemon=True)
        self._thread.start()
        return holder if holder is not None and holder.token != self.me.token else None

    def beat(self) -> bool:
        """Renew the lease now; False (and ``lost`` set) when another driver has taken it over."""
        with self.storage.engine.begin() as conn:
            _lock(conn, self.study_id)
            exists, holder = _read(conn, self.study_id)
            if holder is None or holder.token != self.me.token:
                self.lost = holder.describe() if holder is not None else "it has ended since"
                return False
            _write(conn, self.study_id, exists, dataclasses.replace(self.me, beat=time.time()))
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
        """Stop renewing and remove the lease, unless another driver has taken it over."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            with self.storage.engine.begin() as conn:
                _lock(conn, self.study_id)
                _, holder = _read(conn, self.study_id)
                if holder is not None and holder.token == self.me.token:
                    conn.execute(
                        text("DELETE FROM study_system_attributes WHERE study_id = :sid AND key = :key"),
                        {"sid": self.study_id, "key": LEASE_KEY},
                    )
        except Exception:  # noqa: BLE001 - storage gone: the lease expires by itself
            pass
