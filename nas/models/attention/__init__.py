"""Attention blocks, one module each; importing this package registers them all."""

from nas.models.attention import (  # noqa: F401  (imported for registration)
    mdha,
    mha,
    mixture,
    multi_branch,
    synth_dense,
    synth_factorized_dense,
    synth_factorized_random,
    synth_fixed_random,
    synth_random,
)
from nas.models.attention.base import ATTENTION, AttentionBlock, BlockOptions, FFNSpec

__all__ = ["ATTENTION", "AttentionBlock", "BlockOptions", "FFNSpec"]
