"""Source padding is masked in the encoder: no block that can be an encoder layer attends to it, so a
source's encoding does not depend on how much padding follows it (it did, by 0.2 to 2.6 in logits)."""

from __future__ import annotations

import pytest
import torch

import nas
from nas.models.attention import ATTENTION

#: every block that can be an encoder layer, and a mixture whose parts all fuse (mixture's SDPA path)
ENCODER_BLOCKS = [n for n in ATTENTION.names() if ATTENTION.get(n).bidirectional] + ["mixture-fused"]
CENTERED = {"type": "mdha", "kernel": 3, "centered": True}
OPTIONS = {
    "sliding_window": {"window": 3},
    "mdha": CENTERED,
    # every mixable block, mdha's convolution centered (it reads the position after the last real token)
    "mixture": {
        "components": [
            CENTERED if n == "mdha" else n for n in ATTENTION.get("mixture").example_options()["components"]
        ]
    },
    "mixture-fused": {"type": "mixture", "components": ["mha", CENTERED, "synth_dense"]},
}
VOCAB, PAD = 40, 37  # the pad id: the vocabulary's third-from-last (nas.data.ParallelCorpus' layout)


def _model(name: str, pos_encoding: str) -> torch.nn.Module:
    block = OPTIONS.get(name, {}).get("type", name)
    attention = {"type": block, **ATTENTION.get(block).example_options(), **OPTIONS.get(name, {})}
    arch = nas.ArchConfig.from_dict(
        {
            "task": "seq2seq",
            "d_model": 32,
            "n_heads": 4,
            "max_len": 16,
            "vocab_size": VOCAB,
            "pos_encoding": pos_encoding,
            "encoder_layers": [{"attention": attention}, {"attention": attention}],
            "layers": [{"attention": "mha"}],
        }
    )
    torch.manual_seed(0)
    return nas.build_model(arch).double().eval()


@pytest.mark.parametrize("pos_encoding", ["learned", "alibi"])
@pytest.mark.parametrize("name", ENCODER_BLOCKS)
def test_a_sources_encoding_does_not_depend_on_its_padding(name: str, pos_encoding: str) -> None:
    model = _model(name, pos_encoding)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(0, 30, (2, 7), generator=g)
    short = torch.cat([src, torch.full((2, 2), PAD)], dim=1)  # 7 real tokens, 2 of padding
    long = torch.cat([src, torch.full((2, 9), PAD)], dim=1)  # the same, 9 of padding
    with torch.no_grad():
        a, keep_a = model.encode(short)
        b, _ = model.encode(long)
        alone, _ = model.encode(src)  # no padding at all: no mask
        torch.testing.assert_close(a[:, :7], b[:, :7], atol=1e-10, rtol=1e-9)
        torch.testing.assert_close(a[:, :7], alone, atol=1e-10, rtol=1e-9)
        assert keep_a[:, :7].all() and not keep_a[:, 7:].any()
        tgt = torch.randint(0, 30, (2, 5), generator=g)
        torch.testing.assert_close(
            model.decode(a, keep_a, tgt), model.decode(b, model.encode(long)[1], tgt), atol=1e-10, rtol=1e-9
        )


def test_without_padding_the_encoder_runs_its_unmasked_paths() -> None:
    """A source with no padding gets no mask: the blocks take the same fused paths as before."""
    model = _model("mha", "learned")
    seen = []
    model.encoder[0].attn.register_forward_pre_hook(lambda _m, args: seen.append(len(args)))
    with torch.no_grad():
        model.encode(torch.randint(0, 30, (2, 9)))
        model.encode(torch.cat([torch.randint(0, 30, (2, 5)), torch.full((2, 4), PAD)], dim=1))
    assert seen == [1, 2]  # (x) without padding, (x, keep) with it
