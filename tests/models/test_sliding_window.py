"""sliding_window: the blocked, linear-time path equals attention under a dense band mask."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import nas
from nas.models import Dims, FFNSpec
from nas.models.rotary import alibi_bias

BLOCK = nas.ATTENTION.get("sliding_window")


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [0, 2])
@pytest.mark.parametrize("T", [3, 5, 23, 25])  # shorter than, as long as, and not a multiple of the window
@pytest.mark.parametrize("alibi", [False, True])
def test_blocked_path_equals_a_dense_band(causal: bool, kv_heads: int, T: int, alibi: bool) -> None:
    torch.manual_seed(0)
    dims = Dims(32, 4, 40, alibi=alibi)
    block = BLOCK(dims, BLOCK.Options(window=5, kv_heads=kv_heads), ffn=FFNSpec()).double()
    if not causal:
        block.make_bidirectional()
    x = torch.randn(2, T, 32, dtype=torch.float64)
    q, k, v = block.heads(x)
    k, v = block._every_head(k), block._every_head(v)
    offset = torch.arange(T)[:, None] - torch.arange(T)[None, :]  # query minus key position
    band = (offset.abs() < 5) & ((offset >= 0) if causal else True)
    mask = alibi_bias(4, T).double().masked_fill(~band, float("-inf")) if alibi else band
    want = block.out_proj(block.merge_heads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)))
    torch.testing.assert_close(block(x), want, atol=1e-12, rtol=1e-12)


def test_a_token_beyond_the_window_changes_nothing() -> None:
    torch.manual_seed(0)
    block = BLOCK(Dims(32, 4, 64), BLOCK.Options(window=4), ffn=FFNSpec()).double()
    x = torch.randn(1, 40, 32, dtype=torch.float64)
    changed = x.clone()
    changed[:, 10] += 1.0
    y, y2 = block(x), block(changed)
    assert torch.equal(y[:, :10], y2[:, :10])  # causal
    assert not torch.allclose(y[:, 10:14], y2[:, 10:14])  # inside the window
    assert torch.allclose(y[:, 14:], y2[:, 14:], atol=1e-12)  # beyond it


def test_its_flops_grow_linearly_with_the_sequence_and_equal_mhas_within_one_window() -> None:
    dims, ffn = Dims(64, 4, 8192), FFNSpec()
    mha = nas.ATTENTION.get("mha")
    opts = BLOCK.Options(window=128)
    assert BLOCK.count_flops(dims, opts, ffn, 128) == mha.count_flops(dims, mha.Options(), ffn, 128)
    per_token = [BLOCK.count_flops(dims, opts, ffn, T).fwd for T in (1024, 2048, 4096, 8192)]
    assert max(per_token) == pytest.approx(min(per_token))  # per token: constant in T
    assert mha.count_flops(dims, mha.Options(), ffn, 8192).fwd > 8 * per_token[0]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [0, 2])
@pytest.mark.parametrize("T", [5, 23, 300])  # within a window, a few, and more than one 128-tile
def test_the_flex_attention_path_equals_the_blocked_path(causal: bool, kv_heads: int, T: int) -> None:
    """CUDA takes FlexAttention (tiles outside the band skipped); forward here, where FlexAttention has
    no backward, and forward and backward compiled in tests/gpu."""
    torch.manual_seed(0)
    block = BLOCK(Dims(32, 4, 400), BLOCK.Options(window=5, kv_heads=kv_heads), ffn=FFNSpec()).double()
    if not causal:
        block.make_bidirectional()
    x = torch.randn(2, T, 32, dtype=torch.float64)
    with torch.no_grad():
        block.flex = False
        blocked = block(x)
        block.flex = True
        flex = block(x)
    torch.testing.assert_close(flex, blocked, atol=1e-10, rtol=1e-10)


def test_flex_attention_is_taken_on_cuda_only_and_never_with_padding_or_alibi() -> None:
    block = BLOCK(Dims(32, 4, 64), BLOCK.Options(window=4), ffn=FFNSpec())
    q = torch.zeros(1, 4, 8, 8)
    assert not block.use_flex(q, None)  # CPU: FlexAttention has no backward here
    block.flex = True  # as on CUDA
    assert block.use_flex(q, None) and not block.use_flex(q, torch.ones(1, 8, dtype=torch.bool))
    alibi = BLOCK(Dims(32, 4, 64, alibi=True), BLOCK.Options(window=4), ffn=FFNSpec())
    alibi.flex = True
    assert not alibi.use_flex(q, None)
