"""Random Synthesizer (Tay et al., 2021, "Synthesizer: Rethinking Self-Attention", section 3.2).

The logits are a matrix R of shape [heads, max_len, max_len] that does not
depend on the input: learned in ``synth_random``, a fixed (saved) buffer in
``synth_fixed_random``.  Because R is shared by every sequence, the causal
softmax runs once per step on (1, H, T, T), and the weights meet the values
of the whole batch in one (H, T, T) @ (H, T, B*dh) product
(``ValueAttention.attend_shared``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nas.models.attention.base import ATTENTION, BlockOptions, FFNSpec, ValueAttention
from nas.models.dims import Dims, Flops
from nas.models.parametrization import VECTOR


@ATTENTION.register("synth_random")
class RandomSynthesizer(ValueAttention):
    mixable = True
    bidirectional = True
    has_dot_terms = False
    param_kinds = {"R": VECTOR}  # (H, L, L): one growing dimension, the heads
    static_scores = True
    trainable_logits = True
    no_decay = ("R",)  # logits: decay would pull the attention towards uniform

    def __init__(self, dims: Dims, opts: BlockOptions, *, ffn: FFNSpec, with_values: bool = True) -> None:
        super().__init__(dims, opts, ffn=ffn, with_values=with_values)
        R = torch.randn(dims.n_heads, dims.max_len, dims.max_len)  # (H, L, L)
        if self.trainable_logits:
            self.R = nn.Parameter(R)
        else:
            self.register_buffer("R", R)

    def scores(self, x: Tensor) -> Tensor:
        T = x.shape[1]
        return self.R[:, :T, :T].unsqueeze(0)  # (1, H, T, T)

    def reference_scores(self, x: Tensor) -> Tensor:
        T = x.shape[0]
        return self.R[:, :T, :T].clone()

    @classmethod
    def buffer_bytes(cls, dims: Dims, opts: BlockOptions) -> int:
        """The fixed variant keeps its (H, L, L) float32 logits as a buffer, not a parameter."""
        return 0 if cls.trainable_logits else 4 * dims.n_heads * dims.max_len**2

    @classmethod
    def count_params(cls, dims: Dims, opts: BlockOptions, ffn: FFNSpec, with_values: bool = True) -> int:
        own = dims.n_heads * dims.max_len**2 if cls.trainable_logits else 0
        return own + (cls.value_params(dims) if with_values else 0)

    @classmethod
    def count_flops(
        cls, dims: Dims, opts: BlockOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        if not with_values:
            return Flops()
        return cls.value_flops(dims, seq_len, weights_need_grad=cls.trainable_logits)
