"""Multi-DConv-Head Attention from Primer (So et al., 2021, section 3).

After the Q, K and V projections, each channel of each head goes through its
own causal depthwise convolution along the sequence (kernel 3 in Primer; the
kernel size is an option here), then attention proceeds as in ``mha``.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nas.models.attention.base import ATTENTION, BlockOptions, FFNSpec, positive_int
from nas.models.attention.mha import MultiHeadAttention
from nas.models.dims import Dims, Flops


@dataclasses.dataclass(frozen=True)
class MDHAOptions(BlockOptions):
    kernel: int = 3

    def check(self, dims: Dims, ffn: FFNSpec) -> None:
        positive_int(self.kernel, "kernel")


def causal_depthwise_conv(x: Tensor, weight: Tensor) -> Tensor:
    """y[:, t, c] = sum_s weight[c, s] * x[:, t - (k-1) + s, c], zeros before the start.

    x (B, T, C), weight (C, k); the left padding of k-1 keeps it causal.
    """
    k = weight.shape[-1]
    xt = F.pad(x.transpose(1, 2), (k - 1, 0))  # (B, C, T + k - 1)
    return F.conv1d(xt, weight.unsqueeze(1), groups=weight.shape[0]).transpose(1, 2)  # (B, T, C)


@ATTENTION.register("mdha")
class MultiDConvHeadAttention(MultiHeadAttention):
    Options = MDHAOptions

    def __init__(self, dims: Dims, opts: MDHAOptions, *, ffn: FFNSpec, with_values: bool = True) -> None:
        super().__init__(dims, opts, ffn=ffn, with_values=with_values)
        channels = self.n_proj * dims.d_model
        # Start close to the identity (last tap 1) so the block begins as plain attention.
        weight = torch.randn(channels, opts.kernel) * (0.02 / math.sqrt(opts.kernel))
        weight[:, -1] += 1.0
        self.conv_weight = nn.Parameter(weight)

    def project(self, x: Tensor) -> Tensor:
        return causal_depthwise_conv(self.qkv(x), self.conv_weight)

    @classmethod
    def count_params(cls, dims: Dims, opts: MDHAOptions, ffn: FFNSpec, with_values: bool = True) -> int:
        n_proj = 3 if with_values else 2
        return super().count_params(dims, opts, ffn, with_values) + n_proj * dims.d_model * opts.kernel

    @classmethod
    def count_flops(
        cls, dims: Dims, opts: MDHAOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        n_proj = 3 if with_values else 2
        conv = Flops.dense(2.0 * opts.kernel * n_proj * dims.d_model)
        return super().count_flops(dims, opts, ffn, seq_len, with_values) + conv
