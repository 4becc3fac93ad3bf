"""The normalisation before each sublayer and at the end of the stack: LayerNorm or RMSNorm."""

from __future__ import annotations

import torch
from torch import Tensor, nn

NORMS = ("layernorm", "rmsnorm")


#: RMSNorm's epsilon (Llama's ``norm_eps``); what the Hugging Face export and import read and write
RMS_EPS = 1e-5


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight (Zhang and Sennrich, 2019); no bias, no centring.

    Computed in at least float32 and cast back before the weight, as Llama does; eps 1e-5
    (Llama's ``norm_eps``).  torch's ``nn.RMSNorm`` multiplies before casting back and
    defaults eps to the dtype's machine epsilon, so it is not the reference's formula.
    """

    param_kinds = {"weight": "vector"}

    def __init__(self, d: int, eps: float = RMS_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: Tensor) -> Tensor:
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


def make_norm(kind: str, d: int) -> nn.Module:
    """The normalisation ``kind`` (one of NORMS) over ``d`` features."""
    return RMSNorm(d) if kind == "rmsnorm" else nn.LayerNorm(d)


def norm_params(kind: str, d: int) -> int:
    """Parameters of one normalisation: a scale (RMSNorm), or a scale and a shift (LayerNorm)."""
    return d if kind == "rmsnorm" else 2 * d
