"""The contract every attention block and FFN activation keeps.

Parametrized over every registered block (``variant`` in conftest.py) and
every activation, so a new block or activation gets these tests by being
registered: output shape, causality, gradients reach every parameter,
determinism, parameter count and FLOP formulas, state_dict round trip.

FLOP cross-check with ``torch.utils.flop_counter.FlopCounterMode``:

* on CPU, ``F.scaled_dot_product_attention`` dispatches to a fused op the
  counter does not count; under ``sdpa_kernel(SDPBackend.MATH)`` it
  decomposes into counted ``bmm`` (checked by a test below);
* the counter counts the input gradient of a depthwise convolution as if the
  convolution were dense (``C`` times too much for ``C`` channels), so the
  training check leaves ``aten.convolution_backward`` out and a separate
  assertion pins its exact value;
* input-independent work done once per step (``R1 R2^T`` of the factorized
  random synthesizer, shared by the whole batch) is left out of the per-token
  formulas by design and subtracted here.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from model_cases import BATCH, D_MODEL, DIMS, FFN, MAX_LEN, N_HEADS, VARIANTS, Variant
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import nas
from nas.models import Flops
from nas.models.attention.base import AttentionBlock
from nas.models.attention.hyena import HyenaOperator
from nas.models.attention.mdha import MultiDConvHeadAttention
from nas.models.ffn import GATED, FeedForward, ffn_width
from nas.models.parametrization import KINDS, parameter_kinds

CONV_BWD = torch.ops.aten.convolution_backward
#: blocks whose ``conv_weight`` is a causal depthwise convolution (``mdha.causal_depthwise_conv``)
DEPTHWISE_CONV_BLOCKS = (MultiDConvHeadAttention, HyenaOperator)
REL = 0.02  # FLOP formulas must match the counter within 2%


# -- helpers ------------------------------------------------------------------------------
def counter_formulas() -> dict[object, Callable[..., int]]:
    """The ``COUNTER_FORMULAS`` a block's module publishes for ops the counter leaves out (hyena's FFTs)."""
    out: dict[object, Callable[..., int]] = {}
    for name in nas.ATTENTION.names():
        out.update(getattr(sys.modules[nas.ATTENTION.get(name).__module__], "COUNTER_FORMULAS", {}))
    return out


def count_ops(fn: Callable[[], object]) -> dict[object, int]:
    """FLOPs per aten op of ``fn()`` with SDPA decomposed into counted matmuls."""
    counter = FlopCounterMode(display=False, custom_mapping=counter_formulas())
    with sdpa_kernel(SDPBackend.MATH), counter:
        fn()
    return dict(counter.get_flop_counts().get("Global", {}))


def per_step_flops(module: nn.Module, seq_len: int) -> Flops:
    """Input-independent work done once per forward, excluded from the per-token formulas."""
    total = Flops()
    for m in module.modules():
        if isinstance(m, AttentionBlock):  # work once per step (R1 R2^T, hyena's filters); mostly none
            total = total + m.step_flops(m.dims, m.opts, seq_len)
    return total


def conv_modules(module: nn.Module) -> list[tuple[int, int]]:
    """(channels, kernel) of every depthwise convolution inside ``module``."""
    return [tuple(m.conv_weight.shape) for m in module.modules() if isinstance(m, DEPTHWISE_CONV_BLOCKS)]


def check_flops(module: nn.Module, run: Callable[[], Tensor], expected: Flops, T: int) -> None:
    """Counted forward and backward FLOPs of ``run()`` equal ``expected`` per token."""
    n_tokens = BATCH * T
    step = per_step_flops(module, T)
    out: list[Tensor] = []
    fwd = count_ops(lambda: out.append(run()))
    assert sum(fwd.values()) == pytest.approx(expected.fwd * n_tokens + step.fwd, rel=REL), fwd

    y = out[0]
    bwd = count_ops(lambda: y.backward(torch.randn_like(y)))
    convs = conv_modules(module)
    conv_true_bwd = sum(2 * 2.0 * k * c for c, k in convs)  # grad input + grad weight, per token
    # The counter prices a depthwise conv's input gradient as a dense conv: C times 2*k*C.
    conv_counter_bwd = sum(2.0 * k * c * c + 2.0 * k * c for c, k in convs)
    counted_conv = bwd.pop(CONV_BWD, 0)
    assert counted_conv in (
        pytest.approx(conv_true_bwd * n_tokens),
        pytest.approx(conv_counter_bwd * n_tokens),
    )
    expected_bwd = (expected.bwd - conv_true_bwd) * n_tokens + step.bwd
    assert sum(bwd.values()) == pytest.approx(expected_bwd, rel=REL), bwd


def tokens(T: int, seed: int = 0, vocab: int = 64) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (BATCH, T), generator=g)


def floats(T: int, seed: int = 0) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, T, D_MODEL, generator=g)


def grads_reach_all(module: nn.Module, loss: Tensor) -> None:
    module.zero_grad(set_to_none=True)
    loss.backward()
    for name, p in module.named_parameters():
        assert p.requires_grad, name
        assert p.grad is not None, f"{name} gets no gradient"
        assert p.grad.abs().sum() > 0, f"{name} has an all-zero gradient"


# -- registry -----------------------------------------------------------------------------
def test_every_registered_block_has_a_variant() -> None:
    names = {v.spec.type for v in VARIANTS.values()}
    assert names == set(nas.ATTENTION.names())


def test_variant_options_round_trip(variant: Variant) -> None:
    spec = variant.spec
    assert nas.AttentionSpec.from_raw(spec.to_dict()) == spec
    spec.options.check(DIMS, FFN)


# -- shape and causality --------------------------------------------------------------------
@pytest.mark.parametrize("T", [1, 5, MAX_LEN])
def test_block_output_shape(variant: Variant, T: int) -> None:
    y = variant.block()(floats(T))
    assert y.shape == (BATCH, T, D_MODEL)
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("T", [1, 7, MAX_LEN])
def test_model_output_shape(variant: Variant, T: int) -> None:
    logits = variant.model(n_layers=2)(tokens(T))
    assert logits.shape == (BATCH, T, 64)
    assert torch.isfinite(logits).all()


def test_model_refuses_too_long_input(variant: Variant) -> None:
    with pytest.raises(ValueError, match="max_len"):
        variant.model()(tokens(MAX_LEN + 1))


def test_block_is_causal(variant: Variant) -> None:
    block = variant.block().eval()
    x = floats(MAX_LEN)
    y = block(x)
    for t in range(MAX_LEN - 1):
        x2 = x.clone()
        x2[:, t + 1 :] = floats(MAX_LEN - t - 1, seed=t + 1)
        y2 = block(x2)
        torch.testing.assert_close(y2[:, : t + 1], y[:, : t + 1], atol=1e-6, rtol=0)
        assert not torch.allclose(y2[:, t + 1 :], y[:, t + 1 :])  # the change does reach later positions


def test_block_prefix_gives_same_outputs(variant: Variant) -> None:
    block = variant.block().eval()
    x = floats(MAX_LEN)
    y = block(x)
    for T in (1, 3, 9):
        torch.testing.assert_close(block(x[:, :T]), y[:, :T], atol=1e-6, rtol=1e-5)


def test_model_is_causal(variant: Variant) -> None:
    model = variant.model(n_layers=2).eval()
    idx = tokens(MAX_LEN)
    logits = model(idx)
    for t in range(MAX_LEN - 1):
        idx2 = idx.clone()
        idx2[:, t + 1 :] = (idx[:, t + 1 :] + 1 + t) % 64
        torch.testing.assert_close(model(idx2)[:, : t + 1], logits[:, : t + 1], atol=1e-6, rtol=0)


# -- gradients and trainability ---------------------------------------------------------------
def test_gradients_reach_every_block_parameter(variant: Variant) -> None:
    block = variant.block()
    x = floats(MAX_LEN).requires_grad_(True)
    y = block(x)
    grads_reach_all(block, (y * torch.randn_like(y)).sum())
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_gradients_reach_every_model_parameter(variant: Variant) -> None:
    model = variant.model(n_layers=2)
    logits = model(tokens(MAX_LEN))
    grads_reach_all(model, (logits * torch.randn_like(logits)).sum())


def test_training_step_leaves_persistent_buffers_alone(variant: Variant) -> None:
    model = variant.model()
    before = {k: v.clone() for k, v in model.named_buffers()}
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(2):
        opt.zero_grad()
        F.cross_entropy(model(tokens(MAX_LEN)).flatten(0, 1), tokens(MAX_LEN, seed=1).flatten()).backward()
        opt.step()
    for k, v in model.named_buffers():
        assert torch.equal(v, before[k]), k


def test_fixed_random_logits_are_a_saved_buffer() -> None:
    block = VARIANTS["synth_fixed_random"].block()
    assert "R" not in dict(block.named_parameters())
    assert "R" in dict(block.named_buffers())
    assert "R" in block.state_dict()
    assert block.R.shape == (N_HEADS, MAX_LEN, MAX_LEN)
    assert not block.R.requires_grad
    # and inside a mixture, too
    mix = VARIANTS["mixture-random"].block()
    assert any(k.endswith(".R") for k in mix.state_dict())
    assert not any(k.endswith(".R") for k, _ in mix.named_parameters())


def test_learned_random_logits_are_a_parameter() -> None:
    block = VARIANTS["synth_random"].block()
    assert "R" in dict(block.named_parameters())


def test_fixed_mixture_weights_are_not_trained() -> None:
    block = VARIANTS["mixture-fixed"].block()
    assert not any("alpha" in k for k, _ in block.named_parameters())
    assert "fixed_alpha" in block.state_dict()


# -- determinism and persistence ---------------------------------------------------------------
def test_same_seed_same_model(variant: Variant) -> None:
    a, b = variant.model(seed=3), variant.model(seed=3)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    idx = tokens(MAX_LEN)
    assert torch.equal(a(idx), b(idx))
    c = variant.model(seed=4)
    assert not all(torch.equal(sa[k], c.state_dict()[k]) for k in sa)


def test_state_dict_round_trip(variant: Variant) -> None:
    src = variant.model(seed=0, n_layers=2).eval()
    buf = io.BytesIO()
    torch.save(src.state_dict(), buf)
    buf.seek(0)
    dst = variant.model(seed=1, n_layers=2).eval()
    dst.load_state_dict(torch.load(buf, weights_only=True))
    idx = tokens(MAX_LEN)
    assert torch.equal(src(idx), dst(idx))


# -- parameter counts -----------------------------------------------------------------------
def test_block_param_count_formula(variant: Variant) -> None:
    block = variant.block()
    n = sum(p.numel() for p in block.parameters())
    assert n == variant.cls.count_params(DIMS, variant.spec.options, FFN)


def test_block_buffer_bytes_cover_its_quadratic_tensors(variant: Variant) -> None:
    """What the memory checks add beside the parameters (``buffer_bytes``) covers every buffer the block
    keeps that grows with max_len squared (a fixed random synthesizer's logits): a check that missed
    it passed models that could not be built (issue 36)."""
    block = variant.block()
    big = sum(  # the layer's own causal mask is counted with the model's (``training_bytes``: masks)
        b.numel() * b.element_size()
        for name, b in block.named_buffers()
        if b.numel() >= MAX_LEN * MAX_LEN and name != "causal_mask"
    )
    assert variant.cls.buffer_bytes(DIMS, variant.spec.options) >= big


@pytest.mark.parametrize(
    "top", [{}, {"tie_embeddings": False, "pos_encoding": "sinusoidal"}], ids=["tied", "untied-sin"]
)
def test_model_param_count_equals_compute(variant: Variant, top: dict) -> None:
    model = variant.model(n_layers=2, **top)
    n = sum(p.numel() for p in model.parameters())
    assert n == nas.compute(model.arch).params


# -- parameter kinds (recipe.parametrization: completep) ---------------------------------------------
def test_every_block_parameter_declares_its_kind(variant: Variant) -> None:
    """Each parameter is hidden, vector, embedding or readout (``param_kinds``): completep scales by it,
    so an undeclared one fails here, naming itself (nas.models.parametrization)."""
    kinds = parameter_kinds(variant.block())
    assert set(kinds) == {name for name, _ in variant.block().named_parameters()}
    assert set(kinds.values()) <= set(KINDS)


@pytest.mark.parametrize(
    "top",
    [{}, {"tie_embeddings": False, "pos_encoding": "learned", "norm": "rmsnorm"}],
    ids=["tied", "untied-learned-rms"],
)
def test_every_model_parameter_declares_its_kind(variant: Variant, top: dict) -> None:
    kinds = parameter_kinds(variant.model(n_layers=2, **top))
    assert kinds["tok_emb.weight"] == "embedding"
    if top:
        assert kinds["lm_head.weight"] == "readout" and kinds["pos_emb"] == "embedding"


def test_completep_trains_every_block_at_twice_its_width(variant: Variant) -> None:
    """A block's declared kinds are enough to build it under completep away from its base and train a step."""
    from evaluators.model import prepare_model
    from nas.spec.training import TrainRecipe

    arch = variant.arch(n_layers=2)
    recipe = TrainRecipe(batch_size=2, parametrization="completep", base_width=D_MODEL // 2, base_depth=1)
    prep = prepare_model(arch, recipe, torch.device("cpu"))
    prep.step.set_lr(1e-3)
    loss = prep.step(tokens(MAX_LEN), tokens(MAX_LEN))
    assert torch.isfinite(loss)


# -- FLOPs ----------------------------------------------------------------------------------
def test_math_backend_makes_sdpa_counted() -> None:
    B, H, T, dh = 2, 3, 8, 4
    q = torch.randn(B, H, T, dh)
    expected = 2 * (2 * B * H * T * T * dh)  # Q K^T and P V
    assert (
        sum(count_ops(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True)).values()) == expected
    )
    # Without it the CPU build dispatches to a fused kernel the counter skips (0 here).
    counter = FlopCounterMode(display=False)
    with counter:
        F.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert counter.get_total_flops() in (0, expected)


@pytest.mark.parametrize("T", [7, MAX_LEN])
def test_block_flops_match_counter(variant: Variant, T: int) -> None:
    block = variant.block()
    x = floats(T).requires_grad_(True)  # inside a model the input needs a gradient too
    expected = variant.cls.count_flops(DIMS, variant.spec.options, FFN, T)
    check_flops(block, lambda: block(x), expected, T)


@pytest.mark.parametrize("T", [5, MAX_LEN])
def test_model_flops_match_compute(variant: Variant, T: int) -> None:
    model = variant.model(n_layers=1)
    idx = tokens(T)
    check_flops(model, lambda: model(idx), nas.compute(model.arch, seq_len=T).flops, T)


def test_conv_backward_discrepancy_is_as_documented() -> None:
    """Pins the counter's depthwise-conv backward count: a dense-conv input gradient."""
    block = VARIANTS["mdha"].block()
    x = floats(MAX_LEN).requires_grad_(True)
    y = block(x)
    counted = count_ops(lambda: y.backward(torch.randn_like(y))).get(CONV_BWD, 0)
    C, k = 3 * D_MODEL, 3
    true = 2 * (2 * k * C) * BATCH * MAX_LEN
    over = (2 * k * C * C + 2 * k * C) * BATCH * MAX_LEN
    assert counted in (true, over)


# -- feed-forward activations -------------------------------------------------------------------
def feed_forward(activation: str, seed: int = 0) -> FeedForward:
    torch.manual_seed(seed)
    return FeedForward(D_MODEL, ffn_width(D_MODEL, 2.0, activation), activation)


def test_ffn_shape_positionwise_and_gradients(activation: str) -> None:
    ffn = feed_forward(activation)
    x = floats(MAX_LEN).requires_grad_(True)
    y = ffn(x)
    assert y.shape == x.shape
    x2 = x.detach().clone()
    x2[:, 4] += 1.0
    diff = (ffn(x2) - y).abs().amax(dim=(0, 2))
    assert diff[4] > 0 and torch.count_nonzero(diff) == 1
    grads_reach_all(ffn, (y * torch.randn_like(y)).sum())


def test_ffn_determinism_and_param_count(activation: str) -> None:
    a, b = feed_forward(activation, seed=1), feed_forward(activation, seed=1)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    d_ff = ffn_width(D_MODEL, 2.0, activation)
    assert sum(p.numel() for p in a.parameters()) == FeedForward.count_params(D_MODEL, d_ff, activation)


def test_ffn_flops_match_counter(activation: str) -> None:
    ffn = feed_forward(activation)
    x = floats(MAX_LEN).requires_grad_(True)
    width = ffn_width(D_MODEL, 2.0, activation)
    check_flops(ffn, lambda: ffn(x), FeedForward.count_flops(D_MODEL, width, activation), MAX_LEN)


@pytest.mark.parametrize("block", ["mha", "multi_branch"])
def test_activation_in_model(activation: str, block: str) -> None:
    v = VARIANTS[block]
    if block == "multi_branch" and activation in GATED:  # each branch runs an ungated FFN
        with pytest.raises(nas.ConfigError, match="ungated"):
            v.arch(n_layers=2, activation=activation)
        return
    arch = v.arch(n_layers=2, activation=activation)
    torch.manual_seed(0)
    model = nas.build_model(arch)
    assert all(
        layer.ffn is None or layer.ffn.act is nas.ACTIVATIONS.get(activation) for layer in model.layers
    )
    assert sum(p.numel() for p in model.parameters()) == nas.compute(arch).params
    idx = tokens(MAX_LEN)
    logits = model(idx)
    idx2 = idx.clone()
    idx2[:, 6:] = (idx2[:, 6:] + 1) % 64
    torch.testing.assert_close(model(idx2)[:, :6], logits[:, :6], atol=1e-6, rtol=0)
    check_flops(model, lambda: model(idx), nas.compute(arch).flops, MAX_LEN)
