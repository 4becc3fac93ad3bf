"""Vanilla multi-head attention (Vaswani et al., 2017, "Attention Is All You Need"), with grouped
key/value heads (Ainslie et al., 2023, "GQA"; ``kv_heads: 1`` is multi-query attention, Shazeer, 2019).

softmax(Q K^T / sqrt(d_head)) V per head, causal, through
``F.scaled_dot_product_attention`` (flash kernels on GPU); Q, K, V come from
one fused projection.  With ``kv_heads`` = G < n_heads, K and V have G heads
and query head j uses key/value head j // (n_heads / G) (contiguous groups, as
Llama's ``repeat_kv``).  Rotary positions, when the model uses them, turn Q and
K after the projection (and after MDHA's convolution).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from nas.errors import ConfigError
from nas.models.attention.base import ATTENTION, AttentionBlock, BlockOptions, FFNSpec, default_scale
from nas.models.dims import Dims, Flops
from nas.models.parametrization import HIDDEN
from nas.models.reference import causal_attend, dot_logits, head


@dataclasses.dataclass(frozen=True)
class MHAOptions(BlockOptions):
    kv_heads: int = 0  # key/value heads; 0: one per query head

    def check(self, dims: Dims, ffn: FFNSpec) -> None:
        if self.kv_heads < 0 or (self.kv_heads and dims.n_heads % self.kv_heads):
            divisors = [g for g in range(1, dims.n_heads + 1) if dims.n_heads % g == 0]
            raise ConfigError(
                f"must divide n_heads = {dims.n_heads}, got {self.kv_heads}; valid: "
                f"{', '.join(map(str, divisors))} (or 0: one per query head)",
                "kv_heads",
            )

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if not self.kv_heads:  # the default leaves no trace: arch_ids from before grouped heads stay
            del out["kv_heads"]
        return out


def kv_width(dims: Dims, opts: MHAOptions) -> int:
    """Channels of K (and of V): key/value heads x d_head."""
    return (opts.kv_heads or dims.n_heads) * dims.d_head


@ATTENTION.register("mha")
class MultiHeadAttention(AttentionBlock):
    mixable = True
    bidirectional = True
    has_dot_terms = True  # dot_terms: q k^T / sqrt(dh), which a mixture fuses
    param_kinds = {"qkv.weight": HIDDEN, "out_proj.weight": HIDDEN}
    Options = MHAOptions
    short_option_names = {"kv_heads": "kv"}

    def __init__(self, dims: Dims, opts: MHAOptions, *, ffn: FFNSpec, with_values: bool = True) -> None:
        super().__init__(dims, opts, ffn=ffn, with_values=with_values)
        self.n_proj = 3 if with_values else 2
        self.widths = [dims.d_model] + [kv_width(dims, opts)] * (self.n_proj - 1)  # Q, K (, V)
        self.grouped = kv_width(dims, opts) < dims.d_model
        self.qkv = nn.Linear(dims.d_model, sum(self.widths), bias=False)
        if with_values:
            self.out_proj = nn.Linear(dims.d_model, dims.d_model, bias=False)
            self.out_proj.residual_out = True  # type: ignore[attr-defined]

    def project(self, x: Tensor, keep: Tensor | None = None) -> Tensor:
        """Fused projections, (B, T, sum(widths)); MDHA adds its convolution here."""
        return self.qkv(x)

    def heads(self, x: Tensor, keep: Tensor | None = None) -> list[Tensor]:
        """Q (B, H, T, dh), K (and V) (B, G, T, dh); Q and K at their positions."""
        # a subclass's project(x) without keep still works wherever there is no padding
        z = self.project(x) if keep is None else self.project(x, keep)
        parts = list(z.split(self.widths, dim=-1))
        # turned before the transpose into heads: the same numbers, contiguous memory (rotate_tokens)
        parts[0], parts[1] = self.rotary_tokens(parts[0]), self.rotary_tokens(parts[1])
        return [self.split_heads(t) for t in parts]

    def _every_head(self, t: Tensor) -> Tensor:
        """K or V of G heads (B, G, T, dh) -> (B, H, T, dh), query head j reading group j // (H / G)."""
        return t.repeat_interleave(self.n_heads // t.shape[1], dim=1) if self.grouped else t

    def scores(self, x: Tensor) -> Tensor:
        q, k = self.heads(x)[:2]
        s = (q @ self._every_head(k).transpose(-2, -1)) * default_scale(self.d_head)  # (B, H, T, T)
        bias = self.position_bias(x.shape[1], x.device)
        return s if bias is None else s + bias.to(s.dtype)

    def add_scores(self, x: Tensor, weight: Tensor, into: Tensor) -> Tensor:
        q, k = self.heads(x)[:2]
        bias = self.position_bias(x.shape[1], x.device)
        if bias is not None:
            into = into + weight * bias.to(q.dtype)
        k = self._every_head(k)
        s = (q * (weight * default_scale(self.d_head))) @ k.transpose(-2, -1)  # (B, H, T, T)
        return s.add_(into)  # in place: the product's backward needs q and k, not s

    def dot_terms(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        q, k = self.heads(x)[:2]
        return q * default_scale(self.d_head), self._every_head(k), self.position_bias(x.shape[1], x.device)

    def forward(self, x: Tensor, keep: Tensor | None = None) -> Tensor:
        q, k, v = self.heads(x, keep)  # SDPA reads each key/value head for its group, no copies, where it can
        return self.out_proj(self.merge_heads(self.attend_qkv(q, k, v, keep)))

    def reference_qkv(self, x: Tensor) -> list[Tensor]:
        """Q, K (and V) of one sequence x (T, C), each (T, its width); MDHA adds its convolution here."""
        return list((x @ self.qkv.weight.T).split(self.widths, dim=-1))

    def _reference_heads(self, x: Tensor) -> list[Tensor]:
        """Q, K (and V), each (T, C): K and V copied to every query head of their group, Q and K turned."""
        parts = self.reference_qkv(x)
        H, G = self.n_heads, parts[1].shape[1] // self.d_head
        for i in range(1, len(parts)):
            parts[i] = torch.cat([head(parts[i], j * G // H, G) for j in range(H)], dim=1)
        parts[0], parts[1] = self.reference_rotary(parts[0]), self.reference_rotary(parts[1])
        return parts

    def reference_scores(self, x: Tensor) -> Tensor:
        q, k = self._reference_heads(x)[:2]
        return self.reference_bias(dot_logits(q, k, self.n_heads))

    def reference_forward(self, x: Tensor) -> Tensor:
        q, k, v = self._reference_heads(x)
        return causal_attend(self.reference_bias(dot_logits(q, k, self.n_heads)), v) @ self.out_proj.weight.T

    @classmethod
    def count_params(cls, dims: Dims, opts: MHAOptions, ffn: FFNSpec, with_values: bool = True) -> int:
        d, kv = dims.d_model, kv_width(dims, opts)
        return d * (d + (2 if with_values else 1) * kv) + (d * d if with_values else 0)

    @classmethod
    def state_elements(cls, dims: Dims, opts: MHAOptions, seq_len: int, with_values: bool = True) -> int:
        """The KV cache: a key (and a value) of kv_heads x d_head per past token."""
        return (2 if with_values else 1) * kv_width(dims, opts) * seq_len

    @classmethod
    def count_flops(
        cls, dims: Dims, opts: MHAOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        d, T, kv = dims.d_model, seq_len, kv_width(dims, opts)
        # Projections, then Q K^T: every query head scores T keys, grouped or not.
        flops = Flops.dense(2.0 * d * (d + (2 if with_values else 1) * kv) + 2.0 * T * d)
        if with_values:
            flops = flops + Flops.dense(2.0 * T * d + 2.0 * d * d)  # P V, output projection
        return flops
