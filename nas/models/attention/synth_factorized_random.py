"""Factorized Random Synthesizer (Tay et al., 2021, "Synthesizer", section 3.3).

R = R1 R2^T with R1, R2 of shape [heads, max_len, rank], learned, independent of the input.

Speed: softmax(R1 R2^T) is dot-product attention of two fixed matrices, so it
could run through ``F.scaled_dot_product_attention`` with q = R1 and k = R2
broadcast over the batch (flash kernels on GPU).  On CPU that is slower: the
fused kernel recomputes the logits and their softmax for every sequence,
while the logits here are the same for the whole batch.  This block forms
R1 R2^T and its causal softmax once per step on (H, T, T) and applies it to
every sequence in one (H, T, T) @ (H, T, B*dh) product
(``ValueAttention.attend_shared``).  Measured (one block, forward + backward,
d_model 256, 4 heads, batch 8, fp32, one CPU thread): 13.0 ms against 17.6 ms
for SDPA at T 128, 82 ms against 177 ms at T 512.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from nas.models.attention.base import ATTENTION, BlockOptions, FFNSpec, ValueAttention, positive_int
from nas.models.dims import Dims, Flops
from nas.models.parametrization import VECTOR


@dataclasses.dataclass(frozen=True)
class FactorizedRandomOptions(BlockOptions):
    rank: int = 8

    def check(self, dims: Dims, ffn: FFNSpec) -> None:
        positive_int(self.rank, "rank")


@ATTENTION.register("synth_factorized_random")
class FactorizedRandomSynthesizer(ValueAttention):
    Options = FactorizedRandomOptions
    mixable = True
    bidirectional = True
    has_dot_terms = False
    param_kinds = {"R1": VECTOR, "R2": VECTOR}  # (H, L, k)
    no_decay = ("R1", "R2")  # factors of position-only logits
    static_scores = True
    short_option_names = {"rank": "r"}

    def __init__(
        self, dims: Dims, opts: FactorizedRandomOptions, *, ffn: FFNSpec, with_values: bool = True
    ) -> None:
        super().__init__(dims, opts, ffn=ffn, with_values=with_values)
        std = opts.rank**-0.25  # unit-variance logits at init
        self.R1 = nn.Parameter(torch.randn(dims.n_heads, dims.max_len, opts.rank) * std)  # (H, L, k)
        self.R2 = nn.Parameter(torch.randn(dims.n_heads, dims.max_len, opts.rank) * std)  # (H, L, k)

    def scores(self, x: Tensor) -> Tensor:
        T = x.shape[1]
        # Once per step, not per sequence: (1, H, T, T).  Its 2*H*T*T*k FLOPs are shared by
        # the whole batch and left out of the per-token count.
        return (self.R1[:, :T] @ self.R2[:, :T].transpose(1, 2)).unsqueeze(0)

    def reference_scores(self, x: Tensor) -> Tensor:
        T, H = x.shape[0], self.n_heads
        out = torch.zeros(H, T, T, dtype=x.dtype)
        for h in range(H):
            for i in range(T):
                for j in range(T):
                    out[h, i, j] = self.R1[h, i] @ self.R2[h, j]
        return out

    @classmethod
    def count_params(
        cls, dims: Dims, opts: FactorizedRandomOptions, ffn: FFNSpec, with_values: bool = True
    ) -> int:
        own = 2 * dims.n_heads * dims.max_len * opts.rank
        return own + (cls.value_params(dims) if with_values else 0)

    @classmethod
    def count_flops(
        cls, dims: Dims, opts: FactorizedRandomOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        return cls.value_flops(dims, seq_len) if with_values else Flops()

    @classmethod
    def step_flops(cls, dims: Dims, opts: FactorizedRandomOptions, seq_len: int) -> Flops:
        """R1 R2^T, once per forward whatever the batch: not in ``count_flops`` (per token it is
        this / (batch x T))."""
        return Flops.dense(2.0 * dims.n_heads * seq_len * seq_len * opts.rank)
