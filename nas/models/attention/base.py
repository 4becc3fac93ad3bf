"""The contract every attention block follows, and the helpers they share.

A block maps x [B, T, C] to [B, T, C], is causal (position t never sees a
later position) unless an encoder built it bidirectional (``make_bidirectional``,
for blocks that say ``bidirectional = True``; an encoder then passes ``keep``, the
(B, T) mask of real source tokens, and no position may attend to padding),
batches its heads, and publishes its parameter count and FLOPs per token as
formulas next to its code, so that adding a block is one file (see
docs/adding_a_block.md).  Blocks whose attention weights come from
logits also expose ``scores(x)`` and say ``mixable = True`` so that
``mixture`` can combine them.  What the rest of the engine needs to know
about a block (its options in a search space, its name in reports, an
optional slow reference) it asks the block class, never its name.

What a block must write is abstract (``forward``, ``count_params``,
``count_flops``; ``scores`` for a ``ValueAttention``); what it may do is a
class attribute it states (``bidirectional`` and ``has_dot_terms`` in every
registered class's own body, so a subclass never inherits a capability its
new code may not have).  ``ATTENTION.register`` refuses a class that misses
either, with one line that says what is missing.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import sys
from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nas.errors import ConfigError
from nas.models.attention.options import BlockOptions, FFNSpec, positive_int
from nas.models.dims import Dims, Flops
from nas.models.reference import causal_attend
from nas.models.rotary import alibi_bias, alibi_slopes, reference_rotate, rotary_tables, rotate, rotate_tokens
from nas.registry import Registry

__all__ = [
    "ATTENTION",
    "AttentionBlock",
    "BlockOptions",
    "BlockRegistry",
    "Draw",
    "FFNSpec",
    "ValueAttention",
    "default_scale",
    "positive_int",
    "sdpa",
    "sdpa_causal",
]

#: ``draw(name, low, high)``: a further number a block asks the search for (see ``chosen_options``).
Draw = Callable[[str, float, float], float]


class AttentionBlock(nn.Module, metaclass=ABCMeta):
    """Base class: causal sequence mixing over [B, T, C].

    ``with_values=False`` builds only the part that produces logits (used as a
    mixture component, whose value and output projections are shared).  A block
    implements ``forward``, ``count_params`` and ``count_flops`` (abstract) and
    states ``bidirectional`` and ``has_dot_terms`` in its own class body.
    """

    name: ClassVar[str]
    Options: ClassVar[type[BlockOptions]] = BlockOptions
    #: True when the block also does the layer's feed-forward work (multi_branch).
    replaces_ffn: ClassVar[bool] = False
    #: True when the block can produce logits through ``scores`` (mixture component); opt-in.
    mixable: ClassVar[bool] = False
    #: why a block that writes ``scores`` is still not mixable, for the error that refuses it
    why_not_mixable: ClassVar[str] = ""
    #: True when the logits do not depend on the input (random synthesizers).
    static_scores: ClassVar[bool] = False
    #: True when the block can also run without the causal mask, as a seq2seq encoder layer
    #: (``make_bidirectional``); opt-in, because its forward must then honour ``self.causal``.
    #: Every registered class states it in its own body (a subclass that rewrites ``forward``,
    #: like docs/adding_a_block.md's ALiBi, may apply the causal mask itself).
    bidirectional: ClassVar[bool] = False
    #: True when ``dot_terms`` gives this block's logits as q k^T + bias, so that ``mixture`` fuses
    #: it; stated in every registered class's own body (a subclass that changes ``scores`` but not
    #: ``dot_terms`` says False, and a mixture writes its logits out).
    has_dot_terms: ClassVar[bool] = False
    #: Names of this block's parameters that are not the weights of a linear map (logits,
    #: filters, biases); ``recipe.decay: weights_only`` leaves them out of weight decay.
    no_decay: ClassVar[tuple[str, ...]] = ()
    #: The kind of each of the block's own parameters (names or fnmatch patterns relative to the block:
    #: hidden, vector, embedding, readout), which ``recipe.parametrization: completep`` scales by
    #: (nas.models.parametrization); merged with the bases' declarations.  An undeclared parameter fails
    #: the contract suite.
    param_kinds: ClassVar[Mapping[str, str]] = {}
    #: Short names of options in one-line summaries: {"kernel": "k"} gives ``mdha(k3)``.
    short_option_names: ClassVar[Mapping[str, str]] = {}

    def __init__(self, dims: Dims, opts: BlockOptions, *, ffn: FFNSpec, with_values: bool = True) -> None:
        super().__init__()
        self.dims = dims
        self.opts = opts
        self.n_heads = dims.n_heads
        self.d_head = dims.d_head
        self.with_values = with_values
        self.causal = True
        self.register_buffer(
            "causal_mask",
            torch.ones(dims.max_len, dims.max_len, dtype=torch.bool).triu(1),
            persistent=False,
        )
        if dims.rope_base:
            cos, sin = rotary_tables(dims.max_len, self.d_head, dims.rope_base)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)

    # -- helpers --------------------------------------------------------------------------
    def split_heads(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, -1, self.d_head).transpose(1, 2)  # (B, H, T, dh); H = channels / dh

    def rotary(self, t: Tensor) -> Tensor:
        """Queries or keys (B, H, T, dh) at their positions (RoPE) when the model uses rotary positions."""
        if not self.dims.rope_base:
            return t
        return rotate(t, self.rope_cos, self.rope_sin)

    def rotary_tokens(self, z: Tensor) -> Tensor:
        """Queries or keys (B, T, heads x dh) before the split into heads, turned as :meth:`rotary`."""
        if not self.dims.rope_base:
            return z
        return rotate_tokens(z, self.rope_cos, self.rope_sin, self.d_head)

    def position_bias(self, T: int, device: torch.device) -> Tensor | None:
        """ALiBi's (H, T, T) logit bias when the model uses it, else None."""
        return alibi_bias(self.n_heads, T, device) if self.dims.alibi else None

    def attend_qkv(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        keep: Tensor | None = None,
        *,
        positions: bool = True,
        scale: float | None = None,
    ) -> Tensor:
        """SDPA over heads, causal unless bidirectional, with ALiBi's bias when the model uses it (and
        ``positions``), padding keys masked when ``keep`` (B, T) is given; k and v may have fewer heads
        than q (grouped: each serves a contiguous group of query heads)."""
        T, grouped = q.shape[2], k.shape[1] != q.shape[1]
        bias = self.position_bias(T, q.device) if positions else None
        if bias is None and keep is None:
            if grouped:
                return F.scaled_dot_product_attention(
                    q, k, v, is_causal=self.causal, enable_gqa=True, scale=scale
                )
            return sdpa(q, k, v, causal=self.causal, scale=scale)
        mask = torch.zeros(T, T, device=q.device, dtype=q.dtype) if bias is None else bias.to(q.dtype)
        if self.causal:
            mask = mask.masked_fill(self.causal_mask[:T, :T], float("-inf"))
        if keep is not None:
            mask = mask.masked_fill(~keep[:, None, None, :], float("-inf"))  # (B, H|1, T, T)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=grouped, scale=scale)

    def reference_bias(self, logits: Tensor) -> Tensor:
        """Logits (H, T, T) of one sequence with ALiBi's penalty added, written out; unchanged without it."""
        if not self.dims.alibi:
            return logits
        out = logits.clone()
        H, T = logits.shape[0], logits.shape[1]
        for h, m in enumerate(alibi_slopes(H)):
            for i in range(T):
                for j in range(T):
                    out[h, i, j] -= m * abs(i - j)
        return out

    def reference_rotary(self, t: Tensor) -> Tensor:
        """The same on one sequence (T, heads x dh), written out (``nas.models.rotary.reference_rotate``)."""
        if not self.dims.rope_base:
            return t
        return reference_rotate(t, t.shape[-1] // self.d_head, self.dims.rope_base)

    @staticmethod
    def merge_heads(y: Tensor) -> Tensor:
        B, H, T, dh = y.shape
        return y.transpose(1, 2).reshape(B, T, H * dh)  # (B, T, C)

    def make_bidirectional(self) -> None:
        """Drop the causal mask: every position sees the whole sequence (an encoder layer)."""
        if not self.bidirectional:
            raise ConfigError(f"{self.name} only runs causally; it cannot be an encoder layer")
        self.causal = False

    def masked_softmax(self, logits: Tensor, keep: Tensor | None = None) -> Tensor:
        """Softmax over keys, every later position masked when the block is causal and every padding
        key when ``keep`` (B, T) says which are real; logits (B|1, H, T, T)."""
        T = logits.shape[-1]
        # At least float32 for the softmax (half precision is upcast, float64 stays float64).
        wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
        if self.causal:
            wide = wide.masked_fill(self.causal_mask[:T, :T], float("-inf"))
        if keep is not None:
            wide = wide.masked_fill(~keep[:, None, None, :], float("-inf"))  # (B, H, T, T)
        return torch.softmax(wide, dim=-1).to(logits.dtype)

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

    def dot_terms(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor | None] | None:
        """``scores(x)`` as a product plus a bias: (q, k, bias) with ``scores = q @ k^T + bias``.

        q (B, H, T, e), k (B|1, H, T, e), bias broadcastable to (H, T, T) or None.  Consulted only
        when the class says ``has_dot_terms = True``; a block whose logits are no such product leaves
        this method alone (it returns None).  ``mixture`` concatenates its parts' q and k and hands
        the sum of their biases to SDPA as an additive mask instead of writing (B, H, T, T) logits.
        """
        return None

    @abstractmethod
    def forward(self, x: Tensor, keep: Tensor | None = None) -> Tensor:
        """x (B, T, C) -> (B, T, C); ``keep`` (B, T), an encoder's real tokens: padding is never
        attended to."""

    @classmethod
    @abstractmethod
    def count_params(cls, dims: Dims, opts: BlockOptions, ffn: FFNSpec, with_values: bool = True) -> int:
        """Trained parameters of a block built with these sizes and options (``with_values=False``:
        a mixture component, without the value and output projections it shares)."""

    @classmethod
    @abstractmethod
    def count_flops(
        cls, dims: Dims, opts: BlockOptions, ffn: FFNSpec, seq_len: int, with_values: bool = True
    ) -> Flops:
        """FLOPs per token at sequence length ``seq_len`` (full T x T attention counted)."""

    @classmethod
    def step_flops(cls, dims: Dims, opts: BlockOptions, seq_len: int) -> Flops:
        """Input-independent work done once per forward pass, shared by the batch and left out of
        ``count_flops`` (``synth_factorized_random``'s R1 R2^T, ``hyena``'s filters); none here."""
        return Flops()

    @classmethod
    def buffer_bytes(cls, dims: Dims, opts: BlockOptions) -> int:
        """Bytes of the tensors the block keeps beside its trained parameters whose size its sizes or
        options set (a fixed random synthesizer's logits): the memory checks add them to the
        parameters'.  Small fixed tables (rotary angles, gather indices) are left out."""
        return 0

    @classmethod
    def state_elements(cls, dims: Dims, opts: BlockOptions, seq_len: int, with_values: bool = True) -> int:
        """Numbers one sequence keeps in this layer while generating, after ``seq_len`` tokens.

        What the next token's output needs of the past: here a key and a value of width d_model per
        past token (a KV cache); blocks that keep less (grouped heads, a window, values only, a fixed
        recurrent state) or more (convolution taps) say so.  ``with_values=False``: a mixture
        component's own part, without the values the mixture shares.
        """
        return (2 if with_values else 1) * dims.d_model * seq_len

    # -- what the search space, the reports and the tests ask a block --------------------
    @classmethod
    def example_options(cls) -> dict[str, Any]:
        """Options of a typical instance (the contract tests build it): {} means every default.

        A block that cannot be built from empty options (``mixture``) names some here.
        """
        return {}

    @classmethod
    def option_choices(cls, raw: Mapping[str, Any]) -> dict[str, Any]:
        """This block's entry under ``layers.attention`` of a search space -> {option: choices}.

        Each value is what the space parses as a parameter: a fixed value, a list of
        choices or a ``{low, high}`` range, searched as ``layers.I.attention.NAME.OPTION``.
        A block whose options are structured normalises its YAML here (``mixture``).
        """
        valid = [f.name for f in dataclasses.fields(cls.Options)]
        unknown = sorted(str(k) for k in set(raw) - set(valid))
        if unknown:
            raise ConfigError(
                f"unknown option {unknown[0]!r} of {cls.name}; valid options: {', '.join(valid) or '(none)'}"
            )
        return dict(raw)

    @classmethod
    def chosen_options(cls, chosen: dict[str, Any], draw: Draw) -> dict[str, Any]:
        """The options of one sampled layer (for ``Options.parse``) from the values the space chose.

        A block that searches more than its listed choices asks ``draw(name, low, high)``
        for each further number (searched as ``layers.I.attention.NAME.<name>``);
        validating a space calls this with a ``draw`` that returns ``high``.
        """
        return chosen

    @classmethod
    def describe(cls, opts: BlockOptions, short: bool = False) -> str:
        """The block with its options as reports write it: ``mdha kernel=3``, or short ``mdha(k3)``."""
        items = opts.to_dict().items()
        if not items:
            return cls.name
        if short:
            return f"{cls.name}(" + ",".join(f"{cls.short_option_names.get(k, k)}{v}" for k, v in items) + ")"
        return cls.name + " " + " ".join(f"{k}={v}" for k, v in items)

    # -- optional slow reference (tests/models/test_reference.py) --------------------------
    def reference_scores(self, x: Tensor) -> Tensor:
        """Unmasked logits (H, T, T) of one sequence x (T, C), written out with loops."""
        raise NotImplementedError(f"{self.name} has no slow reference for its logits")

    def reference_forward(self, x: Tensor) -> Tensor:
        """The output (T, C) of one sequence x (T, C), written out with loops (nas.models.reference)."""
        raise NotImplementedError(f"{self.name} has no slow reference implementation")


class ValueAttention(AttentionBlock):
    """Blocks that mix a value projection with weights from ``scores``: out = W_o softmax(S) (X W_v).

    Subclasses implement ``scores`` (and may override ``forward`` with a faster,
    equivalent path); the value and output projections live here.
    """

    param_kinds: ClassVar[Mapping[str, str]] = {"v_proj.weight": "hidden", "out_proj.weight": "hidden"}

    @abstractmethod
    def scores(self, x: Tensor) -> Tensor:
        """Unmasked attention logits, (B, H, T, T), or (1, H, T, T) when ``static_scores``."""

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

    def forward(self, x: Tensor, keep: Tensor | None = None) -> Tensor:
        return self.attend(self.masked_softmax(self.scores(x), keep), x)

    def reference_forward(self, x: Tensor) -> Tensor:
        v = x @ self.v_proj.weight.T  # (T, C)
        return causal_attend(self.reference_scores(x), v) @ self.out_proj.weight.T

    @classmethod
    def state_elements(cls, dims: Dims, opts: BlockOptions, seq_len: int, with_values: bool = True) -> int:
        """The values of every past token; weights computed from the current token or from
        positions alone need nothing else of the past (``additive`` also keeps its keys)."""
        return dims.d_model * seq_len if with_values else 0

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


def sdpa(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, scale: float | None = None) -> Tensor:
    """Scaled dot-product attention, causal or not; flash kernels where the backend has them."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def sdpa_causal(q: Tensor, k: Tensor, v: Tensor, scale: float | None = None) -> Tensor:
    """Causal scaled dot-product attention (for blocks that only run causally)."""
    return sdpa(q, k, v, causal=True, scale=scale)


def default_scale(d_head: int) -> float:
    return 1.0 / math.sqrt(d_head)


#: What every registered block states in its own class body (see ``AttentionBlock``).
DECLARED: tuple[str, ...] = ("bidirectional", "has_dot_terms")


def check_block(name: str, cls: type[AttentionBlock]) -> None:
    """Raise TypeError, naming the block and its file, unless ``cls`` keeps the contract."""
    if not (isinstance(cls, type) and issubclass(cls, AttentionBlock)):
        raise TypeError(f"attention block {name!r} ({cls!r}) does not subclass AttentionBlock")
    source = getattr(sys.modules.get(cls.__module__), "__file__", None) or cls.__module__
    where = f"attention block {name!r} ({cls.__qualname__} in {source})"
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise TypeError(
            f"{where} does not implement {missing}, which every block must (docs/adding_a_block.md)"
        )
    unstated = [attr for attr in DECLARED if attr not in cls.__dict__]
    if unstated:
        raise TypeError(
            f"{where} does not state {' and '.join(unstated)} in its own class body; each block says "
            "what it can do rather than inheriting it (True or False; docs/adding_a_block.md)"
        )
    if cls.has_dot_terms and cls.dot_terms is AttentionBlock.dot_terms:
        raise TypeError(f"{where} says has_dot_terms = True but writes no dot_terms")
    if cls.mixable and cls.scores is AttentionBlock.scores:
        raise TypeError(f"{where} says mixable = True but writes no scores")


class BlockRegistry(Registry[type[AttentionBlock]]):
    """The attention blocks' registry: ``register`` also checks the block contract (``check_block``)."""

    def register(self, name: str) -> Callable[[type[AttentionBlock]], type[AttentionBlock]]:
        add = super().register(name)

        def decorator(cls: type[AttentionBlock]) -> type[AttentionBlock]:
            check_block(name, cls)
            return add(cls)

        return decorator


ATTENTION: BlockRegistry = BlockRegistry("attention block")
