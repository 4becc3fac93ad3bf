"""Small value types shared by every block: model dimensions and FLOP counts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dims:
    """The global sizes and choices a block is built for.

    ``rope_base`` > 0: rotary positions on queries and keys (``nas.models.rotary``), applied by
    every block that takes dot products of queries and keys; 0: positions come from a table
    added to the embeddings (or from nothing: blocks without queries and keys ignore it).
    ``alibi``: linear biases on the attention logits (``nas.models.rotary.alibi_slopes``), added by
    the same blocks.  ``norm``: the normalisation before each sublayer and at the end (``layernorm``,
    ``rmsnorm``).
    """

    d_model: int
    n_heads: int
    max_len: int
    rope_base: float = 0.0
    norm: str = "layernorm"
    alibi: bool = False

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


@dataclass(frozen=True)
class Flops:
    """FLOPs per token (2 per multiply-add) of a forward pass and of its backward pass.

    Only matrix products and convolutions are counted; norms, softmax and
    activations are a few FLOPs per element and are left out, as in the usual
    6*N*D accounting.
    """

    fwd: float = 0.0
    bwd: float = 0.0

    @staticmethod
    def dense(fwd: float) -> Flops:
        """A product whose inputs and weights all need gradients: backward costs twice forward."""
        return Flops(fwd, 2.0 * fwd)

    @property
    def train(self) -> float:
        return self.fwd + self.bwd

    def __add__(self, other: Flops) -> Flops:
        return Flops(self.fwd + other.fwd, self.bwd + other.bwd)

    def __mul__(self, k: float) -> Flops:
        return Flops(self.fwd * k, self.bwd * k)

    __rmul__ = __mul__
