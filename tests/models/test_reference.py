"""Every block against a slow, direct implementation of its formula, using the block's weights.

Each block carries its reference in its own file (``reference_forward``, and
``reference_scores`` for the logits of a mixable block), written with the
loops of ``nas.models.reference`` on tiny shapes in float64: one causal
softmax per query row over the keys j <= i, written out, sharing no code with
the fast paths.  Outputs and gradients (w.r.t. the input and every trained
parameter, fla's habit) are compared, so a hand-written backward
(``hyena``'s FFT convolution, ``additive``'s pair logits) or a fused path
taken only when gradients are needed (``mixture``) is checked as well.  A
block that brings no reference is skipped here with that reason; every
shipped block brings one.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from model_cases import VARIANTS, Variant
from torch import Tensor

import nas
from nas.models import Dims, FFNSpec
from nas.models.attention.base import AttentionBlock, ValueAttention
from nas.models.ffn import GATED
from nas.models.model import sinusoidal_table
from nas.models.reference import ACTIVATIONS as REF_ACTIVATIONS

D, H, L, B = 16, 2, 8, 2
DH = D // H
DIMS = Dims(D, H, L)


def reference(block: AttentionBlock, method: str, x: Tensor) -> Tensor:
    """``block.<method>`` on each sequence of x (B, T, C), stacked; skips a block without one."""
    try:
        return torch.stack([getattr(block, method)(x[b]) for b in range(x.shape[0])])
    except NotImplementedError as err:
        pytest.skip(f"{err} (add {method} to its file to have it checked)")


# -- helpers ------------------------------------------------------------------------------
def tiny_block(variant: Variant, activation: str = "relu", seed: int = 0) -> AttentionBlock:
    ffn = FFNSpec(activation, 4.0)
    opts = variant.spec.options
    opts.check(DIMS, ffn)
    torch.manual_seed(seed)
    block = variant.cls(DIMS, opts, ffn=ffn).double()
    with torch.no_grad():  # move every weight off its special initial value (zeros, ones, identity)
        for p in block.parameters():
            p.normal_(0.0, 0.4)
    return block


def seq(T: int, seed: int = 0) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, D, generator=g, dtype=torch.float64)


def has_scores(block: AttentionBlock) -> bool:
    return type(block).scores is not AttentionBlock.scores


def all_static(block: AttentionBlock) -> bool:
    """True when no logits of the block depend on the input (a block made of parts: of any part)."""
    parts = [m for m in block.modules() if isinstance(m, AttentionBlock) and m is not block]
    if parts:
        return all(all_static(p) for p in parts)
    return type(block).static_scores


# -- against the references ------------------------------------------------------------------
@pytest.mark.parametrize("T", [5, L])
def test_block_matches_reference(variant: Variant, T: int) -> None:
    block = tiny_block(variant)
    x = seq(T)
    with torch.no_grad():
        y = block(x)
        ref = reference(block, "reference_forward", x)
    torch.testing.assert_close(y, ref, atol=1e-10, rtol=1e-9)


def gradients(
    block: AttentionBlock, fn: Callable[[Tensor], Tensor], x: Tensor, seed: int = 7
) -> dict[str, Tensor]:
    """d <w, fn(x)> / d(x and every trained parameter of ``block``), for a fixed random w; zero
    where there is no path (a fixed random synthesizer's logits depend on nothing trained)."""
    x = x.detach().clone().requires_grad_(True)
    y = fn(x)
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(y.shape, generator=g, dtype=y.dtype)
    named = [("x", x)] + [(n, p) for n, p in block.named_parameters() if p.requires_grad]
    if not y.requires_grad:
        return {n: torch.zeros_like(t) for n, t in named}
    grads = torch.autograd.grad((y * w).sum(), [t for _, t in named], allow_unused=True)
    return {n: torch.zeros_like(t) if gr is None else gr for (n, t), gr in zip(named, grads, strict=True)}


def assert_same_gradients(fast: dict[str, Tensor], slow: dict[str, Tensor]) -> None:
    assert fast.keys() == slow.keys()
    for name in fast:
        torch.testing.assert_close(
            fast[name], slow[name], atol=1e-10, rtol=1e-9, msg=lambda m, n=name: f"d/d{n}: {m}"
        )


@pytest.mark.parametrize("T", [5, L])
def test_block_gradients_match_reference(variant: Variant, T: int) -> None:
    """The fast path's gradients w.r.t. the input and every parameter are the reference's (float64)."""
    block = tiny_block(variant)
    x = seq(T)
    fast = gradients(block, block, x)
    slow = gradients(block, lambda t: reference(block, "reference_forward", t), x)
    assert_same_gradients(fast, slow)


def test_scores_match_reference_logits(variant: Variant) -> None:
    block = tiny_block(variant)
    if not has_scores(block):
        assert not variant.cls.mixable
        return
    x = seq(L)
    with torch.no_grad():
        s = block.scores(x)
        assert s.shape[1:] == (H, L, L) and s.shape[0] in (1, B)
        ref = reference(block, "reference_scores", x)
        torch.testing.assert_close(s.expand(B, -1, -1, -1), ref, atol=1e-10, rtol=1e-9)
    fast = gradients(block, lambda t: block.scores(t).expand(B, -1, -1, -1), x)
    assert_same_gradients(fast, gradients(block, lambda t: reference(block, "reference_scores", t), x))


def test_multi_branch_matches_reference_for_every_activation(activation: str) -> None:
    if activation in GATED:  # refused: each branch runs an ungated FFN (tests/models/test_config.py)
        return
    block = tiny_block(VARIANTS["multi_branch"], activation)
    x = seq(L)
    with torch.no_grad():
        ref = reference(block, "reference_forward", x)
        torch.testing.assert_close(block(x), ref, atol=1e-10, rtol=1e-9)
    slow = gradients(block, lambda t: reference(block, "reference_forward", t), x)
    assert_same_gradients(gradients(block, block, x), slow)


@pytest.mark.parametrize("T", [5, L])
@pytest.mark.parametrize("positions", ["rope", "alibi"])
def test_block_with_positions_in_attention_matches_reference(
    variant: Variant, T: int, positions: str
) -> None:
    """Every block under ``pos_encoding: rope`` or ``alibi``: those with queries and keys turn them
    (or bias their logits), the rest ignore it; outputs and gradients."""
    ffn = FFNSpec("relu", 4.0)
    # a small base turns every pair visibly within 8 positions
    dims = Dims(D, H, L, rope_base=100.0) if positions == "rope" else Dims(D, H, L, alibi=True)
    torch.manual_seed(0)
    block = variant.cls(dims, variant.spec.options, ffn=ffn).double()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.4)
        x = seq(T)
        torch.testing.assert_close(block(x), reference(block, "reference_forward", x), atol=1e-10, rtol=1e-9)
        if has_scores(block):
            s = block.scores(x)
            torch.testing.assert_close(
                s.expand(B, -1, -1, -1), reference(block, "reference_scores", x), atol=1e-10, rtol=1e-9
            )
    slow = gradients(block, lambda t: reference(block, "reference_forward", t), x)
    assert_same_gradients(gradients(block, block, x), slow)


