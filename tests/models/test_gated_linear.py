"""gated_linear: the chunked parallel form equals the recurrence (both gates, rotary positions, lengths
that are no multiple of the chunk), the fixed gate is RetNet's retention, it is causal, it stays finite
under extreme gates, it trains, and its parameter, FLOP and state counts are exact (the contract suite,
generated from the registry, checks the rest at the default options)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import nas
from nas.errors import ConfigError
from nas.models import Dims, FFNSpec
from nas.models.attention.gated_linear import (
    CHUNK,
    GatedLinearAttention,
    chunk_size,
    chunked_gated_linear,
    naive_gated_linear,
    retention_gammas,
)

BLOCK = nas.ATTENTION.get("gated_linear")
FFN = FFNSpec()
D, H, L = 16, 2, 160  # two full chunks of 64 and a partial third


DIMS = Dims(D, H, L)


def block(gate: str = "data", dims: Dims = DIMS, seed: int = 0, double: bool = True) -> GatedLinearAttention:
    torch.manual_seed(seed)
    opts = BLOCK.Options.parse({"gate": gate})
    opts.check(dims, FFN)
    b = BLOCK(dims, opts, ffn=FFN)
    if double:
        b = b.double()
        with torch.no_grad():  # off the special initial values (zero bias, unit norm weight)
            for p in b.parameters():
                p.normal_(0.0, 0.4)
    return b


def seq(T: int, seed: int = 0, B: int = 2, d: int = D, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, d, generator=g, dtype=dtype)


def reference(b: GatedLinearAttention, x: torch.Tensor) -> torch.Tensor:
    return torch.stack([b.reference_forward(x[i]) for i in range(x.shape[0])])


# -- what it is ------------------------------------------------------------------------------
def test_it_is_registered_causal_only_and_not_mixable() -> None:
    assert BLOCK is GatedLinearAttention
    assert not BLOCK.bidirectional and not BLOCK.mixable and not BLOCK.replaces_ffn
    assert BLOCK.describe(BLOCK.Options(), short=True) == "gated_linear(data)"
    assert BLOCK.describe(BLOCK.Options(gate="fixed")) == "gated_linear gate=fixed"
    with pytest.raises(ConfigError):
        block().make_bidirectional()


def test_an_unknown_gate_is_refused() -> None:
    with pytest.raises(ConfigError, match="data, fixed") as err:
        BLOCK.Options.parse({"gate": "learned"}).check(Dims(D, H, L), FFN)
    assert err.value.path == "gate"
    arch = {
        "d_model": D,
        "n_heads": H,
        "max_len": 16,
        "layers": [{"attention": {"type": "gated_linear", "gate": 1}}],
    }
    with pytest.raises(ConfigError):
        nas.ArchConfig.from_dict(arch)


def test_the_decays_are_retnets_and_glas_written_as_numbers() -> None:
    """The fast path and its reference both read ``retention_gammas`` and the gate's constants, so a
    wrong constant would pass every comparison: pin them to the sources' values (REFERENCES 2.6)."""
    assert retention_gammas(4) == [0.96875, 0.984375, 0.9921875, 0.99609375]  # 1 - 2^(-5-h)
    b = block("fixed", Dims(16, 4, 8))
    torch.testing.assert_close(
        b.log_decay(seq(3))[0, :, 0, 0],
        torch.tensor([0.96875, 0.984375, 0.9921875, 0.99609375]).log().double(),
    )
    b = block("data")
    x = seq(5)
    with torch.no_grad():
        z = x @ b.gate_down.weight.T @ b.gate_up.weight.T + b.gate_up.bias  # rank 16, bias on the up map
        want = (-torch.log1p(torch.exp(-z)) / 16).view(2, 5, H, D // H).transpose(1, 2)
        assert b.gate_down.weight.shape == (16, D)
        torch.testing.assert_close(b.log_decay(x), want, atol=1e-12, rtol=1e-12)


def test_chunk_sizes() -> None:
    assert [chunk_size(T) for T in (1, 2, 3, 5, 8, 9, 64, 65, 1000)] == [1, 2, 4, 8, 8, 16, 64, 64, 64]
    assert CHUNK == 64


def test_a_build_on_the_meta_device_leaves_later_builds_real() -> None:
    """Hugging Face's from_pretrained builds on the meta device; the gather indices were a cached
    tensor, so every block built after it in the process got meta indices and could not run."""
    with torch.device("meta"):
        assert block("data", double=False).triangle_64.is_meta
    b = block("data")
    assert not any(t.is_meta for t in b.buffers())
    x = seq(100)
    with torch.no_grad():
        torch.testing.assert_close(b(x), reference(b, x), atol=1e-10, rtol=1e-9)


# -- the chunked form against the recurrence ----------------------------------------------------
@pytest.mark.parametrize("gate", ["data", "fixed"])
@pytest.mark.parametrize("rope", [False, True])
@pytest.mark.parametrize("T", [3, 64, 100, 157])  # inside one chunk, exactly one, 1.6 and 2.5 chunks
def test_chunked_forward_equals_the_recurrence(gate: str, rope: bool, T: int) -> None:
    dims = Dims(D, H, L, rope_base=100.0 if rope else 0.0)
    b = block(gate, dims)
    x = seq(T)
    with torch.no_grad():
        torch.testing.assert_close(b(x), reference(b, x), atol=1e-10, rtol=1e-9)


@pytest.mark.parametrize("T", [1, 5, 64, 150])
def test_chunked_op_has_the_outputs_and_gradients_of_the_naive_recurrence(T: int) -> None:
    """fla's check: the chunked op against its naive form, outputs and the gradients of q, k, v and
    the log-decay, per channel (GLA) and per head (RetNet's shape: one decay for every channel)."""
    g = torch.Generator().manual_seed(T)
    Bq, Hq, dk, dv = 2, 2, 4, 3
    for width in (dk, 1):
        q, k = (torch.randn(Bq, Hq, T, dk, generator=g, dtype=torch.float64) for _ in range(2))
        v = torch.randn(Bq, Hq, T, dv, generator=g, dtype=torch.float64)
        log_decay = -torch.rand(Bq, Hq, T, width, generator=g, dtype=torch.float64)  # decays in (1/e, 1]
        inputs = [t.requires_grad_(True) for t in (q, k, v, log_decay)]
        w = torch.randn(Bq, Hq, T, dv, generator=g, dtype=torch.float64)
        fast_out, slow_out = chunked_gated_linear(*inputs), naive_gated_linear(*inputs)
        torch.testing.assert_close(fast_out, slow_out, atol=1e-10, rtol=1e-9)
        # At T 1 the chunked form never reads the decay (nothing before the first position).
        fast = torch.autograd.grad((fast_out * w).sum(), inputs, allow_unused=True, materialize_grads=True)
        slow = torch.autograd.grad((slow_out * w).sum(), inputs)
        for name, f, s in zip(("dq", "dk", "dv", "dlog_decay"), fast, slow, strict=True):
            torch.testing.assert_close(f, s, atol=1e-10, rtol=1e-9, msg=lambda m, n=name: f"{n}: {m}")


def test_rotary_positions_are_applied() -> None:
    plain, turned = block(), block(dims=Dims(D, H, L, rope_base=100.0))
    turned.load_state_dict(plain.state_dict())
    x = seq(70)
    with torch.no_grad():
        a, b = plain(x), turned(x)
    assert (a - b).abs().max() > 1e-3 * a.abs().max()
    torch.testing.assert_close(a[:, :1], b[:, :1])  # position 0 is not turned


def test_alibi_changes_nothing() -> None:
    plain, alibi = block(), block(dims=Dims(D, H, L, alibi=True))
    alibi.load_state_dict(plain.state_dict())
    x = seq(20)
    with torch.no_grad():
        assert torch.equal(plain(x), alibi(x))


def retention_parallel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """RetNet's parallel form per head: O = ((Q K^T) * D) V, D_nm = gamma_h^(n-m) for n >= m, else 0."""
    H, T = q.shape[1], q.shape[2]
    n = torch.arange(T, dtype=torch.float64)
    dist = n[:, None] - n[None, :]
    D_ = torch.stack(
        [torch.where(dist >= 0, g**dist, torch.zeros(())) for g in retention_gammas(H)]
    )  # (H, T, T)
    return ((q @ k.transpose(-1, -2)) * D_) @ v


@pytest.mark.parametrize("T", [1, 7, 64, 150])
def test_fixed_gate_is_retention(T: int) -> None:
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(2, 4, T, 8, generator=g, dtype=torch.float64) for _ in range(3))
    log_gamma = (
        torch.tensor(retention_gammas(4), dtype=torch.float64).log().view(1, 4, 1, 1).expand(1, 4, T, 1)
    )
    torch.testing.assert_close(
        chunked_gated_linear(q, k, v, log_gamma), retention_parallel(q, k, v), atol=1e-11, rtol=1e-10
    )


