"""Worker and node failures on the shared Ray cluster: the search still ends with every trial finished.

The trials use the ``sleep:S`` evaluator (a known wait, then the parameter
proxy), so a trial lasts long enough to be killed and its values can be
checked exactly against ``nas.compute``.  What these tests guarantee is
written in docs/reliability.md.
"""

from __future__ import annotations

import io
import math
import threading
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from benchmarks._chaos import WorkerKiller
from nas.cli import build_parser, main
from nas.commands.search import build_run
from nas.models import ArchConfig
from nas.models.cost import compute
from nas.search.driver.inflight import default_pool
from nas.search.driver.loop import Driver

TINY_SPACE = Path(__file__).with_name("tiny_space.yaml")

pytestmark = pytest.mark.usefixtures("ray_cluster")


def settings_for(tmp_path: Path, corpus: Path, *extra: str) -> Any:
    args = build_parser().parse_args([
        "search", "--space", str(TINY_SPACE), "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db",
        "--runs-dir", str(tmp_path / "runs"), "--data", str(corpus), "--no-tensorboard",
        "--sampler", "random", *extra,
    ])  # fmt: skip
    return build_run(args)


class Recorder:
    """A pool factory that remembers the pool, so a test can watch and harm its workers."""

    def __init__(self) -> None:
        self.pool: Any = None

    def __call__(self, settings: Any) -> Any:
        self.pool = default_pool(settings)
        return self.pool


def trials_of(tmp_path: Path) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db").trials


def check_finished(trials: list[optuna.trial.FrozenTrial], n: int) -> None:
    """``n`` trials, none RUNNING, every FAIL with a reason, COMPLETE values as the worker measured them."""
    assert len(trials) == n
    for t in trials:
        assert t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL), t.state
        if t.state == TrialState.FAIL:
            assert t.user_attrs.get("fail_reason"), t.number
        if t.state == TrialState.COMPLETE:
            arch = ArchConfig.from_dict(t.user_attrs["arch"])
            c = compute(arch, arch.max_len)
            assert t.values == [pytest.approx(math.log(c.params)), pytest.approx(c.fwd_flops_per_token)]
            assert t.values[0] == t.user_attrs["val_loss"]


@pytest.mark.timeout(300)
def test_killed_workers_cost_retries_not_the_search(tmp_path, text_corpus):
    settings = settings_for(
        tmp_path, text_corpus, "--trials", "8", "--workers", "2", "--evaluator", "sleep:1.5", "--retries", "1"
    )
    pool = Recorder()
    killer = WorkerKiller(lambda: pool.pool, every=(0.5, 1.5), max_kills=3, seed=1)
    killer.start()
    try:
        Driver(settings, pool_factory=pool, out=io.StringIO()).run()
    finally:
        killer.stop()
    trials = trials_of(tmp_path)
    check_finished(trials, 8)
    assert len(killer.kills) >= 2
    assert pool.pool.deaths >= len(killer.kills) - 1  # a kill can land as the trial ends
    hit = [t for t in trials if t.user_attrs.get("worker_errors")]
    assert hit
    for t in hit:
        assert all(e.startswith("worker died") for e in t.user_attrs["worker_errors"])
        if t.state == TrialState.FAIL:  # its one retry was killed too
            assert (
                t.user_attrs["fail_reason"].startswith("worker died")
                and "(2 attempts)" in t.user_attrs["fail_reason"]
            )
        else:
            assert t.user_attrs["attempts"] >= 2
    assert any(t.state == TrialState.COMPLETE and t.user_attrs.get("attempts", 1) > 1 for t in trials)
    assert pool.pool.given_up == 0  # Ray restarted every killed worker


@pytest.mark.timeout(300)
def test_losing_a_node_mid_trial(tmp_path, text_corpus, ray_cluster):
    node = ray_cluster.add_node(num_cpus=1)
    ray_cluster.wait_for_nodes()
    lost = node.node_id
    # 3 workers, one per node; after the loss 2 CPUs are left, so the third worker cannot come back.
    settings = settings_for(
        tmp_path,
        text_corpus,
        "--trials",
        "6",
        "--workers",
        "3",
        "--evaluator",
        "sleep:3",
        "--worker-timeout",
        "20",
    )
    pool = Recorder()
    removed = threading.Event()
    stop = threading.Event()

    def remove_when_busy() -> None:
        while not stop.wait(0.2):
            p = pool.pool
            if p is not None and any(node_id == lost for _, node_id in p.busy_workers()):
                ray_cluster.remove_node(node)
                removed.set()
                return

    remover = threading.Thread(target=remove_when_busy, daemon=True)
    remover.start()
    try:
        Driver(settings, pool_factory=pool, out=io.StringIO()).run()
    finally:
        stop.set()
        remover.join(60)
        if not removed.is_set():
            ray_cluster.remove_node(node)
    assert removed.is_set()
    trials = trials_of(tmp_path)
    check_finished(trials, 6)
    hit = [t for t in trials if t.user_attrs.get("worker_errors")]
    assert hit, [t.user_attrs.get("worker_node") for t in trials]
    for t in hit:
        assert t.state == TrialState.COMPLETE or t.user_attrs["fail_reason"]
        assert t.user_attrs.get("worker_node") != lost  # its result came from a node that is still there
    assert pool.pool.size <= 3


