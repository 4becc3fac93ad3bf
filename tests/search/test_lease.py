"""One driver per study: a second driver is refused, a dead driver's lease is taken over.

Real driver processes (``run_search.py search --local``, ``sleep:S`` trials)
on one SQLite study; the lease mechanics themselves are checked directly on a
storage.  What is guaranteed is in docs/reliability.md.
"""

from __future__ import annotations

import dataclasses
import io
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
from optuna.trial import TrialState

from nas.cli import build_parser, main
from nas.commands.search import build_run
from nas.search.driver.loop import Driver
from nas.search.storage.lease import (
    LEASE_TABLE,
    DriverLease,
    Holder,
    LeaseHeld,
    LeaseLost,
    live_holder,
    refuse_if_held,
)
from nas.search.storage.urls import open_storage

# end to end: a real search, Ray, or a fresh interpreter (the full suite runs it)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TINY_SPACE = Path(__file__).with_name("tiny_space.yaml")


def search_argv(url: str, corpus: Path, *extra: str) -> list[str]:
    return ["search", "--space", str(TINY_SPACE), "--study", "s", "--storage", url, "--data", str(corpus),
            "--local", "--sampler", "random", "--no-tensorboard", *extra]  # fmt: skip


def start_driver(argv: list[str], cwd: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "run_search.py"), *argv],
        cwd=cwd,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
    )


