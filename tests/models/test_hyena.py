"""hyena: the FFT long convolution equals a direct causal sum, its hand-written backward is right,
it is causal, it trains, and its parameter and FLOP formulas are exact (the contract suite, generated
from the registry, checks the rest)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import nas
from nas.errors import ConfigError
from nas.models import Dims, FFNSpec
from nas.models.attention.hyena import (
    COUNTER_FORMULAS,
    CausalFFTConv,
    HyenaOperator,
    fft_causal_conv,
    naive_causal_conv,
)

BLOCK = nas.ATTENTION.get("hyena")
FFN = FFNSpec()
D, H, L = 16, 2, 24  # max_len 24: not a power of two


DIMS = Dims(D, H, L)


def block(dims: Dims = DIMS, seed: int = 0, double: bool = False, **options: int) -> HyenaOperator:
    torch.manual_seed(seed)
    opts = BLOCK.Options.parse(options)
    opts.check(dims, FFN)
    b = BLOCK(dims, opts, ffn=FFN)
    return b.double() if double else b


#: the direct sum, written out beside the FFT path in hyena.py
direct_causal_conv = naive_causal_conv


def test_it_is_registered_causal_only_and_not_mixable() -> None:
    assert BLOCK is HyenaOperator
    assert not BLOCK.bidirectional and not BLOCK.mixable and not BLOCK.replaces_ffn
    assert BLOCK.describe(BLOCK.Options(), short=True) == "hyena(o2,f64,e3)"
    with pytest.raises(ConfigError):
        block().make_bidirectional()


@pytest.mark.parametrize("T", [1, 7, 31])
def test_fft_convolution_has_the_gradients_of_the_direct_sum(T: int) -> None:
    """fla's check: the fast op against its naive form on outputs and on both inputs' gradients."""
    g = torch.Generator().manual_seed(T)
    u = torch.randn(2, 3, T, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(3, T, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 3, T, generator=g, dtype=torch.float64)
    fast = torch.autograd.grad((fft_causal_conv(u, k) * w).sum(), (u, k))
    slow = torch.autograd.grad((naive_causal_conv(u, k) * w).sum(), (u, k))
    for name, f, s in zip(("du", "dk"), fast, slow, strict=True):
        torch.testing.assert_close(f, s, atol=1e-12, rtol=1e-10, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("T", [1, 2, 7, 16, 31, 64])
def test_fft_convolution_equals_the_direct_sum(T: int) -> None:
    g = torch.Generator().manual_seed(T)
    u = torch.randn(2, 3, T, generator=g, dtype=torch.float64)
    k = torch.randn(3, T, generator=g, dtype=torch.float64)
    torch.testing.assert_close(fft_causal_conv(u, k), direct_causal_conv(u, k), atol=1e-12, rtol=1e-12)
    # float32 inputs run in float32 and come back float32; bf16 ones run in float32 too
    y32 = fft_causal_conv(u.float(), k.float())
    assert y32.dtype == torch.float32
    torch.testing.assert_close(y32.double(), direct_causal_conv(u, k), atol=1e-4, rtol=1e-4)
    assert fft_causal_conv(u.bfloat16(), k.float()).dtype == torch.bfloat16


@pytest.mark.parametrize("T", [1, 6, 13])
def test_hand_written_backward_passes_gradcheck(T: int) -> None:
    g = torch.Generator().manual_seed(T)
    u = torch.randn(2, 3, T, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(3, T, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(CausalFFTConv.apply, (u, k))
    # and it agrees with autograd through the plain FFT path
    y = CausalFFTConv.apply(u, k)
    plain = torch.fft.irfft(torch.fft.rfft(u, n=2 * T) * torch.fft.rfft(k, n=2 * T), n=2 * T)[..., :T]
    w = torch.randn_like(y)
    for a, b in zip(torch.autograd.grad(y, (u, k), w), torch.autograd.grad(plain, (u, k), w), strict=True):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("T", [1, 5, 16, L])
@pytest.mark.parametrize("options", [{}, {"order": 3, "filter_order": 8, "emb_dim": 5}], ids=["o2", "o3"])
def test_block_equals_its_reference(T: int, options: dict) -> None:
    b = block(double=True, **options)
    with torch.no_grad():
        for p in b.parameters():  # off the identity short filter, onto visible filters
            p.normal_(0.0, 0.4)
        x = torch.randn(2, T, D, dtype=torch.float64)
        ref = torch.stack([b.reference_forward(x[i]) for i in range(2)])
        torch.testing.assert_close(b(x), ref, atol=1e-10, rtol=1e-9)


def test_the_filters_are_windowed_and_made_for_the_current_length() -> None:
    b = block(double=True)
    with torch.no_grad():
        h = b.filters(L)  # (N-1, d, T)
        assert h.shape == (1, D, L)
        torch.testing.assert_close(b.filters(7), h[..., :7])  # a prefix of the longer one
        torch.testing.assert_close(h.permute(0, 2, 1), b.reference_filters(L), atol=1e-12, rtol=1e-10)
        # A network whose output is 1 everywhere leaves the window: exp(-|delta_c| t / (L-1)),
        # channel 0 down to 1e-2 ** (1 / 1.5) at the last lag, channel d-1 to 1e-2 ** (1 / 0.3).
        for name, p in b.named_parameters():
            if name.startswith("filter_") and name != "filter_freq":
                p.zero_()
            if name.endswith("_bias"):
                p.fill_(math.pi / 2)  # sin(pi / 2) = 1
        b.filter_out.fill_(1.0 / b.opts.filter_order)
        h = b.filters(L)[0]  # (d, T)
    torch.testing.assert_close(h[:, 0], torch.ones(D, dtype=torch.float64))
    torch.testing.assert_close(h[0, -1].item(), 1e-2 ** (1 / 1.5))
    torch.testing.assert_close(h[-1, -1].item(), 1e-2 ** (1 / 0.3))
    assert (h[:, 1:] < h[:, :-1]).all() and (h[1:, 1:] < h[:-1, 1:]).all()  # decays in t, faster in c


def test_causal_a_change_at_t_changes_nothing_before_t() -> None:
    b = block().eval()
    x = torch.randn(2, L, D)
    with torch.no_grad():
        y = b(x)
        for t in (0, 5, L - 1):
            x2 = x.clone()
            x2[:, t] += 1.0
            y2 = b(x2)
            torch.testing.assert_close(y2[:, :t], y[:, :t], atol=1e-6, rtol=0)
            assert not torch.allclose(y2[:, t], y[:, t])
            if t < L - 1:
                assert not torch.allclose(y2[:, -1], y[:, -1])  # the long filter reaches the end


def test_rope_and_alibi_leave_it_alone() -> None:
    """No queries or keys: the model's rotary or ALiBi positions change nothing (as for synth_random)."""
    x = torch.randn(2, 10, D)
    plain = block()
    for dims in (Dims(D, H, L, rope_base=100.0), Dims(D, H, L, alibi=True)):
        other = block(dims)
        other.load_state_dict(plain.state_dict())
        with torch.no_grad():
            assert torch.equal(other(x), plain(x))


