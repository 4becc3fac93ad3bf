"""Every file in examples/archs loads, builds, and trains a couple of steps."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from synthetic_text import write_parallel_corpus

import nas
from evaluators.lm import train_lm
from nas.data import load_corpus
from nas.files.archfile import load_arch_file
from nas.spec.training import Budget, TrainRecipe

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "examples" / "archs").glob("*.yaml"))
pytestmark = pytest.mark.usefixtures("single_thread")


def test_the_seed_architectures_have_files() -> None:
    # A block needs no example file (docs/adding_a_block.md); the seeds of every search do.
    assert {"vanilla", "primer_ez"} <= {f.stem for f in FILES}


def test_vanilla_and_primer_ez_are_the_documented_shapes() -> None:
    vanilla = nas.load_arch(ROOT / "examples" / "archs" / "vanilla.yaml")
    primer = nas.load_arch(ROOT / "examples" / "archs" / "primer_ez.yaml")
    for arch in (vanilla, primer):
        assert (arch.d_model, arch.n_layers, arch.n_heads, arch.max_len) == (128, 4, 4, 128)
        assert arch.pos_encoding == "learned" and arch.tie_embeddings
    assert {(layer.attention.type, layer.ffn.activation) for layer in vanilla.layers} == {("mha", "relu")}
    assert {
        (layer.attention.type, layer.attention.options.to_dict().get("kernel"), layer.ffn.activation)
        for layer in primer.layers
    } == {("mdha", 3, "squared_relu")}


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_example_loads_builds_and_trains(path: Path, corpus_dir: Path, tmp_path: Path) -> None:
    doc = load_arch_file(path)
    arch = doc["arch"]
    recipe = TrainRecipe.from_dict(doc.get("recipe"))
    Budget.from_dict(doc["budget"])
    if path.stem in nas.ATTENTION.names():  # a file named after a block uses that block
        assert any(layer.attention.type == path.stem for layer in arch.layers)
    model = nas.build_model(arch)
    data = corpus_dir
    if arch.is_seq2seq:  # source and target side by side; bytes and pad, bos, eos
        assert model(torch.zeros(1, 16, dtype=torch.long)).shape == (1, 8, arch.vocab_size)
        data = write_parallel_corpus(tmp_path / "pairs")
    else:
        assert model(torch.zeros(1, 8, dtype=torch.long)).shape == (1, 8, 256)
    small = dataclasses.replace(recipe, batch_size=2, seq_len=32, eval_batches=1)
    corpus = load_corpus(data)
    result = train_lm(arch.with_vocab(corpus.vocab_size), small, Budget("steps", 2), corpus, device="cpu")
    assert result.steps == 2 and result.val_loss < 10
