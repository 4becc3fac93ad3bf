"""nas.compute: parameter and FLOP accounting as documented (the counter cross-check is in the contract)."""

from __future__ import annotations

from typing import Any

import pytest
from model_cases import VARIANTS

import nas
from nas import ArchConfig
from nas.models import Flops

D, H, LEN, V = 32, 4, 16, 64


def arch(layers: Any = None, **top: Any) -> ArchConfig:
    raw = {
        "d_model": D,
        "n_heads": H,
        "max_len": LEN,
        "vocab_size": V,
        "layers": layers or [{"attention": "mha"}],
    }
    raw.update(top)
    return ArchConfig.from_dict(raw)


def mha_layers(n: int, **ffn: Any) -> dict[str, Any]:
    return {"repeat": n, "attention": "mha", "ffn": {"activation": "relu", "mult": 4, **ffn}}


def test_hand_count_of_a_vanilla_model() -> None:
    c = nas.compute(arch(mha_layers(2)))
    d_ff = 4 * D
    per_layer = 4 * D * D + 2 * D * d_ff + 2 * (2 * D)  # attention, FFN, two LayerNorms
    assert c.params == V * D + LEN * D + 2 * per_layer + 2 * D
    assert c.embedding_params == V * D + LEN * D
    assert c.non_embedding_params == 2 * per_layer + 2 * D
    fwd_layer = 2 * 4 * D * D + 2 * 2 * LEN * D + 2 * 2 * D * d_ff  # projections, QK^T + PV, FFN
    assert c.fwd_flops_per_token == 2 * fwd_layer + 2 * D * V
    assert c.train_flops_per_token == 3 * c.fwd_flops_per_token
    assert c.seq_len == LEN


def test_untied_embeddings_add_the_head() -> None:
    tied, untied = nas.compute(arch()), nas.compute(arch(tie_embeddings=False))
    assert untied.params - tied.params == V * D
    assert untied.embedding_params - tied.embedding_params == V * D
    assert untied.flops == tied.flops  # the head costs the same, shared or not


def test_learned_positions_add_a_table_sinusoidal_none() -> None:
    learned, sinus = nas.compute(arch()), nas.compute(arch(pos_encoding="sinusoidal"))
    assert learned.params - sinus.params == LEN * D
    assert learned.embedding_params - sinus.embedding_params == LEN * D
    assert learned.flops == sinus.flops


def test_flops_grow_linearly_in_layers() -> None:
    fs = [nas.compute(arch(mha_layers(n))).flops for n in range(1, 5)]
    steps = {(b.fwd - a.fwd, b.bwd - a.bwd) for a, b in zip(fs[:-1], fs[1:], strict=True)}
    assert len(steps) == 1
    ps = [nas.compute(arch(mha_layers(n))).params for n in range(1, 5)]
    assert len({b - a for a, b in zip(ps[:-1], ps[1:], strict=True)}) == 1


def test_attention_flops_grow_linearly_in_seq_len() -> None:
    a = arch(mha_layers(3))
    f = {T: nas.compute(a, seq_len=T).fwd_flops_per_token for T in (4, 8, 12)}
    assert f[8] - f[4] == f[12] - f[8] == 3 * 4 * D * 4  # per layer: QK^T and PV, 2*T*d each
    assert nas.compute(a).seq_len == LEN and nas.compute(a, seq_len=8).seq_len == 8


@pytest.mark.parametrize("n_layers", [1, 3])
def test_train_is_three_times_forward_for_mha(n_layers: int) -> None:
    for top in ({}, {"tie_embeddings": False}, {"pos_encoding": "sinusoidal"}):
        c = nas.compute(arch(mha_layers(n_layers, activation="squared_relu", mult=2), **top))
        assert c.flops.bwd == 2 * c.flops.fwd
        assert c.train_flops_per_token == 3 * c.fwd_flops_per_token


