"""Positions inside attention: rotary embeddings (RoPE; Su et al., 2021, "RoFormer") and ALiBi
(Press et al., 2022, "Train Short, Test Long").

RoPE rotates each pair of a query's (and a key's) channels by an angle that grows
with the position, so that q_i . k_j depends on i - j only.  Frequencies
``base^(-2i/dh)`` for i < dh/2 (base 10000 as in Llama), every channel of the head
rotated.  Pairs follow the half-split convention of Hugging Face's Llama (channel
c pairs with c + dh/2: ``x cos + rotate_half(x) sin``); Meta's reference code pairs
adjacent channels instead, which is the same model up to a fixed permutation of the
query and key projection rows (the Llama converters permute them).  The tables are
computed and kept in float64 and cast to the input's dtype where they are used: the
references compute the angles in float32, whose error grows with the position (about
1e-7 relative at position 8, which a float64 check against the written-out formula sees).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def rotary_tables(max_len: int, d_head: int, base: float) -> tuple[Tensor, Tensor]:
    """cos and sin, (max_len, d_head) float64: position t, channel c at angle
    t * base^(-2 (c mod dh/2) / dh)."""
    inv_freq = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)  # (dh/2,)
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (T, dh/2)
    angles = torch.cat((angles, angles), dim=-1)  # (T, dh): channel c and c + dh/2 share an angle
    return angles.cos(), angles.sin()


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (..., T, dh) rotated by the first T rows of the tables."""
    T, half = x.shape[-2], x.shape[-1] // 2
    c, s = cos[:T].to(x.dtype), sin[:T].to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return x * c + torch.cat((-x2, x1), dim=-1) * s


def rotate_tokens(x: Tensor, cos: Tensor, sin: Tensor, d_head: int) -> Tensor:
    """x (B, T, heads x d_head), token-major as a projection leaves it, every head rotated: the same
    numbers as :func:`rotate` on the (B, H, T, dh) view, computed where the channels are contiguous.
    On the head-major view a compiled backward writes the projection's gradient through a transpose
    (13% of a Transformer++ step's GPU time on an H200, docs/BENCHMARKS.md)."""
    B, T, C = x.shape
    h = x.view(B, T, C // d_head, d_head)
    c, s = cos[:T, None].to(x.dtype), sin[:T, None].to(x.dtype)
    half = d_head // 2
    h1, h2 = h[..., :half], h[..., half:]
    return (h * c + torch.cat((-h2, h1), dim=-1) * s).view(B, T, C)


def reference_rotate(x: Tensor, n_heads: int, base: float) -> Tensor:
    """x (T, C) with every head's channel pairs (c, c + dh/2) rotated, written out with loops."""
    T, C = x.shape
    dh = C // n_heads
    out = x.clone()
    for h in range(n_heads):
        for t in range(T):
            for i in range(dh // 2):
                angle = t * base ** (-2.0 * i / dh)
                a, b = x[t, h * dh + i], x[t, h * dh + i + dh // 2]
                out[t, h * dh + i] = a * math.cos(angle) - b * math.sin(angle)
                out[t, h * dh + i + dh // 2] = b * math.cos(angle) + a * math.sin(angle)
    return out


def alibi_slopes(n_heads: int) -> list[float]:
    """ALiBi's slope per head: 2^(-8h/n) for h = 1..n when n is a power of two (n = 8: 1/2 .. 1/256);
    otherwise the power of two below n, then every other slope of twice that many (the paper's code)."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start ** (h + 1) for h in range(n)]

    if math.log2(n_heads).is_integer():
        return power_of_two(n_heads)
    c = 2 ** math.floor(math.log2(n_heads))
    return power_of_two(c) + alibi_slopes(2 * c)[0::2][: n_heads - c]


def alibi_slopes_on(n_heads: int, device: torch.device | str | None = None) -> Tensor:
    """:func:`alibi_slopes` as a float32 tensor computed on ``device``: ``torch.tensor(list,
    device="cuda")`` copies from host memory, a transfer that waits for every kernel queued before it,
    once per layer and step (an ALiBi model's training loop could not run ahead of the GPU)."""
    c = 2 ** math.floor(math.log2(n_heads))
    h = torch.arange(1, 2 * c + 1, dtype=torch.float64, device=device)  # exponents 1 .. 2c
    first = (2.0 ** (-8.0 / c)) ** h[:c]  # power_of_two(c): start = 2^(-8/c), start^h
    rest = (2.0 ** (-8.0 / (2 * c))) ** h[0::2][: n_heads - c]  # every other slope of power_of_two(2c)
    return torch.cat((first, rest)).float()


def alibi_penalty(n_heads: int, offset: Tensor) -> Tensor:
    """(H, *offset.shape): -m_h |offset|, head h's penalty for a key ``offset`` positions from its query."""
    slopes = alibi_slopes_on(n_heads, offset.device)
    return -slopes.view(-1, *[1] * offset.dim()) * offset.abs()


def alibi_bias(n_heads: int, T: int, device: torch.device | None = None) -> Tensor:
    """(H, T, T): -m_h |i - j|, the penalty of key j for query i (a causal block masks j > i anyway;
    an encoder layer sees the same penalty on either side)."""
    pos = torch.arange(T, device=device)
    return alibi_penalty(n_heads, pos[:, None] - pos[None, :])
