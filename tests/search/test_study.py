"""Study identity and storage: the settings record is a study's commit point; readers write nothing."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

import nas.search.storage.study
from nas.cli import main
from nas.errors import UserError
from nas.search.storage.urls import open_storage

TINY_SPACE = Path(__file__).with_name("tiny_space.yaml")


def search(tmp_path: Path, corpus: Path, *extra: str) -> int:
    return main(
        [
            "search",
            "--space",
            str(TINY_SPACE),
            "--study",
            "s",
            "--storage",
            f"sqlite:///{tmp_path}/s.db",
            "--data",
            str(corpus),
            "--local",
            "--evaluator",
            "proxy:params",
            "--no-tensorboard",
            "--sampler",
            "random",
            *extra,
        ]
    )


def load(tmp_path: Path) -> optuna.Study:
    return optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")


def test_a_creation_stopped_by_ctrl_c_leaves_no_study(tmp_path, corpus, monkeypatch, capsys):
    real = nas.search.storage.study.enqueue_seed_archs

    def interrupted(study: optuna.Study, space: Any) -> list[str]:
        real(study, space)
        raise KeyboardInterrupt  # Ctrl-C after the study and its seeds, before the settings record

    monkeypatch.setattr(nas.search.storage.study, "enqueue_seed_archs", interrupted)
    assert search(tmp_path, corpus, "--trials", "3") == 130
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/s.db")
    assert storage.get_all_studies() == []  # nothing half-made is left behind
    monkeypatch.undo()
    assert search(tmp_path, corpus, "--trials", "3") == 0


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_ctrl_c_the_garbage_collector_swallowed_still_stops_the_search(
    tmp_path, corpus, monkeypatch, capsys, sigint_raises
):
    """A signal's exception raised inside a ``__del__`` or a weakref callback (Ray's object references have
    them) is printed by Python as "Exception ignored" and dropped: a search stopped by SIGTERM once ran on
    to its last trial.  The driver's loop raises it again at its next pass: exit 130."""
    import signal

    from nas.execution.local_pool import LocalPool

    class Collected:
        def __del__(self) -> None:
            signal.raise_signal(signal.SIGINT)  # the handler runs here, inside __del__

    real = LocalPool.submit
    calls = []

    def submit(self: LocalPool, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            Collected()  # made and collected at once, while trial 1 is running
            calls.append("went on")

    monkeypatch.setattr(LocalPool, "submit", submit)
    assert search(tmp_path, corpus, "--trials", "6") == 130
    assert "went on" in calls  # the KeyboardInterrupt was swallowed where it was raised
    assert capsys.readouterr().err.strip().endswith("interrupted")
    # stopped at the driver's next pass, once the trial it was running had finished (it used to run all 6)
    assert [t.state for t in load(tmp_path).trials] == [TrialState.COMPLETE, TrialState.COMPLETE]
    assert search(tmp_path, corpus, "--trials", "6") == 0  # the same command continues it
    assert len(load(tmp_path).trials) == 6


def test_ctrl_c_while_the_tables_are_created_leaves_no_file(tmp_path, corpus, monkeypatch, capsys):
    """Ctrl-C while Optuna creates a new database's tables: the half-made file used to stay and be refused
    for good as someone else's database; it is removed, and the same command then starts the study."""
    real = optuna.storages.RDBStorage

    def interrupted(url: str, *args: Any, **kwargs: Any) -> Any:
        import sqlite3

        with sqlite3.connect(tmp_path / "s.db") as db:  # part of a schema, as an interrupted creation leaves
            db.execute("CREATE TABLE IF NOT EXISTS studies (study_id INTEGER PRIMARY KEY)")
        raise KeyboardInterrupt

    monkeypatch.setattr(optuna.storages, "RDBStorage", interrupted)
    assert search(tmp_path, corpus, "--trials", "3") == 130
    assert list(tmp_path.glob("s.db*")) == []
    monkeypatch.setattr(optuna.storages, "RDBStorage", real)
    assert search(tmp_path, corpus, "--trials", "3") == 0
    # an existing study's file is never removed, whatever stops the open
    monkeypatch.setattr(optuna.storages, "RDBStorage", interrupted)
    assert search(tmp_path, corpus, "--trials", "4") == 130
    monkeypatch.setattr(optuna.storages, "RDBStorage", real)
    assert len(load(tmp_path).trials) == 3


def test_a_creation_cut_by_a_killed_driver_is_replaced_by_the_next_start(tmp_path, corpus):
    # SIGKILL-like: the process ends after the study and its seeds, before the settings record
    argv = ["search", "--space", str(TINY_SPACE), "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db",
            "--data", str(corpus), "--local", "--evaluator", "proxy:params", "--no-tensorboard",
            "--sampler", "random", "--trials", "3"]  # fmt: skip
    code = (
        "import os, sys, nas.search.storage.study as st\n"
        "real = st.enqueue_seed_archs\n"
        "st.enqueue_seed_archs = lambda study, space: (real(study, space), os._exit(9))\n"
        "from nas.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    killed = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300)
    assert killed.returncode == 9, killed.stderr
    half = load(tmp_path)
    assert "settings" not in half.user_attrs
    assert {t.state for t in half.trials} == {TrialState.WAITING}  # only the queued seeds
    # Continued under another budget: nothing says the half-made study had one, so it is replaced.
    assert search(tmp_path, corpus, "--trials", "3", "--steps", "9") == 0
    study = load(tmp_path)
    assert study.user_attrs["settings"]["budget"] == {"steps": 9}
    assert len(study.trials) == 3 and all(t.state != TrialState.WAITING for t in study.trials)
    assert study.trials[0].user_attrs.get("seed_arch") == "vanilla"  # seeded once, not twice


@pytest.mark.parametrize("queued", [0, 2])
def test_a_study_made_with_optuna_is_refused_and_left_as_it_was(tmp_path, corpus, capsys, queued):
    study = optuna.create_study(
        study_name="s", storage=f"sqlite:///{tmp_path}/s.db", directions=["minimize"] * 2
    )
    for n in range(queued):
        study.enqueue_trial({"x": n})
    before = hashlib.sha256((tmp_path / "s.db").read_bytes()).hexdigest()
    assert search(tmp_path, corpus, "--trials", "3") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--study 's'" in err[0] and "not made by this tool" in err[0], err
    assert hashlib.sha256((tmp_path / "s.db").read_bytes()).hexdigest() == before
    assert len(load(tmp_path).trials) == queued


def test_a_study_with_trials_but_no_settings_is_refused(tmp_path, corpus, capsys):
    study = optuna.create_study(
        study_name="s", storage=f"sqlite:///{tmp_path}/s.db", directions=["minimize"] * 2
    )
    study.add_trial(optuna.trial.create_trial(values=[1.0, 2.0]))
    before = hashlib.sha256((tmp_path / "s.db").read_bytes()).hexdigest()
    assert search(tmp_path, corpus, "--trials", "3") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--study 's'" in err[0] and "no settings record" in err[0]
    assert hashlib.sha256((tmp_path / "s.db").read_bytes()).hexdigest() == before


def test_read_only_commands_cannot_write(tmp_path, corpus):
    assert search(tmp_path, corpus, "--trials", "2") == 0
    db = tmp_path / "s.db"
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    assert main(["best", "--study", "s", "--storage", f"sqlite:///{db}"]) == 0
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    storage = open_storage(f"sqlite:///{db}", read_only=True)
    with pytest.raises(optuna.exceptions.StorageInternalError) as info:
        optuna.create_study(study_name="other", storage=storage)
    assert "readonly" in str(info.value.__cause__)  # SQLite itself refused the write
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    with pytest.raises(UserError, match="no such database file"):
        open_storage(f"sqlite:///{tmp_path}/missing.db", read_only=True)
    assert not (tmp_path / "missing.db").exists()


def test_a_search_that_fails_before_its_first_result_leaves_no_study(tmp_path, corpus, monkeypatch):
    import nas.execution.local_pool as local_pool

    def broken(payload: Any) -> Any:
        raise RuntimeError("a fault outside any candidate")  # not a trial's failure: the run's

    monkeypatch.setattr(local_pool, "run_trial", broken)
    with pytest.raises(RuntimeError):
        search(tmp_path, corpus, "--trials", "3")
    assert optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/s.db").get_all_studies() == []
    monkeypatch.undo()
    assert search(tmp_path, corpus, "--trials", "2") == 0  # a first result: kept from then on
    monkeypatch.setattr(local_pool, "run_trial", broken)
    with pytest.raises(RuntimeError):
        search(tmp_path, corpus, "--trials", "5")
    assert len([t for t in load(tmp_path).trials if t.state == TrialState.COMPLETE]) == 2


def test_a_requeued_trial_keeps_all_its_fixed_parameters() -> None:
    """A confirm or ladder run (queued with fixed parameters) stopped while its parameters were being read
    holds only some of them; queued again, it must get all of them, or the sampler fills in the rest at
    random (a run at a random scale and seed: the ladder's Ctrl-C test caught one under load)."""
    from optuna.trial import TrialState

    from nas.search.storage.records import CONFIRM_OF
    from nas.search.storage.study import requeue

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.set_user_attr(CONFIRM_OF, "s")  # a confirmation's (or ladder's) study of fixed runs
    study.enqueue_trial({"arch": 3, "scale": 0.5, "seed": 1})
    trial = study.ask()
    trial.suggest_int("arch", 0, 10)  # stopped here: scale and seed not read yet
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))[0]
    requeue(study, running, "driver stopped (KeyboardInterrupt)")
    again = study.ask()
    params = {
        "arch": again.suggest_int("arch", 0, 10),
        "scale": again.suggest_float("scale", 1e-9, 1e9),
        "seed": again.suggest_int("seed", 0, 100),
    }
    assert params == {"arch": 3, "scale": 0.5, "seed": 1}
    assert again.user_attrs["requeued_from"] == trial.number


