#!/usr/bin/env python
"""mdha in the encoder: a causal convolution (each position mixes the k-1 before it) against a
centered one (kernel 3: one position on each side), on the built-in seq2seq task.

Trains examples/archs/seq2seq.yaml's shape (d_model 64, 2 encoder and 2 decoder layers, T 64,
its recipe and its 1e12 FLOPs budget) on ``shakespeare-reversed`` with the encoder's attention
replaced by ``mdha`` (kernel 3, causal, then centered) and, for reference, ``mha``; ``--seeds``
seeds each, the decoder's layers unchanged.  Run::

    .venv/bin/python benchmarks/encoder_conv.py [--seeds 3]

It prints a markdown table and replaces its own section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _doc import markdown_table, provenance, write_section  # noqa: E402

import nas  # noqa: E402
from evaluators.lm import train_lm  # noqa: E402
from nas.data import load_corpus  # noqa: E402
from nas.files.archfile import load_arch_file  # noqa: E402
from nas.spec.training import Budget, TrainRecipe  # noqa: E402

SECTION = "encoder_conv"
ENCODERS = {
    "mha": "mha",
    "mdha, causal convolution": {"type": "mdha", "kernel": 3},
    "mdha, centered convolution": {"type": "mdha", "kernel": 3, "centered": True},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    doc = load_arch_file(ROOT / "examples/archs/seq2seq.yaml")
    corpus = load_corpus("shakespeare-reversed")
    budget = Budget.from_dict(doc["budget"])
    rows = []
    for name, attention in ENCODERS.items():
        raw = doc["arch"].to_dict()
        ffn = {"activation": "relu", "mult": 4}
        raw["encoder_layers"] = {"repeat": 2, "attention": attention, "ffn": ffn}
        arch = nas.ArchConfig.from_dict(raw).with_vocab(corpus.vocab_size)
        losses = []
        for seed in range(args.seeds):
            t0 = time.perf_counter()
            recipe = TrainRecipe.from_dict({**doc["recipe"], "seed": seed})
            result = train_lm(arch, recipe, budget, corpus, device="cpu", threads=args.threads)
            losses.append(result.val_loss)
            took = time.perf_counter() - t0
            print(f"{name} seed {seed}: {result.val_loss:.4f} ({took:.0f} s)", file=sys.stderr)
        spread = statistics.stdev(losses) if len(losses) > 1 else 0.0
        per_seed = " ".join(f"{v:.4f}" for v in losses)
        rows.append([name, f"{statistics.mean(losses):.4f}", f"{spread:.4f}", per_seed])
    table = markdown_table(["encoder attention", "val loss (mean)", "sd", "per seed"], rows)
    print(table)
    if not args.no_write:
        body = (
            "## A centered convolution in the encoder (`benchmarks/encoder_conv.py`)\n\n"
            f"{provenance(args.threads)}\n\n"
            "examples/archs/seq2seq.yaml's shape, recipe and budget (1e12 FLOPs) on "
            "`shakespeare-reversed`, "
            f"the encoder's 2 layers replaced; seeds 0-{args.seeds - 1}; validation loss per target "
            "token.\n\n"
            f"{table}\n"
        )
        write_section(SECTION, body)


if __name__ == "__main__":
    main()
