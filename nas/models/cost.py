"""Analytic compute accounting: parameters and FLOPs per token for any ArchConfig.

FLOPs count matrix products and convolutions at 2 FLOPs per multiply-add;
attention counts the full T x T score matrix (as PaLM's MFU accounting does),
at the training sequence length.  Backward passes cost twice the forward
except where a block says otherwise (a fixed random synthesizer needs no
gradient for its attention weights).  ``torch.utils.flop_counter`` misses CPU
SDPA and over-counts depthwise-conv backward, so it is only a test cross-check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nas.errors import ConfigError
from nas.models.attention import ATTENTION
from nas.models.config import ArchConfig, LayerConfig
from nas.models.dims import Flops
from nas.models.ffn import FeedForward, ffn_width
from nas.models.norms import norm_params
from nas.plural import plural
from nas.validate import MAX_TRAIN_BYTES


@dataclass(frozen=True)
class Compute:
    """Parameters and per-token FLOPs of one architecture at one sequence length."""

    params: int
    embedding_params: int
    seq_len: int
    flops: Flops
    #: per layer: (attention block name, attention+ffn Flops)
    per_layer: tuple[tuple[str, Flops], ...] = field(default=())
    #: numbers one sequence keeps while generating after ``seq_len`` tokens, all layers (KV caches,
    #: windows, recurrent states; a seq2seq decoder's cross-attention keys and values of the source)
    state_elements: int = 0

    @property
    def state_bytes(self) -> int:
        """``state_elements`` in float32: the inference state of one sequence at ``seq_len``."""
        return 4 * self.state_elements

    @property
    def non_embedding_params(self) -> int:
        return self.params - self.embedding_params

    @property
    def fwd_flops_per_token(self) -> float:
        return self.flops.fwd

    @property
    def train_flops_per_token(self) -> float:
        return self.flops.train

    def by_block(self) -> dict[str, float]:
        """Training FLOPs per token summed by attention block type."""
        out: dict[str, float] = {}
        for name, f in self.per_layer:
            out[name] = out.get(name, 0.0) + f.train
        return out


def layer_params(arch: ArchConfig, layer: LayerConfig) -> int:
    d = arch.d_model
    block = ATTENTION.get(layer.attention.type)
    norm = norm_params(arch.norm, d)
    n = block.count_params(arch.dims, layer.attention.options, layer.ffn) + norm
    if not block.replaces_ffn:
        act = layer.ffn.activation
        n += FeedForward.count_params(d, ffn_width(d, layer.ffn.mult, act), act) + norm
    return n


def layer_flops(arch: ArchConfig, layer: LayerConfig, seq_len: int) -> Flops:
    block = ATTENTION.get(layer.attention.type)
    flops = block.count_flops(arch.dims, layer.attention.options, layer.ffn, seq_len)
    if not block.replaces_ffn:
        act = layer.ffn.activation
        flops = flops + FeedForward.count_flops(
            arch.d_model, ffn_width(arch.d_model, layer.ffn.mult, act), act
        )
    return flops


def layer_state(arch: ArchConfig, layer: LayerConfig, seq_len: int) -> int:
    """What one sequence keeps in ``layer`` while generating after ``seq_len`` tokens (the block's
    ``state_elements``; the FFN keeps nothing)."""
    return ATTENTION.get(layer.attention.type).state_elements(arch.dims, layer.attention.options, seq_len)


def layer_rows(arch: ArchConfig, seq_len: int) -> list[tuple[str, int, LayerConfig, int, Flops]]:
    """Per layer: (stack, index, layer, params, Flops per token); a seq2seq decoder layer's
    include its cross-attention.  Stacks: ``layers`` for an LM, ``encoder`` then ``decoder``."""
    rows = []
    for i, layer in enumerate(arch.encoder_layers):
        rows.append(("encoder", i, layer, layer_params(arch, layer), layer_flops(arch, layer, seq_len)))
    stack = "decoder" if arch.is_seq2seq else "layers"
    for i, layer in enumerate(arch.layers):
        params, flops = layer_params(arch, layer), layer_flops(arch, layer, seq_len)
        if arch.is_seq2seq:
            params += cross_attention_params(arch.d_model, arch.norm)
            flops = flops + cross_attention_flops(arch.d_model, seq_len)
        rows.append((stack, i, layer, params, flops))
    return rows


def cross_attention_params(d: int, norm: str = "layernorm") -> int:
    """A seq2seq decoder layer's cross-attention (Q, K, V, output) and its normalisation."""
    return 4 * d * d + norm_params(norm, d)


def cross_attention_flops(d: int, seq_len: int) -> Flops:
    """Per target token, with the source as long as the target: projections (K and V of one
    source token each), scores and weights @ V over ``seq_len`` keys, and the output."""
    return Flops.dense(8.0 * d * d + 4.0 * seq_len * d)


