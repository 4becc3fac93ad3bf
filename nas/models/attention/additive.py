"""Additive attention (Bahdanau et al., 2015, "Neural Machine Translation by Jointly Learning
to Align and Translate"), per head and causal.

The logit of query i at key j in head h is a one-hidden-layer MLP of the pair,

    S[h, i, j] = v_h . tanh(q_i W_q,h + x_j W_k,h),

with W_q,h and W_k,h of shape (d_model, d_a) and v_h of length ``d_a``; the
attention weights are the causal softmax of S and mix a value projection as
in ``mha`` (``ValueAttention``).  The query and key maps go straight from the
token to the d_a-wide hidden layer: a separate query/key projection before
them would be a product of two linear maps, which one map already spans.

Memory: the tanh's input is (B, H, T, T, d_a) in one piece, d_a times the
logits.  ``scores`` builds it a chunk of queries at a time (a chunk holds at
most ``CHUNK_ELEMENTS`` of it) and reduces each chunk to its (B, H, c, T)
logits at once; backward rebuilds each chunk's tanh from q and k instead of
keeping it (``PairLogits``, a hand-written backward, because autograd would
save every chunk's tanh).  Peak memory is then the (B, H, T, T) logits and
weights, as for the synthesizers, plus one chunk.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from nas.models.attention.base import ATTENTION, BlockOptions, FFNSpec, ValueAttention, positive_int
from nas.models.dims import Dims, Flops
from nas.models.parametrization import HIDDEN, VECTOR

#: Elements of the (B, H, c, T, d_a) tanh input one chunk of queries may hold: 64 MiB in float32
#: on a CPU, four times that on a GPU, whose memory is larger and whose kernel launches cost more.
CHUNK_ELEMENTS = 1 << 24
CHUNK_ELEMENTS_CUDA = 1 << 26


@dataclasses.dataclass(frozen=True)
class AdditiveOptions(BlockOptions):
    d_a: int = 32  # width of the scoring MLP's hidden layer, per head

    def check(self, dims: Dims, ffn: FFNSpec) -> None:
        positive_int(self.d_a, "d_a")


class PairLogits(torch.autograd.Function):
    """S[b, h, i, j] = v_h . tanh(q[b, h, i] + k[b, h, j]), a chunk of queries at a time.

    q, k (B, H, T, d_a), v (H, d_a, 1) -> S (B, H, T, T).  Only q, k and v are saved:
    backward rebuilds each chunk's tanh (elementwise work) instead of keeping the
    (B, H, T, T, d_a) tensor, so memory stays at one chunk.  The products with v are
    batched matmuls, which is the work the FLOP formulas count (twice in backward: the
    gradient of the tanh and of v).
    """

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx, q: Tensor, k: Tensor, v: Tensor, chunk: int
    ) -> Tensor:
        ctx.save_for_backward(q, k, v)
        ctx.chunk = chunk
        B, H, T, d_a = q.shape
        v = v.to(q.dtype)
        rows = []
        for i in range(0, T, chunk):
            hidden = (q[:, :, i : i + chunk, None] + k[:, :, None]).tanh_()  # (B, H, c, T, d_a)
            c = hidden.shape[2]
            rows.append((hidden.view(B, H, c * T, d_a) @ v).view(B, H, c, T))
        return torch.cat(rows, dim=2)

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, None]:
        q, k, v = ctx.saved_tensors
        B, H, T, d_a = q.shape
        grad, vt = grad.to(q.dtype), v.to(q.dtype).transpose(1, 2)  # vt (H, 1, d_a)
        dq, dk = torch.empty_like(q), torch.zeros_like(k)
        dv = torch.zeros(H, d_a, 1, dtype=q.dtype, device=q.device)
        for i in range(0, T, ctx.chunk):
            # In place where the chunk's tensors allow it: each is d_a times the chunk's logits.
            hidden = (q[:, :, i : i + ctx.chunk, None] + k[:, :, None]).tanh_()  # (B, H, c, T, d_a)
            c = hidden.shape[2]
            g = grad[:, :, i : i + c].reshape(B, H, c * T, 1)
            dv += (hidden.view(B, H, c * T, d_a).transpose(2, 3) @ g).sum(0)  # (H, d_a, 1)
            dpre = (g @ vt).view(B, H, c, T, d_a).mul_(hidden.mul_(hidden).neg_().add_(1.0))  # through tanh
            dq[:, :, i : i + c] = dpre.sum(3)
            dk += dpre.sum(2)
        return dq, dk, dv.to(v.dtype), None


@ATTENTION.register("additive")
class AdditiveAttention(ValueAttention):
    Options = AdditiveOptions
    mixable = True
    bidirectional = True
    has_dot_terms = False
    param_kinds = {"w_q.weight": HIDDEN, "w_k.weight": HIDDEN, "v": VECTOR}  # v: (H, d_a, 1)
    short_option_names = {"d_a": "da"}

    def __init__(self, dims: Dims, opts: AdditiveOptions, *, ffn: FFNSpec, with_values: bool = True) -> None:
        super().__init__(dims, opts, ffn=ffn, with_values=with_values)
        H, self.d_a = dims.n_heads, opts.d_a
        self.w_q = nn.Linear(dims.d_model, H * opts.d_a, bias=False)  # W_q of every head
        self.w_k = nn.Linear(dims.d_model, H * opts.d_a, bias=False)  # W_k of every head
        self.v = nn.Parameter(torch.randn(H, opts.d_a, 1) / math.sqrt(opts.d_a))  # (H, d_a, 1)

    def hidden_heads(self, x: Tensor, proj: nn.Linear) -> Tensor:
        B, T, _ = x.shape
        return proj(x).view(B, T, self.n_heads, self.d_a).transpose(1, 2)  # (B, H, T, d_a)

    def scores(self, x: Tensor) -> Tensor:
        q, k = self.hidden_heads(x, self.w_q), self.hidden_heads(x, self.w_k)
        B, H, T, _ = q.shape
        budget = CHUNK_ELEMENTS_CUDA if q.is_cuda else CHUNK_ELEMENTS
        chunk = max(1, budget // (B * H * T * self.d_a))
        return PairLogits.apply(q, k, self.v, chunk)  # (B, H, T, T)

    def reference_scores(self, x: Tensor) -> Tensor:
        T, H, d_a = x.shape[0], self.n_heads, self.d_a
        q, k = x @ self.w_q.weight.T, x @ self.w_k.weight.T  # (T, H * d_a)
        out = torch.zeros(H, T, T, dtype=x.dtype)
        for h in range(H):
            cols = slice(h * d_a, (h + 1) * d_a)
            for i in range(T):
                for j in range(T):
                    out[h, i, j] = self.v[h, :, 0] @ torch.tanh(q[i, cols] + k[j, cols])
        return out

    @classmethod
    def count_params(cls, dims: Dims, opts: AdditiveOptions, ffn: FFNSpec, with_values: bool = True) -> int:
        d, H = dims.d_model, dims.n_heads
        own = 2 * d * H * opts.d_a + H * opts.d_a
        return own + (cls.value_params(dims) if with_values else 0)

    @classmethod
    def state_elements(cls, dims: Dims, opts: AdditiveOptions, seq_len: int, with_values: bool = True) -> int:
        """W_k x_j (H x d_a) of every past token, and the values."""
        return dims.n_heads * opts.d_a * seq_len + super().state_elements(dims, opts, seq_len, with_values)

    @classmethod
    def count_flops(
        cls, dims: Dims, opts: AdditiveOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        d, H, T = dims.d_model, dims.n_heads, seq_len
        proj = Flops.dense(2.0 * d * 2 * H * opts.d_a)  # x W_q and x W_k
        # v . tanh(.) for every (query, key) pair: 2 d_a per pair and head (the add and the tanh are
        # elementwise, uncounted as everywhere; so is rebuilding the tanh in backward).
        own = proj + Flops.dense(2.0 * T * H * opts.d_a)
        return own + (cls.value_flops(dims, seq_len) if with_values else Flops())
