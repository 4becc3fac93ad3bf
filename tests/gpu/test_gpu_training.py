"""Training on CUDA end to end: device facts, torch.compile, out-of-memory recovery, four trials on one GPU.

Uses the default corpus (set ``NAS_CACHE_DIR`` to a cache that holds it on a
machine without network access).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from gpu_archs import block_options

import nas
from evaluators.lm import train_lm
from nas.data import load_corpus
from nas.execution.worker import OUT_OF_MEMORY, run_trial
from nas.models import ArchConfig
from nas.spec.training import Budget, TrainRecipe

SMALL = {"d_model": 256, "n_heads": 4, "max_len": 256, "layers": {"repeat": 4, "attention": "mha"}}
RECIPE = TrainRecipe(batch_size=16, eval_batches=4, log_every=10)


@pytest.fixture(scope="module")
def corpus() -> Any:
    return load_corpus(None)


def payload(arch: dict[str, Any], recipe: dict[str, Any], steps: int, **extra: Any) -> dict[str, Any]:
    return {
        "arch": arch, "recipe": recipe, "budget": {"steps": steps}, "data": None,
        "hurdles": [], "thresholds": {}, "logdir": None, "hparams": {},
        "spec": {"search": {"evaluator": "lm"}, "resources": {"device": "cuda"}}, **extra,
    }  # fmt: skip


def test_a_cuda_run_records_its_device_dtype_and_memory(corpus: Any) -> None:
    r = train_lm(ArchConfig.from_dict(SMALL), RECIPE, Budget("steps", 30), corpus, device="cuda")
    assert r.device == "cuda" and r.device_name == torch.cuda.get_device_name()
    assert r.dtype == "bfloat16"
    assert r.peak_memory_bytes is not None and r.peak_memory_bytes > 0
    assert math.isfinite(r.val_loss) and r.val_loss < math.log(256)


def test_compile_trains_to_about_the_eager_loss(corpus: Any) -> None:
    arch = ArchConfig.from_dict(SMALL)
    eager = train_lm(arch, RECIPE, Budget("steps", 30), corpus, device="cuda")
    compiled = train_lm(arch, RECIPE, Budget("steps", 30), corpus, device="cuda", compile=True)
    assert compiled.compile_error is None
    assert compiled.compile_seconds is not None and compiled.compile_seconds > 0
    assert abs(compiled.val_loss - eager.val_loss) < 0.05  # same seed and batches; bf16 kernels differ


def _compiled_and_eager(raw: dict[str, Any], corpus: Any) -> tuple[Any, Any]:
    arch = ArchConfig.from_dict(raw)
    recipe = TrainRecipe(batch_size=16, eval_batches=4, log_every=50)
    eager = train_lm(arch, recipe, Budget("steps", 120), corpus, device="cuda")
    compiled = train_lm(arch, recipe, Budget("steps", 120), corpus, device="cuda", compile=True)
    return eager, compiled


@pytest.mark.parametrize("block", nas.ATTENTION.names())
def test_every_block_trains_the_same_compiled_as_eager(block: str, corpus: Any) -> None:
    """torch.compile must not change what a block learns: a compiled Primer-EZ once trained to 4.0 against
    2.4 eager on an H100 (the channels-last depthwise conv of mdha under inductor; docs/gpu.md)."""
    layers = {"repeat": 3, "attention": block_options(block, 256), "ffn": "squared_relu"}
    raw = {"d_model": 256, "n_heads": 4, "max_len": 256, "layers": layers}
    eager, compiled = _compiled_and_eager(raw, corpus)
    assert compiled.compile_error is None, compiled.compile_error
    assert abs(compiled.val_loss - eager.val_loss) < 0.1, (eager.val_loss, compiled.val_loss)


def test_transformer_pp_trains_the_same_compiled_as_eager(corpus: Any) -> None:
    layers = {"repeat": 3, "attention": {"type": "mha", "kv_heads": 2}, "ffn": "swiglu"}
    raw = {
        "d_model": 256,
        "n_heads": 4,
        "max_len": 256,
        "pos_encoding": "rope",
        "norm": "rmsnorm",
        "layers": layers,
    }
    eager, compiled = _compiled_and_eager(raw, corpus)
    assert compiled.compile_error is None, compiled.compile_error
    assert abs(compiled.val_loss - eager.val_loss) < 0.1, (eager.val_loss, compiled.val_loss)


def test_a_real_out_of_memory_frees_the_gpu_for_the_next_trial() -> None:
    huge = {"d_model": 1024, "n_heads": 8, "max_len": 1024, "layers": {"repeat": 4, "attention": "mha"}}
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    out = run_trial(payload(huge, {"batch_size": 4096, "eval_batches": 1}, steps=2))
    assert out["status"] == "failed" and out["reason"] == OUT_OF_MEMORY, out
    assert torch.cuda.memory_allocated() - before < 64 * 2**20  # the failed trial's tensors are gone
    ok = run_trial(payload(SMALL, {"batch_size": 16, "eval_batches": 2}, steps=10))
    assert ok["status"] == "ok", ok


def test_four_real_trials_share_one_gpu() -> None:
    pytest.importorskip("ray")
    from nas.execution.ray_pool import RayPool

    pool = RayPool(4, cpus_per_trial=1, gpus_per_trial=0.25)
    try:
        for tag in range(4):
            assert pool.has_idle()
            pool.submit(tag, payload(SMALL, {"batch_size": 16, "eval_batches": 2, "seed": tag}, steps=150))
        done = []
        while len(done) < 4:
            done += pool.wait(timeout=1.0)
    finally:
        pool.shutdown()
    results = [f.result for f in done]
    assert all(f.error is None for f in done) and all(r["status"] == "ok" for r in results), results
    assert {tuple(r["gpus"]) for r in results} == {tuple(results[0]["gpus"])}  # one GPU for all four
    assert all(r["metrics"]["device"] == "cuda" and r["metrics"]["peak_memory_bytes"] > 0 for r in results)
    assert max(r["started_at"] for r in results) < min(r["finished_at"] for r in results)  # all at once
