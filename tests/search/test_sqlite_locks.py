"""A study's -wal stays under a live writer: checking the storage again in the writer's process must
not drop the POSIX locks its SQLite connection holds (a reader elsewhere would then delete the -wal)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna

from nas.search.storage.urls import check_storage_url, open_storage

#: another process reads the study and closes its connection; prints the number of trials
READ_AND_CLOSE = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
print(db.execute("SELECT count(*) FROM trials").fetchone()[0])
db.close()
"""


def _read_elsewhere(db: Path) -> int:
    return int(
        subprocess.run(
            [sys.executable, "-c", READ_AND_CLOSE, str(db)], check=True, capture_output=True, text=True
        ).stdout
    )


def test_rechecking_a_storage_in_the_writers_process_keeps_its_wal(tmp_path: Path) -> None:
    db = tmp_path / "study.db"
    url = f"sqlite:///{db}"
    optuna.create_study(study_name="s", storage=url)  # a study file exists, as when a search continues
    storage = open_storage(url, writer=True)
    study = optuna.load_study(study_name="s", storage=storage)
    study.tell(study.ask(), 1.0)  # the writer's connection is open, with a commit in the -wal
    if not Path(f"{db}-wal").exists():  # not a WAL-mode file: nothing this test can check
        raise AssertionError("the writer's storage is expected in WAL mode")
    check_storage_url(url)  # what a driver does again when it opens the study for another step
    check_storage_url(url)
    assert _read_elsewhere(db) == 1
    assert Path(f"{db}-wal").exists()  # the reader did not take itself for the last connection
    study.tell(study.ask(), 2.0)
    assert _read_elsewhere(db) == 2  # the writer's newest commit reaches other processes
