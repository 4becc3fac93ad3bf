"""Dense Synthesizer (Tay et al., 2021, "Synthesizer: Rethinking Self-Attention", section 3.1).

Each token predicts its own row of attention logits with a two-layer MLP,
with no query-key interaction: B_i = relu(x_i W1 + b1) W2 + b2, one row of
length ``max_len`` per token and head, cut to the sequence length.

Speed: the logits are a dot product between the hidden vector h_i and fixed
learned "keys" (the columns of W2, one per position), so the block runs
through ``F.scaled_dot_product_attention`` with scale 1.  The bias b2 rides
along as one extra key dimension against a constant-1 query dimension.

The fused CPU kernel (flash attention for CPU) takes only q, k and v of one
head width and real strides, so v gets a zero column to match the (dh + 1)-wide
q and k (dropped again after attention), and the keys, shared by the batch,
are copied B times rather than broadcast with stride 0.  Without both, SDPA
silently fell back to its unfused math path: at T 512, batch 8, the block ran
1.35x slower than ``mha`` instead of as fast (benchmarks/block_cost.py).
On CUDA the width is padded to a multiple of 8, which flash kernels need.

W1 and the value projection stay two ``nn.Linear`` layers: one fused
(d, 2d) product measured no faster here (the product is small next to
attention, and concatenating the weights each step costs what the fusion
saves), and the separate layers keep the state dict and parameter count
(b1 but no value bias) plain.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nas.models.attention.base import ATTENTION, BlockOptions, FFNSpec, ValueAttention
from nas.models.dims import Dims, Flops
from nas.models.parametrization import HIDDEN, VECTOR
from nas.models.reference import head


@ATTENTION.register("synth_dense")
class DenseSynthesizer(ValueAttention):
    mixable = True
    bidirectional = True
    has_dot_terms = True  # dot_terms: relu(X W1) W2 is a product (plus the bias b2)
    param_kinds = {"hidden.weight": HIDDEN, "hidden.bias": VECTOR, "w2": VECTOR, "b2": VECTOR}
    no_decay = ("b2",)  # the per-position logit bias (H, L)

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

    def add_scores(self, x: Tensor, weight: Tensor, into: Tensor) -> Tensor:
        T = x.shape[1]
        s = (self.hidden_heads(x) * weight) @ self.w2[:, :, :T]  # (B, H, T, T)
        return s.add_(into + weight * self.b2[:, None, :T])  # the bias joins the small (.., T, T) term

    def dot_terms(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        T = x.shape[1]
        k = self.w2[:, :, :T].transpose(1, 2).unsqueeze(0)  # (1, H, T, dh): the keys are positions
        return self.hidden_heads(x), k, self.b2[:, None, :T]

    #: None: pad the (dh + 1)-wide heads to a multiple of 8 where the fused kernels want it (CUDA);
    #: True/False forces it (tests)
    pad_to_8: bool | None = None

    def forward(self, x: Tensor, keep: Tensor | None = None) -> Tensor:
        B, T, _ = x.shape
        H, dh = self.n_heads, self.d_head
        pads = x.is_cuda if self.pad_to_8 is None else self.pad_to_8
        pad = -(dh + 1) % 8 if pads else 0  # zero columns beyond the bias column
        h = self.hidden_heads(x)
        q = torch.cat([h, h.new_ones(B, H, T, 1), h.new_zeros(B, H, T, pad)], dim=-1)  # (B, H, T, w)
        k = torch.cat(
            [self.w2[:, :, :T].transpose(1, 2), self.b2[:, :T, None], self.b2.new_zeros(H, T, pad)], dim=-1
        )  # (H, T, w)
        k = k.to(q.dtype).unsqueeze(0).expand(B, -1, -1, -1).contiguous()  # (B, H, T, w)
        v = self.split_heads(self.v_proj(x))  # (B, H, T, dh)
        v = torch.cat([v, v.new_zeros(B, H, T, 1 + pad)], dim=-1)  # (B, H, T, w)
        y = self.attend_qkv(q, k, v, keep, positions=False, scale=1.0)[..., :dh]  # (B, H, T, dh)
        return self.out_proj(self.merge_heads(y))

    def reference_scores(self, x: Tensor) -> Tensor:
        T, H = x.shape[0], self.n_heads
        hid = torch.relu(x @ self.hidden.weight.T + self.hidden.bias)  # relu(X W1 + b1), (T, C)
        out = torch.zeros(H, T, T, dtype=x.dtype)
        for h in range(H):
            for i in range(T):
                for j in range(T):
                    out[h, i, j] = head(hid, h, H)[i] @ self.w2[h, :, j] + self.b2[h, j]
        return out

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
        # The fused path multiplies (dh + 1)-wide queries, keys and values (the bias column, and the
        # zero column that gives v the same width): 2*T*H more for Q K^T and again for P V.
        return Flops.dense(2.0 * d * d + 4.0 * T * H + 2.0 * T * d) + cls.value_flops(dims, T)