def wait_running(proc: subprocess.Popen[str], url: str, finished: int = 1) -> None:
    """Until the study has ``finished`` COMPLETE trials and one RUNNING trial on a worker."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        try:
            trials = optuna.load_study(study_name="s", storage=url).trials
        except Exception:  # noqa: BLE001 - not created yet
            continue
        done = [t for t in trials if t.state == TrialState.COMPLETE]
        running = [t for t in trials if t.state == TrialState.RUNNING and "arch" in t.user_attrs]
        if len(done) >= finished and running:
            return
    out, err = proc.communicate(timeout=60) if proc.poll() is not None else ("", "timed out")
    pytest.fail(f"the first driver never had a trial running: {err[-2000:]}")


def lease_record(url: str) -> Holder | None:
    """The lease stored for study ``s``, live or not."""
    storage = open_storage(url, read_only=True)
    with storage.engine.connect() as conn:
        if not sa.inspect(conn).has_table(LEASE_TABLE.name):
            return None
        row = conn.execute(sa.select(LEASE_TABLE.c.holder).where(LEASE_TABLE.c.study_name == "s")).first()
    return None if row is None else Holder.from_json(row.holder)


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


@pytest.mark.timeout(300)
def test_a_second_driver_is_refused_and_the_first_finishes_intact(tmp_path: Path, text_corpus: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    argv = search_argv(url, text_corpus, "--trials", "3", "--evaluator", "sleep:4")
    first = start_driver(argv, tmp_path)
    try:
        wait_running(first, url)
        second = subprocess.run(
            [sys.executable, str(ROOT / "run_search.py"), *argv],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert main(["best", "--study", "s", "--storage", url]) == 0  # reading needs no lease
        out, err = first.communicate(timeout=240)
    finally:
        stop(first)
    assert second.returncode == 2, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in second.stderr, second.stderr
    assert f"host {socket.gethostname()}, PID {first.pid}, last heartbeat" in lines[0]
    assert "being run by another driver" in lines[0]
    assert first.returncode == 0, err
    trials = optuna.load_study(study_name="s", storage=url).trials
    assert len(trials) == 3 and all(t.state == TrialState.COMPLETE for t in trials)  # nothing failed as stale
    assert not any(t.user_attrs.get("requeued_as") for t in trials)
    assert lease_record(url) is None  # released


@pytest.mark.timeout(300)
def test_a_killed_drivers_lease_is_taken_over(tmp_path: Path, text_corpus: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    argv = search_argv(url, text_corpus, "--trials", "3", "--evaluator", "sleep:1.5")
    first = start_driver(argv, tmp_path)
    try:
        wait_running(first, url)
        os.kill(first.pid, signal.SIGKILL)
        first.communicate(timeout=30)
    finally:
        stop(first)
    held = lease_record(url)
    assert held is not None and held.pid == first.pid  # left behind: nobody released it
    study = optuna.load_study(study_name="s", storage=url)
    running = [t.number for t in study.trials if t.state == TrialState.RUNNING]
    assert running

    out = io.StringIO()
    args = build_parser().parse_args(argv)
    Driver(build_run(args), out=out).run()  # at once: the holder's process is gone
    assert (
        f"took over the study from a driver that is gone (host {socket.gethostname()}, PID {first.pid}"
        in out.getvalue()
    )
    trials = optuna.load_study(study_name="s", storage=url).trials
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    for number in running:
        assert trials[number].user_attrs["requeued_as"]
    assert len([t for t in trials if not t.user_attrs.get("requeued_as")]) == 3


@pytest.mark.timeout(300)
def test_a_stalled_drivers_lease_expires_and_it_stops_on_waking(tmp_path: Path, text_corpus: Path) -> None:
    # The first driver renews every 0.3 s; stopped (SIGSTOP) for longer than 3 heartbeats, it is
    # taken for dead.  The second driver takes over and finishes; the first, woken, finds its lease
    # gone and stops with one line, without telling the trial it had (the second re-queued it).
    url = f"sqlite:///{tmp_path / 's.db'}"
    argv = search_argv(url, text_corpus, "--trials", "3", "--evaluator", "sleep:1.5")
    first = start_driver(argv, tmp_path, NAS_LEASE_HEARTBEAT="0.3")
    try:
        wait_running(first, url)
        os.kill(first.pid, signal.SIGSTOP)
        time.sleep(1.5)  # five heartbeats missed
        out = io.StringIO()
        Driver(build_run(build_parser().parse_args(argv)), out=out).run()
        assert (
            f"took over the study from a driver that is gone (host {socket.gethostname()}, PID "
            f"{first.pid}" in out.getvalue()
        )
        before = optuna.load_study(study_name="s", storage=url).trials
        os.kill(first.pid, signal.SIGCONT)
        _, err = first.communicate(timeout=120)
    finally:
        stop(first)
    assert first.returncode == 2, err
    assert "another driver took the study over" in err and "Traceback" not in err, err
    after = optuna.load_study(study_name="s", storage=url).trials
    assert [(t.number, t.state, t.values, t.user_attrs) for t in after] == [
        (t.number, t.state, t.values, t.user_attrs) for t in before
    ]
    assert not [t for t in after if t.state == TrialState.RUNNING]


def _study(tmp_path: Path) -> optuna.storages.RDBStorage:
    storage = open_storage(f"sqlite:///{tmp_path / 'l.db'}")
    optuna.create_study(study_name="s", storage=storage)
    return storage


def _plant(storage: optuna.storages.RDBStorage, host: str, age: float, heartbeat: float = 5.0) -> Holder:
    """A lease on study ``s`` held by a driver on ``host`` whose last heartbeat was ``age`` seconds ago."""
    holder = Holder(host, 4242, "other", time.time() - age, heartbeat)
    LEASE_TABLE.create(storage.engine, checkfirst=True)
    with storage.engine.begin() as conn:
        conn.execute(sa.delete(LEASE_TABLE).where(LEASE_TABLE.c.study_name == "s"))
        conn.execute(
            sa.insert(LEASE_TABLE).values(
                study_name="s", study_id=storage.get_study_id_from_name("s"), holder=holder.to_json()
            )
        )
    return holder


def test_a_live_lease_on_another_host_is_refused_and_an_expired_one_taken(tmp_path: Path) -> None:
    storage = _study(tmp_path)
    _plant(storage, "elsewhere", age=4.0)  # within 3 heartbeats of 5 s: alive
    with pytest.raises(LeaseHeld, match=r"host elsewhere, PID 4242, last heartbeat 4 s ago"):
        DriverLease(storage, "s").acquire()
    assert live_holder(storage, "s").host == "elsewhere"
    _plant(storage, "elsewhere", age=16.0)  # 3 heartbeats missed
    assert live_holder(storage, "s") is None
    lease = DriverLease(storage, "s", heartbeat=60)
    replaced = lease.acquire()
    try:
        assert replaced is not None and replaced.host == "elsewhere"
        assert live_holder(storage, "s").token == lease.me.token
    finally:
        lease.release()
    assert live_holder(storage, "s") is None


def test_a_driver_whose_lease_was_taken_stops_without_touching_the_trials(tmp_path: Path) -> None:
    storage = _study(tmp_path)
    lease = DriverLease(storage, "s", heartbeat=60)
    lease.acquire()
    _plant(storage, "elsewhere", age=0.0)  # what a driver that took over writes
    assert lease.beat() is False and lease.lost.startswith("host elsewhere, PID 4242")
    with pytest.raises(LeaseLost, match="another driver took the study over"):
        lease.confirm()
    lease.release()  # leaves the new holder's lease alone
    assert live_holder(storage, "s").host == "elsewhere"


def test_the_heartbeat_renews_the_lease(tmp_path: Path) -> None:
    storage = _study(tmp_path)
    lease = DriverLease(storage, "s", heartbeat=0.05)
    lease.acquire()
    try:
        first = live_holder(storage, "s").beat
        deadline = time.monotonic() + 30
        while live_holder(storage, "s").beat == first and time.monotonic() < deadline:
            time.sleep(0.05)
        assert live_holder(storage, "s").beat > first
    finally:
        lease.release()


def test_the_lease_is_released_when_the_pool_cannot_start(tmp_path: Path, text_corpus: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    argv = search_argv(url, text_corpus, "--trials", "1", "--evaluator", "proxy:params")
    assert main(argv) == 0
    run = build_run(build_parser().parse_args(argv))
    settings = dataclasses.replace(run, spec=run.spec.replace(search={"trials": 2}))

    def broken(_settings: object) -> object:
        raise RuntimeError("no pool")

    with pytest.raises(RuntimeError):
        Driver(settings, pool_factory=broken, out=io.StringIO()).run()
    assert lease_record(url) is None
    assert main([*argv[:-4], "--trials", "2", "--evaluator", "proxy:params"]) == 0


def _tables(path: Path) -> dict[str, list[tuple]]:
    """Every row of every table in the SQLite file ``path``."""
    with sqlite3.connect(path) as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {name: sorted(db.execute(f'SELECT * FROM "{name}"').fetchall(), key=repr) for name in names}


def test_the_lease_lives_in_its_own_table_and_never_writes_optunas(tmp_path: Path) -> None:
    storage = _study(tmp_path)
    before = _tables(tmp_path / "l.db")
    assert LEASE_TABLE.name not in before  # made by the first driver, not by opening the storage
    writes: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER"):
            writes.append(" ".join(statement.split()))

    sa.event.listen(storage.engine, "before_cursor_execute", record)
    lease = DriverLease(storage, "s", heartbeat=60)
    lease.acquire()
    assert lease.beat()
    held = _tables(tmp_path / "l.db")
    lease.release()
    sa.event.remove(storage.engine, "before_cursor_execute", record)

    assert writes and all("nas_driver_lease" in w for w in writes), writes
    [(name, study_id, holder)] = held[LEASE_TABLE.name]
    assert (name, study_id) == ("s", storage.get_study_id_from_name("s"))
    assert Holder.from_json(holder).token == lease.me.token
    after = _tables(tmp_path / "l.db")
    assert after.pop(LEASE_TABLE.name) == []  # released: the row is deleted
    assert after == before  # Optuna's tables: not a row changed
    assert storage.get_study_system_attrs(storage.get_study_id_from_name("s")) == {}


def test_a_read_only_check_creates_nothing(tmp_path: Path) -> None:
    storage = _study(tmp_path)
    before = _tables(tmp_path / "l.db")
    for opened in (storage, open_storage(f"sqlite:///{tmp_path / 'l.db'}", read_only=True)):
        assert live_holder(opened, "s") is None  # no table: nobody holds anything
        refuse_if_held(opened, "s")
    assert _tables(tmp_path / "l.db") == before


def test_an_old_versions_lease_in_the_study_blocks_nothing(tmp_path: Path) -> None:
    storage = _study(tmp_path)
    alive = Holder("elsewhere", 4242, "old", time.time(), 3600.0)  # live, as an older version wrote it
    storage.set_study_system_attr(storage.get_study_id_from_name("s"), "nas:driver_lease", alive.to_json())
    assert live_holder(storage, "s") is None
    lease = DriverLease(storage, "s", heartbeat=60)
    assert lease.acquire() is None
    lease.release()


def check_recreated_study_is_not_blocked(storage: optuna.storages.RDBStorage) -> None:
    """Study ``s`` deleted while a live driver elsewhere held it, and made again: its old lease is ignored."""
    optuna.create_study(study_name="t", storage=storage)  # so that the new "s" gets a new id on SQLite too
    _plant(storage, "elsewhere", age=0.0)  # alive, on another machine: it would block for 15 s
    old_id = storage.get_study_id_from_name("s")
    optuna.delete_study(study_name="s", storage=storage)
    optuna.create_study(study_name="s", storage=storage)
    assert storage.get_study_id_from_name("s") != old_id
    assert live_holder(storage, "s") is None
    lease = DriverLease(storage, "s", heartbeat=60)
    assert lease.acquire() is None  # no gone holder was replaced: the old row was not this study's
    try:
        assert live_holder(storage, "s").token == lease.me.token
    finally:
        lease.release()


def test_a_deleted_and_recreated_study_is_not_blocked_by_its_old_lease(tmp_path: Path) -> None:
    check_recreated_study_is_not_blocked(_study(tmp_path))


def test_search_recreates_a_deleted_study_under_a_new_lease(tmp_path: Path, text_corpus: Path) -> None:
    # SQLite gives the re-created study the deleted one's id (it was the only study): `search`
    # takes the lease before it creates the study, so the old row cannot block it.
    url = f"sqlite:///{tmp_path / 's.db'}"
    argv = search_argv(url, text_corpus, "--trials", "1", "--evaluator", "proxy:params")
    assert main(argv) == 0
    storage = open_storage(url)
    old_id = storage.get_study_id_from_name("s")
    _plant(storage, "elsewhere", age=0.0)
    optuna.delete_study(study_name="s", storage=storage)
    assert main(argv) == 0
    assert storage.get_study_id_from_name("s") == old_id
    assert lease_record(url) is None
    trials = optuna.load_study(study_name="s", storage=url).trials
    assert [t.state for t in trials if t.state != TrialState.WAITING] == [TrialState.COMPLETE]


Opener = Callable[[], optuna.storages.RDBStorage]


def race_for_the_lease(open_one: Opener, n: int = 4) -> tuple[DriverLease, Holder | None]:
    """``n`` drivers (one storage each) take study ``s``'s lease at the same moment: exactly one wins.

    Returns the winner's lease (held: the caller releases it) and what ``acquire`` returned to it.
    """
    storages = [open_one() for _ in range(n)]
    leases = [DriverLease(storage, "s", heartbeat=60) for storage in storages]
    start = threading.Barrier(n)
    results: list = [None] * n

    def take(i: int) -> None:
        start.wait()
        try:
            results[i] = ("won", leases[i].acquire())
        except Exception as err:  # noqa: BLE001 - reported below
            results[i] = ("refused", err)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    won = [i for i, r in enumerate(results) if r is not None and r[0] == "won"]
    refused = [r[1] for r in results if r is not None and r[0] == "refused"]
    assert len(won) == 1 and len(refused) == n - 1, results
    assert all(isinstance(err, LeaseHeld) for err in refused), refused
    for i, storage in enumerate(storages):
        if i != won[0]:
            storage.engine.dispose()
    return leases[won[0]], results[won[0]][1]


def check_concurrent_acquisition(storage: optuna.storages.RDBStorage, open_one: Opener) -> None:
    """Drivers starting at once, three times: no lease table yet, no row, a gone holder's row."""
    lease, replaced = race_for_the_lease(open_one)  # the table is created by the racers themselves
    assert replaced is None and live_holder(storage, "s").token == lease.me.token
    lease.release()
    lease.storage.engine.dispose()
    lease, replaced = race_for_the_lease(open_one)
    assert replaced is None and live_holder(storage, "s").token == lease.me.token
    lease.release()
    lease.storage.engine.dispose()
    gone = _plant(storage, "elsewhere", age=60.0)
    lease, replaced = race_for_the_lease(open_one)  # exactly one takes it over
    assert replaced == gone and live_holder(storage, "s").token == lease.me.token
    lease.release()
    lease.storage.engine.dispose()
    assert live_holder(storage, "s") is None


@pytest.mark.timeout(300)
def test_drivers_starting_at_once_are_serialized(tmp_path: Path) -> None:
    storage = _study(tmp_path)
    check_concurrent_acquisition(storage, lambda: open_storage(f"sqlite:///{tmp_path / 'l.db'}", writer=True))
