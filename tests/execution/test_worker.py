"""nas.execution.worker: a payload in, a plain result out; every candidate fault is that trial's alone."""

from __future__ import annotations

import json
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch

import nas
from evaluators.step import TrainStep
from nas.execution.worker import run_trial

pytestmark = pytest.mark.usefixtures("single_thread")
ROOT = Path(__file__).resolve().parents[2]
ARCH = nas.ArchConfig.from_dict(
    {"d_model": 32, "n_heads": 2, "max_len": 32, "layers": {"repeat": 1, "attention": "mha", "ffn": "relu"}}
)


def payload(
    corpus: Path | None = None, *, evaluator: str = "lm", compile: bool = False, **extra: Any
) -> dict[str, Any]:
    """A trial's payload; the evaluator, the device and compile travel in its spec, as the driver's do."""
    recipe = {"batch_size": 2, "eval_batches": 1, "log_every": 2}
    data = str(corpus) if corpus else None
    return {
        "arch": ARCH.to_dict(),
        "recipe": recipe,
        "budget": {"steps": 4},
        "data": data,
        "spec": {"search": {"evaluator": evaluator}, "resources": {"device": "cpu", "compile": compile}},
        **extra,
    }


def test_a_trial_that_runs_out_of_memory_gives_it_back_and_the_next_trial_runs(
    corpus_dir, monkeypatch
) -> None:
    models: list[weakref.ref] = []
    real_step = TrainStep.__call__

    def out_of_memory(self: TrainStep, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        models.append(weakref.ref(self.model))
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB\nmore detail")

    monkeypatch.setattr(TrainStep, "__call__", out_of_memory)
    failed = run_trial(payload(corpus_dir))
    assert failed["status"] == "failed" and failed["reason"] == "out of memory"
    assert failed["detail"] == "CUDA out of memory. Tried to allocate 20.00 GiB"
    assert models and models[0]() is None  # nothing (a traceback frame, a cycle) still holds the model

    monkeypatch.setattr(TrainStep, "__call__", real_step)
    ok = run_trial(payload(corpus_dir))
    assert ok["status"] == "ok" and ok["metrics"]["steps"] == 4 and ok["metrics"]["device"] == "cpu"
    json.dumps(ok)  # plain data: it crosses to the driver through Ray


def test_a_missed_hurdle_prunes_and_records_the_loss_there() -> None:
    result = run_trial(payload(evaluator="proxy:params", hurdles=[0.5], thresholds={"0.5": 1.0}))
    loss = result["metrics"]["val_loss"]
    assert result["status"] == "pruned" and result["intermediate"] == {"0.5": loss} and loss > 1.0
    assert result["metrics"]["stopped_at"] == 0.5 and result["metrics"]["proxy"] == "params"


def test_compile_reaches_the_trainer_from_the_payload(corpus_dir, monkeypatch) -> None:
    def refuse(model: torch.nn.Module) -> torch.nn.Module:
        raise RuntimeError("no compiler in this test")

    monkeypatch.setattr(torch, "compile", refuse)
    result = run_trial(payload(corpus_dir, compile=True))
    assert result["status"] == "ok"  # a failed compile is never a failed trial
    assert result["metrics"]["compile_error"] == "RuntimeError: no compiler in this test"


def test_an_unknown_evaluator_fails_the_trial_naming_the_valid_ones() -> None:
    result = run_trial(payload(evaluator="bleu"))
    assert result["status"] == "failed" and "unknown evaluator 'bleu'; valid: lm;" in result["reason"]


def test_a_trial_that_fails_mid_training_reports_what_it_spent(corpus_dir, monkeypatch) -> None:
    real_step = TrainStep.__call__
    calls = []

    def fault_in_step_3(self: TrainStep, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected fault")
        return real_step(self, x, y)

    monkeypatch.setattr(TrainStep, "__call__", fault_in_step_3)
    failed = run_trial(payload(corpus_dir))
    assert failed["status"] == "failed" and "injected fault" in failed["reason"]
    per_step = 2 * 32 * nas.compute(ARCH, 32).train_flops_per_token  # batch 2 x 32 tokens
    assert failed["spent"] == {"steps": 2, "tokens": 2 * 2 * 32, "train_flops": 2 * per_step}

    diverged = run_trial(
        payload(
            corpus_dir,
            recipe={"batch_size": 2, "eval_batches": 1, "log_every": 2, "lr": 1e6, "warmup_frac": 0.0},
        )
    )
    assert diverged["status"] == "failed" and diverged["reason"] == "diverged"
    # caught at the first report point (log_every 2): the two steps taken count
    assert diverged["spent"] == {"steps": 2, "tokens": 2 * 2 * 32, "train_flops": 2 * per_step}
    json.dumps(diverged)  # plain data: it crosses to the driver through Ray


def test_workers_and_evaluators_import_nothing_of_the_search_optuna_or_ray() -> None:
    code = (
        "import sys, nas.execution.worker, evaluators; "
        "print(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('optuna', 'ray') or m.startswith('nas.search')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_of_two_hurdles_on_one_step_the_one_missed_is_named(corpus_dir) -> None:
    """0.25 and 0.5 of 2 steps are both checked after step 1: a loss over 0.25's threshold but under
    0.5's stops the trial at 0.25 (the driver said 'stopped at hurdle 0.5', the last one recorded)."""
    import optuna

    from nas.search.driver.outcome import tell_result

    result = run_trial(
        payload(corpus_dir, budget={"steps": 2}, hurdles=[0.25, 0.5], thresholds={"0.25": 0.0, "0.5": 1e9})
    )
    assert result["status"] == "pruned" and result["missed_at"] == 0.25
    assert set(result["intermediate"]) == {"0.25", "0.5"}
    study = optuna.create_study()
    trial = study.ask()
    state, text, _, _ = tell_result(study, trial, result, "loss", ("val_loss",))
    assert state == "PRUNED" and text.startswith("stopped at hurdle 0.25: loss "), text
    assert study.trials[0].user_attrs["pruned_at"] == 0.25
