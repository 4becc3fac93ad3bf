"""The speed paths of the blocks (benchmarks/block_cost.py) compute what the plain paths do.

* The blocks built on ``F.scaled_dot_product_attention`` hand it inputs its
  fused CPU kernel accepts (equal head widths, real strides): run under
  ``sdpa_kernel(FLASH_ATTENTION)``, which raises instead of falling back to
  the unfused math path.
* ``ValueAttention.attend_shared`` (weights shared by the batch) and
  ``Mixture.forward`` (static parts and the mask summed first, weighted logits
  added in place) give the outputs and gradients of the generic
  ``ValueAttention`` path, and ``Mixture.fused`` (SDPA with the summed biases
  as its float mask) those of the written-out logits.
"""

from __future__ import annotations

import pytest
import torch
from model_cases import D_MODEL, DIMS, FFN, MAX_LEN, N_HEADS, VARIANTS
from torch.nn.attention import SDPBackend, sdpa_kernel

from nas.models.attention import mixture
from nas.models.attention.base import ValueAttention
from nas.models.attention.mdha import causal_depthwise_conv
from nas.models.attention.mixture import Mixture, MixtureOptions
from nas.models.dims import Dims


def _x(T: int = MAX_LEN, B: int = 3, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randn(B, T, D_MODEL, generator=g, dtype=dtype).requires_grad_(True)


@pytest.mark.parametrize("name", ["mha", "mdha", "synth_dense", "multi_branch"])
def test_sdpa_blocks_reach_the_fused_kernel(name: str) -> None:
    block = VARIANTS[name].block()
    x = _x()
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # no fallback: raises if the inputs do not qualify
        block(x).sum().backward()
    assert x.grad is not None


@pytest.mark.parametrize("shape", [(1, 1, 6), (2, 5, 12), (3, 16, 96)])
def test_causal_depthwise_conv_is_contiguous_and_causal(shape: tuple[int, int, int]) -> None:
    B, T, C = shape
    x = torch.randn(B, T, C, dtype=torch.float64)
    w = torch.randn(C, 3, dtype=torch.float64)
    y = causal_depthwise_conv(x, w)
    assert y.shape == x.shape and y.is_contiguous()
    ref = x * w[:, 2]
    ref[:, 1:] += x[:, :-1] * w[:, 1]
    ref[:, 2:] += x[:, :-2] * w[:, 0]
    torch.testing.assert_close(y, ref)


def _grads(block: torch.nn.Module, fn, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    block.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    y = fn(x)
    y.backward(torch.ones_like(y))
    return y.detach(), {k: p.grad.clone() for k, p in block.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    "key",
    [
        "synth_random",
        "synth_fixed_random",
        "synth_factorized_random",
        "mixture",
        "mixture-fixed",
        "mixture-random",
    ],
)
def test_fast_forward_matches_the_generic_path(key: str) -> None:
    torch.manual_seed(0)
    block = VARIANTS[key].cls(DIMS, VARIANTS[key].spec.options, ffn=FFN).double()
    x = _x(dtype=torch.float64)

    def generic(inp: torch.Tensor) -> torch.Tensor:  # broadcast matmul, masked_fill, one softmax
        weights = block.masked_softmax(block.scores(inp))
        v = block.split_heads(block.v_proj(inp))
        return block.out_proj(block.merge_heads(torch.matmul(weights.expand(inp.shape[0], -1, -1, -1), v)))

    y_fast, g_fast = _grads(block, block, x)
    y_ref, g_ref = _grads(block, generic, x)
    torch.testing.assert_close(y_fast, y_ref, atol=1e-10, rtol=1e-9)
    assert g_fast.keys() == g_ref.keys()
    for k in g_ref:
        torch.testing.assert_close(g_fast[k], g_ref[k], atol=1e-10, rtol=1e-9, msg=k)
    assert isinstance(block, ValueAttention)


MIXES = {
    "mha+random": {"components": ["mha", "synth_random"]},
    "mdha-kv2+dense+fixed": {
        "components": [{"type": "mdha", "kv_heads": 2}, "synth_dense", "synth_fixed_random"]
    },
    "dense+mha, fixed weights": {"components": ["synth_dense", "mha"], "weights": [0.3, 0.7]},
    "mha+factorized_random": {"components": ["mha", "synth_factorized_random"]},
    "mha+fixed_random, fixed weights (SDPA on CPU)": {
        "components": ["mha", "synth_fixed_random"],
        "weights": [2, 1],
    },
}
POSITIONS = {
    "table": DIMS,
    "rope": Dims(D_MODEL, N_HEADS, MAX_LEN, rope_base=10000.0),
    "alibi": Dims(D_MODEL, N_HEADS, MAX_LEN, alibi=True),
}


@pytest.mark.parametrize("positions", sorted(POSITIONS))
@pytest.mark.parametrize("mix", sorted(MIXES))
@pytest.mark.parametrize("encoder", [False, True], ids=["causal", "encoder-padded"])
def test_fused_mixture_matches_its_written_out_logits(mix: str, positions: str, encoder: bool) -> None:
    """SDPA over concatenated queries and keys with the summed biases as its float mask gives the
    outputs and gradients of the path that writes the (B, H, T, T) logits (``Mixture.unfused``)."""
    torch.manual_seed(0)
    opts = MixtureOptions.parse(MIXES[mix])
    block = Mixture(POSITIONS[positions], opts, ffn=FFN).double()
    with torch.no_grad():  # learned mixing weights away from uniform, so that a lost alpha shows
        for p in block.parameters():
            if p.dim() == 1 and p.numel() == len(opts.components):
                p.copy_(torch.linspace(-1.0, 1.0, p.numel()))
    keep = None
    if encoder:
        block.make_bidirectional()
        keep = torch.ones(3, MAX_LEN, dtype=torch.bool)
        keep[0, -5:] = False  # padding keys of the first sequence
        keep[2, -1:] = False
    x = _x(dtype=torch.float64)
    calls: list[str] = []
    original = Mixture.fused

    def spy(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append("fused")
        return original(self, *args, **kwargs)

    def written_out(inp: torch.Tensor) -> torch.Tensor:
        T = inp.shape[1]
        parts_x = inp if keep is None else inp * keep[..., None]  # the parts read zeros at padding
        bias = torch.zeros(T, T, dtype=inp.dtype)
        if block.causal:
            bias = bias.masked_fill(block.causal_mask[:T, :T], float("-inf"))
        dynamic = []
        for a, part in zip(block.alpha, block.parts, strict=True):
            if part.static_scores:
                bias = bias + a * part.scores(parts_x)[0]
            else:
                dynamic.append((a, part))
        if keep is not None:
            bias = bias.masked_fill(~keep[:, None, None, :], float("-inf"))
        return block.unfused(inp, bias, dynamic, parts_x)

    Mixture.fused = spy  # type: ignore[method-assign]
    try:
        y_fast, g_fast = _grads(block, lambda inp: block(inp, keep), x)
    finally:
        Mixture.fused = original  # type: ignore[method-assign]
    assert calls, "the mixture did not take its fused path"
    y_ref, g_ref = _grads(block, written_out, x)
    real = keep[..., None] if keep is not None else torch.ones(1, 1, 1, dtype=torch.bool)
    torch.testing.assert_close(y_fast * real, y_ref * real, atol=1e-10, rtol=1e-9)
    assert g_fast.keys() == g_ref.keys()
    for k in g_ref:
        torch.testing.assert_close(g_fast[k], g_ref[k], atol=1e-10, rtol=1e-9, msg=k)


def test_fused_mixture_with_a_fixed_mask_reaches_the_flash_kernel() -> None:
    """Fixed weights and a fixed random part: the mask needs no gradient, so the CPU's fused kernel
    takes it (with a trained mask CPU SDPA runs its math path, as the written-out logits do)."""
    opts = MixtureOptions.parse({"components": ["mha", "synth_fixed_random"], "weights": [0.5, 0.5]})
    block = Mixture(DIMS, opts, ffn=FFN)
    x = _x()
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # raises if SDPA had to fall back
        block(x).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def _forced_pair(block: torch.nn.Module, switch: str, keep: torch.Tensor | None) -> None:
    """The block's CUDA form (``switch`` True) against its CPU form (False): float32 outputs and
    gradients agree within float32 rounding."""
    x = _x()
    forms = {}
    for forced in (True, False):
        setattr(block, switch, forced)
        forms[forced] = _grads(block, lambda inp: block(inp, keep), x)
    (y_cuda, g_cuda), (y_cpu, g_cpu) = forms[True], forms[False]
    real = keep[..., None] if keep is not None else torch.ones(1, 1, 1, dtype=torch.bool)
    torch.testing.assert_close(y_cuda * real, y_cpu * real, atol=1e-5, rtol=1e-5)
    assert g_cuda.keys() == g_cpu.keys() and g_cpu
    for k in g_cpu:
        torch.testing.assert_close(g_cuda[k], g_cpu[k], atol=1e-5, rtol=1e-4, msg=k)


def _padding(encoder: bool) -> torch.Tensor | None:
    if not encoder:
        return None
    keep = torch.ones(3, MAX_LEN, dtype=torch.bool)
    keep[0, -5:] = False  # padding keys of the first sequence
    return keep


@pytest.mark.parametrize("encoder", [False, True], ids=["causal", "encoder-padded"])
def test_synth_dense_padded_to_a_multiple_of_8_as_on_cuda_equals_the_cpu_form(
    encoder: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = VARIANTS["synth_dense"].block()
    if encoder:
        block.make_bidirectional()
    widths: list[int] = []
    original = type(block).attend_qkv

    def spy(self, q, *args, **kwargs):  # type: ignore[no-untyped-def]
        widths.append(q.shape[-1])
        return original(self, q, *args, **kwargs)

    monkeypatch.setattr(type(block), "attend_qkv", spy)
    _forced_pair(block, "pad_to_8", _padding(encoder))
    dh = D_MODEL // N_HEADS
    assert widths == [(dh + 1 + 7) // 8 * 8, dh + 1]  # each form took its own width (16, then 9)


@pytest.mark.parametrize("encoder", [False, True], ids=["causal", "encoder-padded"])
def test_fused_mixture_sdpa_with_a_trained_mask_as_on_cuda_equals_the_cpu_form(
    encoder: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    block = Mixture(DIMS, MixtureOptions.parse(MIXES["mdha-kv2+dense+fixed"]), ffn=FFN)
    if encoder:
        block.make_bidirectional()
    sdpa_masks: list[bool] = []
    original = mixture.F.scaled_dot_product_attention

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        sdpa_masks.append(kwargs.get("attn_mask") is not None and kwargs["attn_mask"].requires_grad)
        return original(*args, **kwargs)

    monkeypatch.setattr(mixture.F, "scaled_dot_product_attention", spy)
    _forced_pair(block, "sdpa_trained_mask", _padding(encoder))
    assert sdpa_masks == [True]  # the forced form: SDPA with a mask that needs a gradient; the CPU form: none


@pytest.mark.parametrize("k, left", [(1, 0), (3, 2), (5, 4), (3, 1), (5, 2), (4, 1)])
def test_the_compiled_tap_sum_equals_the_eager_convolution(
    k: int, left: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under torch.compile the taps are a sum of shifted slices (mdha.py says why): same values and grads."""
    x = torch.randn(2, 9, 12, dtype=torch.float64, requires_grad=True)
    w = torch.randn(12, k, dtype=torch.float64, requires_grad=True)
    g = torch.randn(2, 9, 12, dtype=torch.float64)
    eager = causal_depthwise_conv(x, w, left)
    eager_grads = torch.autograd.grad(eager, (x, w), g)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    monkeypatch.setattr(torch.nn.functional, "conv2d", None)  # the compiled path must not reach it
    taps = causal_depthwise_conv(x, w, left)
    torch.testing.assert_close(taps, eager)
    for a, b in zip(torch.autograd.grad(taps, (x, w), g), eager_grads, strict=True):
        torch.testing.assert_close(a, b)
