"""A driver stopped by SIGTERM (a scheduler, ``kill``) leaves nothing RUNNING, and the same command continues.

(SIGKILL, which no process can answer, is covered with Ray workers by
``tests/search/test_driver.py::test_resume_after_the_driver_is_killed``: the
next start fails and re-queues what was left RUNNING.)  These run without Ray
(``--local``); ``sleep:1`` makes each trial last a second, long enough to be
caught running.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

# end to end: a real search, Ray, or a fresh interpreter (the full suite runs it)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TINY_SPACE = ROOT / "tests" / "search" / "tiny_space.yaml"


def test_sigterm_requeues_the_running_trial_and_the_search_continues(tmp_path: Path, corpus_dir) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    argv = [
        sys.executable, str(ROOT / "run_search.py"), "search", "--space", str(TINY_SPACE), "--study", "s",
        "--storage", url, "--data", str(corpus_dir), "--local", "--evaluator", "sleep:1", "--trials", "4",
        "--sampler", "random", "--no-tensorboard",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            if not (tmp_path / "s.db").exists():
                continue
            try:
                trials = optuna.load_study(study_name="s", storage=url).trials
            except Exception:  # noqa: BLE001 - not created yet
                continue
            if any(t.state == TrialState.COMPLETE for t in trials) and any(
                t.state == TrialState.RUNNING and "arch" in t.user_attrs for t in trials
            ):
                break
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "terminated (SIGTERM)", err
    trials = optuna.load_study(study_name="s", storage=url).trials
    finished = {t.number: t.values for t in trials if t.state == TrialState.COMPLETE}
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    stopped = [t for t in trials if t.user_attrs.get("requeued_as")]
    assert len(stopped) == 1 and stopped[0].state == TrialState.FAIL
    assert stopped[0].user_attrs["fail_reason"] == "driver stopped (SystemExit)"

    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    trials = optuna.load_study(study_name="s", storage=url).trials
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    for number, values in finished.items():
        assert trials[number].values == values  # nothing finished ran again
    rerun = [t for t in trials if t.user_attrs.get("requeued_from") == stopped[0].number]
    assert len(rerun) == 1 and rerun[0].params == stopped[0].params and rerun[0].state == TrialState.COMPLETE
    counted = [t for t in trials if not t.user_attrs.get("requeued_as")]
    assert len(counted) == 4
    # the interrupted trial is not a failure of a candidate: `best` and `show` say what happened to it
    best = subprocess.run([*argv[:2], "best", "--study", "s", "--storage", url], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert best.returncode == 0, best.stderr
    assert "1 interrupted and run again" in best.stdout and " fail" not in best.stdout
    which = ["--trial", str(stopped[0].number)]
    show = subprocess.run([*argv[:2], "show", "--study", "s", "--storage", url, *which],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert f"run again as trial {rerun[0].number}" in show.stdout and "failed:" not in show.stdout