@pytest.mark.parametrize("positions", ["rope", "alibi"])
def test_positions_in_attention_change_what_query_key_blocks_compute(positions: str) -> None:
    """The rope (alibi) path is taken: the same weights give other outputs with it than without."""
    dims = Dims(32, 4, 16, rope_base=10000.0) if positions == "rope" else Dims(32, 4, 16, alibi=True)
    for name in ("mha", "mdha", "multi_branch", "mha-kv1", "sliding_window-w3"):
        plain, turned = VARIANTS[name].block(0), VARIANTS[name].block(0, dims=dims)
        turned.load_state_dict(plain.state_dict())
        x = torch.randn(2, 16, 32)
        with torch.no_grad():
            a, b = plain(x), turned(x)
            scale = a.abs().max()
            assert (a - b).abs().max() > 1e-2 * scale, name
            assert (a[:, :1] - b[:, :1]).abs().max() < 1e-5 * scale, name  # position 0 sees only itself


def test_activation_matches_reference(activation: str) -> None:
    x = torch.linspace(-4, 4, 101, dtype=torch.float64)
    fn = nas.ACTIVATIONS.get(activation)
    torch.testing.assert_close(fn(x), REF_ACTIVATIONS[activation](x), atol=1e-12, rtol=1e-12)


def test_model_forward_matches_reference() -> None:
    """Pre-LN residual layers, the FFN skipped for multi_branch, tied head, sinusoidal positions."""
    raw = {
        "d_model": D,
        "n_heads": H,
        "max_len": L,
        "vocab_size": 11,
        "pos_encoding": "sinusoidal",
        "layers": [{"attention": "mha", "ffn": "squared_relu"}, {"attention": "multi_branch"}],
    }
    torch.manual_seed(0)
    model = nas.build_model(nas.ArchConfig.from_dict(raw)).double()
    idx = torch.randint(0, 11, (B, L))

    def ln(m: torch.nn.LayerNorm, t: Tensor) -> Tensor:
        mu, var = t.mean(-1, keepdim=True), t.var(-1, unbiased=False, keepdim=True)
        return (t - mu) / torch.sqrt(var + m.eps) * m.weight + m.bias

    with torch.no_grad():
        E = model.tok_emb.weight
        out = []
        for b in range(B):
            x = E[idx[b]] + model.pos_emb  # the float32 table, checked by test_sinusoidal_table
            mha, mb = model.layers
            x = x + mha.attn.reference_forward(ln(mha.ln_attn, x))
            h = ln(mha.ln_ffn, x)
            x = x + REF_ACTIVATIONS["squared_relu"](h @ mha.ffn.fc_in.weight.T) @ mha.ffn.fc_out.weight.T
            assert mb.ffn is None
            x = x + mb.attn.reference_forward(ln(mb.ln_attn, x))
            out.append(ln(model.ln_f, x) @ E.T)  # tied: the head is the embedding
        torch.testing.assert_close(model(idx), torch.stack(out), atol=1e-10, rtol=1e-9)


