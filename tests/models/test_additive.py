"""``additive``'s hand-written backward and its chunking (the contract suite checks the rest)."""

from __future__ import annotations

import pytest
import torch
from model_cases import DIMS, FFN

from nas.models.attention import additive
from nas.models.attention.additive import AdditiveAttention, AdditiveOptions, PairLogits


def test_pair_logits_gradient_matches_finite_differences() -> None:
    torch.manual_seed(0)
    q = torch.randn(2, 3, 5, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 3, 5, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(3, 4, 1, dtype=torch.float64, requires_grad=True)
    for chunk in (1, 2, 5):  # chunks that divide T, that do not, and one chunk for every query
        assert torch.autograd.gradcheck(lambda q, k, v, c=chunk: PairLogits.apply(q, k, v, c), (q, k, v))


def test_chunk_size_changes_neither_logits_nor_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    block = AdditiveAttention(DIMS, AdditiveOptions(d_a=8), ffn=FFN).double()
    x = torch.randn(2, DIMS.max_len, DIMS.d_model, dtype=torch.float64)

    def run() -> tuple[torch.Tensor, list[torch.Tensor]]:
        block.zero_grad()
        y = block(x)
        y.square().sum().backward()
        return y.detach(), [p.grad.clone() for p in block.parameters()]

    whole, whole_grads = run()  # at the test sizes one chunk holds every query
    monkeypatch.setattr(additive, "CHUNK_ELEMENTS", 2 * DIMS.n_heads * DIMS.max_len * 8 * 3)  # 3 queries
    chunked, chunked_grads = run()
    torch.testing.assert_close(chunked, whole)
    for a, b in zip(chunked_grads, whole_grads, strict=True):
        torch.testing.assert_close(a, b)