@pytest.mark.parametrize(
    "name",
    [
        "mha",
        "mdha",
        "synth_dense",
        "synth_random",
        "synth_factorized_random",
        "synth_factorized_dense",
        "multi_branch",
        "mixture",
    ],
)
def test_blocks_whose_weights_all_train_cost_three_times_forward(name: str) -> None:
    c = nas.compute(arch([{"attention": VARIANTS[name].raw}]))
    assert c.train_flops_per_token == pytest.approx(3 * c.fwd_flops_per_token)


def test_fixed_random_backward_is_cheaper() -> None:
    fixed = nas.compute(arch([{"attention": "synth_fixed_random"}] * 2))
    learned = nas.compute(arch([{"attention": "synth_random"}] * 2))
    assert fixed.flops.fwd == learned.flops.fwd
    # No gradient for the attention weights: each layer skips dP = dY V^T, 2*T*d per token.
    assert learned.flops.bwd - fixed.flops.bwd == 2 * (2 * LEN * D)
    assert fixed.train_flops_per_token < 3 * fixed.fwd_flops_per_token
    # Only the logits are fixed: the parameters are those of synth_random less R.
    assert learned.params - fixed.params == 2 * H * LEN * LEN


def test_fixed_weight_mixture_of_fixed_random_needs_no_weight_gradient() -> None:
    both = {"type": "mixture", "components": ["synth_fixed_random", "synth_fixed_random"], "weights": [1, 1]}
    learned = {**both, "weights": "learned"}
    a, b = nas.compute(arch([{"attention": both}])), nas.compute(arch([{"attention": learned}]))
    assert b.flops.bwd - a.flops.bwd == 2 * LEN * D
    assert b.params - a.params == 2  # the two mixing logits


def test_per_layer_breakdown_sums_to_total_minus_head() -> None:
    layers = [{"attention": v.raw} for v in VARIANTS.values()]
    c = nas.compute(arch(layers))
    assert [name for name, _ in c.per_layer] == [
        nas.AttentionSpec.from_raw(v.raw).type for v in VARIANTS.values()
    ]
    total = sum((f for _, f in c.per_layer), Flops())
    head = Flops.dense(2.0 * D * V)
    assert total.fwd + head.fwd == pytest.approx(c.flops.fwd)
    assert total.bwd + head.bwd == pytest.approx(c.flops.bwd)
    by_block = c.by_block()
    assert set(by_block) == {name for name, _ in c.per_layer}
    assert sum(by_block.values()) == pytest.approx(total.train)


def test_per_layer_matches_one_layer_models() -> None:
    for v in VARIANTS.values():
        one = nas.compute(arch([{"attention": v.raw}]))
        head = Flops.dense(2.0 * D * V)
        assert one.per_layer[0][1].fwd == pytest.approx(one.flops.fwd - head.fwd), v.id


def test_ffn_width_scales_ffn_flops_and_params() -> None:
    a, b = nas.compute(arch(mha_layers(1, mult=2))), nas.compute(arch(mha_layers(1, mult=4)))
    assert b.fwd_flops_per_token - a.fwd_flops_per_token == 4 * D * (2 * D)
    assert b.params - a.params == 2 * D * (2 * D)


def test_multi_branch_replaces_the_ffn() -> None:
    mb = nas.compute(arch([{"attention": "multi_branch"}]))
    mha = nas.compute(arch([{"attention": "mha"}]))
    # multi_branch: W_qkv, per-head W_o, branch FFNs (same total width), kappa and alpha; one LayerNorm.
    assert mb.params - mha.params == 2 * H - 2 * D
    # The same matmuls as mha + FFN, plus the alpha-weighted sum over heads (2*H*d per token).
    assert mb.fwd_flops_per_token - mha.fwd_flops_per_token == 2 * H * D


def test_compute_refuses_nothing_it_can_build() -> None:
    for v in VARIANTS.values():
        for pos in ("learned", "sinusoidal"):
            c = nas.compute(v.arch(n_layers=2, pos_encoding=pos))
            assert c.params > 0 and c.flops.fwd > 0 and c.flops.bwd > 0
