"""Model code: configs, blocks and the LM.  Imports torch only (no optuna, ray or yaml)."""

from nas.models.attention import ATTENTION, AttentionBlock, BlockOptions, FFNSpec
from nas.models.config import ArchConfig, AttentionSpec, LayerConfig
from nas.models.dims import Dims, Flops
from nas.models.ffn import ACTIVATIONS
from nas.models.model import TransformerLM, build_model

FFN = ACTIVATIONS

__all__ = [
    "ACTIVATIONS",
    "ATTENTION",
    "ArchConfig",
    "AttentionBlock",
    "AttentionSpec",
    "BlockOptions",
    "Dims",
    "FFN",
    "FFNSpec",
    "Flops",
    "LayerConfig",
    "TransformerLM",
    "build_model",
]
