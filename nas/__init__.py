"""NAS engine for decoder-only Transformer language models.

Public API::

    import nas
    arch = nas.load_arch("examples/archs/primer_ez.yaml")
    model = nas.build_model(arch)          # token ids (B, T) -> logits (B, T, vocab)
    nas.compute(arch).train_flops_per_token
    nas.ATTENTION.names()                  # registered attention blocks
    model = nas.load_model("model.pt")     # weights saved by `run_search.py train --save`
"""

from nas.archfile import load_arch, save_arch
from nas.checkpoint import load_checkpoint, load_model, save_checkpoint
from nas.compute import Compute, compute
from nas.errors import CheckpointError, ConfigError, UserError
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
