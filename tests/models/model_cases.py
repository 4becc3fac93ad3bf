"""Tiny sizes and the block variants that the model tests run over (imported by conftest.py).

The ``variant`` fixture is parametrized over every registered attention block
(with its own ``example_options()``, every default for most blocks) plus a few
option variants, so registering a new block gives it the whole contract suite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

import nas
from nas.models import AttentionSpec, Dims, FFNSpec

D_MODEL, N_HEADS, MAX_LEN, BATCH = 32, 4, 16, 2
DIMS = Dims(D_MODEL, N_HEADS, MAX_LEN)
FFN = FFNSpec("relu", 4.0)


def mixable_names() -> list[str]:
    return [n for n in nas.ATTENTION.names() if nas.ATTENTION.get(n).mixable]


#: Option variants on top of every block with its defaults.
EXTRA_VARIANTS: dict[str, dict[str, Any]] = {
    "mdha-k1": {"type": "mdha", "kernel": 1},
    "mdha-k4": {"type": "mdha", "kernel": 4},
    "mha-kv1": {"type": "mha", "kv_heads": 1},  # multi-query
    "mha-kv2": {"type": "mha", "kv_heads": 2},  # grouped: 2 query heads per key/value head
    "mdha-kv2": {"type": "mdha", "kv_heads": 2, "kernel": 3},
    "sliding_window-w3": {"type": "sliding_window", "window": 3},  # a band narrower than the sequence
    "sliding_window-w1-kv1": {"type": "sliding_window", "window": 1, "kv_heads": 1},  # each token alone
    "factorized_random-r2": {"type": "synth_factorized_random", "rank": 2},
    "factorized_dense-3x7": {"type": "synth_factorized_dense", "a": 3, "b": 7},  # 21 > max_len 16
    "mixture-fixed": {"type": "mixture", "components": ["mha", "synth_dense", "mdha"], "weights": [1, 3, 2]},
    "multi_branch-norm": {"type": "multi_branch", "branch_norm": True},
    "multi_branch-norm-scaled": {"type": "multi_branch", "branch_norm": True, "init": "scaled"},
    "mixture-random": {"type": "mixture", "components": ["synth_fixed_random", "synth_factorized_random"]},
}


@dataclass(frozen=True)
class Variant:
    """One attention block with fixed options, and helpers to build it at the test sizes."""

    id: str
    raw: dict[str, Any]

    @property
    def spec(self) -> AttentionSpec:
        return AttentionSpec.from_raw(self.raw)

    @property
    def cls(self) -> type[nas.models.AttentionBlock]:
        return nas.ATTENTION.get(self.spec.type)

    def block(self, seed: int = 0, dims: Dims = DIMS, ffn: FFNSpec = FFN) -> nas.models.AttentionBlock:
        torch.manual_seed(seed)
        return self.cls(dims, self.spec.options, ffn=ffn)

    def arch(self, n_layers: int = 1, activation: str = "relu", **top: Any) -> nas.ArchConfig:
        raw = {
            "d_model": D_MODEL,
            "n_heads": N_HEADS,
            "max_len": MAX_LEN,
            "vocab_size": 64,
            "layers": {"repeat": n_layers, "attention": self.raw, "ffn": {"activation": activation}},
            **top,
        }
        return nas.ArchConfig.from_dict(raw)

    def model(self, seed: int = 0, n_layers: int = 1, **top: Any) -> nas.TransformerLM:
        arch = self.arch(n_layers, **top)
        torch.manual_seed(seed)
        return nas.build_model(arch)


def all_variants() -> dict[str, Variant]:
    out = {
        name: Variant(name, {"type": name, **nas.ATTENTION.get(name).example_options()})
        for name in nas.ATTENTION.names()
    }
    out.update({key: Variant(key, raw) for key, raw in EXTRA_VARIANTS.items()})
    return out


VARIANTS = all_variants()