@pytest.mark.timeout(300)
def test_a_worker_that_cannot_be_placed_is_given_up(tmp_path, text_corpus):
    # The cluster has two 1-CPU nodes: the third worker never starts, so its first trial comes
    # back after --worker-timeout and runs on another worker; the search goes on with the others.
    # (On a loaded machine a worker that is merely slow to start may be given up too.)
    settings = settings_for(
        tmp_path,
        text_corpus,
        "--trials",
        "5",
        "--workers",
        "3",
        "--evaluator",
        "sleep:0.5",
        "--worker-timeout",
        "8",
    )
    pool = Recorder()
    Driver(settings, pool_factory=pool, out=io.StringIO()).run()
    trials = trials_of(tmp_path)
    check_finished(trials, 5)
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert 1 <= pool.pool.given_up <= 2
    moved = [t for t in trials if t.user_attrs.get("worker_errors")]
    errors = [e for t in moved for e in t.user_attrs["worker_errors"]]
    assert errors and all("not (re)started within 8 s" in e for e in errors)


@pytest.mark.timeout(300)
def test_no_worker_at_all_stops_with_one_line_and_nothing_running(tmp_path, text_corpus, capsys):
    # No node has 4 CPUs: no worker ever starts.  The search stops with exit status 2 and one line;
    # the trial it had asked is re-queued, so the same command continues later.
    argv = [
        "search", "--space", str(TINY_SPACE), "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db",
        "--data", str(text_corpus), "--no-tensorboard", "--trials", "2", "--workers", "1",
        "--cpus-per-trial", "4", "--evaluator", "sleep:0", "--worker-timeout", "3",
    ]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no Ray worker left") and "re-queued" in err[0]
    # It stopped because --worker-timeout gave the one worker up, not after some other wait.
    assert "1 of 1 could not be started or restarted within 3 s" in err[0]
    trials = trials_of(tmp_path)
    assert trials and all(t.state != TrialState.RUNNING for t in trials)
    assert all(t.user_attrs.get("requeued_as") for t in trials if t.state == TrialState.FAIL)


@pytest.mark.timeout(300)
def test_a_trial_past_trial_timeout_fails_and_its_worker_is_restarted(tmp_path, text_corpus):
    # Each trial would sleep 60 s (a hang); --trial-timeout 2 stops it.  One worker: the second
    # trial can only time out if the killed worker was restarted and started it.
    settings = settings_for(
        tmp_path,
        text_corpus,
        "--trials",
        "2",
        "--workers",
        "1",
        "--evaluator",
        "sleep:60",
        "--trial-timeout",
        "2",
    )
    pool = Recorder()
    busy: set[int] = set()  # PIDs of the worker processes seen running a trial
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.1):
            if pool.pool is not None:
                busy.update(pool.pool.busy_pids())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        Driver(settings, pool_factory=pool, out=io.StringIO()).run()
    finally:
        stop.set()
        watcher.join(10)
    trials = trials_of(tmp_path)
    check_finished(trials, 2)
    for t in trials:
        # FAIL, not COMPLETE: no sleep returned its result; the pool's --trial-timeout path ended it.
        assert t.state == TrialState.FAIL
        assert t.user_attrs["fail_reason"] == "timed out: still running after --trial-timeout 2 s"
        assert "attempts" not in t.user_attrs  # not retried: it would hang again
        assert "worker_pid" not in t.user_attrs  # no worker ever answered for it
    assert pool.pool.given_up == 0  # the killed worker came back
    assert len(busy) == 2  # the first trial's process was killed; a new one ran the second


def test_trial_timeout_needs_ray_workers(tmp_path, text_corpus, capsys):
    argv = [
        "search",
        "--space",
        str(TINY_SPACE),
        "--study",
        "s",
        "--storage",
        f"sqlite:///{tmp_path}/s.db",
        "--data",
        str(text_corpus),
        "--local",
        "--trial-timeout",
        "5",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and "resources.local (--local) runs trials one at a time in this process, without Ray; "
        "drop resources.trial_timeout (--trial-timeout)"
        in err[0]
    )
    assert not (tmp_path / "s.db").exists()
