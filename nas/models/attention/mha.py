"""Vanilla multi-head attention (Vaswani et al., 2017, "Attention Is All You Need").

softmax(Q K^T / sqrt(d_head)) V per head, causal, through
``F.scaled_dot_product_attention`` (flash kernels on GPU); Q, K, V come from
one fused projection.
"""

from __future__ import annotations

from torch import Tensor, nn

from nas.models.attention.base import (
    ATTENTION,
    AttentionBlock,
    BlockOptions,
    FFNSpec,
    default_scale,
    sdpa,
)
from nas.models.dims import Dims, Flops
from nas.models.reference import causal_attend, dot_logits


@ATTENTION.register("mha")
class MultiHeadAttention(AttentionBlock):
    mixable = True
    bidirectional = True

    def __init__(self, dims: Dims, opts: BlockOptions, *, ffn: FFNSpec, with_values: bool = True) -> None:
        super().__init__(dims, opts, ffn=ffn, with_values=with_values)
        self.n_proj = 3 if with_values else 2
        self.qkv = nn.Linear(dims.d_model, self.n_proj * dims.d_model, bias=False)
        if with_values:
            self.out_proj = nn.Linear(dims.d_model, dims.d_model, bias=False)
            self.out_proj.residual_out = True  # type: ignore[attr-defined]

    def project(self, x: Tensor) -> Tensor:
        """Fused projections, (B, T, n_proj * C); MDHA adds its convolution here."""
        return self.qkv(x)

    def heads(self, x: Tensor) -> list[Tensor]:
        return [self.split_heads(t) for t in self.project(x).chunk(self.n_proj, dim=-1)]  # (B, H, T, dh)

    def scores(self, x: Tensor) -> Tensor:
        q, k = self.heads(x)[:2]
        return (q @ k.transpose(-2, -1)) * default_scale(self.d_head)  # (B, H, T, T)

    def add_scores(self, x: Tensor, weight: Tensor, into: Tensor) -> Tensor:
        q, k = self.heads(x)[:2]
        s = (q * (weight * default_scale(self.d_head))) @ k.transpose(-2, -1)  # (B, H, T, T)
        return s.add_(into)  # in place: the product's backward needs q and k, not s

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.heads(x)
        return self.out_proj(self.merge_heads(sdpa(q, k, v, causal=self.causal)))

    def reference_qkv(self, x: Tensor) -> list[Tensor]:
        """Q, K (and V), each (T, C), of one sequence x (T, C); MDHA adds its convolution here."""
        return list((x @ self.qkv.weight.T).split(self.dims.d_model, dim=-1))

    def reference_scores(self, x: Tensor) -> Tensor:
        q, k = self.reference_qkv(x)[:2]
        return dot_logits(q, k, self.n_heads)

    def reference_forward(self, x: Tensor) -> Tensor:
        q, k, v = self.reference_qkv(x)
        return causal_attend(dot_logits(q, k, self.n_heads), v) @ self.out_proj.weight.T

    @classmethod
    def count_params(cls, dims: Dims, opts: BlockOptions, ffn: FFNSpec, with_values: bool = True) -> int:
        d = dims.d_model
        return (4 if with_values else 2) * d * d

    @classmethod
    def count_flops(
        cls, dims: Dims, opts: BlockOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        d, T = dims.d_model, seq_len
        n_proj = 3 if with_values else 2
        flops = Flops.dense(2.0 * n_proj * d * d + 2.0 * T * d)  # projections, Q K^T
        if with_values:
            flops = flops + Flops.dense(2.0 * T * d + 2.0 * d * d)  # P V, output projection
        return flops