def test_fixed_gate_block_is_retention_then_norm_gate_and_projection() -> None:
    b, T = block("fixed", Dims(32, 4, L, rope_base=50.0)), 130
    x = seq(T, d=32)
    with torch.no_grad():
        q, k, v, gate = b.proj(x).split(b.widths, dim=-1)
        q, k, v = (t.view(2, T, 4, 8).transpose(1, 2) for t in (q, k, v))
        q, k = b.rotary(q) / math.sqrt(8), b.rotary(k)
        o = retention_parallel(q, k, v).transpose(1, 2)  # (B, T, H, dv)
        o = o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + 1e-5) * b.norm.weight
        want = b.out_proj((o * F.silu(gate.view(2, T, 4, 8))).flatten(2))
        torch.testing.assert_close(b(x), want, atol=1e-10, rtol=1e-9)
    assert not hasattr(b, "gate_down")  # no gate parameters
    assert "log_gamma" not in b.state_dict()


@pytest.mark.parametrize("gate", ["data", "fixed"])
def test_it_is_causal_across_chunks(gate: str) -> None:
    b, T = block(gate), 150
    x = seq(T)
    with torch.no_grad():
        y = b(x)
        for t in (0, 5, 63, 64, 100, 149):
            x2 = x.clone()
            x2[:, t] += torch.randn(2, D, dtype=torch.float64)
            y2 = b(x2)
            torch.testing.assert_close(y2[:, :t], y[:, :t], atol=1e-12, rtol=0)
            assert not torch.allclose(y2[:, t], y[:, t])
        for T2 in (1, 63, 64, 65, 129):  # a prefix alone gives the same outputs
            torch.testing.assert_close(b(x[:, :T2]), y[:, :T2], atol=1e-12, rtol=1e-10)


