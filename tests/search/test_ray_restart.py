"""A search survives the death of the local Ray it started: a new node, the running trials run again.

The search runs in a subprocess (it starts its own local Ray, apart from the test session's shared
one); its raylet, found among that process's own descendants, is SIGKILLed while two trials run, as
the kernel's OOM killer would.
"""

from __future__ import annotations

import os
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

ROOT = Path(__file__).resolve().parents[2]
TINY_SPACE = Path(__file__).with_name("tiny_space.yaml")


def _children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            out.append(int(p.name))
    return out


def _raylet_of(pid: int) -> int | None:
    """The raylet among ``pid``'s descendants (never another Ray's on this machine)."""
    todo = [pid]
    while todo:
        for child in _children(todo.pop()):
            try:
                if Path(f"/proc/{child}/comm").read_text().strip() == "raylet":
                    return child
            except OSError:
                continue
            todo.append(child)
    return None


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the raylet through /proc (Linux)")
@pytest.mark.timeout(400)
def test_the_search_starts_a_new_local_ray_when_its_node_dies(tmp_path, text_corpus):
    url = f"sqlite:///{tmp_path}/s.db"
    argv = [sys.executable, str(ROOT / "run_search.py"), "search", "--space", str(TINY_SPACE), "--study", "s",
            "--storage", url, "--runs-dir", str(tmp_path / "runs"), "--data", str(text_corpus),
            "--no-tensorboard", "--sampler", "random", "--trials", "6", "--workers", "2",
            "--evaluator", "sleep:4"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = tmp_path / "search.log"  # a file, not a pipe: Ray's dump of the dead raylet's log cannot block it
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    killed = None
    try:
        deadline = time.monotonic() + 180
        while proc.poll() is None and killed is None and time.monotonic() < deadline:
            time.sleep(0.3)
            try:
                trials = optuna.load_study(study_name="s", storage=url).trials
            except (KeyError, optuna.exceptions.StorageInternalError):
                continue  # not created yet
            if sum(t.state == TrialState.RUNNING for t in trials) >= 2:
                killed = _raylet_of(proc.pid)
                if killed is not None:
                    os.kill(killed, signal.SIGKILL)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = log.read_text(errors="replace")
    assert killed is not None, "no raylet found while two trials ran"
    assert proc.returncode == 0, out[-3000:]
    assert "starting a new one (restart 1 of 3)" in out and "a new local Ray is up" in out, out[-3000:]
    trials = optuna.load_study(study_name="s", storage=url).trials
    assert len(trials) == 6
    assert {t.state for t in trials} <= {TrialState.COMPLETE, TrialState.PRUNED}, [t.state for t in trials]
