"""Multi-DConv-Head Attention from Primer (So et al., 2021, section 3).

After the Q, K and V projections, each channel of each head goes through its
own causal depthwise convolution along the sequence (kernel 3 in Primer; the
kernel size is an option here), then attention proceeds as in ``mha``.  As a
seq2seq encoder layer the attention sees the whole source; the convolution
stays causal (each channel mixes a position with the k-1 before it) unless
``centered: true``, which mixes the k // 2 positions before it and the
(k - 1) // 2 after (kernel 3: one on each side).  A centered convolution sees
later positions, so only an encoder layer may have it.

Speed (CPU, fp32, B 8, T 512, 3 x 256 channels, kernel 3, one thread,
forward + backward of the convolution alone): ``F.conv1d`` on the transposed
(B, C, T) layout 27 ms, shift-and-add over the k taps in (B, T, C) 32 ms (k
reads and writes of the whole tensor, each tap its own autograd node), and a
depthwise ``F.conv2d`` that reads the (B, T, C) projections in place as a
channels-last (B, C, 1, T) image 6.8 ms.  The last also hands attention
(B, T, C)-contiguous q, k, v; the transposed conv1d output made
``F.scaled_dot_product_attention`` fall back from its fused CPU kernel to
the unfused math path, which had cost the block a further 25%.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nas.errors import ConfigError
from nas.models.attention.base import ATTENTION, FFNSpec, positive_int
from nas.models.attention.mha import MHAOptions, MultiHeadAttention, kv_width
from nas.models.dims import Dims, Flops
from nas.models.parametrization import VECTOR
from nas.models.reference import causal_conv


@dataclasses.dataclass(frozen=True)
class MDHAOptions(MHAOptions):
    kernel: int = 3
    centered: bool = False  # encoder layers only: the taps reach (kernel - 1) // 2 positions ahead

    def check(self, dims: Dims, ffn: FFNSpec) -> None:
        super().check(dims, ffn)
        positive_int(self.kernel, "kernel")

    def check_causal(self) -> None:
        if self.centered:
            raise ConfigError(
                "a centered convolution sees later positions; valid only in an encoder layer "
                "(encoder_layers of a task: seq2seq architecture), not in a causal one",
                "centered",
            )

    @property
    def left(self) -> int:
        """How many positions before the current one the taps reach (k - 1 when causal)."""
        return self.kernel // 2 if self.centered else self.kernel - 1

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if not self.centered:  # the default leaves no trace: arch_ids from before the option stay
            del out["centered"]
        return out


def causal_depthwise_conv(x: Tensor, weight: Tensor, left: int | None = None) -> Tensor:
    """y[:, t, c] = sum_s weight[c, s] * x[:, t - left + s, c], zeros outside the sequence.

    x (B, T, C), weight (C, k); ``left`` defaults to k-1, which keeps it causal.  The
    (B, T, C) memory is read as a channels-last (B, C, 1, T) image, so the
    depthwise convolution needs no transposed copies and its output is
    (B, T, C)-contiguous again (see the module docstring for the timings).
    """
    B, T, C = x.shape
    k = weight.shape[-1]
    left = k - 1 if left is None else left
    xp = F.pad(x, (0, 0, left, k - 1 - left))  # (B, T + k - 1, C), zeros before the start (and after)
    if torch.compiler.is_compiling():
        # Under torch.compile the taps are summed as shifted slices: pointwise work that inductor fuses
        # into one kernel.  The channels-last conv2d below trained a 12-layer Primer-EZ on an H100
        # (bf16, torch 2.11) to val loss 4.01 compiled against 2.36 eager (docs/gpu.md); the size-1
        # image height leaves its layout ambiguous to inductor.  Eager keeps conv2d (the CPU timings above).
        return sum(xp[:, s : s + T] * weight[:, s] for s in range(k))
    image = xp.transpose(1, 2).unsqueeze(2)  # (B, C, 1, T + k - 1), channels-last strides
    y = F.conv2d(image, weight.view(C, 1, 1, k), groups=C)  # (B, C, 1, T), channels-last
    return y.squeeze(2).transpose(1, 2)  # (B, T, C), contiguous


def conv_channels(dims: Dims, opts: MDHAOptions, with_values: bool = True) -> int:
    """Channels the convolution runs over: Q, K (and V) of kv_heads heads each."""
    return dims.d_model + (2 if with_values else 1) * kv_width(dims, opts)


@ATTENTION.register("mdha")
class MultiDConvHeadAttention(MultiHeadAttention):
    bidirectional = True  # mha's forward: the causal flag drops the mask; the convolution stays causal
    has_dot_terms = True  # mha's dot_terms over its convolved queries and keys
    param_kinds = {"conv_weight": VECTOR}  # a filter per channel: one growing dimension
    Options = MDHAOptions
    short_option_names = {"kernel": "k", "kv_heads": "kv", "centered": "centered="}
    no_decay = ("conv_weight",)  # a per-channel filter that starts at the identity, not a matrix

    def __init__(self, dims: Dims, opts: MDHAOptions, *, ffn: FFNSpec, with_values: bool = True) -> None:
        super().__init__(dims, opts, ffn=ffn, with_values=with_values)
        channels = sum(self.widths)  # Q, K (and V), K and V of kv_heads heads each
        # Start close to the identity (the current position's tap 1) so the block begins as plain attention.
        weight = torch.randn(channels, opts.kernel) * (0.02 / math.sqrt(opts.kernel))
        weight[:, opts.left] += 1.0
        self.conv_weight = nn.Parameter(weight)
        self.left = opts.left

    def project(self, x: Tensor, keep: Tensor | None = None) -> Tensor:
        z = self.qkv(x)
        if keep is not None:  # padding contributes nothing to a real position's taps (a centered one's)
            z = z * keep[..., None].to(z.dtype)
        return causal_depthwise_conv(z, self.conv_weight, self.left)

    def reference_qkv(self, x: Tensor) -> list[Tensor]:
        z = causal_conv(x @ self.qkv.weight.T, self.conv_weight, self.left)  # (T, sum(widths))
        return list(z.split(self.widths, dim=-1))

    @classmethod
    def count_params(cls, dims: Dims, opts: MDHAOptions, ffn: FFNSpec, with_values: bool = True) -> int:
        channels = conv_channels(dims, opts, with_values)
        return super().count_params(dims, opts, ffn, with_values) + channels * opts.kernel

    @classmethod
    def state_elements(cls, dims: Dims, opts: MDHAOptions, seq_len: int, with_values: bool = True) -> int:
        """mha's KV cache (of the convolved keys and values) plus the last k-1 projections of every
        channel, which the next token's taps read."""
        channels = conv_channels(dims, opts, with_values)
        return super().state_elements(dims, opts, seq_len, with_values) + (opts.kernel - 1) * channels

    @classmethod
    def count_flops(
        cls, dims: Dims, opts: MDHAOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        channels = conv_channels(dims, opts, with_values)
        conv = Flops.dense(2.0 * opts.kernel * channels)
        return super().count_flops(dims, opts, ffn, seq_len, with_values) + conv
