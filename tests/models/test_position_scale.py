"""Positions that do not drown the tokens: at initialisation the sinusoidal table's RMS equals the
token embeddings' (ratio 1.0; it was 35 before the table was scaled, the token then under 0.1% of
the first layer's input), as a learned table's does."""

from __future__ import annotations

import pytest
import torch

import nas
from nas.models.model import EMBED_STD, SINUSOIDAL_SCALE, sinusoidal_table


def _rms(t: torch.Tensor) -> float:
    return t.pow(2).mean().sqrt().item()


@pytest.mark.parametrize("pos_encoding", ["sinusoidal", "learned"])
@pytest.mark.parametrize("d_model", [64, 128, 256])
def test_the_position_table_starts_at_the_token_embeddings_scale(pos_encoding: str, d_model: int) -> None:
    arch = nas.ArchConfig.from_dict(
        {
            "d_model": d_model,
            "n_heads": 4,
            "max_len": 128,
            "vocab_size": 256,
            "pos_encoding": pos_encoding,
            "layers": {"repeat": 1, "attention": "mha"},
        }
    )
    torch.manual_seed(0)
    model = nas.build_model(arch)
    ratio = _rms(model.pos_emb) / _rms(model.tok_emb.weight)
    assert ratio == pytest.approx(1.0, abs=0.05)  # the ratio at initialisation: 1.0 (35.4 unscaled)
    # the token's share of the first layer's input energy: about half (it was 0.08%)
    x = model.tok_emb.weight[:128] + model.pos_emb
    share = model.tok_emb.weight[:128].pow(2).sum() / x.pow(2).sum()
    assert 0.4 < share.item() < 0.6


def test_the_unscaled_table_would_swamp_the_tokens() -> None:
    """What the scale corrects: the table itself has RMS sqrt(1/2), 35 times the embeddings' 0.02."""
    table = sinusoidal_table(128, 128)
    assert _rms(table) == pytest.approx(0.5**0.5, rel=1e-6)
    assert _rms(table) / EMBED_STD == pytest.approx(35.36, rel=1e-3)
    assert _rms(table * SINUSOIDAL_SCALE) == pytest.approx(EMBED_STD, rel=1e-6)