def test_ctrl_c_during_the_first_trial_of_a_new_study_leaves_no_study(tmp_path, corpus, monkeypatch, capsys):
    """It left a study holding one re-queued FAIL and its queued seeds, nothing finished; now nothing, and
    the same command starts afresh.  A study with a finished trial is kept (the second half)."""
    from nas.execution.local_pool import LocalPool

    real = LocalPool.submit
    calls: list[int] = []

    def submit(self: LocalPool, *args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == stop_at[0]:
            raise KeyboardInterrupt  # Ctrl-C while the trial is being started
        real(self, *args, **kwargs)

    stop_at = [1]
    monkeypatch.setattr(LocalPool, "submit", submit)
    assert search(tmp_path, corpus, "--trials", "3") == 130
    assert optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/s.db").get_all_studies() == []
    calls.clear()
    stop_at[0] = 2  # stopped during the second trial: the first finished, the study stays
    assert search(tmp_path, corpus, "--trials", "3") == 130
    states = [t.state for t in load(tmp_path).trials]
    assert TrialState.COMPLETE in states


def test_a_driver_that_loses_the_race_to_create_a_study_is_told_of_the_race(
    tmp_path, corpus, monkeypatch, capsys
):
    """Two drivers start one new study at once; the second found no study, then the first made it: it was
    told only that the study "exists already", as if it had been asked to make a study that was there."""
    import nas.search.driver.loop as loop

    assert search(tmp_path, corpus, "--trials", "1") == 0  # the winner's study
    before = [(t.number, t.state) for t in load(tmp_path).trials]
    monkeypatch.setattr(
        loop, "load_existing_study", lambda settings, confirmation=False: None
    )  # not there yet
    capsys.readouterr()
    assert search(tmp_path, corpus, "--trials", "2") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another driver created it while this one was starting" in err
    assert [(t.number, t.state) for t in load(tmp_path).trials] == before  # the winner's study as it was
