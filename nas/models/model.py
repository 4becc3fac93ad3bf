"""The decoder-only Transformer LM that every ``task: lm`` candidate is an instance of.

Token ids (B, T) -> logits (B, T, vocab).  Pre-norm residual layers:
x = x + attn(N(x)); x = x + ffn(N(x)), N a LayerNorm or an RMSNorm (``norm``; the FFN
is skipped by blocks that do its work themselves, such as ``multi_branch``).  Initialisation follows GPT-2:
N(0, 0.02) weights, residual output projections scaled by 1/sqrt(2 * layers).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from nas.models.attention import ATTENTION
from nas.models.config import ArchConfig, LayerConfig
from nas.models.dims import Dims
from nas.models.ffn import FeedForward, ffn_width
from nas.models.norms import make_norm

#: N(0, EMBED_STD) token embeddings (and learned position tables) at initialisation, as GPT-2.
EMBED_STD = 0.02
#: What the sinusoidal table is multiplied by in a model: its RMS is sqrt(1/2) (sin^2 + cos^2 = 1
#: per pair), 35 times the embeddings' 0.02, which left the token under 0.1% of the first
#: layer's input; scaled, the table starts at the embeddings' RMS, as a learned table does.
#: benchmarks/position_scale.py measured this against the unscaled table and against the
#: Transformer's sqrt(d_model) embedding scale (docs/BENCHMARKS.md, position_scale).
SINUSOIDAL_SCALE = EMBED_STD / math.sqrt(0.5)


def sinusoidal_table(max_len: int, d_model: int) -> Tensor:
    """PE[t, 2i] = sin(t / 10000^(2i/d)), PE[t, 2i+1] = cos(same); (max_len, d_model)."""
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table


class Layer(nn.Module):
    #: 1/r under completep (CompleteP's residual-branch multiplier, nas.models.parametrization); 1 otherwise
    branch_mult = 1.0

    def __init__(self, dims: Dims, cfg: LayerConfig) -> None:
        super().__init__()
        block = ATTENTION.get(cfg.attention.type)
        self.ln_attn = make_norm(dims.norm, dims.d_model)
        self.attn = block(dims, cfg.attention.options, ffn=cfg.ffn)
        self.ffn: FeedForward | None = None
        if not block.replaces_ffn:
            self.ln_ffn = make_norm(dims.norm, dims.d_model)
            act = cfg.ffn.activation
            self.ffn = FeedForward(dims.d_model, ffn_width(dims.d_model, cfg.ffn.mult, act), act)

    def forward(self, x: Tensor, keep: Tensor | None = None) -> Tensor:
        """``keep`` (B, T): an encoder layer's real tokens, which its attention alone may attend to."""
        h = self.ln_attn(x)
        y = self.attn(h) if keep is None else self.attn(h, keep)
        if self.branch_mult != 1.0:  # skipped at 1: the standard model's graph, unchanged
            y = y * self.branch_mult
        x = x + y
        if self.ffn is not None:
            y = self.ffn(self.ln_ffn(x))
            x = x + (y * self.branch_mult if self.branch_mult != 1.0 else y)
        return x


class TransformerLM(nn.Module):
    """Decoder-only LM built from an :class:`ArchConfig`; ``self.arch`` keeps the config."""

    param_kinds = {"pos_emb": "embedding", "lm_head.weight": "readout"}  # tok_emb: nn.Embedding's own
    #: 1/m under completep (muP's readout multiplier, tied head or not); 1 otherwise
    logit_mult = 1.0

    def __init__(self, arch: ArchConfig) -> None:
        super().__init__()
        self.arch = arch
        d = arch.d_model
        self.tok_emb = nn.Embedding(arch.vocab_size, d)
        if arch.pos_encoding == "learned":
            self.pos_emb = nn.Parameter(torch.zeros(arch.max_len, d))
            nn.init.normal_(self.pos_emb, std=EMBED_STD)
        else:  # rope, alibi: no table (None); attention places the tokens
            table = position_table(arch) if arch.pos_encoding == "sinusoidal" else None
            self.register_buffer("pos_emb", table, persistent=False)
        self.layers = nn.ModuleList(Layer(arch.dims, layer) for layer in arch.layers)
        self.ln_f = make_norm(arch.norm, d)
        self.lm_head = nn.Linear(d, arch.vocab_size, bias=False)
        init_gpt2(self, arch.n_layers)
        if arch.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight

    def forward(self, idx: Tensor) -> Tensor:
        logits = self.lm_head(self.hidden(idx))  # (B, T, vocab)
        return logits * self.logit_mult if self.logit_mult != 1.0 else logits

    def hidden(self, idx: Tensor) -> Tensor:
        """The final normalised states before the head, (B, T, C) (the compression probe pools them)."""
        B, T = idx.shape
        if T > self.arch.max_len:
            raise ValueError(f"sequence length {T} exceeds max_len {self.arch.max_len}")
        x = self.tok_emb(idx)  # (B, T, C)
        if self.pos_emb is not None:
            x = x + self.pos_emb[:T].to(x.dtype)
        for layer in self.layers:
            x = layer(x)
        return self.ln_f(x)


def position_table(arch: ArchConfig) -> Tensor:
    """The fixed sinusoidal table a model adds to its token embeddings, scaled (``SINUSOIDAL_SCALE``)."""
    return sinusoidal_table(arch.max_len, arch.d_model) * SINUSOIDAL_SCALE


def init_gpt2(model: nn.Module, n_layers: int) -> None:
    """GPT-2's initialisation: N(0, 0.02) weights, residual output projections / sqrt(2 * n_layers)."""
    resid_std = 0.02 / math.sqrt(2 * n_layers)
    for module in model.modules():
        if isinstance(module, nn.Linear):
            std = resid_std if getattr(module, "residual_out", False) else 0.02
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=EMBED_STD)


@torch.no_grad()
def greedy_generate(model: TransformerLM, idx: Tensor, max_new: int) -> Tensor:
    """``idx`` (B, T) followed by ``max_new`` most likely tokens, one at a time (the model reruns
    over the last ``max_len`` tokens at each step: the blocks keep no cache); (B, T + max_new)."""
    was_training = model.training
    model.eval()
    for _ in range(max_new):
        nxt = model(idx[:, -model.arch.max_len :])[:, -1].argmax(-1)
        idx = torch.cat([idx, nxt[:, None]], dim=1)
    model.train(was_training)
    return idx
