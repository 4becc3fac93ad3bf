"""The speed paths of the blocks (benchmarks/block_cost.py) compute what the plain paths do.

* The blocks built on ``F.scaled_dot_product_attention`` hand it inputs its
  fused CPU kernel accepts (equal head widths, real strides): run under
  ``sdpa_kernel(FLASH_ATTENTION)``, which raises instead of falling back to
  the unfused math path.
* ``ValueAttention.attend_shared`` (weights shared by the batch) and
  ``Mixture.forward`` (static parts and the mask summed first, weighted logits
  added in place) give the outputs and gradients of the generic
  ``ValueAttention`` path.
"""

from __future__ import annotations

import pytest
import torch
from model_cases import D_MODEL, DIMS, FFN, MAX_LEN, VARIANTS
from torch.nn.attention import SDPBackend, sdpa_kernel

from nas.models.attention.base import ValueAttention
from nas.models.attention.mdha import causal_depthwise_conv


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
    "key", ["synth_random", "synth_fixed_random", "synth_factorized_random", "mixture", "mixture-fixed",
            "mixture-random"]
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
