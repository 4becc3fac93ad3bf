"""NAS engine for decoder-only Transformer language models.

Public API::

    import nas
    arch = nas.load_arch("examples/archs/primer_ez.yaml")
    model = nas.build_model(arch)          # token ids (B, T) -> logits (B, T, vocab)
    nas.compute(arch).train_flops_per_token
    nas.ATTENTION.names()                  # registered attention blocks
    model = nas.load_model("model.pt")     # weights saved by `nas train --save`

The names are imported on first use (PEP 562), so ``import nas.errors`` (and
the other torch-free modules: ``nas.validate``, ``nas.files.yamlsafe``,
``nas.shipped``, ``nas.cli``) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nas.errors import CheckpointError, ConfigError, UserError
    from nas.files.archfile import load_arch, save_arch
    from nas.files.checkpoint import load_checkpoint, load_model, save_checkpoint
    from nas.models import (
        ACTIVATIONS,
        ATTENTION,
        FFN,
        ArchConfig,
        AttentionSpec,
        FFNSpec,
        LayerConfig,
        TransformerLM,
        build_model,
    )
    from nas.models.cost import Compute, compute

#: public name -> the module it comes from
_SOURCES = {
    "load_arch": "nas.files.archfile",
    "save_arch": "nas.files.archfile",
    "load_checkpoint": "nas.files.checkpoint",
    "load_model": "nas.files.checkpoint",
    "save_checkpoint": "nas.files.checkpoint",
    "Compute": "nas.models.cost",
    "compute": "nas.models.cost",
    "CheckpointError": "nas.errors",
    "ConfigError": "nas.errors",
    "UserError": "nas.errors",
    **{name: "nas.models" for name in ("ACTIVATIONS", "ATTENTION", "FFN", "ArchConfig", "AttentionSpec",
                                       "FFNSpec", "LayerConfig", "TransformerLM", "build_model")},
}  # fmt: skip

__all__ = [
    "ACTIVATIONS",
    "ATTENTION",
    "FFN",
    "ArchConfig",
    "AttentionSpec",
    "Compute",
    "CheckpointError",
    "ConfigError",
    "FFNSpec",
    "LayerConfig",
    "TransformerLM",
    "UserError",
    "build_model",
    "compute",
    "load_arch",
    "load_checkpoint",
    "load_model",
    "save_arch",
    "save_checkpoint",
]


def __getattr__(name: str) -> Any:
    if name not in _SOURCES:
        raise AttributeError(f"module 'nas' has no attribute {name!r}")
    value = getattr(importlib.import_module(_SOURCES[name]), name)
    globals()[name] = value  # later lookups find it without coming here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SOURCES))
