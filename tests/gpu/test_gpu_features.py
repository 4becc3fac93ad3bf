"""What came after the last GPU run (2026-11-27), once on CUDA: a tokenized corpus with its byte ends
(bits per byte), a search that keeps its best weights, their Hugging Face export, WSD rungs, a
ladder, and an encoder-decoder.  Small: seconds each on an H100.

Each test's logic was run on a CPU by setting ``DEVICE = "cpu"`` (and lifting the conftest's skip).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest

import nas
from evaluators.lm import train_lm
from nas.cli import main
from nas.data import load_corpus
from nas.files.checkpoint import load_checkpoint
from nas.models import ArchConfig
from nas.spec.training import Budget, TrainRecipe

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the corpus and tokenizer makers
from synthetic_text import write_corpus  # noqa: E402
from token_corpus import train_tiny_bpe  # noqa: E402

DEVICE = "cuda"
SPACE = """
name: gpu-features
globals: {d_model: 64, n_heads: 4, n_layers: 2, max_len: 64}
layers:
  attention: {mha: {}, mdha: {kernel: 3}}
  ffn: {activation: [relu, squared_relu], mult: 2}
recipe: {batch_size: 8, eval_batches: 2, log_every: 10}
budget: {steps: 30}
"""


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Two trials on CUDA on a BPE-tokenized corpus (with val_bytes.bin), the best one's weights kept."""
    root = tmp_path_factory.mktemp("gpu_features")
    (root / "space.yaml").write_text(SPACE, encoding="utf-8")
    text = write_corpus(root / "text", 12)
    tok = train_tiny_bpe(root / "tok" / "tokenizer.json")
    where = ["--study", "s", "--storage", f"sqlite:///{root}/s.db", "--runs-dir", str(root / "runs")]
    argv = ["search", "--space", str(root / "space.yaml"), *where, "--data", str(text), "--tokenizer",
            str(tok), "--local", "--device", DEVICE, "--trials", "2", "--objective", "loss",
            "--sampler", "random", "--keep-weights", "1", "--no-tensorboard"]  # fmt: skip
    assert main(argv) == 0
    return root, where


def test_a_search_on_cuda_scores_bits_per_byte_and_keeps_its_best_weights(searched, capsys) -> None:
    root, where = searched
    weights = list((root / "runs").rglob("*.safetensors"))
    assert len(weights) == 1, weights
    model = nas.load_model(weights[0])  # saved from CUDA, read on the CPU
    assert all(p.device.type == "cpu" for p in model.parameters())
    metrics = load_checkpoint(weights[0])["metrics"]
    assert metrics["device"] == DEVICE
    assert metrics["val_bpb"] is not None and math.isfinite(metrics["val_bpb"])
    assert 0 < metrics["val_bpb"] < metrics["val_loss"] / math.log(2)  # BPE tokens hold over one byte each


def test_the_kept_cuda_weights_export_to_hugging_face(searched, tmp_path) -> None:
    root, where = searched
    out = tmp_path / "hf"
    assert main(["export", *where, "--best", "--hf", str(out)]) == 0
    assert (out / "config.json").is_file() and list(out.glob("*.safetensors"))


def test_a_ladder_of_the_cuda_study_runs_on_cuda(searched, capsys) -> None:
    root, where = searched
    argv = ["ladder", *where, "--local", "--no-tensorboard", "--baseline", "vanilla", "--sizes", "0.25,0.5,1",
            "--json"]  # fmt: skip
    capsys.readouterr()
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["families"]) == 2  # the best trial and vanilla, each fitted over its 3 sizes


def test_wsd_rungs_on_cuda_leave_the_main_run_as_it_was(tmp_path: Path) -> None:
    corpus = load_corpus(write_corpus(tmp_path, 12))
    arch = ArchConfig.from_dict(
        {"d_model": 64, "n_heads": 4, "max_len": 64, "layers": {"repeat": 2, "attention": "mha"}}
    )
    recipe = TrainRecipe(batch_size=8, eval_batches=2, log_every=10, schedule="wsd", seed=0)
    plain = train_lm(arch, recipe, Budget("steps", 40), corpus, device=DEVICE)
    rung = train_lm(arch, recipe, Budget("steps", 40, (0.5,)), corpus, device=DEVICE)
    alone = train_lm(arch, recipe, Budget("steps", 20), corpus, device=DEVICE)
    assert rung.device == DEVICE and [r["steps"] for r in rung.rungs] == [20]
    assert abs(rung.val_loss - plain.val_loss) < 1e-3  # the branch was put back (bf16 kernels may differ)
    assert abs(rung.rungs[0]["val_loss"] - alone.val_loss) < 2e-2  # what an independent 20-step run gets


def test_a_rungs_snapshot_lives_in_pinned_host_memory_and_restores_exactly() -> None:
    import torch

    from evaluators.loop import _Snapshot
    from evaluators.step import TrainStep

    device = torch.device(DEVICE)
    torch.manual_seed(0)
    arch = ArchConfig.from_dict(
        {"d_model": 64, "n_heads": 4, "max_len": 32, "layers": {"repeat": 2, "attention": "mha"}}
    )
    model = nas.build_model(arch).to(device)
    stepper = TrainStep(model, TrainRecipe(batch_size=4, seed=0), device)
    batch = torch.randint(0, arch.vocab_size, (4, 33), device=device)
    stepper(batch[:, :-1], batch[:, 1:])  # AdamW's moments exist
    live = [t.detach().clone() for t in model.parameters()]
    state = stepper.optimizer.state
    moments = [(p, {k: v.clone() for k, v in state[p].items()}) for p in model.parameters()]
    before = torch.cuda.memory_allocated(device) if DEVICE == "cuda" else 0
    snapshot = _Snapshot(stepper, torch.Generator().manual_seed(0))
    if DEVICE == "cuda":
        assert torch.cuda.memory_allocated(device) == before  # nothing of it on the GPU
        assert all(saved.device.type == "cpu" and saved.is_pinned() for _, saved in snapshot.tensors)
    for _ in range(3):
        stepper(batch[:, :-1], batch[:, 1:])
    snapshot.restore()
    assert all(torch.equal(t, saved) for t, saved in zip(model.parameters(), live, strict=True))
    for p, saved in moments:  # AdamW's step and both moments, each back on its own device
        assert state[p].keys() == saved.keys()
        assert all(state[p][k].device == v.device and torch.equal(state[p][k], v) for k, v in saved.items())


def test_an_encoder_decoder_trains_and_decodes_on_cuda() -> None:
    arch = nas.ArchConfig.from_dict(
        {
            "task": "seq2seq",
            "vocab_size": 259,
            "d_model": 64,
            "n_heads": 4,
            "max_len": 64,
            "encoder_layers": {"repeat": 2, "attention": "mha"},
            "layers": {"repeat": 2, "attention": "mha"},
        }  # fmt: skip
    )
    recipe = dataclasses.replace(TrainRecipe(), batch_size=8, eval_batches=2, log_every=10)
    r = train_lm(arch, recipe, Budget("steps", 30), "shakespeare-reversed", device=DEVICE)
    assert r.device == DEVICE and math.isfinite(r.val_loss)
    assert r.samples and all(isinstance(s["output"], str) for s in r.samples)
    if DEVICE == "cuda":
        assert r.dtype == "bfloat16" and r.peak_memory_bytes and r.peak_memory_bytes > 0