def test_transformer_pp_forward_matches_reference() -> None:
    """RMSNorm before each sublayer and at the end, rotary positions in attention, a SwiGLU FFN, no table."""
    raw = {"d_model": D, "n_heads": H, "max_len": L, "vocab_size": 11, "pos_encoding": "rope",
           "rope_base": 500.0, "norm": "rmsnorm",
           "layers": [{"attention": {"type": "mha", "kv_heads": 1}, "ffn": "swiglu"}]}  # fmt: skip
    torch.manual_seed(0)
    model = nas.build_model(nas.ArchConfig.from_dict(raw)).double()
    assert model.pos_emb is None
    idx = torch.randint(0, 11, (B, L))

    def rms(m: torch.nn.Module, t: Tensor) -> Tensor:
        return t / torch.sqrt((t * t).mean(-1, keepdim=True) + 1e-5) * m.weight

    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
        E = model.tok_emb.weight
        out = []
        for b in range(B):
            x = E[idx[b]]
            (layer,) = model.layers
            x = x + layer.attn.reference_forward(rms(layer.ln_attn, x))
            h = rms(layer.ln_ffn, x)
            w1, w3 = layer.ffn.fc_in.weight.chunk(2, dim=0)
            x = x + (REF_ACTIVATIONS["silu"](h @ w1.T) * (h @ w3.T)) @ layer.ffn.fc_out.weight.T
            out.append(rms(model.ln_f, x) @ E.T)
        torch.testing.assert_close(model(idx), torch.stack(out), atol=1e-10, rtol=1e-9)


def sinusoidal_ref(T: int, d: int) -> Tensor:
    pe = torch.zeros(T, d, dtype=torch.float64)
    for t in range(T):
        for i in range(0, d, 2):
            pe[t, i] = math.sin(t / 10000 ** (i / d))
            pe[t, i + 1] = math.cos(t / 10000 ** (i / d))
    return pe


def test_sinusoidal_table() -> None:
    torch.testing.assert_close(sinusoidal_table(L, D).double(), sinusoidal_ref(L, D), atol=1e-6, rtol=0)


# -- block-specific properties -----------------------------------------------------------------
def test_static_scores_do_not_depend_on_the_input(variant: Variant) -> None:
    block = tiny_block(variant)
    if not has_scores(block):
        return
    x1, x2 = seq(L, seed=1), seq(L, seed=2)
    with torch.no_grad():
        s1, s2 = block.scores(x1), block.scores(x2)
    if all_static(block):
        assert s1.shape[0] == 1  # computed once and broadcast over the batch
        assert torch.equal(s1, s2)
    else:
        assert not torch.allclose(s1, s2)