# -- numerics --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_very_negative_gates_stay_finite_and_forget(dtype: torch.dtype) -> None:
    """logsigmoid(-1e4) / 16: a log-decay of -625 per step, -40000 over a chunk, where the factorised
    form q exp(b) . k exp(-b) overflows.  With no memory left, o_t = (q_t . k_t) v_t / sqrt(d_k)."""
    b, T = block(double=False), 150
    b = b.to(dtype)
    with torch.no_grad():
        b.gate_up.bias.fill_(-1e4)
    x = seq(T, dtype=dtype).requires_grad_(True)
    y = b(x)
    y.square().mean().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()
    for name, p in b.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    with torch.no_grad():
        q, k, v, gate = b.proj(x).split(b.widths, dim=-1)
        q, k, v = (t.view(2, T, H, D // H) for t in (q, k, v))
        o = (q * k).sum(-1, keepdim=True) * v / math.sqrt(D // H)
        o = b.norm(o)
        want = b.out_proj((o * F.silu(gate.view(2, T, H, D // H))).flatten(2))
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(y, want, atol=tol, rtol=tol)


@pytest.mark.parametrize("gate", ["data", "fixed"])
def test_bf16_autocast_keeps_decays_in_float32_and_stays_finite(gate: str) -> None:
    b, T = block(gate, Dims(32, 4, 256), double=False), 200
    x = seq(T, B=2, d=32, dtype=torch.float32).requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert b.log_decay(x).dtype == torch.float32
        y = b(x)
    assert y.dtype == torch.bfloat16
    y.float().square().mean().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()
    with torch.no_grad():
        want = b(x)
    torch.testing.assert_close(y.float(), want, atol=0.05, rtol=0.05)


# -- it learns ------------------------------------------------------------------------------------
@pytest.mark.parametrize("gate", ["data", "fixed"])
def test_it_trains_in_a_language_model(gate: str) -> None:
    raw = {"d_model": 32, "n_heads": 4, "max_len": 96, "vocab_size": 16, "pos_encoding": "rope",
           "layers": {"repeat": 2, "attention": {"type": "gated_linear", "gate": gate}}}  # fmt: skip
    torch.manual_seed(0)
    model = nas.build_model(nas.ArchConfig.from_dict(raw))
    g = torch.Generator().manual_seed(0)
    pattern = torch.randint(0, 16, (8, 12), generator=g)
    idx = pattern.repeat(1, 8)  # (8, 96): each row repeats its own 12 tokens; 84 of 96 are predictable
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(25):
        opt.zero_grad()
        loss = F.cross_entropy(model(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.7 * losses[0], losses


# -- sizes ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("gate", ["data", "fixed"])
def test_param_count(gate: str) -> None:
    for dims in (Dims(D, H, L), Dims(64, 8, 32), Dims(128, 4, 128, rope_base=1e4)):
        b = block(gate, dims, double=False)
        d = dims.d_model
        want = 5 * d * d + dims.d_head + (2 * 16 * d + d if gate == "data" else 0)
        assert sum(p.numel() for p in b.parameters()) == want == BLOCK.count_params(dims, b.opts, FFN)


@pytest.mark.parametrize("gate", ["data", "fixed"])
@pytest.mark.parametrize("T", [1, 5, 64, 100, 160])
def test_flops_match_the_counter_over_several_chunks(gate: str, T: int) -> None:
    dims = Dims(D, H, L)
    b = block(gate, dims, double=False)
    x = seq(T, dtype=torch.float32).requires_grad_(True)
    counter = FlopCounterMode(display=False)
    with counter:
        y = b(x)
    fwd = counter.get_total_flops()
    counter = FlopCounterMode(display=False)
    with counter:
        y.backward(torch.randn_like(y))
    bwd = counter.get_total_flops()
    expected = BLOCK.count_flops(dims, b.opts, FFN, T)
    n = 2 * T
    assert fwd == pytest.approx(expected.fwd * n, rel=1e-9)
    assert bwd == pytest.approx(expected.bwd * n, rel=1e-9)


def test_flops_per_token_are_constant_in_the_sequence_length() -> None:
    dims, opts = Dims(128, 4, 8192), BLOCK.Options()
    per_token = [BLOCK.count_flops(dims, opts, FFN, T).fwd for T in (1024, 2048, 4096, 8192)]
    assert max(per_token) / min(per_token) < 1.01
    mha = nas.ATTENTION.get("mha")
    assert mha.count_flops(dims, mha.Options(), FFN, 8192).fwd > 10 * per_token[-1]


def test_state_elements_do_not_grow_with_the_sequence() -> None:
    dims = Dims(128, 4, 4096)
    for gate in ("data", "fixed"):
        opts = BLOCK.Options(gate=gate)
        assert {BLOCK.state_elements(dims, opts, T) for T in (1, 128, 4096)} == {4 * 32 * 32}
