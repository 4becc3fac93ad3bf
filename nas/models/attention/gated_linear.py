"""Gated linear attention (Yang et al., 2024, "Gated Linear Attention Transformers with
Hardware-Efficient Training", GLA) and retention (Sun et al., 2023, "Retentive Network", RetNet),
per head, causal only.

Per head a state S_t of d_head x d_head floats follows

    S_t = diag(alpha_t) S_{t-1} + k_t v_t^T,        o_t = (q_t d_head^-1/2)^T S_t,

with a decay alpha_t in (0, 1] per key channel: learned from the token by a rank-16 gate
(``gate: data``, GLA) or RetNet's fixed gamma_h = 1 - 2^(-5-h) per head (``gate: fixed``).  The
output is ``o_proj(RMSNorm_head(o) * swish(g_proj x))``, as fla's GLA and retention layers.
Training runs the chunked parallel form (``chunked_gated_linear``); ``reference_forward`` runs
the recurrence one position at a time.  Rotary positions turn q and k; ALiBi changes nothing.
The chunked form, its numerics and the FLOP formula are derived in docs/mixers.md.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nas.errors import ConfigError
from nas.models.attention.base import ATTENTION, AttentionBlock, BlockOptions, FFNSpec
from nas.models.dims import Dims, Flops
from nas.models.norms import RMSNorm
from nas.models.parametrization import HIDDEN, READOUT, VECTOR

GATES = ("data", "fixed")
#: Positions per chunk of the parallel form (a power of two); shorter sequences take one chunk.
CHUNK = 64
#: Rank of the data gate's projection and the divisor of its logsigmoid (fla's GLA defaults).
GATE_RANK = 16
GATE_NORMALISER = 16.0
NORM_EPS = 1e-5


@dataclasses.dataclass(frozen=True)
class GatedLinearOptions(BlockOptions):
    gate: str = "data"  # data: GLA's gate from the token, per key channel; fixed: RetNet's gamma_h per head

    def check(self, dims: Dims, ffn: FFNSpec) -> None:
        if self.gate not in GATES:
            raise ConfigError(f"must be one of {', '.join(GATES)}, got {self.gate!r}", "gate")


def retention_gammas(n_heads: int) -> list[float]:
    """RetNet's decay per head: gamma_h = 1 - 2^(-5-h), h = 0 .. H-1 (0.96875 .. towards 1)."""
    return [1.0 - 2.0 ** (-5.0 - h) for h in range(n_heads)]


def chunk_size(T: int) -> int:
    """Positions per chunk at length T: CHUNK, or the smallest power of two >= T when that is less."""
    return min(CHUNK, 1 << max(T - 1, 0).bit_length())


def triangle_index(C: int) -> Tensor:
    """(C * C,) long: where entry (r, s) of a chunk's C x C matrix lies in the list
    [0, the diagonal (C), the halving blocks of h = 1 (C/2 blocks of 1 x 1), h = 2, .., h = C/2],
    each block flattened row by row; entries above the diagonal point at the leading 0.  A new tensor
    on the default device each call (the numbers are cached, not the tensor: a cached tensor made
    under ``torch.device("meta")``, as Hugging Face's ``from_pretrained`` builds, was meta ever after)."""
    return torch.tensor(_triangle_entries(C), dtype=torch.long)


