"""The encoder-decoder Transformer of ``task: seq2seq`` architectures (Vaswani et al., 2017).

The encoder is a stack of the architecture's ``encoder_layers``, each block
built bidirectional (every source position sees the whole source); the
decoder is its ``layers``, causal, each with a cross-attention sublayer
between its self-attention and its FFN (pre-LN, as the LM's layers):

    x = x + self_attn(LN(x));  x = x + cross_attn(LN(x), memory);  x = x + ffn(LN(x))

Cross-attention is vanilla multi-head attention (queries from the decoder,
keys and values from the final-normalised encoder output) and never attends
to source padding; neither does an encoder block, which takes the mask of real
source tokens (``keep``) whenever a batch holds padding (docs/seq2seq.md).  One
token embedding is shared by source, target and output layer (the
vocabulary is shared); each stack has its own learned position table, or
both use the sinusoidal one.

A batch is ``x = cat([src, tgt_in], dim=1)`` (B, 2T): source and shifted
target side by side, so the trainer, the validation and ``torch.compile``
handle it as one tensor like an LM batch; ``forward(src, tgt_in)`` takes
them apart too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nas.models.config import ArchConfig, LayerConfig
from nas.models.dims import Dims
from nas.models.model import Layer, init_gpt2, position_table
from nas.models.norms import make_norm


class CrossAttention(nn.Module):
    """Multi-head attention of decoder queries over encoder keys and values, padding masked."""

    param_kinds = {"q_proj.weight": "hidden", "kv_proj.weight": "hidden", "out_proj.weight": "hidden"}

    def __init__(self, dims: Dims) -> None:
        super().__init__()
        d = dims.d_model
        self.n_heads, self.d_head = dims.n_heads, dims.d_head
        self.q_proj = nn.Linear(d, d, bias=False)
        self.kv_proj = nn.Linear(d, 2 * d, bias=False)
        self.out_proj = nn.Linear(d, d, bias=False)
        self.out_proj.residual_out = True  # type: ignore[attr-defined]

    def _heads(self, t: Tensor) -> Tensor:
        B, T, _ = t.shape
        return t.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, dh)

    def forward(self, x: Tensor, memory: Tensor, keep: Tensor | None) -> Tensor:
        """x (B, T, C) queries, memory (B, S, C), keep (B, S) True at real source tokens."""
        q = self._heads(self.q_proj(x))
        k, v = (self._heads(t) for t in self.kv_proj(memory).chunk(2, dim=-1))
        mask = None if keep is None else keep[:, None, None, :]  # (B, 1, 1, S): broadcast over heads, queries
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, T, dh)
        B, H, T, dh = y.shape
        return self.out_proj(y.transpose(1, 2).reshape(B, T, H * dh))


class DecoderLayer(Layer):
    """A causal layer of the LM with cross-attention to the encoder between attention and FFN."""

    def __init__(self, dims: Dims, cfg: LayerConfig) -> None:
        super().__init__(dims, cfg)
        self.ln_cross = make_norm(dims.norm, dims.d_model)
        self.cross = CrossAttention(dims)

    def forward(self, x: Tensor, memory: Tensor, keep: Tensor | None) -> Tensor:  # type: ignore[override]
        x = x + self.attn(self.ln_attn(x))
        x = x + self.cross(self.ln_cross(x), memory, keep)
        if self.ffn is not None:
            x = x + self.ffn(self.ln_ffn(x))
        return x


def encoder_layer(dims: Dims, cfg: LayerConfig) -> Layer:
    """A layer of the LM whose attention block is built bidirectional."""
    layer = Layer(dims, cfg)
    layer.attn.make_bidirectional()
    return layer


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder built from a ``task: seq2seq`` :class:`ArchConfig`; ``self.arch`` keeps it.

    ``pad_id`` (default: the vocabulary's third-from-last id, as
    ``nas.data.ParallelCorpus`` lays out its specials) marks source padding.
    """

    # declared for the contract (every parameter has a kind); completep itself refuses seq2seq
    param_kinds = {"enc_pos": "embedding", "dec_pos": "embedding", "lm_head.weight": "readout"}

    def __init__(self, arch: ArchConfig, pad_id: int | None = None) -> None:
        super().__init__()
        if not arch.is_seq2seq:
            raise ValueError("Seq2SeqTransformer builds task: seq2seq architectures")
        self.arch = arch
        self.pad_id = arch.vocab_size - 3 if pad_id is None else pad_id
        d = arch.d_model
        self.tok_emb = nn.Embedding(arch.vocab_size, d)
        if arch.pos_encoding == "learned":
            self.enc_pos = nn.Parameter(torch.zeros(arch.max_len, d))
            self.dec_pos = nn.Parameter(torch.zeros(arch.max_len, d))
            for table in (self.enc_pos, self.dec_pos):
                nn.init.normal_(table, std=0.02)
        else:  # rope, alibi: no tables (None); self-attention places the tokens
            table = position_table(arch) if arch.pos_encoding == "sinusoidal" else None
            self.register_buffer("enc_pos", table, persistent=False)
            self.register_buffer("dec_pos", None if table is None else table.clone(), persistent=False)
        self.encoder = nn.ModuleList(encoder_layer(arch.dims, layer) for layer in arch.encoder_layers)
        self.ln_enc = make_norm(arch.norm, d)
        self.layers = nn.ModuleList(DecoderLayer(arch.dims, layer) for layer in arch.layers)
        self.ln_f = make_norm(arch.norm, d)
        self.lm_head = nn.Linear(d, arch.vocab_size, bias=False)
        init_gpt2(self, len(arch.encoder_layers) + arch.n_layers)
        if arch.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight

    def _embed(self, idx: Tensor, pos: Tensor | None) -> Tensor:
        T = idx.shape[1]
        if T > self.arch.max_len:
            raise ValueError(f"sequence length {T} exceeds max_len {self.arch.max_len}")
        x = self.tok_emb(idx)
        return x if pos is None else x + pos[:T].to(x.dtype)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """The encoder output (B, S, C) and the mask of real source tokens (B, S)."""
        x = self._embed(src, self.enc_pos)
        keep = src != self.pad_id
        mask = None if bool(keep.all()) else keep  # no padding: the unmasked (fused) paths
        for layer in self.encoder:
            x = layer(x, mask)
        return self.ln_enc(x), keep

    def decode(self, memory: Tensor, keep: Tensor, tgt_in: Tensor) -> Tensor:
        """Logits (B, T, vocab) of every next target token."""
        x = self._embed(tgt_in, self.dec_pos)
        for layer in self.layers:
            x = layer(x, memory, keep)
        return self.lm_head(self.ln_f(x))

    def forward(self, src: Tensor, tgt_in: Tensor | None = None) -> Tensor:
        """``forward(src, tgt_in)`` or ``forward(x)`` with x = cat([src, tgt_in], 1); logits (B, T, vocab)."""
        if tgt_in is None:
            if src.shape[1] % 2:
                width = src.shape[1]
                raise ValueError(f"a seq2seq batch holds source and target side by side; got width {width}")
            src, tgt_in = src.chunk(2, dim=1)
        memory, keep = self.encode(src)
        return self.decode(memory, keep, tgt_in)


@torch.no_grad()
def greedy_decode(
    model: Seq2SeqTransformer, src: Tensor, bos_id: int, eos_id: int, max_new: int | None = None
) -> list[list[int]]:
    """The most likely target of each source (B, S), one token at a time, without the BOS and EOS.

    The encoder runs once; the decoder reruns over the prefix at each step (the
    blocks keep no cache), which is fine for the few samples ``train`` shows.
    """
    was_training = model.training
    model.eval()
    max_new = model.arch.max_len if max_new is None else min(max_new, model.arch.max_len)
    memory, keep = model.encode(src)
    out = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_new):  # the prefix fed back is at most max_new <= max_len tokens (BOS included)
        nxt = model.decode(memory, keep, out)[:, -1].argmax(-1)
        out = torch.cat([out, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if bool(done.all()):
            break
    model.train(was_training)
    result = []
    for row in out[:, 1:].tolist():
        result.append(row[: row.index(eos_id)] if eos_id in row else row)
    return result
