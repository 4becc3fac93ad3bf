"""Every registered block trains on CUDA in bf16 autocast at long contexts; mha takes the fused kernels."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from gpu_archs import block_arch
from torch.nn.attention import SDPBackend, sdpa_kernel

import nas

BLOCKS = nas.ATTENTION.names()


def _loss_and_grads(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)  # (B, T, vocab)
    loss = F.cross_entropy(logits.float().flatten(0, 1), x.roll(-1, dims=1).flatten())
    loss.backward()
    return logits.detach(), loss.detach()


@pytest.mark.parametrize("seq_len", [1024, 2048])
@pytest.mark.parametrize("block", BLOCKS)
def test_block_trains_in_bf16(block: str, seq_len: int) -> None:
    torch.manual_seed(0)
    arch = block_arch(block, d_model=256, n_layers=2, n_heads=4, seq_len=seq_len)
    model = nas.build_model(arch).cuda()
    x = torch.randint(0, arch.vocab_size, (2, seq_len), device="cuda")
    logits, loss = _loss_and_grads(model, x)
    assert logits.dtype == torch.bfloat16
    assert logits.shape == (2, seq_len, arch.vocab_size)
    assert torch.isfinite(loss)
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("block", BLOCKS)
def test_block_is_causal_on_cuda(block: str) -> None:
    """Changing the last half of a sequence leaves the first half's logits unchanged."""
    torch.manual_seed(0)
    T = 1024
    model = nas.build_model(block_arch(block, d_model=128, n_layers=2, n_heads=4, seq_len=T)).cuda().eval()
    x = torch.randint(0, 256, (1, T), device="cuda")
    y = x.clone()
    y[:, T // 2 :] = torch.randint(0, 256, (1, T - T // 2), device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        a, b = model(x)[:, : T // 2].float(), model(y)[:, : T // 2].float()
    torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2)


def test_mha_uses_flash_or_efficient_kernels() -> None:
    """With the math fallback forbidden, vanilla attention still runs: it takes a fused kernel."""
    torch.manual_seed(0)
    arch = block_arch("mha", d_model=256, n_layers=2, n_heads=4, seq_len=1024)
    model = nas.build_model(arch).cuda()
    x = torch.randint(0, 256, (2, 1024), device="cuda")
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        _, loss = _loss_and_grads(model, x)
    assert torch.isfinite(loss)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("kv_heads", [0, 2])
def test_sliding_window_through_flex_attention_equals_the_blocked_form(kv_heads: int, compiled: bool) -> None:
    """On CUDA the band runs through FlexAttention; outputs and gradients equal the blocked SDPA form's."""
    from nas.models import Dims, FFNSpec

    block_cls = nas.ATTENTION.get("sliding_window")
    torch.manual_seed(0)
    opts = block_cls.Options(window=256, kv_heads=kv_heads)
    block = block_cls(Dims(256, 4, 2048), opts, ffn=FFNSpec()).cuda()
    x = torch.randn(2, 2048, 256, device="cuda", requires_grad=True)
    outs = []
    for flex in (False, True):
        block.flex = flex
        run = torch.compile(block) if compiled and flex else block
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = run(x)
        (gx,) = torch.autograd.grad(y.float().square().mean(), x)
        outs.append((y.float(), gx))
    for got, want in zip(outs[1], outs[0], strict=True):  # bf16 operands: relative errors of 1e-3 to 1e-2
        assert torch.isfinite(got).all()
        assert ((got - want).norm() / want.norm()).item() < 2e-2
