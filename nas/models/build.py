"""``build_model``: the model an :class:`ArchConfig` describes, an LM or an encoder-decoder.

It sits above both models (the encoder-decoder reuses the LM's layers), so neither
model module imports the other's.
"""

from __future__ import annotations

from torch import nn

from nas.models.config import ArchConfig
from nas.models.model import TransformerLM
from nas.models.seq2seq import Seq2SeqTransformer


def build_model(arch: ArchConfig) -> nn.Module:
    """The model for ``arch`` (an LM, or an encoder-decoder for ``task: seq2seq``), freshly
    initialised from the current torch RNG state."""
    if not isinstance(arch, ArchConfig):
        raise TypeError(f"build_model takes an ArchConfig, got {type(arch).__name__}")
    if arch.is_seq2seq:
        return Seq2SeqTransformer(arch)
    return TransformerLM(arch)
