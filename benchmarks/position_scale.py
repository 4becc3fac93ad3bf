#!/usr/bin/env python
"""Positions that do not drown the tokens: sinusoidal tables at three scales against learned positions.

At initialisation the token embeddings are N(0, 0.02) and the sinusoidal table has RMS
sqrt(1/2), 35 times more: the token is under 0.1% of the first layer's input.  This trains
vanilla.yaml's shape (d_model 128, 4 layers, T 128) on the default corpus, same recipe and
step budget (equal compute: the table adds no FLOPs), ``--seeds`` seeds, with

* ``learned``: a learned table, N(0, 0.02) (the reference);
* ``sinusoidal x1``: the unscaled table (the engine before 2026-11-25, and seed 004's table);
* ``sinusoidal scaled``: the table times 0.02 / sqrt(1/2), so it starts at the embeddings' RMS
  (``nas.models.model.SINUSOIDAL_SCALE``, what the engine does now);
* ``sinusoidal, tokens x sqrt(d)``: the unscaled table, token embeddings multiplied by
  sqrt(d_model) at the input (the Transformer paper's and seed 004's choice);
* ``rope``, ``alibi``: no table; positions inside attention (for comparison at the same shape).

It reports the mean and spread of the validation loss and the ratio of the table's RMS to
the token embeddings' at initialisation.  Run::

    .venv/bin/python benchmarks/position_scale.py [--seeds 3] [--steps 200]

It prints a markdown table and replaces its own section of docs/BENCHMARKS.md (~10 min).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _doc import markdown_table, provenance, write_section  # noqa: E402

import nas  # noqa: E402
import nas.models.model as model_module  # noqa: E402
from evaluators.lm import train_lm  # noqa: E402
from nas.data import load_corpus  # noqa: E402
from nas.spec.training import Budget, TrainRecipe  # noqa: E402

SECTION = "position_scale"
VARIANTS = {  # name: (pos_encoding, table scale, token scale)
    "learned": ("learned", None, 1.0),
    "sinusoidal x1 (before)": ("sinusoidal", 1.0, 1.0),
    "sinusoidal scaled (now)": ("sinusoidal", model_module.SINUSOIDAL_SCALE, 1.0),
    "sinusoidal, tokens x sqrt(d)": ("sinusoidal", 1.0, "sqrt"),
    "rope (no table)": ("rope", None, 1.0),
    "alibi (no table)": ("alibi", None, 1.0),
}


def build(pos: str, table_scale: float | None, token_scale: float | str) -> nas.ArchConfig:
    raw = nas.load_arch(ROOT / "examples/archs/vanilla.yaml").to_dict()
    raw["pos_encoding"] = pos
    if table_scale is not None:
        model_module.SINUSOIDAL_SCALE = table_scale
    return nas.ArchConfig.from_dict(raw)


def scaled_tokens(factor: float) -> None:
    """Multiply the token embeddings at the input by ``factor`` (a hook on every new LM's ``tok_emb``)."""
    init = model_module.TransformerLM.__init__

    def patched(self: model_module.TransformerLM, arch: nas.ArchConfig) -> None:
        init(self, arch)
        if factor != 1.0:
            self.tok_emb.register_forward_hook(lambda _m, _i, out: out * factor)

    model_module.TransformerLM.__init__ = patched  # type: ignore[method-assign]


def ratio_at_init(arch: nas.ArchConfig, token_factor: float) -> float | None:
    torch.manual_seed(0)
    model = nas.build_model(arch)
    if model.pos_emb is None:
        return None
    tokens = model.tok_emb.weight.pow(2).mean().sqrt().item() * token_factor
    table = model.pos_emb.pow(2).mean().sqrt().item()
    return table / tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    corpus = load_corpus(None)
    init, scale = model_module.TransformerLM.__init__, model_module.SINUSOIDAL_SCALE
    rows = []
    for name, (pos, table_scale, token_scale) in VARIANTS.items():
        arch = build(pos, table_scale, token_scale)
        factor = math.sqrt(arch.d_model) if token_scale == "sqrt" else 1.0
        scaled_tokens(factor)
        ratio = ratio_at_init(arch, factor)
        losses = []
        for seed in range(args.seeds):
            t0 = time.perf_counter()
            recipe = TrainRecipe(batch_size=16, lr=0.003, seed=seed)
            budget = Budget("steps", args.steps)
            result = train_lm(arch, recipe, budget, corpus, device="cpu", threads=args.threads)
            losses.append(result.val_loss)
            took = time.perf_counter() - t0
            print(f"{name} seed {seed}: {result.val_loss:.4f} ({took:.0f} s)", file=sys.stderr)
        model_module.TransformerLM.__init__ = init  # type: ignore[method-assign]
        model_module.SINUSOIDAL_SCALE = scale
        spread = statistics.stdev(losses) if len(losses) > 1 else 0.0
        rows.append(
            [
                name,
                "-" if ratio is None else f"{ratio:.2f}",
                f"{statistics.mean(losses):.4f}",
                f"{spread:.4f}",
                " ".join(f"{v:.4f}" for v in losses),
            ]
        )
    table = markdown_table(
        ["positions", "table RMS / token RMS at init", "val loss (mean)", "sd", "per seed"], rows
    )
    print(table)
    if not args.no_write:
        body = (
            "## Positions that do not drown the tokens (`benchmarks/position_scale.py`)\n\n"
            f"{provenance(args.threads)}\n\n"
            f"vanilla.yaml's shape (d_model 128, 4 layers, T 128), batch 16, lr 0.003, {args.steps} steps, "
            f"seeds 0-{args.seeds - 1}, validation loss in nats per byte-token.\n\n{table}\n"
        )
        write_section(SECTION, body)


if __name__ == "__main__":
    main()