@functools.cache
def _triangle_entries(C: int) -> tuple[int, ...]:
    index = [[0] * C for _ in range(C)]
    for r in range(C):
        index[r][r] = 1 + r
    offset, h = 1 + C, 1
    while h < C:
        for j in range(C // (2 * h)):
            for i in range(h):  # query j 2h + h + i, key j 2h + c
                for c in range(h):
                    index[j * 2 * h + h + i][j * 2 * h + c] = offset + (j * h + i) * h + c
        offset += (C // (2 * h)) * h * h
        h *= 2
    return tuple(i for row in index for i in row)


def chunked_gated_linear(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, index: Tensor | None = None
) -> Tensor:
    """o_t = q_t^T S_t, S_t = diag(exp(log_decay_t)) S_{t-1} + k_t v_t^T, in parallel over the sequence.

    q, k (B, H, T, dk) (q already scaled), v (B, H, T, dv); log_decay (B or 1, H, T, dk or 1), <= 0,
    in float32 or wider; ``index``: ``triangle_index(chunk_size(T))`` on q's device (a block keeps
    them as buffers).  Returns (B, H, T, dv) in q's dtype (see the module's docstring).
    """
    T, dtype = q.shape[2], q.dtype
    C = chunk_size(T)
    N = -(-T // C)

    def chunks(t: Tensor) -> Tensor:  # (..., T, w) -> (..., N, C, w), zeros after T
        return F.pad(t, (0, 0, 0, N * C - T)).unflatten(2, (N, C))

    q, k, v = chunks(q), chunks(k), chunks(v)
    b = chunks(log_decay).cumsum(-2)  # (B|1, H, N, C, dk|1): log-decay from the chunk's start to r

    # Every exponent below is b_later - b_earlier <= 0, never exp(-b): that factorised form overflows
    # (inf, then 0 * inf = nan) when the log-decays are very negative.
    # Inside each chunk: the lower triangle of A, the diagonal (decay exp(0) = 1) and then, for
    # h = 1, 2, .., C/2, the second half of every block of 2h positions against its first half.
    parts = [(q.unsqueeze(-2) @ k.unsqueeze(-1)).flatten(-3)]  # (B, H, N, C)
    h = 1
    while h < C:
        halves = (C // (2 * h), 2, h)  # (..., N, C, w) -> (..., N, C / 2h, 2, h, w)
        qh, kh, bh = q.unflatten(-2, halves), k.unflatten(-2, halves), b.unflatten(-2, halves)
        mid = bh[..., 0, -1:, :]  # b at m, the last position of the first half
        qs = (qh[..., 1, :, :] * (bh[..., 1, :, :] - mid).exp()).to(dtype)  # decay over (m, r]
        ks = (kh[..., 0, :, :] * (mid - bh[..., 0, :, :]).exp()).to(dtype)  # decay over (s, m]
        parts.append((qs @ ks.transpose(-1, -2)).flatten(-3))  # (B, H, N, C/2h * h * h)
        h *= 2
    entries = torch.cat([parts[0].new_zeros(*parts[0].shape[:-1], 1), *parts], dim=-1)
    if index is None:
        index = triangle_index(C).to(q.device)
    A = entries[..., index].unflatten(-1, (C, C))  # (B, H, N, C, C), zero above
    o = A @ v  # (B, H, N, C, dv)

    if N > 1:  # what the state brings from the chunks before
        last = b[..., -1:, :]  # (B|1, H, N, 1, dk|1): log-decay over the whole chunk
        k_to_end = (k * (last - b).exp()).to(dtype)  # decayed to the chunk's last position
        U = k_to_end[:, :, :-1].transpose(-1, -2) @ v[:, :, :-1]  # (B, H, N-1, dk, dv)
        through = last[:, :, :-1].exp().transpose(-1, -2)  # (B|1, H, N-1, dk|1, 1)
        S = U[:, :, 0]
        states = [S]  # the state after chunk n, which chunk n + 1 reads
        for n in range(1, N - 1):
            S = through[:, :, n] * S + U[:, :, n]
            states.append(S)
        q_from_start = (q[:, :, 1:] * b[:, :, 1:].exp()).to(dtype)  # decay over [start, r]
        inter = q_from_start @ torch.stack(states, dim=2).to(dtype)  # (B, H, N-1, C, dv)
        o = torch.cat([o[:, :, :1], o[:, :, 1:] + inter], dim=2)
    return o.flatten(2, 3)[:, :, :T]


def naive_gated_linear(
    q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, index: Tensor | None = None
) -> Tensor:
    """``chunked_gated_linear``'s recurrence run one position at a time: same arguments, same result.

    S_t = diag(exp(log_decay_t)) S_{t-1} + k_t v_t^T, o_t = q_t^T S_t; ``index`` is ignored.  The slow
    reference (fla's ``naive.py``) that the tests compare the chunked form with, outputs and gradients.
    """
    B, H, T, dk = q.shape
    decay = log_decay.exp().expand(B, H, T, dk)
    S = q.new_zeros(B, H, dk, v.shape[-1])  # (B, H, dk, dv)
    out = []
    for t in range(T):
        S = decay[:, :, t, :, None] * S + k[:, :, t, :, None] * v[:, :, t, None, :]
        out.append((q[:, :, t, None, :] @ S)[:, :, 0])  # (B, H, dv)
    return torch.stack(out, dim=2)  # (B, H, T, dv)


@ATTENTION.register("gated_linear")
class GatedLinearAttention(AttentionBlock):
    Options = GatedLinearOptions
    bidirectional = False  # a causal recurrence: no encoder form (yet)
    has_dot_terms = False
    param_kinds = {
        "proj.weight": HIDDEN,
        "out_proj.weight": HIDDEN,
        "gate_down.weight": READOUT,
        "gate_up.weight": VECTOR,
        "gate_up.bias": VECTOR,
    }  # gate_down: d_model -> a fixed rank, as logits are; gate_up: out of that rank
    short_option_names = {"gate": ""}  # gated_linear(data), gated_linear(fixed)

    @classmethod
    def buffer_bytes(cls, dims: Dims, opts: BlockOptions) -> int:
        """The gather index (int64, C x C) of every chunk size up to the one ``max_len`` takes."""
        total, C = 0, 1
        while True:
            total += 8 * C * C
            if C >= chunk_size(dims.max_len):
                return total
            C *= 2

    def __init__(
        self, dims: Dims, opts: GatedLinearOptions, *, ffn: FFNSpec, with_values: bool = True
    ) -> None:
        # Not mixable: with_values=False (a mixture's logits-only form) never comes here.
        super().__init__(dims, opts, ffn=ffn, with_values=with_values)
        d = dims.d_model
        self.widths = [d, d, d, d]  # q, k, v, output gate g: H heads of d_head each
        self.proj = nn.Linear(d, sum(self.widths), bias=False)
        if opts.gate == "data":
            self.gate_down = nn.Linear(d, GATE_RANK, bias=False)
            self.gate_up = nn.Linear(GATE_RANK, d, bias=True)
        else:  # rebuilt from the sizes, not saved
            log_gamma = torch.tensor(retention_gammas(dims.n_heads), dtype=torch.float64).log()
            self.register_buffer("log_gamma", log_gamma, persistent=False)
        C = 1
        while True:  # the gather index of every chunk size a sequence up to max_len can take
            self.register_buffer(f"triangle_{C}", triangle_index(C), persistent=False)
            if C >= chunk_size(dims.max_len):
                break
            C *= 2
        self.norm = RMSNorm(self.d_head, eps=NORM_EPS)  # per head, one weight for every head
        self.out_proj = nn.Linear(d, d, bias=False)
        self.out_proj.residual_out = True  # type: ignore[attr-defined]

    def log_decay(self, x: Tensor) -> Tensor:
        """log alpha, (B, H, T, dk) for the data gate or (1, H, T, 1) for the fixed one, <= 0,
        in float32 at least (the decay arithmetic stays out of bf16 under autocast)."""
        T = x.shape[1]
        wide = torch.promote_types(x.dtype, torch.float32)
        if self.opts.gate == "fixed":
            return self.log_gamma.to(wide).view(1, -1, 1, 1).expand(1, self.n_heads, T, 1)
        z = self.gate_up(self.gate_down(x))  # (B, T, H * dk)
        return self.split_heads(F.logsigmoid(z.to(wide)) / GATE_NORMALISER)

    def forward(self, x: Tensor, keep: Tensor | None = None) -> Tensor:
        # Causal only (bidirectional is False): no encoder builds it, so ``keep`` is always None.
        B, T, _ = x.shape
        q, k, v, g = self.proj(x).split(self.widths, dim=-1)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)  # (B, H, T, dh)
        q = self.rotary(q) * self.d_head**-0.5
        k = self.rotary(k)
        index = getattr(self, f"triangle_{chunk_size(T)}")
        o = chunked_gated_linear(q, k, v, self.log_decay(x), index)  # (B, H, T, dv)
        o = self.norm(o.transpose(1, 2))  # (B, T, H, dv), each head on its own
        return self.out_proj((o * F.silu(g.view(B, T, self.n_heads, self.d_head))).flatten(2))

    # -- the slow reference: the recurrence, one position at a time ---------------------------
    def reference_forward(self, x: Tensor) -> Tensor:
        T, H, dk = x.shape[0], self.n_heads, self.d_head
        q, k, v, g = (x @ self.proj.weight.T).split(self.widths, dim=-1)  # (T, C) each
        q, k = self.reference_rotary(q), self.reference_rotary(k)
        if self.opts.gate == "data":
            z = (x @ self.gate_down.weight.T) @ self.gate_up.weight.T + self.gate_up.bias  # (T, H dk)
            log_alpha = -torch.log1p(torch.exp(-z)) / GATE_NORMALISER  # logsigmoid, written out
        else:
            gammas = retention_gammas(H)
            log_alpha = torch.tensor([[math.log(gammas[c // dk]) for c in range(H * dk)]] * T, dtype=x.dtype)

        def heads(t: Tensor) -> Tensor:  # (T, H dk) -> (1, H, T, dk)
            return t.reshape(T, H, dk).transpose(0, 1)[None]

        q = q / math.sqrt(dk)
        o = naive_gated_linear(heads(q), heads(k), heads(v), heads(log_alpha))[0]  # (H, T, dv)
        out = torch.zeros(T, H * dk, dtype=x.dtype)
        for h in range(H):
            cols = slice(h * dk, (h + 1) * dk)
            for t in range(T):
                oh = o[h, t] / torch.sqrt((o[h, t] * o[h, t]).mean() + NORM_EPS) * self.norm.weight
                gate = g[t, cols]
                out[t, cols] = oh * gate / (1.0 + torch.exp(-gate))  # swish
        return out @ self.out_proj.weight.T

    # -- sizes ----------------------------------------------------------------------------------
    @classmethod
    def count_params(
        cls, dims: Dims, opts: GatedLinearOptions, ffn: FFNSpec, with_values: bool = True
    ) -> int:
        d = dims.d_model
        gate = GATE_RANK * d + GATE_RANK * d + d if opts.gate == "data" else 0  # W_down, W_up, b
        return 4 * d * d + d * d + gate + dims.d_head  # q, k, v, g; output; gate; the heads' norm

    @classmethod
    def count_flops(
        cls, dims: Dims, opts: GatedLinearOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        d, dh, T = dims.d_model, dims.d_head, seq_len
        C = chunk_size(T)
        N = -(-T // C)
        P = N * C
        proj = 2.0 * d * 4 * d + 2.0 * d * d
        intra = P * d * (C + 1) + 2.0 * P * C * d  # A (halving blocks and diagonal), then A V
        inter = 4.0 * (N - 1) * C * d * dh  # (k decayed)^T v per chunk, q (decayed) S per chunk
        flops = Flops.dense(proj + (intra + inter) / T)
        if opts.gate == "data":
            gate = 2.0 * d * GATE_RANK + 2.0 * GATE_RANK * d
            # A single position decays nothing (its state starts empty): no gradient reaches the gate.
            flops = flops + Flops(gate, 2.0 * gate if T > 1 else 0.0)
        return flops

    @classmethod
    def state_elements(
        cls, dims: Dims, opts: GatedLinearOptions, seq_len: int, with_values: bool = True
    ) -> int:
        """Elements a layer keeps per sequence while generating: one d_head x d_head state S per
        head (keys by values), n_heads x d_head^2 = d_model x d_head, independent of ``seq_len``
        (which a softmax block's key/value cache grows with; the argument is there for those)."""
        return dims.n_heads * dims.d_head * dims.d_head