def test_random_synthesizers_are_linear_in_the_input(variant: Variant) -> None:
    """With input-independent attention weights, the block is W_o P (X W_v): linear in X."""
    block = tiny_block(variant)
    if not (has_scores(block) and all_static(block)):
        return
    x1, x2 = seq(L, seed=1), seq(L, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(block(2.0 * x1 - 3.0 * x2), 2.0 * block(x1) - 3.0 * block(x2))


def test_dense_synthesizer_fast_path_equals_scores_path() -> None:
    block = tiny_block(VARIANTS["synth_dense"])
    for T in (1, 5, L):
        x = seq(T)
        with torch.no_grad():
            slow = ValueAttention.forward(block, x)  # softmax(mask(scores)) V, then W_o
            torch.testing.assert_close(block(x), slow, atol=1e-10, rtol=1e-9)
    fp32 = VARIANTS["synth_dense"].block()  # and at the default float32 sizes
    x = torch.randn(2, 16, 32)
    with torch.no_grad():
        torch.testing.assert_close(fp32(x), ValueAttention.forward(fp32, x), atol=1e-5, rtol=1e-4)


def train_a_little(block: AttentionBlock, steps: int = 5) -> None:
    opt = torch.optim.Adam(block.parameters(), lr=0.3)
    for step in range(steps):
        opt.zero_grad()
        y = block(seq(L, seed=step))
        (y * seq(L, seed=100 + step)).sum().backward()
        opt.step()


def assert_simplex(w: Tensor, n: int) -> None:
    assert w.shape == (n,)
    assert (w >= 0).all()
    torch.testing.assert_close(w.sum(), torch.ones((), dtype=w.dtype))


@pytest.mark.parametrize("key", ["mixture", "mixture-random"])
def test_learned_mixture_weights_stay_on_the_simplex(key: str) -> None:
    block = tiny_block(VARIANTS[key])
    n = len(block.parts)
    torch.nn.init.zeros_(block.alpha_logits)
    assert_simplex(block.alpha, n)
    torch.testing.assert_close(block.alpha, torch.full((n,), 1.0 / n, dtype=torch.float64))
    train_a_little(block)
    assert_simplex(block.alpha, n)
    assert not torch.allclose(block.alpha, torch.full((n,), 1.0 / n, dtype=torch.float64))


def test_fixed_mixture_weights_are_the_normalised_config() -> None:
    block = tiny_block(VARIANTS["mixture-fixed"])
    expected = torch.tensor([1.0, 3.0, 2.0], dtype=torch.float64) / 6.0
    torch.testing.assert_close(block.alpha.double(), expected)
    train_a_little(block)
    torch.testing.assert_close(block.alpha.double(), expected)


def test_multi_branch_weights_stay_on_the_simplex() -> None:
    block = tiny_block(VARIANTS["multi_branch"])
    torch.nn.init.zeros_(block.kappa_logits)
    torch.nn.init.zeros_(block.alpha_logits)
    for w in (block.kappa, block.alpha):
        assert_simplex(w, H)
    train_a_little(block)
    for w in (block.kappa, block.alpha):
        assert_simplex(w, H)
        assert not torch.allclose(w, torch.full((H,), 1.0 / H, dtype=torch.float64))


def test_fixed_random_logits_do_not_train_but_learned_ones_do() -> None:
    fixed, learned = tiny_block(VARIANTS["synth_fixed_random"]), tiny_block(VARIANTS["synth_random"])
    R_fixed, R_learned = fixed.R.clone(), learned.R.detach().clone()
    train_a_little(fixed)
    train_a_little(learned)
    assert torch.equal(fixed.R, R_fixed)
    assert not torch.equal(learned.R, R_learned)
    # Only the causal (lower) triangle of R is ever used, so only it moves.
    moved = (learned.R.detach() != R_learned).any(dim=0)
    assert not (moved & torch.ones(L, L, dtype=torch.bool).triu(1)).any()


def test_factorized_dense_tiles_a_and_b() -> None:
    """logit j = A[j mod a] * B[j div a]: with B = 1 the row is A tiled; keys past max_len are cut."""
    block = tiny_block(VARIANTS["factorized_dense-3x7"])
    with torch.no_grad():
        block.wb.zero_()
        block.bb.fill_(1.0)
        x = seq(L)
        s = block.scores(x)  # (B, H, T, T)
        A = (F.relu(block.hidden(x)).view(B, L, H, DH).transpose(1, 2) @ block.wa) + block.ba  # (B, H, T, a)
    torch.testing.assert_close(s, A.repeat(1, 1, 1, 7)[..., :L])
