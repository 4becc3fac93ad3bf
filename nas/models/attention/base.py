"""The contract every attention block follows, and the helpers they share.

A block maps x [B, T, C] to [B, T, C], is causal (position t never sees a
later position), batches its heads, and publishes its parameter count and
FLOPs per token as formulas next to its code, so that adding a block is one
file.  Blocks whose attention weights come from logits also expose
``scores(x)`` so that ``mixture`` can combine them.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nas.errors import ConfigError
from nas.models.dims import Dims, Flops
from nas.registry import Registry


@dataclasses.dataclass(frozen=True)
class FFNSpec:
    """Feed-forward choice of one layer: activation name and width multiplier (d_ff = mult * d_model)."""

    activation: str = "relu"
    mult: float = 4.0


@dataclasses.dataclass(frozen=True)
class BlockOptions:
    """Options of a block; subclasses add fields with defaults and override ``check``."""

    def check(self, dims: Dims, ffn: FFNSpec) -> None:
        """Raise ConfigError(message, field) if the options cannot work with these sizes."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> BlockOptions:
        """Build from a plain mapping, refusing unknown keys and wrong types."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        hints = typing.get_type_hints(cls)
        unknown = sorted(set(raw) - set(fields))
        if unknown:
            valid = ", ".join(sorted(fields)) or "(none)"
            raise ConfigError(f"unknown option {unknown[0]!r}; valid options: {valid}", str(unknown[0]))
        values = {}
        for key, value in raw.items():
            values[key] = _coerce(value, hints[key], key)
        return cls(**values)


def _coerce(value: Any, hint: Any, key: str) -> Any:
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"must be an integer, got {value!r}", key)
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"must be a number, got {value!r}", key)
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"must be a string, got {value!r}", key)
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"must be true or false, got {value!r}", key)
        return value
    return value


def positive_int(value: int, key: str, minimum: int = 1) -> None:
    if value < minimum:
        raise ConfigError(f"must be an integer >= {minimum}, got {value}", key)


class AttentionBlock(nn.Module):
    """Base class: causal sequence mixing over [B, T, C].

    ``with_values=False`` builds only the part that produces logits (used as a
    mixture component, whose value and output projections are shared).
    """

    name: ClassVar[str]
    Options: ClassVar[type[BlockOptions]] = BlockOptions
    #: True when the block also does the layer's feed-forward work (multi_branch).
    replaces_ffn: ClassVar[bool] = False
    #: True when the block can produce logits through ``scores`` (mixture component).
    mixable: ClassVar[bool] = True
    #: True when the logits do not depend on the input (random synthesizers).
    static_scores: ClassVar[bool] = False

    def __init__(self, dims: Dims, opts: BlockOptions, *, ffn: FFNSpec, with_values: bool = True) -> None:
        super().__init__()
        self.dims = dims
        self.opts = opts
        self.n_heads = dims.n_heads
        self.d_head = dims.d_head
        self.with_values = with_values
        self.register_buffer(
            "causal_mask",
            torch.ones(dims.max_len, dims.max_len, dtype=torch.bool).triu(1),
            persistent=False,
        )

    # -- helpers --------------------------------------------------------------------------
    def split_heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, dh)

    @staticmethod
    def merge_heads(y: Tensor) -> Tensor:
        B, H, T, dh = y.shape
        return y.transpose(1, 2).reshape(B, T, H * dh)  # (B, T, C)

    def causal_softmax(self, logits: Tensor) -> Tensor:
        """Softmax over keys with every later position masked; logits (..., T, T)."""
        T = logits.shape[-1]
        # At least float32 for the softmax (half precision is upcast, float64 stays float64).
        wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
        masked = wide.masked_fill(self.causal_mask[:T, :T], float("-inf"))
        return torch.softmax(masked, dim=-1).to(logits.dtype)

    # -- the contract ---------------------------------------------------------------------
    def scores(self, x: Tensor) -> Tensor:
        """Unmasked attention logits, (B, H, T, T), or (1, H, T, T) when ``static_scores``."""
        raise NotImplementedError(f"{self.name} cannot be a mixture component")

    def add_scores(self, x: Tensor, weight: Tensor, into: Tensor) -> Tensor:
        """``into + weight * scores(x)``, (B, H, T, T); ``into`` broadcasts to that shape.

        What ``mixture`` accumulates.  Blocks whose logits are a product override it to
        fold the scalar ``weight`` into a small factor and add ``into`` in place, which
        saves two passes over the (B, H, T, T) logits, forward and backward.
        """
        return into + weight * self.scores(x)

    def forward(self, x: Tensor) -> Tensor:  # pragma: no cover - every block overrides
        raise NotImplementedError

    @classmethod
    def count_params(cls, dims: Dims, opts: BlockOptions, ffn: FFNSpec, with_values: bool = True) -> int:
        raise NotImplementedError

    @classmethod
    def count_flops(
        cls, dims: Dims, opts: BlockOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        """FLOPs per token at sequence length ``seq_len`` (full T x T attention counted)."""
        raise NotImplementedError


class ValueAttention(AttentionBlock):
    """Blocks that mix a value projection with weights from ``scores``: out = W_o softmax(S) (X W_v).

    Subclasses implement ``scores`` (and may override ``forward`` with a faster,
    equivalent path); the value and output projections live here.
    """

    def __init__(self, dims: Dims, opts: BlockOptions, *, ffn: FFNSpec, with_values: bool = True) -> None:
        super().__init__(dims, opts, ffn=ffn, with_values=with_values)
        if with_values:
            self.v_proj = nn.Linear(dims.d_model, dims.d_model, bias=False)
            self.out_proj = nn.Linear(dims.d_model, dims.d_model, bias=False)
            self.out_proj.residual_out = True  # type: ignore[attr-defined]

    def attend(self, weights: Tensor, x: Tensor) -> Tensor:
        """weights (B|1, H, T, T) already normalised; returns (B, T, C)."""
        if weights.shape[0] == 1:
            return self.attend_shared(weights[0], x)
        v = self.split_heads(self.v_proj(x))  # (B, H, T, dh)
        return self.out_proj(self.merge_heads(torch.matmul(weights.to(v.dtype), v)))

    def attend_shared(self, weights: Tensor, x: Tensor) -> Tensor:
        """weights (H, T, T) shared by every sequence of the batch; returns (B, T, C).

        The batch rides along the columns of one (H, T, T) @ (H, T, B*dh) product
        instead of broadcasting the weights over the batch, which makes torch.matmul
        copy them B times (and sum B copies of their gradient).  About 30% faster
        per random-synthesizer block on CPU at T 512, batch 8 (benchmarks/block_cost.py).
        """
        B, T, C = x.shape
        H, dh = self.n_heads, self.d_head
        v = self.v_proj(x).view(B, T, H, dh).permute(2, 1, 0, 3).reshape(H, T, B * dh)  # (H, T, B*dh)
        y = torch.bmm(weights.to(v.dtype), v)  # (H, T, B*dh)
        y = y.view(H, T, B, dh).permute(2, 1, 0, 3).reshape(B, T, C)  # (B, T, C)
        return self.out_proj(y)

    def forward(self, x: Tensor) -> Tensor:
        return self.attend(self.causal_softmax(self.scores(x)), x)

    @staticmethod
    def value_params(dims: Dims) -> int:
        return 2 * dims.d_model * dims.d_model

    @staticmethod
    def value_flops(dims: Dims, seq_len: int, weights_need_grad: bool = True) -> Flops:
        """V and output projections plus weights @ V."""
        d = dims.d_model
        proj = Flops.dense(4.0 * d * d)
        av_fwd = 2.0 * seq_len * d
        # Backward of P @ V gives dV (always) and dP (only when P depends on trained tensors).
        av = Flops(av_fwd, av_fwd * (2.0 if weights_need_grad else 1.0))
        return proj + av


def sdpa_causal(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None) -> Tensor:
    """Causal scaled dot-product attention; flash kernels where the backend has them."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


def default_scale(d_head: int) -> float:
    return 1.0 / math.sqrt(d_head)


ATTENTION: Registry[type[AttentionBlock]] = Registry("attention block")
