"""Architectures the GPU tests and benchmarks build: every registered block at a given context."""

from __future__ import annotations

from typing import Any

import nas


def block_options(block: str, seq_len: int) -> dict[str, Any]:
    """Options that make ``block`` valid at context ``seq_len`` (the defaults where they are)."""
    att: dict[str, Any] = {"type": block}
    if block == "mixture":
        att["components"] = ["mha", "synth_random"]
    if block == "synth_factorized_dense":
        att.update(a=32, b=(seq_len + 31) // 32)  # a * b >= seq_len
    return att


def block_arch(
    block: str, d_model: int, n_layers: int, n_heads: int, seq_len: int, **top: Any
) -> nas.ArchConfig:
    """A stack of ``n_layers`` identical layers of ``block`` with a ReLU FFN."""
    raw = {
        "d_model": d_model,
        "n_heads": n_heads,
        "max_len": seq_len,
        "layers": {"repeat": n_layers, "attention": block_options(block, seq_len), "ffn": "relu"},
        **top,
    }
    return nas.ArchConfig.from_dict(raw)
