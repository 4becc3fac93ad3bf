"""Model code: configs, blocks, the LM and the encoder-decoder, and what they cost (``cost.py``).

Imports torch only (no optuna, ray or yaml).
"""

from nas.models.attention import ATTENTION, AttentionBlock, BlockOptions, FFNSpec
from nas.models.build import build_model
from nas.models.config import ArchConfig, AttentionSpec, LayerConfig
from nas.models.dims import Dims, Flops
from nas.models.ffn import ACTIVATIONS
from nas.models.model import TransformerLM, greedy_generate
from nas.models.seq2seq import Seq2SeqTransformer, greedy_decode

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
    "Seq2SeqTransformer",
    "TransformerLM",
    "build_model",
    "greedy_decode",
    "greedy_generate",
]