def test_bf16_autocast_gives_finite_gradients() -> None:
    b = block()
    x = torch.randn(2, L, D, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = b(x)
    assert y.dtype == torch.bfloat16
    (y.float() * torch.randn(y.shape)).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    for name, p in b.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    with torch.no_grad():  # and close to float32
        y32 = b(x)
    assert (y.float() - y32).abs().max() < 0.05 * y32.abs().max()


def test_it_trains_in_a_language_model() -> None:
    arch = nas.ArchConfig.from_dict(
        {
            "d_model": 32,
            "n_heads": 4,
            "max_len": 32,
            "vocab_size": 16,
            "layers": {"repeat": 2, "attention": {"type": "hyena", "filter_order": 16}},
        }
    )
    torch.manual_seed(0)
    model = nas.build_model(arch)
    # the model's GPT-2 init (nn.Linear only) leaves the filter network at its own init
    hy = model.layers[0].attn
    assert hy.filter_in.abs().max() > 0.1 and torch.equal(hy.filter_freq, torch.ones_like(hy.filter_freq))
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 16, (8, 33), generator=g)
    idx[:, 1::2] = (idx[:, 0::2][:, :16] * 3 + 1) % 16  # every odd token follows from the one before
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = F.cross_entropy(model(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.8 * losses[0]


# -- accounting ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "options",
    [{}, {"order": 3}, {"filter_order": 16, "emb_dim": 5}, {"order": 4, "filter_order": 4, "emb_dim": 7}],
)
def test_param_count_formula(options: dict) -> None:
    dims = Dims(24, 3, 20)
    b = block(dims, **options)
    assert sum(p.numel() for p in b.parameters()) == BLOCK.count_params(dims, b.opts, FFN)
    d, N, Fw, E = 24, b.opts.order, b.opts.filter_order, b.opts.emb_dim
    filter_net = Fw * E + Fw + 2 * (Fw * Fw + Fw) + Fw * (N - 1) * d + Fw
    block_rest = (N + 2) * d * d + 3 * (N + 1) * d + (N - 1) * d  # projections, short conv, D
    assert BLOCK.count_params(dims, b.opts, FFN) == block_rest + filter_net


def test_no_decay_names_every_parameter_but_the_projections() -> None:
    b = block(order=3)
    names = {n for n, _ in b.named_parameters()}
    assert set(BLOCK.no_decay) <= names
    assert names - set(BLOCK.no_decay) == {"in_proj.weight", "out_proj.weight"}


def counted(run: Callable[[], torch.Tensor]) -> tuple[int, int, int]:
    """FLOPs of ``run()`` under the counter, FFTs and complex products counted: forward, backward
    less the convolution's backward, and the convolution's backward."""
    out = []
    with FlopCounterMode(display=False, custom_mapping=COUNTER_FORMULAS) as c:
        out.append(run())
    fwd = c.get_total_flops()
    y = out[0]
    with FlopCounterMode(display=False, custom_mapping=COUNTER_FORMULAS) as c:
        y.backward(torch.randn_like(y))
    counts = c.get_flop_counts()["Global"]
    conv_bwd = counts.pop(torch.ops.aten.convolution_backward, 0)
    return fwd, sum(counts.values()), conv_bwd


@pytest.mark.parametrize("T", [1, 9, 32])
@pytest.mark.parametrize("options", [{}, {"order": 3, "filter_order": 8}], ids=["o2", "o3"])
def test_flop_formulas_are_exact(T: int, options: dict) -> None:
    dims, batch = Dims(32, 4, 32), 3
    b = block(dims, **options)
    x = torch.randn(batch, T, 32, requires_grad=True)
    fwd, bwd, conv_bwd = counted(lambda: b(x))
    per_token = BLOCK.count_flops(dims, b.opts, FFN, T)
    step = BLOCK.step_flops(dims, b.opts, T)
    C = (b.opts.order + 1) * 32
    conv_true = 2 * 2.0 * 3 * C * batch * T  # the short conv's input and weight gradients
    conv_dense = (2.0 * 3 * C * C + 2.0 * 3 * C) * batch * T  # the counter's: a dense input gradient
    assert conv_bwd in (pytest.approx(conv_true), pytest.approx(conv_dense))
    assert fwd == pytest.approx(per_token.fwd * batch * T + step.fwd, rel=1e-6)
    assert bwd + conv_true == pytest.approx(per_token.bwd * batch * T + step.bwd, rel=1e-6)


def test_flops_per_token_grow_as_log_t_and_the_convention_is_as_documented() -> None:
    dims, opts = Dims(128, 4, 8192), BLOCK.Options()
    d, N = 128, 2
    dense = 2.0 * d * (N + 1) * d + 2.0 * 3 * (N + 1) * d + 2.0 * d * d
    for T in (512, 1024, 8192):
        f = BLOCK.count_flops(dims, opts, FFN, T)
        fft = 10 * torch.log2(torch.tensor(2.0 * T)).item()
        assert f.fwd == pytest.approx(dense + (N - 1) * d * (fft + 6 * (T + 1) / T))
        assert f.bwd == pytest.approx(2 * dense + (N - 1) * d * (fft + 12 * (T + 1) / T))
    mha = nas.ATTENTION.get("mha")
    long = mha.count_flops(dims, mha.Options(), FFN, 8192).fwd
    assert BLOCK.count_flops(dims, opts, FFN, 8192).fwd < long / 10


def test_state_elements() -> None:
    dims = Dims(64, 4, 1024)
    assert BLOCK.state_elements(dims, BLOCK.Options(), 1024) == 64 * 1024 + 2 * 3 * 64
    assert BLOCK.state_elements(dims, BLOCK.Options(order=3), 100) == 2 * 64 * 100 + 2 * 4 * 64


@pytest.mark.parametrize(
    "options, field",
    [
        ({"order": 1}, "order"),
        ({"emb_dim": 4}, "emb_dim"),
        ({"emb_dim": 1}, "emb_dim"),
        ({"filter_order": 0}, "filter_order"),
    ],
)
def test_options_that_cannot_work_are_refused(options: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        BLOCK.Options.parse(options).check(Dims(D, H, L), FFN)
    assert err.value.path == field
