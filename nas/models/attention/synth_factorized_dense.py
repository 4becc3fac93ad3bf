"""Factorized Dense Synthesizer (Tay et al., 2021, "Synthesizer", section 3.3).

Two small dense heads give A (length a) and B (length b) per token, with
a * b >= max_len; the logit of token i at key j is A_i[j mod a] * B_i[j div a]
(A tiled b times, times B with each entry repeated a times), cut to the
sequence length.  Unlike the seed sketch, a * b may exceed max_len.

``a`` and ``b`` have the seed's roles swapped: there the vector of length a
is the one whose entries repeat and the one of length b is tiled, so this
block's ``a: 8, b: 2`` is the seed's ``a=2, b=8`` (the same model).  The
names stay, since studies and exported architecture files use them.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nas.errors import ConfigError
from nas.models.attention.base import ATTENTION, BlockOptions, FFNSpec, ValueAttention, positive_int
from nas.models.dims import Dims, Flops
from nas.models.parametrization import HIDDEN, VECTOR
from nas.models.reference import head


@dataclasses.dataclass(frozen=True)
class FactorizedDenseOptions(BlockOptions):
    a: int = 16  # length of the tiled vector A (the seed's b)
    b: int = 16  # length of B, whose entries repeat a times each (the seed's a)

    def check(self, dims: Dims, ffn: FFNSpec) -> None:
        positive_int(self.a, "a")
        positive_int(self.b, "b")
        if self.a * self.b < dims.max_len:
            raise ConfigError(f"a * b = {self.a * self.b} must be at least max_len = {dims.max_len}", "b")


@ATTENTION.register("synth_factorized_dense")
class FactorizedDenseSynthesizer(ValueAttention):
    Options = FactorizedDenseOptions
    mixable = True
    bidirectional = True
    has_dot_terms = False
    param_kinds = {
        "hidden.weight": HIDDEN,
        "hidden.bias": VECTOR,
        "wa": VECTOR,
        "ba": VECTOR,
        "wb": VECTOR,
        "bb": VECTOR,
    }
    no_decay = ("ba", "bb")  # biases of A and B (bb starts at 1)

    def __init__(
        self, dims: Dims, opts: FactorizedDenseOptions, *, ffn: FFNSpec, with_values: bool = True
    ) -> None:
        super().__init__(dims, opts, ffn=ffn, with_values=with_values)
        H, dh = dims.n_heads, dims.d_head
        self.a, self.b = opts.a, opts.b
        self.hidden = nn.Linear(dims.d_model, dims.d_model, bias=True)
        self.wa = nn.Parameter(torch.randn(H, dh, opts.a) / math.sqrt(dh))  # (H, dh, a)
        self.ba = nn.Parameter(torch.zeros(H, 1, opts.a))
        self.wb = nn.Parameter(torch.randn(H, dh, opts.b) / math.sqrt(dh))  # (H, dh, b)
        self.bb = nn.Parameter(torch.ones(H, 1, opts.b))  # start as the tiled A alone

    def scores(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        h = self.split_heads(F.relu(self.hidden(x)))  # (B, H, T, dh)
        A = h @ self.wa + self.ba  # (B, H, T, a)
        Bv = h @ self.wb + self.bb  # (B, H, T, b)
        # logits[..., j] with j = jb * a + ja is Bv[..., jb] * A[..., ja]
        tiled = (Bv.unsqueeze(-1) * A.unsqueeze(-2)).flatten(-2)  # (B, H, T, a*b)
        return tiled[..., :T]

    def reference_scores(self, x: Tensor) -> Tensor:
        T, H, a = x.shape[0], self.n_heads, self.a
        hid = torch.relu(x @ self.hidden.weight.T + self.hidden.bias)  # (T, C)
        out = torch.zeros(H, T, T, dtype=x.dtype)
        for h in range(H):
            for i in range(T):
                A = head(hid, h, H)[i] @ self.wa[h] + self.ba[h, 0]  # (a,)
                Bv = head(hid, h, H)[i] @ self.wb[h] + self.bb[h, 0]  # (b,)
                for j in range(T):
                    out[h, i, j] = A[j % a] * Bv[j // a]
        return out

    @classmethod
    def count_params(
        cls, dims: Dims, opts: FactorizedDenseOptions, ffn: FFNSpec, with_values: bool = True
    ) -> int:
        d, H = dims.d_model, dims.n_heads
        own = d * d + d + (d + H) * (opts.a + opts.b)
        return own + (cls.value_params(dims) if with_values else 0)

    @classmethod
    def count_flops(
        cls, dims: Dims, opts: FactorizedDenseOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        d = dims.d_model
        own = Flops.dense(2.0 * d * d + 2.0 * d * (opts.a + opts.b))
        return own + (cls.value_flops(dims, seq_len) if with_values else Flops())
