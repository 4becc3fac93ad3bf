"""An SQLite study can be read (``best``, optuna-dashboard's ``load_study``) while a search writes it.

The search runs as a real ``run_search.py search --local`` process with the
proxy evaluator, so its trials finish as fast as the database takes them;
this process reads the same file in a loop meanwhile.  Neither side may see
an error ("database is locked" included).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from nas.cli import main

# end to end: a real search, Ray, or a fresh interpreter (the full suite runs it)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TINY_SPACE = ROOT / "tests" / "search" / "tiny_space.yaml"
TRIALS = 60


def study_created(db: Path) -> bool:
    """Whether study 's' exists, read-only (opening a missing file through Optuna would create it)."""
    if not db.is_file():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as con:
            return bool(con.execute("SELECT 1 FROM studies WHERE study_name = 's'").fetchall())
    except sqlite3.Error:
        return False


def test_reading_a_study_while_a_search_writes_it(tmp_path: Path, corpus_dir: Path, capsys) -> None:
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    argv = [
        sys.executable, str(ROOT / "run_search.py"), "search", "--space", str(TINY_SPACE), "--study", "s",
        "--storage", url, "--data", str(corpus_dir), "--local", "--evaluator", "proxy:params",
        "--trials", str(TRIALS), "--sampler", "random", "--no-tensorboard",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    reads, counts = 0, []
    try:
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            if not study_created(db):
                time.sleep(0.05)
                continue
            rc = main(["best", "--study", "s", "--storage", url, "--json"])
            out, err = capsys.readouterr()
            assert rc == 0 and err == "", err
            json.loads(out)  # a whole, valid answer
            trials = optuna.load_study(study_name="s", storage=url).get_trials(deepcopy=False)
            counts.append(sum(t.state.is_finished() for t in trials))
            reads += 1
    finally:
        if proc.poll() is None:
            proc.kill()
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "locked" not in stderr and "Traceback" not in stderr, stderr
    assert reads >= 3, f"only {reads} reads while the search ran"
    assert counts == sorted(counts)  # finished trials only ever grow
    trials = optuna.load_study(study_name="s", storage=url).trials
    assert len(trials) == TRIALS and all(t.state != TrialState.RUNNING for t in trials)
