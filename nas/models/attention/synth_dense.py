"""Dense Synthesizer (Tay et al., 2021, "Synthesizer: Rethinking Self-Attention", section 3.1).

Each token predicts its own row of attention logits with a two-layer MLP,
with no query-key interaction: B_i = relu(x_i W1 + b1) W2 + b2, one row of
length ``max_len`` per token and head, cut to the sequence length.

Speed: the logits are a dot product between the hidden vector h_i and fixed
learned "keys" (the columns of W2, one per position), so the block runs
through ``F.scaled_dot_product_attention`` with scale 1.  The bias b2 rides
along as one extra key dimension against a constant-1 query dimension.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nas.models.attention.base import ATTENTION, BlockOptions, FFNSpec, ValueAttention, sdpa_causal
from nas.models.dims import Dims, Flops


@ATTENTION.register("synth_dense")
class DenseSynthesizer(ValueAttention):
    def __init__(self, dims: Dims, opts: BlockOptions, *, ffn: FFNSpec, with_values: bool = True) -> None:
        super().__init__(dims, opts, ffn=ffn, with_values=with_values)
        H, dh, L = dims.n_heads, dims.d_head, dims.max_len
        self.hidden = nn.Linear(dims.d_model, dims.d_model, bias=True)  # W1, b1
        self.w2 = nn.Parameter(torch.randn(H, dh, L) / math.sqrt(dh))  # (H, dh, L)
        self.b2 = nn.Parameter(torch.zeros(H, L))  # (H, L)

    def hidden_heads(self, x: Tensor) -> Tensor:
        return self.split_heads(F.relu(self.hidden(x)))  # (B, H, T, dh)

    def scores(self, x: Tensor) -> Tensor:
        T = x.shape[1]
        h = self.hidden_heads(x)
        return h @ self.w2[:, :, :T] + self.b2[:, None, :T]  # (B, H, T, T)

    def forward(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        h = self.hidden_heads(x)
        q = torch.cat([h, h.new_ones(B, self.n_heads, T, 1)], dim=-1)  # (B, H, T, dh+1)
        k = torch.cat([self.w2[:, :, :T].transpose(1, 2), self.b2[:, :T, None]], dim=-1)  # (H, T, dh+1)
        k = k.to(q.dtype).unsqueeze(0).expand(B, -1, -1, -1)
        v = self.split_heads(self.v_proj(x))
        return self.out_proj(self.merge_heads(sdpa_causal(q, k, v, scale=1.0)))

    @classmethod
    def count_params(cls, dims: Dims, opts: BlockOptions, ffn: FFNSpec, with_values: bool = True) -> int:
        d, H, L = dims.d_model, dims.n_heads, dims.max_len
        own = d * d + d + d * L + H * L
        return own + (cls.value_params(dims) if with_values else 0)

    @classmethod
    def count_flops(
        cls, dims: Dims, opts: BlockOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        d, H, T = dims.d_model, dims.n_heads, seq_len
        if not with_values:
            return Flops.dense(2.0 * d * d + 2.0 * T * d)
        # The fused path multiplies (dh + 1)-wide queries and keys: the bias column costs 2*T*H.
        return Flops.dense(2.0 * d * d + 2.0 * T * (d + H)) + cls.value_flops(dims, T)
