"""A trial that runs out of GPU memory while sharing a GPU is retried once with the GPU to itself.

The pool here is scripted (no Ray, no GPU): it answers a shared submission of
the chosen trials with the worker's out-of-memory result and runs everything
else in this process.  tests/search/test_gpu_packing.py checks that the Ray
pool gives an exclusive trial its GPU alone; tests/gpu runs a real OOM.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from nas.cli import build_parser
from nas.commands.search import build_run
from nas.execution.pool import Finished, PoolBase
from nas.execution.worker import OUT_OF_MEMORY, run_trial
from nas.search.driver.loop import Driver

TINY_SPACE = Path(__file__).with_name("tiny_space.yaml")


class ScriptedPool(PoolBase):
    """Runs trials inline; those in ``oom`` run out of memory when shared, ``oom_alone`` ones when alone."""

    def __init__(self, oom: set[int], oom_alone: set[int] = frozenset()) -> None:
        self.oom, self.oom_alone = oom, oom_alone
        self.submitted: list[tuple[int, bool]] = []
        self.done: list[Finished] = []

    def __call__(self, settings: Any) -> ScriptedPool:  # the driver's pool factory
        return self

    def has_idle(self) -> bool:
        return not self.done

    def submit(self, tag: int, payload: dict[str, Any], exclusive: bool = False) -> None:
        self.submitted.append((tag, exclusive))
        if tag in (self.oom_alone if exclusive else self.oom):
            result = {"status": "failed", "reason": OUT_OF_MEMORY, "detail": "CUDA out of memory (injected)"}
        else:
            result = run_trial(payload)
        self.done.append(Finished(tag, result))

    def wait(self, timeout: float) -> list[Finished]:
        out, self.done = self.done, []
        return out

    def shutdown(self) -> None:
        pass


@pytest.fixture(autouse=True)
def gpus_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted pool plays GPU workers on this machine: its device check would refuse them."""
    import nas.preflight

    monkeypatch.setattr(nas.preflight, "check_devices", lambda *args, **kwargs: None)


def search(tmp_path: Path, corpus: Path, pool: ScriptedPool, gpus: str) -> list[optuna.trial.FrozenTrial]:
    args = build_parser().parse_args([
        "search", "--space", str(TINY_SPACE), "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db",
        "--runs-dir", str(tmp_path / "runs"), "--data", str(corpus), "--no-tensorboard", "--trials", "3",
        "--sampler", "random", "--evaluator", "proxy:params", "--gpus-per-trial", gpus, "--workers", "1",
    ])  # fmt: skip
    Driver(build_run(args), pool_factory=pool, out=io.StringIO()).run()
    return optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db").trials


def test_oom_while_sharing_is_retried_alone(tmp_path: Path, text_corpus: Path) -> None:
    pool = ScriptedPool(oom={1})
    trials = search(tmp_path, text_corpus, pool, "0.5")
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    assert pool.submitted == [(0, False), (1, False), (1, True), (2, False)]
    assert trials[1].user_attrs["retried_alone"] is True
    assert "retried_alone" not in trials[0].user_attrs


def test_oom_when_alone_too_ends_fail(tmp_path: Path, text_corpus: Path) -> None:
    pool = ScriptedPool(oom={1}, oom_alone={1})
    trials = search(tmp_path, text_corpus, pool, "0.25")
    assert trials[1].state == TrialState.FAIL
    assert trials[1].user_attrs["fail_reason"] == OUT_OF_MEMORY
    assert pool.submitted.count((1, True)) == 1  # one retry alone, not more


@pytest.mark.parametrize("gpus", ["1", "0"])
def test_oom_on_a_whole_gpu_or_cpu_is_not_retried(tmp_path: Path, text_corpus: Path, gpus: str) -> None:
    pool = ScriptedPool(oom={0})
    trials = search(tmp_path, text_corpus, pool, gpus)
    assert trials[0].state == TrialState.FAIL and trials[0].user_attrs["fail_reason"] == OUT_OF_MEMORY
    assert all(not exclusive for _, exclusive in pool.submitted)
