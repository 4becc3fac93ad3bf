"""Slow, written-out formulas that blocks use for their optional reference implementation.

A block may carry ``reference_scores`` / ``reference_forward`` next to its fast
code (see ``AttentionBlock``); ``tests/models/test_reference.py`` checks the
fast path against them on tiny float64 inputs.  Everything here loops over
heads and positions and shares no code with the fast paths, so a bug in a
fused kernel, a reshape or a mask cannot hide in both.  One sequence at a time:
``x`` is (T, C).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

#: The feed-forward activations, written out (``nas.models.ffn`` has the fast ones).
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": lambda x: torch.where(x > 0, x, torch.zeros_like(x)),
    "squared_relu": lambda x: torch.where(x > 0, x * x, torch.zeros_like(x)),
    "gelu": lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))),
    "silu": lambda x: x / (1.0 + torch.exp(-x)),
}
#: The gated FFNs' gates (``swiglu``: SiLU, ``geglu``: GELU); the FFN is W2 (gate(W1 x) * W3 x).
ACTIVATIONS["swiglu"] = ACTIVATIONS["silu"]
ACTIVATIONS["geglu"] = ACTIVATIONS["gelu"]


def softmax(v: Tensor) -> Tensor:
    """Softmax of one vector."""
    e = torch.exp(v - v.max())
    return e / e.sum()


def head(t: Tensor, h: int, n_heads: int) -> Tensor:
    """Columns of head ``h``, (T, dh), from (T, C)."""
    dh = t.shape[-1] // n_heads
    return t[:, h * dh : (h + 1) * dh]


def causal_attend(logits: Tensor, v: Tensor) -> Tensor:
    """logits (H, T, T), v (T, C): row i of head h mixes v_j over j <= i with softmax weights."""
    H, T = logits.shape[0], v.shape[0]
    dh = v.shape[1] // H
    out = torch.zeros_like(v)
    for h in range(H):
        vh = head(v, h, H)
        for i in range(T):
            w = softmax(logits[h, i, : i + 1])
            for j in range(i + 1):
                out[i, h * dh : (h + 1) * dh] += w[j] * vh[j]
    return out


def dot_logits(q: Tensor, k: Tensor, n_heads: int) -> Tensor:
    """q, k (T, C): per head, q_i . k_j / sqrt(dh), unmasked, (H, T, T)."""
    T, dh = q.shape[0], q.shape[1] // n_heads
    out = torch.zeros(n_heads, T, T, dtype=q.dtype)
    for h in range(n_heads):
        for i in range(T):
            for j in range(T):
                out[h, i, j] = head(q, h, n_heads)[i] @ head(k, h, n_heads)[j] / math.sqrt(dh)
    return out


def causal_conv(z: Tensor, weight: Tensor, left: int | None = None) -> Tensor:
    """y[t, c] = sum_s weight[c, s] * z[t - left + s, c] (left k-1: causal); positions outside are zero."""
    T, _ = z.shape
    k = weight.shape[1]
    left = k - 1 if left is None else left
    y = torch.zeros_like(z)
    for t in range(T):
        for s in range(k):
            src = t - left + s
            if 0 <= src < T:
                y[t] += weight[:, s] * z[src]
    return y
