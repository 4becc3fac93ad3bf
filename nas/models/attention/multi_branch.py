"""Weighted Transformer multi-branch attention (Ahmed et al., 2017, "Weighted Transformer
Network for Machine Translation", section 3).

Each of the M = n_heads heads is projected to d_model with its own slice of
W_o, scaled by a learned concatenation weight kappa_i, passed through its
own feed-forward branch of width d_ff / M, scaled by a learned addition
weight alpha_i, and the branches are summed.  kappa and alpha are softmaxes
of free parameters, so each is non-negative and sums to 1.  The block does
the layer's feed-forward work, so a layer using it has no separate FFN.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from nas.errors import ConfigError
from nas.models.attention.base import ATTENTION, AttentionBlock, BlockOptions, FFNSpec, sdpa_causal
from nas.models.dims import Dims, Flops
from nas.models.ffn import ACTIVATIONS, ffn_width
from nas.models.reference import ACTIVATIONS as REFERENCE_ACTIVATIONS
from nas.models.reference import causal_attend, dot_logits, head, softmax


@dataclasses.dataclass(frozen=True)
class _MultiBranchOptions(BlockOptions):
    def check(self, dims: Dims, ffn: FFNSpec) -> None:
        d_ff = ffn_width(dims.d_model, ffn.mult)
        if d_ff % dims.n_heads:
            raise ConfigError(
                f"multi_branch needs the FFN width ({d_ff} = {ffn.mult} * d_model) to divide into "
                f"{dims.n_heads} branches (one per head)",
                "ffn.mult",
            )


@ATTENTION.register("multi_branch")
class MultiBranchAttention(AttentionBlock):
    Options = _MultiBranchOptions
    replaces_ffn = True

    def __init__(self, dims: Dims, opts: BlockOptions, *, ffn: FFNSpec, with_values: bool = True) -> None:
        super().__init__(dims, opts, ffn=ffn, with_values=with_values)
        d, H, dh = dims.d_model, dims.n_heads, dims.d_head
        f = ffn_width(d, ffn.mult) // H
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.w_o = nn.Parameter(torch.randn(H, dh, d) * 0.02)  # (H, dh, C): head i -> d_model
        self.w_in = nn.Parameter(torch.randn(H, d, f) * 0.02)  # (H, C, f)
        self.w_out = nn.Parameter(torch.randn(H, f, d) * (0.02 / math.sqrt(2)))  # (H, f, C)
        self.kappa_logits = nn.Parameter(torch.zeros(H))
        self.alpha_logits = nn.Parameter(torch.zeros(H))
        self.act = ACTIVATIONS.get(ffn.activation)
        self.activation_name = ffn.activation  # for the reference below

    @property
    def kappa(self) -> Tensor:
        return torch.softmax(self.kappa_logits, dim=0)

    @property
    def alpha(self) -> Tensor:
        return torch.softmax(self.alpha_logits, dim=0)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = (self.split_heads(t) for t in self.qkv(x).chunk(3, dim=-1))  # (B, H, T, dh)
        heads = sdpa_causal(q, k, v)  # (B, H, T, dh)
        branch = torch.einsum("bhtd,hdc->bhtc", heads, self.w_o)  # (B, H, T, C)
        branch = branch * self.kappa.view(1, -1, 1, 1)
        hidden = self.act(torch.einsum("bhtc,hcf->bhtf", branch, self.w_in))  # (B, H, T, f)
        out = torch.einsum("bhtf,hfc->bhtc", hidden, self.w_out)  # (B, H, T, C)
        return torch.einsum("bhtc,h->btc", out, self.alpha)  # (B, T, C)

    def reference_forward(self, x: Tensor) -> Tensor:
        H = self.n_heads
        q, k, v = (x @ self.qkv.weight.T).split(self.dims.d_model, dim=-1)  # (T, C) each
        heads = causal_attend(dot_logits(q, k, H), v)  # (T, C)
        kappa, alpha = softmax(self.kappa_logits), softmax(self.alpha_logits)
        act = REFERENCE_ACTIVATIONS[self.activation_name]
        y = torch.zeros_like(x)
        for i in range(H):
            branch = (head(heads, i, H) @ self.w_o[i]) * kappa[i]  # (T, C)
            y += alpha[i] * (act(branch @ self.w_in[i]) @ self.w_out[i])
        return y

    @classmethod
    def count_params(cls, dims: Dims, opts: BlockOptions, ffn: FFNSpec, with_values: bool = True) -> int:
        d, H = dims.d_model, dims.n_heads
        d_ff = ffn_width(d, ffn.mult)
        return 3 * d * d + d * d + 2 * d * d_ff + 2 * H

    @classmethod
    def count_flops(
        cls, dims: Dims, opts: BlockOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        d, T = dims.d_model, seq_len
        d_ff = ffn_width(d, ffn.mult)
        H = dims.n_heads
        # QKV, Q K^T, P V, per-head projections to d_model, branch FFNs, and the alpha-weighted
        # sum of the H branches (a contraction over heads, 2*H*d per token).
        return Flops.dense(6.0 * d * d + 4.0 * T * d + 2.0 * d * d + 4.0 * d * d_ff + 2.0 * H * d)
