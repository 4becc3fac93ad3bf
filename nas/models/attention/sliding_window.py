"""Sliding-window attention (local attention: Child et al., 2019; Beltagy et al., 2020, "Longformer";
the windowed layers of Mistral and Gemma 2).

Multi-head attention in which query i sees only the ``window`` keys i - window + 1 .. i
(causal), or, as a bidirectional encoder layer, the keys within window - 1 positions on
either side.  Everything else is ``mha``'s: fused projections, grouped key/value heads
(``kv_heads``), rotary positions.

Compute is linear in T: the sequence is cut into blocks of ``window`` positions, and the
queries of each block attend, through ``F.scaled_dot_product_attention`` with a boolean
band mask, to the keys of their own block and the one before (and the one after, in an
encoder): 2 x window keys per query instead of T (Longformer's "sliding chunks").  The
FLOP formula counts exactly that, padding of the last block included; a window as long as
the sequence is ``mha`` itself and takes its fused causal path.  The encoder form computes
3 x window keys per query; the formula, which does not know the direction, counts the
causal form's 2 x window.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from nas.models.attention.base import ATTENTION, FFNSpec, positive_int
from nas.models.attention.mha import MHAOptions, MultiHeadAttention
from nas.models.dims import Dims, Flops
from nas.models.reference import causal_attend, dot_logits
from nas.models.rotary import alibi_penalty


@dataclasses.dataclass(frozen=True)
class WindowOptions(MHAOptions):
    window: int = 64  # keys each query sees, itself included

    def check(self, dims: Dims, ffn: FFNSpec) -> None:
        super().check(dims, ffn)
        positive_int(self.window, "window")


def block_mask(
    window: int, n_blocks: int, ahead: int, T: int, device: torch.device | None = None
) -> tuple[Tensor, Tensor]:
    """(n_blocks, window, (2 + ahead) x window): may query r of block b see context key c (bool),
    and how many positions the key lies after the query (for ALiBi's penalty).

    The context of block b is blocks b-1, b (and b+1 when ``ahead``): key c is at position
    (b - 1) x window + c, query r at b x window + r.  A key is seen when it lies in the band
    and in the sequence (the padding before the first block and after position T is not).
    Built on ``device``: built on the host and moved, it would be a transfer per layer and step
    that waits for the GPU's queue.
    """
    b = torch.arange(n_blocks, device=device)[:, None, None]
    query = b * window + torch.arange(window, device=device)[None, :, None]
    key = (b - 1) * window + torch.arange((2 + ahead) * window, device=device)[None, None, :]
    after = key - query
    in_band = (after > -window) & (after <= (window - 1 if ahead else 0))
    return in_band & (key >= 0) & (key < T), after


def blocks(t: Tensor, window: int, n_blocks: int, ahead: int) -> Tensor:
    """Keys or values (B, H, T, dh) -> each block's context (B, H, n_blocks, (2 + ahead) x window, dh)."""
    T = t.shape[2]
    padded = F.pad(t, (0, 0, window, n_blocks * window - T + ahead * window))  # zeros before and after
    return padded.unfold(2, (2 + ahead) * window, window).transpose(-1, -2)


_BAND_MASKS: dict[tuple[int, int, bool, str], object] = {}
_COMPILED_FLEX: list[Callable[..., Tensor]] = []


def band_block_mask(window: int, T: int, causal: bool, device: torch.device) -> object:
    """FlexAttention's block mask of the band: key j is seen by query i when i - window < j <= i
    (causal) or |i - j| < window (encoder).  Built once per shape in eager code; under
    ``torch.compile`` it is traced into the graph (a fused kernel over the tiles)."""
    from torch.nn.attention.flex_attention import create_block_mask

    def band(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        after = kv - q
        return (after > -window) & (after <= (0 if causal else window - 1))

    if torch.compiler.is_compiling():
        return create_block_mask(band, None, None, T, T, device=device)
    key = (window, T, causal, str(device))
    if key not in _BAND_MASKS:
        _BAND_MASKS[key] = create_block_mask(band, None, None, T, T, device=device)
    return _BAND_MASKS[key]


def flex_attention(q: Tensor, k: Tensor, v: Tensor, block_mask: object, enable_gqa: bool) -> Tensor:
    """FlexAttention, compiled once per process when called from eager code on CUDA (uncompiled it
    materializes every score); inside a compiled model, the model's compilation covers it.  On a
    CPU (tests only: no backward there) it runs uncompiled, the reference form."""
    from torch.nn.attention import flex_attention as fa

    if torch.compiler.is_compiling():
        return fa.flex_attention(q, k, v, block_mask=block_mask, enable_gqa=enable_gqa)
    if not q.is_cuda:
        with warnings.catch_warnings():  # "called without torch.compile": on purpose, see above
            warnings.simplefilter("ignore", UserWarning)
            return fa.flex_attention(q, k, v, block_mask=block_mask, enable_gqa=enable_gqa)
    if not _COMPILED_FLEX:
        _COMPILED_FLEX.append(torch.compile(fa.flex_attention, dynamic=False))
    return _COMPILED_FLEX[0](q, k, v, block_mask=block_mask, enable_gqa=enable_gqa)


@ATTENTION.register("sliding_window")
class SlidingWindowAttention(MultiHeadAttention):
    # not a mixture component: a mixture takes mha's logits from it and applies its own full causal
    # mask, so the window would not apply and the component would be mha under another name
    mixable = False
    why_not_mixable = "its window would not apply under the mixture's one causal mask; mix mha instead"
    bidirectional = True  # forward reads self.causal
    has_dot_terms = True  # mha's dot_terms (its band is applied in forward)
    Options = WindowOptions
    short_option_names = {"window": "w", "kv_heads": "kv"}

    def __init__(self, dims: Dims, opts: WindowOptions, *, ffn: FFNSpec, with_values: bool = True) -> None:
        super().__init__(dims, opts, ffn=ffn, with_values=with_values)
        self.window = opts.window

    def forward(self, x: Tensor, keep: Tensor | None = None) -> Tensor:
        T, W = x.shape[1], self.window
        if W >= T:  # the band is the whole causal triangle (or, in an encoder, everything): mha
            return super().forward(x, keep)
        q, k, v = self.heads(x, keep)
        if self.use_flex(q, keep):
            mask = band_block_mask(W, T, self.causal, q.device)
            y = flex_attention(q, k, v, mask, self.grouped)
            return self.out_proj(self.merge_heads(y))
        k, v = self._every_head(k), self._every_head(v)
        B, H, _, dh = q.shape
        n, ahead = -(-T // W), 0 if self.causal else 1
        qb = F.pad(q, (0, 0, 0, n * W - T)).view(B, H, n, W, dh)  # (B, H, n, W, dh)
        mask, after = block_mask(W, n, ahead, T, x.device)  # (n, W, context)
        if keep is not None:  # and not a padding key of the block's context: (B, 1, n, W, context)
            real = blocks(keep[:, None, :, None].to(q.dtype), W, n, ahead)[..., 0] > 0  # (B, 1, n, context)
            mask = mask & real[:, :, :, None, :]
        if self.dims.alibi:  # ALiBi's penalty where a key may be seen, else -inf: (B|1, H, n, W, context)
            penalty = alibi_penalty(H, after).to(q.dtype)
            mask = torch.where(mask, penalty, float("-inf"))
        y = F.scaled_dot_product_attention(qb, blocks(k, W, n, ahead), blocks(v, W, n, ahead), attn_mask=mask)
        return self.out_proj(self.merge_heads(y.reshape(B, H, n * W, dh)[:, :, :T]))

    #: None: FlexAttention where it is fast and has a backward (CUDA); True/False forces it (tests)
    flex: bool | None = None

    def use_flex(self, q: Tensor, keep: Tensor | None) -> bool:
        if keep is not None or self.dims.alibi:  # per-batch padding and ALiBi keep the blocked form
            return False
        return q.is_cuda if self.flex is None else self.flex

    def reference_forward(self, x: Tensor) -> Tensor:
        q, k, v = self._reference_heads(x)
        logits = self.reference_bias(dot_logits(q, k, self.n_heads))  # (H, T, T)
        T = x.shape[0]
        for i in range(T):
            for j in range(T):
                if i - j >= self.window:
                    logits[:, i, j] = float("-inf")  # causal_attend masks j > i itself
        return causal_attend(logits, v) @ self.out_proj.weight.T

    @classmethod
    def state_elements(cls, dims: Dims, opts: WindowOptions, seq_len: int, with_values: bool = True) -> int:
        """The KV cache of the last ``window`` tokens only: bounded, whatever the length."""
        return super().state_elements(dims, opts, min(opts.window, seq_len), with_values)

    @classmethod
    def count_flops(
        cls, dims: Dims, opts: WindowOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        T, W = seq_len, opts.window
        full = super().count_flops(dims, opts, ffn, T, with_values)
        if W >= T:
            return full
        # Per token, mha scores T keys; here each of the n x W (padded) queries scores 2W keys.
        keys = 2 * W * (-(-T // W) * W) / T
        per_key = (2.0 if with_values else 1.0) * 2.0 * dims.d_model  # Q K^T (and P V), per key
        return full + Flops.dense((keys - T) * per_key)
