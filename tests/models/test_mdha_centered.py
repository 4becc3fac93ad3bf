"""mdha's ``centered`` convolution: an encoder layer's taps reach both ways; a causal layer refuses it."""

from __future__ import annotations

import math

import pytest
import torch

import nas
from nas.models import Dims, FFNSpec
from nas.models.reference import causal_conv, head, softmax

MDHA = nas.ATTENTION.get("mdha")


def _seq2seq(encoder: dict, decoder: dict) -> dict:
    return {"task": "seq2seq", "d_model": 32, "n_heads": 4, "max_len": 16, "vocab_size": 40,
            "encoder_layers": [{"attention": encoder}], "layers": [{"attention": decoder}]}  # fmt: skip


CENTERED = {"type": "mdha", "kernel": 3, "centered": True}


# A mixture's component is checked as the layer it sits in: a centered mdha inside a mixture of an
# LM layer was accepted, and the model saw the next token through the convolution's taps.
@pytest.mark.parametrize(
    ("attention", "path"),
    [
        (CENTERED, "centered"),
        ({"type": "mixture", "components": ["mha", CENTERED]}, "components.1.centered"),
    ],
    ids=["mdha", "in-a-mixture"],
)
def test_only_an_encoder_layer_may_center_its_convolution(attention: dict, path: str) -> None:
    assert nas.ArchConfig.from_dict(_seq2seq(attention, "mha")).encoder_layers  # an encoder layer may
    for raw in (
        _seq2seq("mha", attention),
        {"d_model": 32, "n_heads": 4, "max_len": 16, "layers": [{"attention": attention}]},
    ):
        with pytest.raises(nas.ConfigError, match="only in an encoder layer") as err:
            nas.ArchConfig.from_dict(raw)
        assert err.value.path == f"layers.0.attention.{path}"
    plain = nas.ArchConfig.from_dict(_seq2seq({"type": "mdha", "kernel": 3}, "mha"))
    assert plain.to_dict()["encoder_layers"][0]["attention"] == {"type": "mdha", "kernel": 3}  # arch_id kept


@pytest.mark.parametrize("kernel", [1, 3, 4])
def test_a_centered_encoder_layer_matches_its_written_out_formula(kernel: int) -> None:
    opts = MDHA.Options.parse({"kernel": kernel, "centered": True})
    assert opts.left == kernel // 2
    torch.manual_seed(0)
    block = MDHA(Dims(16, 2, 8), opts, ffn=FFNSpec()).double()
    block.make_bidirectional()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.4)
        x = torch.randn(2, 7, 16, dtype=torch.float64)
        y = block(x)
        for b in range(2):
            z = causal_conv(x[b] @ block.qkv.weight.T, block.conv_weight, kernel // 2)  # (T, 3C)
            q, k, v = z.split(16, dim=-1)
            out = torch.zeros(7, 16, dtype=torch.float64)
            for h in range(2):
                for i in range(7):
                    logits = torch.stack(
                        [head(q, h, 2)[i] @ head(k, h, 2)[j] / math.sqrt(8) for j in range(7)]
                    )
                    w = softmax(logits)
                    out[i, h * 8 : (h + 1) * 8] = sum(w[j] * head(v, h, 2)[j] for j in range(7))
            torch.testing.assert_close(y[b], out @ block.out_proj.weight.T, atol=1e-10, rtol=1e-9)


def test_the_centered_convolution_starts_as_the_identity_and_looks_ahead() -> None:
    torch.manual_seed(0)
    block = MDHA(Dims(16, 2, 8), MDHA.Options.parse({"kernel": 3, "centered": True}), ffn=FFNSpec())
    w = block.conv_weight.detach()
    assert torch.allclose(w[:, 1], torch.ones_like(w[:, 1]), atol=0.1)  # the current position's tap
    z = torch.zeros(1, 5, w.shape[0])
    z[0, 3] = 1.0  # a signal at position 3 reaches position 2 (one ahead of it) through tap 2
    from nas.models.attention.mdha import causal_depthwise_conv

    y = causal_depthwise_conv(z, w, block.left)
    assert torch.allclose(y[0, 2], w[:, 2]) and torch.allclose(y[0, 4], w[:, 0])
