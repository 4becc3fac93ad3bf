"""Weighted Transformer multi-branch attention (Ahmed et al., 2017, "Weighted Transformer
Network for Machine Translation", section 3).

Each of the M = n_heads heads is projected to d_model with its own slice of
W_o, scaled by a learned concatenation weight kappa_i, passed through its
own feed-forward branch of width d_ff / M, scaled by a learned addition
weight alpha_i, and the branches are summed.  kappa and alpha are softmaxes
of free parameters, so each is non-negative and sums to 1.  The block does
the layer's feed-forward work, so a layer using it has no separate FFN.

The defaults compute exactly that formula with small N(0, 0.02) matrices, the
seed's form.  Two options address why that form trains slowly here
(docs/RESULTS.md): at initialisation kappa_i * alpha_i = 1/M^2 and the chain
of four small matrices has no normalisation, so the layer's update starts
about 1000x smaller than a vanilla layer's.

- ``branch_norm: true`` wraps each branch FFN as LayerNorm_i(z_i + FFN_i(z_i)),
  z_i = kappa_i head_i W_o,i, with its own LayerNorm per branch (the form of the
  paper's reference code); ``2 * M * d_model`` more parameters, no counted FLOPs.
- ``init: scaled`` draws the same matrices but scales them so that kappa_i W_o,i
  and W_in,i preserve variance (std 1/sqrt(fan_in)) and alpha_i W_out,i has the
  std the seed gives W_out,i; the layer's update at initialisation is then about
  a vanilla layer's.  ``init: seed`` (the default) keeps the seed's scales.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nas.errors import ConfigError
from nas.models.attention.base import ATTENTION, AttentionBlock, BlockOptions, FFNSpec
from nas.models.dims import Dims, Flops
from nas.models.ffn import ACTIVATIONS, GATED, ffn_width
from nas.models.parametrization import HIDDEN, VECTOR
from nas.models.reference import ACTIVATIONS as REFERENCE_ACTIVATIONS
from nas.models.reference import causal_attend, dot_logits, head, softmax

INITS = ("seed", "scaled")
_STD = 0.02  # the seed's std of every branch matrix (W_out: / sqrt(2))


@dataclasses.dataclass(frozen=True)
class MultiBranchOptions(BlockOptions):
    branch_norm: bool = False  # LayerNorm_i(z_i + FFN_i(z_i)) around each branch
    init: str = "seed"  # "seed" or "scaled" (see the module docstring)

    def check(self, dims: Dims, ffn: FFNSpec) -> None:
        if self.init not in INITS:
            raise ConfigError(f"must be one of {', '.join(INITS)}, got {self.init!r}", "init")
        if ffn.activation in GATED:
            raise ConfigError(
                f"multi_branch runs an ungated FFN in each branch; {ffn.activation} is gated "
                f"(valid here: {', '.join(n for n in ACTIVATIONS.names() if n not in GATED)})",
                "ffn.activation",
            )
        d_ff = ffn_width(dims.d_model, ffn.mult)
        if d_ff % dims.n_heads:
            raise ConfigError(
                f"multi_branch needs the FFN width ({d_ff} = {ffn.mult} * d_model) to divide into "
                f"{dims.n_heads} branches (one per head)",
                "ffn.mult",
            )

    def to_dict(self) -> dict[str, Any]:
        """Only the options that differ from the seed's form, so that form keeps its written
        form and ``arch_id`` from before these options existed."""
        return {k: v for k, v in super().to_dict().items() if v != getattr(MultiBranchOptions, k)}


def init_stds(opts: MultiBranchOptions, dims: Dims, branch_width: int) -> tuple[float, float, float]:
    """Standard deviations of W_o, W_in and W_out at initialisation."""
    M, d = dims.n_heads, dims.d_model
    if opts.init == "seed":
        return _STD, _STD, _STD / math.sqrt(2)
    # kappa = alpha = 1/M at init: fold M into W_o and W_out so the products have the target stds.
    return M / math.sqrt(dims.d_head), 1.0 / math.sqrt(d), M * _STD / math.sqrt(2)


@ATTENTION.register("multi_branch")
class MultiBranchAttention(AttentionBlock):
    Options = MultiBranchOptions
    replaces_ffn = True
    bidirectional = True
    has_dot_terms = False
    param_kinds = {
        "qkv.weight": HIDDEN,
        "w_o": HIDDEN,
        "w_in": HIDDEN,
        "w_out": HIDDEN,
        "kappa_logits": VECTOR,
        "alpha_logits": VECTOR,
        "norm_weight": VECTOR,
        "norm_bias": VECTOR,
    }
    # kappa/alpha logits and the branch LayerNorms are vectors: no rule decays them.

    @classmethod
    def describe(cls, opts: BlockOptions, short: bool = False) -> str:
        """``multi_branch``, ``multi_branch branch_norm=True init=scaled`` / ``multi_branch(norm,scaled)``."""
        items = opts.to_dict()
        if not items or not short:
            return super().describe(opts, short)
        words = ["norm" if k == "branch_norm" else str(v) for k, v in items.items() if v is not False]
        return f"{cls.name}(" + ",".join(words) + ")"

    def __init__(
        self, dims: Dims, opts: MultiBranchOptions, *, ffn: FFNSpec, with_values: bool = True
    ) -> None:
        super().__init__(dims, opts, ffn=ffn, with_values=with_values)
        d, H, dh = dims.d_model, dims.n_heads, dims.d_head
        f = ffn_width(d, ffn.mult) // H
        s_o, s_in, s_out = init_stds(opts, dims, f)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.w_o = nn.Parameter(torch.randn(H, dh, d) * s_o)  # (H, dh, C): head i -> d_model
        self.w_in = nn.Parameter(torch.randn(H, d, f) * s_in)  # (H, C, f)
        self.w_out = nn.Parameter(torch.randn(H, f, d) * s_out)  # (H, f, C)
        self.kappa_logits = nn.Parameter(torch.zeros(H))
        self.alpha_logits = nn.Parameter(torch.zeros(H))
        self.branch_norm = opts.branch_norm
        if opts.branch_norm:
            # One LayerNorm per branch: scale and shift for (H, C), kept flat (H * C,) so that, like
            # every LayerNorm's, they are vectors and never weight-decayed (evaluators/step.py).
            self.norm_weight = nn.Parameter(torch.ones(H * d))
            self.norm_bias = nn.Parameter(torch.zeros(H * d))
        self.act = ACTIVATIONS.get(ffn.activation)
        self.activation_name = ffn.activation  # for the reference below

    @property
    def kappa(self) -> Tensor:
        return torch.softmax(self.kappa_logits, dim=0)

    @property
    def alpha(self) -> Tensor:
        return torch.softmax(self.alpha_logits, dim=0)

    def forward(self, x: Tensor, keep: Tensor | None = None) -> Tensor:
        q, k, v = (self.split_heads(t) for t in self.qkv(x).chunk(3, dim=-1))  # (B, H, T, dh)
        heads = self.attend_qkv(self.rotary(q), self.rotary(k), v, keep)  # (B, H, T, dh)
        branch = torch.einsum("bhtd,hdc->bhtc", heads, self.w_o)  # (B, H, T, C)
        branch = branch * self.kappa.view(1, -1, 1, 1)
        hidden = self.act(torch.einsum("bhtc,hcf->bhtf", branch, self.w_in))  # (B, H, T, f)
        out = torch.einsum("bhtf,hfc->bhtc", hidden, self.w_out)  # (B, H, T, C)
        if self.branch_norm:
            H, C = out.shape[1], out.shape[-1]
            scale, shift = self.norm_weight.view(H, 1, C), self.norm_bias.view(H, 1, C)
            out = F.layer_norm(branch + out, (C,)) * scale + shift
        return torch.einsum("bhtc,h->btc", out, self.alpha)  # (B, T, C)

    def reference_forward(self, x: Tensor) -> Tensor:
        H = self.n_heads
        q, k, v = (x @ self.qkv.weight.T).split(self.dims.d_model, dim=-1)  # (T, C) each
        q, k = self.reference_rotary(q), self.reference_rotary(k)
        heads = causal_attend(self.reference_bias(dot_logits(q, k, H)), v)  # (T, C)
        kappa, alpha = softmax(self.kappa_logits), softmax(self.alpha_logits)
        act = REFERENCE_ACTIVATIONS[self.activation_name]
        y = torch.zeros_like(x)
        for i in range(H):
            branch = (head(heads, i, H) @ self.w_o[i]) * kappa[i]  # (T, C)
            out = act(branch @ self.w_in[i]) @ self.w_out[i]  # (T, C)
            if self.branch_norm:
                z = branch + out
                mu, var = (
                    z.mean(-1, keepdim=True),
                    ((z - z.mean(-1, keepdim=True)) ** 2).mean(-1, keepdim=True),
                )
                scale, shift = self.norm_weight.view(H, -1)[i], self.norm_bias.view(H, -1)[i]
                out = (z - mu) / torch.sqrt(var + 1e-5) * scale + shift
            y += alpha[i] * out
        return y

    @classmethod
    def count_params(
        cls, dims: Dims, opts: MultiBranchOptions, ffn: FFNSpec, with_values: bool = True
    ) -> int:
        d, H = dims.d_model, dims.n_heads
        d_ff = ffn_width(d, ffn.mult)
        norms = 2 * H * d if opts.branch_norm else 0
        return 3 * d * d + d * d + 2 * d * d_ff + 2 * H + norms

    @classmethod
    def count_flops(
        cls, dims: Dims, opts: MultiBranchOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        d, T = dims.d_model, seq_len
        d_ff = ffn_width(d, ffn.mult)
        H = dims.n_heads
        # QKV, Q K^T, P V, per-head projections to d_model, branch FFNs, and the alpha-weighted
        # sum of the H branches (a contraction over heads, 2*H*d per token).  The branch
        # LayerNorms are elementwise work, which no block counts.
        return Flops.dense(6.0 * d * d + 4.0 * T * d + 2.0 * d * d + 4.0 * d * d_ff + 2.0 * H * d)
