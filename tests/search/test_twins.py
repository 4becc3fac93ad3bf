"""An architecture a hurdle stopped is not trained again while its recorded losses still miss a hurdle.

The searches here run the ``proxy:params`` evaluator inline (its loss, the same at
every hurdle, grows with the parameter count, so with ``n_layers`` fixed per trial
each trial's loss is known in advance), with trials queued in a chosen order.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState, create_trial

import nas.search.driver.loop as driver_module
from nas.cli import build_parser
from nas.commands.search import build_run
from nas.execution.pool import Finished
from nas.search.driver.allowance import spent_flops
from nas.search.driver.loop import METRIC_KEYS, Driver
from nas.search.driver.twins import Twins
from nas.search.samplers.hurdles import Hurdles
from nas.search.storage.study import create_new_study
from tests.search.test_oom_retry import ScriptedPool

SPACE = (
    "globals: {d_model: 16, n_heads: 2, n_layers: [1, 2, 3, 4, 5], max_len: 16}\n"
    "layers: {attention: [mha], ffn: {activation: relu, mult: 2}}\n"
    "recipe: {batch_size: 4, eval_batches: 1}\nbudget: {steps: 4}\nseed_archs: []\n"
)


class TwoWorkers(ScriptedPool):
    """Two workers: a trial runs inline when submitted, but its result comes back one ``wait`` at a time,
    oldest first, so the next trials are asked while it is still "running". ``fail``: trials that fail."""

    def __init__(self, fail: set[int] = frozenset(), stop: bool = False) -> None:
        super().__init__(oom=set())
        self.fail, self.stop = fail, stop

    def has_idle(self) -> bool:
        return len(self.done) < 2

    def submit(self, tag: int, payload: dict[str, Any], exclusive: bool = False) -> None:
        if tag in self.fail:
            self.submitted.append((tag, exclusive))
            self.done.append(Finished(tag, {"status": "failed", "reason": "error: injected"}))
        else:
            super().submit(tag, payload, exclusive)

    def wait(self, timeout: float) -> list[Finished]:
        if self.stop:
            raise KeyboardInterrupt  # Ctrl-C while trials run and wait
        out, self.done = self.done[:1], self.done[1:]
        return out


def search(
    tmp_path: Path,
    corpus: Path,
    monkeypatch: pytest.MonkeyPatch,
    layers: list[int],
    pool: ScriptedPool | None = None,
) -> tuple[list[optuna.trial.FrozenTrial], list[int]]:
    """One trial per entry of ``layers`` (its n_layers), in order; (trials, the trials sent to a worker)."""
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)

    def create_and_queue(settings: Any, heartbeat: Any = None) -> Any:
        study, seeds, lease = create_new_study(settings, heartbeat)
        for n in layers:
            study.enqueue_trial({"n_layers": n})
        return study, seeds, lease

    monkeypatch.setattr(driver_module, "create_new_study", create_and_queue)
    args = build_parser().parse_args([
        "search", "--space", str(space), "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db",
        "--runs-dir", str(tmp_path / "runs"), "--data", str(corpus), "--no-tensorboard",
        "--trials", str(len(layers)), "--sampler", "random", "--evaluator", "proxy:params", "--workers", "2",
        "--objective", "loss", "--hurdles", "0.5", "--hurdle-percentile", "50", "--hurdle-min-trials", "1",
    ])  # fmt: skip
    pool = pool or ScriptedPool(oom=set())
    Driver(build_run(args), pool_factory=pool, out=io.StringIO()).run()
    trials = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db").trials
    assert [t.params["n_layers"] for t in trials] == layers
    return trials, [tag for tag, _ in pool.submitted]


def test_a_stopped_architecture_that_still_misses_its_hurdle_trains_nothing(tmp_path, corpus, monkeypatch):
    # 1 layer passes (no threshold yet); 2 layers miss the median of {1 layer}; proposed again, its
    # recorded loss still misses the median of {1 layer, 2 layers}, however often it comes back.
    trials, trained = search(tmp_path, corpus, monkeypatch, [1, 2, 2, 2])
    assert trained == [0, 1]
    assert [t.state for t in trials] == [TrialState.COMPLETE] + [TrialState.PRUNED] * 3
    first = trials[1]
    for t in trials[2:]:
        assert t.user_attrs["duplicate_of"] == 1 and t.user_attrs["pruned_at"] == 0.5
        assert t.user_attrs["intermediate"] == first.user_attrs["intermediate"]
        assert t.user_attrs["val_loss"] == first.user_attrs["val_loss"]
        assert t.intermediate_values == first.intermediate_values  # what the samplers read of a stopped trial
        assert "worker_pid" not in t.user_attrs
    assert spent_flops(trials) == spent_flops(trials[:2])  # the repeats cost no training FLOPs


def test_a_stopped_architecture_trains_again_once_its_hurdle_would_pass(tmp_path, corpus, monkeypatch):
    # Losses grow with the layers.  Trial 1 (2 layers) misses the median of {1}; by trial 5 the
    # median of {1, 2, 3, 4, 5} is the 3-layer loss, which the 2-layer loss passes: it trains, to
    # the end, and a third proposal reuses that result.
    trials, trained = search(tmp_path, corpus, monkeypatch, [1, 2, 3, 4, 5, 2, 2])
    assert trained == [0, 1, 2, 3, 4, 5]
    assert trials[1].state == TrialState.PRUNED and trials[5].state == TrialState.COMPLETE
    assert "duplicate_of" not in trials[5].user_attrs
    assert trials[5].user_attrs["intermediate"] == trials[1].user_attrs["intermediate"]  # same loss again
    assert trials[6].state == TrialState.COMPLETE and trials[6].user_attrs["duplicate_of"] == 5


def test_a_proposal_of_an_architecture_in_training_waits_for_its_result(tmp_path, corpus, monkeypatch):
    # Trial 1 is trial 0's architecture, proposed while trial 0 trains: it waits (trial 2 takes the
    # second worker) and reuses trial 0's result instead of training it a second time at once.
    trials, trained = search(tmp_path, corpus, monkeypatch, [1, 1, 2], TwoWorkers())
    assert trained == [0, 2]
    assert trials[1].state == TrialState.COMPLETE and trials[1].user_attrs["duplicate_of"] == 0
    assert trials[1].values == trials[0].values and "worker_pid" not in trials[1].user_attrs


def test_a_waiting_proposal_trains_when_its_twin_failed(tmp_path, corpus, monkeypatch):
    trials, trained = search(tmp_path, corpus, monkeypatch, [1, 1, 2], TwoWorkers(fail={0}))
    assert trained == [0, 2, 1]  # trial 1 goes to the worker trial 0 left
    assert trials[0].state == TrialState.FAIL and trials[1].state == TrialState.COMPLETE
    assert "duplicate_of" not in trials[1].user_attrs


def test_a_stopped_driver_requeues_its_waiting_trials_too(tmp_path, corpus, monkeypatch):
    # a new study stopped before any result is dropped whole (test_study.py); kept here, as a study with a
    # result is, to show what the stop leaves in it
    monkeypatch.setattr(driver_module, "drop_if_empty", lambda study: False)
    with pytest.raises(KeyboardInterrupt):
        search(tmp_path, corpus, monkeypatch, [1, 1, 2], TwoWorkers(stop=True))
    trials = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db").trials
    assert [t.state for t in trials[:3]] == [TrialState.FAIL] * 3  # nothing left RUNNING
    assert all("requeued_as" in t.user_attrs for t in trials[:3])
    assert [t.state for t in trials[3:]] == [TrialState.WAITING] * 3  # run first when continued


def stopped_study(losses_of_others: list[float]) -> optuna.Study:
    """A study where trial 0 (arch "x") stopped at hurdle 0.5 after 2.0 at 0.25, beside other archs."""
    study = optuna.create_study()
    study.add_trial(create_trial(state=TrialState.PRUNED, user_attrs={
        "arch_id": "x", "intermediate": {"0.25": 2.0, "0.5": 3.0}, "pruned_at": 0.5, "val_loss": 3.0,
        "train_flops": 5.0,
    }))  # fmt: skip
    for i, loss in enumerate(losses_of_others):
        study.add_trial(create_trial(state=TrialState.COMPLETE, value=loss, user_attrs={
            "arch_id": f"o{i}", "intermediate": {"0.25": loss, "0.5": loss},
        }))  # fmt: skip
    return study


@pytest.mark.parametrize(
    ("others", "stop", "intermediate", "metrics"),
    [
        ([2.5, 2.5], 0.5, {"0.25": 2.0, "0.5": 3.0}, {"val_loss": 3.0, "train_flops": 5.0}),  # where it was
        ([1.0, 1.0], 0.25, {"0.25": 2.0}, {}),  # the first hurdle rose above it: it would stop sooner
    ],
)
def test_a_stopped_twin_stops_where_its_losses_say(others, stop, intermediate, metrics):
    study = stopped_study(others)
    twins = Twins.of(study.get_trials(), METRIC_KEYS)
    trial = study.ask()
    state, text = twins.reuse(study, trial, "x", Hurdles((0.25, 0.5), percentile=50, min_trials=1))
    assert state == "PRUNED" and "trial 0" in text
    t = study.trials[trial.number]
    assert t.state == TrialState.PRUNED and t.user_attrs["duplicate_of"] == 0
    assert t.user_attrs["pruned_at"] == stop and t.user_attrs["intermediate"] == intermediate
    # Stopping sooner it would have trained less: the twin's metrics are not this run's.
    assert {k: t.user_attrs[k] for k in ("val_loss", "train_flops") if k in t.user_attrs} == metrics


def test_a_stopped_twin_trains_when_its_losses_pass_every_hurdle_it_reached():
    study = stopped_study([4.0, 4.0])
    twins = Twins.of(study.get_trials(), METRIC_KEYS)
    assert twins.reuse(study, study.ask(), "x", Hurdles((0.25, 0.5), percentile=50, min_trials=1)) is None
    assert twins.reuse(study, study.ask(), "x", Hurdles()) is None  # no hurdles: nothing stops it now
    assert study.trials[-1].state == TrialState.RUNNING  # left for the driver to send to a worker