def compute(arch: ArchConfig, seq_len: int | None = None) -> Compute:
    """Parameters and FLOPs per token of ``arch`` at ``seq_len`` (default: ``arch.max_len``).

    For ``task: seq2seq`` a token is one target token together with one source
    token (batches pad both sides to ``seq_len``): the encoder's FLOPs per source
    token, the decoder's and its cross-attention's per target token, and the output
    layer's, so training FLOPs are this times the target positions trained on.
    """
    T = arch.max_len if seq_len is None else seq_len
    d, V = arch.d_model, arch.vocab_size
    tables = 2 if arch.is_seq2seq else 1  # learned positions: one table per stack
    embedding = V * d + (tables * arch.max_len * d if arch.pos_encoding == "learned" else 0)
    head = 0 if arch.tie_embeddings else V * d
    per_layer = tuple((layer.attention.type, layer_flops(arch, layer, T)) for layer in arch.encoder_layers)
    per_layer += tuple((layer.attention.type, layer_flops(arch, layer, T)) for layer in arch.layers)
    params = (
        embedding + head + sum(layer_params(arch, layer) for layer in arch.layers) + norm_params(arch.norm, d)
    )
    if arch.is_seq2seq:
        per_layer += tuple(("cross_attention", cross_attention_flops(d, T)) for _ in arch.layers)
        params += sum(layer_params(arch, layer) for layer in arch.encoder_layers)
        params += norm_params(arch.norm, d)  # the encoder's final normalisation
        params += arch.n_layers * cross_attention_params(d, arch.norm)
    flops = Flops.dense(2.0 * d * V)  # LM head
    for _, f in per_layer:
        flops = flops + f
    state = sum(layer_state(arch, layer, T) for layer in arch.layers)
    if arch.is_seq2seq:  # the encoder runs once; each decoder layer keeps the source's keys and values
        state += arch.n_layers * 2 * d * T
    return Compute(
        params=params,
        embedding_params=embedding + head,
        seq_len=T,
        flops=flops,
        per_layer=per_layer,
        state_elements=state,
    )


def training_bytes(
    arch: ArchConfig, batch_size: int = 1, seq_len: int | None = None, n_layers: int | None = None
) -> dict[str, float]:
    """A lower bound of the memory training ``arch`` needs, in bytes, by the size that drives each part.

    16 bytes per parameter (fp32 weights, gradients and AdamW's two moments); the tensors a
    block keeps beside its parameters (``AttentionBlock.buffer_bytes``: a fixed random
    synthesizer's logits); each layer's causal mask (a bool ``max_len x max_len`` buffer)
    and the position table;
    the logits of one batch (forward and gradient, fp32) and one saved residual
    stream per layer.  Real use is higher (more activations, the allocator), so a
    model over a limit by this count is over it for sure.  ``n_layers`` counts the
    model as that many copies of its layers (a one-layer stand-in of a deep model).
    """
    T = arch.max_len if seq_len is None else seq_len
    c = compute(arch, T)
    own = arch.n_layers + len(arch.encoder_layers)  # a seq2seq model: both stacks
    d, n = arch.d_model, n_layers or own
    tokens = batch_size * T
    layers = (*arch.encoder_layers, *arch.layers)
    buffers = sum(
        ATTENTION.get(x.attention.type).buffer_bytes(arch.dims, x.attention.options) for x in layers
    )
    return {
        "embeddings": 16.0 * c.embedding_params,
        "layers": (16.0 * c.non_embedding_params + buffers) * n / own,
        "masks": float(n * arch.max_len**2 + 4 * arch.max_len * d),
        "activations": 4.0 * tokens * (2 * arch.vocab_size + n * d),
    }


def check_fits(
    arch: ArchConfig,
    batch_size: int = 1,
    seq_len: int | None = None,
    *,
    n_layers: int | None = None,
    limit: float | None = None,
    where: str = "one device",
) -> None:
    """Refuse, before anything is allocated, an architecture whose training cannot fit ``limit`` bytes.

    ``limit`` defaults to ``nas.validate.MAX_TRAIN_BYTES`` (why that much is said
    there).  The ConfigError names the size that drives most of the memory.
    """
    limit = MAX_TRAIN_BYTES if limit is None else limit
    n = n_layers or arch.n_layers + len(arch.encoder_layers)
    parts = training_bytes(arch, batch_size, seq_len, n)
    total = sum(parts.values())
    if total > limit:
        part = max(parts, key=lambda k: parts[k])
        field = {  # the size to reduce: one layer over the limit is d_model's doing, many are n_layers'
            "embeddings": "vocab_size" if arch.vocab_size > arch.d_model else "d_model",
            "layers": "d_model" if parts["layers"] / n > limit / 2 else "n_layers",
            "masks": "max_len",
            "activations": "batch_size",
        }[part]
        raise ConfigError(
            f"training this model needs at least {total / 2**30:,.0f} GiB (d_model {arch.d_model}, "
            f"{plural(n, 'layer')}, max_len {arch.max_len}, vocabulary {arch.vocab_size}, "
            f"batch {batch_size}), "
            f"over the {limit / 2**30:,.0f} GiB {where} can hold; reduce {field}",
            field,
        )
