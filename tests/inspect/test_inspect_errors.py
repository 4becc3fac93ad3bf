"""User mistakes end as one line on stderr and exit status 2, and leave nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

REPO = Path(__file__).resolve().parents[2]


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")} if root.exists() else set()


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ["best"],
        ["show", "--trial", "0"],
        ["plot", "--out", "PLOTS"],
        ["export", "--best", "--out", "OUT.yaml"],
    ],
)
def test_missing_study_creates_nothing(cli, multi: optuna.Study, runs: Path, tmp_path: Path, command) -> None:
    before = _files(tmp_path)
    argv = [str(tmp_path / a) if a in ("PLOTS", "OUT.yaml") else a for a in command]
    rc, out, err = cli(*argv, "--study", "nosuch", "--runs-dir", runs)
    assert rc == 2 and out == ""
    line = _one_line(err)
    assert "'nosuch'" in line and "studies in" in line and "multi" in line
    assert _files(tmp_path) == before  # no runs/nosuch/, no study.db, no plots, no yaml


def test_missing_runs_dir_and_storage_file(cli, tmp_path: Path) -> None:
    rc, _, err = cli("best", "--study", "demo", "--runs-dir", tmp_path / "runs")
    assert rc == 2 and "holds no studies" in _one_line(err)
    db = tmp_path / "deep" / "dir" / "study.db"
    rc, _, err = cli("show", "--study", "demo", "--trial", "0", "--storage", f"sqlite:///{db}")
    assert rc == 2 and "no such database file" in _one_line(err)
    assert list(tmp_path.iterdir()) == []


def test_study_missing_from_an_existing_storage(cli, multi: optuna.Study, runs: Path) -> None:
    rc, _, err = cli("best", "--study", "other", "--storage", f"sqlite:///{runs / 'multi' / 'study.db'}")
    assert rc == 2 and "studies there: multi" in _one_line(err)
    assert [
        s.study_name for s in optuna.get_all_study_summaries(f"sqlite:///{runs / 'multi' / 'study.db'}")
    ] == ["multi"]


def test_bad_storage_url(cli) -> None:
    rc, _, err = cli("best", "--study", "x", "--storage", "not-a-url")
    assert rc == 2 and "is not a database URL" in _one_line(err)


def test_unknown_trial(cli, multi: optuna.Study, runs: Path) -> None:
    rc, _, err = cli("show", "--study", "multi", "--runs-dir", runs, "--trial", "42")
    assert rc == 2 and _one_line(err) == "error: --trial 42: study 'multi' has trials 0..9"


@pytest.mark.parametrize("number,state", [(6, "PRUNED"), (7, "FAIL"), (8, "FAIL")])
def test_export_refuses_unfinished_trials(
    cli, multi: optuna.Study, runs: Path, tmp_path: Path, number, state
):
    out = tmp_path / "x.yaml"
    rc, _, err = cli("export", "--study", "multi", "--runs-dir", runs, "--trial", str(number), "--out", out)
    line = _one_line(err)
    assert rc == 2 and f"--trial {number} of study 'multi' is {state}" in line and "only COMPLETE" in line
    assert not out.exists()


def test_export_refuses_running_trial_and_empty_study(cli, runs: Path, tmp_path: Path) -> None:
    from inspect_studies import make_study

    study = make_study(runs, "live")
    study.ask()  # RUNNING
    out = tmp_path / "x.yaml"
    rc, _, err = cli("export", "--study", "live", "--runs-dir", runs, "--trial", "0", "--out", out)
    assert rc == 2 and "is RUNNING" in _one_line(err)
    rc, _, err = cli("export", "--study", "live", "--runs-dir", runs, "--best", "--out", out)
    assert rc == 2 and "no COMPLETE trial" in _one_line(err)
    rc, _, err = cli("plot", "--study", "live", "--runs-dir", runs, "--out", tmp_path / "plots")
    assert rc == 2 and "no COMPLETE trial to plot" in _one_line(err)
    assert not out.exists() and not (tmp_path / "plots").exists()
    assert study.trials[0].state == TrialState.RUNNING  # read-only commands changed nothing


def test_export_needs_trial_or_best(cli, multi: optuna.Study, runs: Path, tmp_path: Path) -> None:
    rc, _, err = cli("export", "--study", "multi", "--runs-dir", runs, "--out", tmp_path / "x.yaml")
    assert rc == 2 and "one of the arguments --trial --best --confirmed is required" in err
    assert len(err.strip().splitlines()) == 1
    rc, _, err = cli("export", "--study", "multi", "--runs-dir", runs, "--best", "--out", tmp_path)
    assert rc == 2 and "is a directory" in _one_line(err)


def test_real_entry_point(tmp_path: Path) -> None:
    """``run_search.py`` itself, in a fresh process: one line, exit 2, nothing created."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(REPO / "run_search.py"), "best", "--study", "demo", "--runs-dir", "runs"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "error: --study 'demo' not found: no runs/demo/study.db; "
        "runs/ holds no studies (start one with: python run_search.py search --study NAME)"
    )
    assert list(tmp_path.iterdir()) == []


def test_foreign_sqlite_file_is_left_alone(cli, tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE notes (x TEXT)")
    before = db.read_bytes()
    rc, _, err = cli("best", "--study", "x", "--storage", f"sqlite:///{db}")
    assert rc == 2 and "is not an Optuna study database" in _one_line(err)
    assert db.read_bytes() == before
