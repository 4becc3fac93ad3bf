"""A broken candidate ends FAIL with its reason, and the search goes on to the trials asked for.

These run the real driver, worker and trainer through ``search --local`` (the
in-process pool), so a fault can be injected by patching a block: a Ray
worker process would not see the patch.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from optuna.trial import TrialState

from nas.cli import main
from nas.models import ArchConfig
from nas.models.attention.mdha import MultiDConvHeadAttention
from nas.models.cost import compute

TINY_SPACE = Path(__file__).parent / "search" / "tiny_space.yaml"


def search(tmp_path: Path, corpus: Path, *extra: str, space: Path = TINY_SPACE) -> list[Any]:
    argv = [
        "search", "--space", str(space), "--study", "s", "--storage", f"sqlite:///{tmp_path}/s.db",
        "--runs-dir", str(tmp_path / "runs"), "--data", str(corpus), "--local", "--no-tensorboard",
        "--sampler", "random", *extra,
    ]  # fmt: skip
    assert main(argv) == 0
    return optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db").trials


def no_nan(trials: list[optuna.trial.FrozenTrial]) -> bool:
    return all(t.values is None or all(math.isfinite(v) for v in t.values) for t in trials)


def test_diverging_candidates_fail_and_the_sampler_never_sees_a_nan(tmp_path, corpus_dir, single_thread):
    space = tmp_path / "diverging.yaml"
    space.write_text(TINY_SPACE.read_text().replace("  log_every: 2\n", "  log_every: 2\n  lr: 1.0e+6\n"))
    trials = search(tmp_path, corpus_dir, "--steps", "6", "--trials", "3", space=space)
    assert len(trials) == 3
    for t in trials:
        assert t.state == TrialState.FAIL and t.values is None
        assert t.user_attrs["fail_reason"] == "diverged"
        assert "loss" in t.user_attrs["fail_detail"]
        # the steps it took before the loss was caught are compute spent: counted as a finished trial's
        steps, arch = t.user_attrs["steps"], ArchConfig.from_dict(t.user_attrs["arch"])
        per_step = 4 * 16 * compute(arch, 16).train_flops_per_token  # the tiny space: batch 4 x 16 tokens
        assert 0 < steps <= 6 and t.user_attrs["tokens"] == steps * 4 * 16
        assert t.user_attrs["train_flops"] == steps * per_step and t.user_attrs["seconds"] > 0
    assert no_nan(trials)


@pytest.mark.parametrize(
    "fault,reason",
    [
        (RuntimeError("injected fault in mdha"), "error: RuntimeError: injected fault in mdha"),
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "out of memory"),
    ],
    ids=["exception", "out-of-memory"],
)
def test_a_fault_inside_a_block_fails_only_that_candidate(
    tmp_path, corpus_dir, single_thread, monkeypatch, fault, reason
):
    def broken(self, x):
        raise fault

    monkeypatch.setattr(MultiDConvHeadAttention, "project", broken)
    trials = search(tmp_path, corpus_dir, "--steps", "4", "--trials", "5")
    assert len(trials) == 5 and all(t.state != TrialState.RUNNING for t in trials)
    uses_mdha = [t for t in trials if "mdha" in t.user_attrs["summary"]]
    others = [t for t in trials if "mdha" not in t.user_attrs["summary"]]
    assert uses_mdha and others  # the seed architectures: vanilla (mha) and Primer-EZ (mdha)
    for t in uses_mdha:
        assert t.state == TrialState.FAIL and t.user_attrs["fail_reason"] == reason
        if isinstance(fault, torch.OutOfMemoryError):
            continue
        tb = t.user_attrs["traceback"]
        assert tb.startswith("Traceback") and "in broken" in tb and "injected fault in mdha" in tb
    for t in others:
        assert t.state == TrialState.COMPLETE, t.user_attrs.get("fail_reason")
    assert no_nan(trials)


def test_a_candidate_that_fails_to_compile_trains_eager_and_its_trial_says_why(
    tmp_path, corpus_dir, single_thread, monkeypatch
):
    def refuse(model):
        raise RuntimeError("injected compiler failure")

    monkeypatch.setattr(torch, "compile", refuse)
    trials = search(tmp_path, corpus_dir, "--steps", "2", "--trials", "2", "--compile")
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    assert all(t.user_attrs["compile_error"] == "RuntimeError: injected compiler failure" for t in trials)
    assert all(t.user_attrs["dtype"] == "float32" and t.user_attrs["vocab_size"] == 256 for t in trials)
