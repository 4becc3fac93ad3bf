"""Transformer++ (RoPE, RMSNorm, SwiGLU, grouped key/value heads, no biases) against Hugging Face's Llama.

The canonical implementation, built from a config (nothing downloaded), is given our weights;
the logits must agree to 1e-5.  Our RoPE pairs channel c with c + d_head/2 (Hugging Face's
half-split convention), so the Q and K weights map over unpermuted.
"""

from __future__ import annotations

import math

import pytest
import torch
import yaml

import nas
from nas.models import ArchConfig, build_model
from nas.models.cost import compute
from nas.models.ffn import ffn_width
from nas.models.norms import RMSNorm
from nas.models.rotary import reference_rotate, rotary_tables, rotate

transformers = pytest.importorskip("transformers")  # a test extra: pip install -e '.[test]'

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _arch(kv_heads: int, activation: str = "swiglu", **extra) -> ArchConfig:
    attention = {"type": "mha", "kv_heads": kv_heads} if kv_heads else "mha"
    return ArchConfig.from_dict({
        "vocab_size": 97, "d_model": 64, "n_heads": 4, "max_len": 32, "pos_encoding": "rope",
        "norm": "rmsnorm", "tie_embeddings": True, **extra,
        "layers": {"repeat": 2, "attention": attention, "ffn": {"activation": activation, "mult": 4}},
    })  # fmt: skip


def _llama(arch: ArchConfig, kv_heads: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    d = arch.d_model
    config = LlamaConfig(
        vocab_size=arch.vocab_size,
        hidden_size=d,
        intermediate_size=ffn_width(d, 4, "swiglu"),
        num_hidden_layers=arch.n_layers,
        num_attention_heads=arch.n_heads,
        num_key_value_heads=kv_heads or arch.n_heads,
        max_position_embeddings=arch.max_len,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        attention_bias=False,
        mlp_bias=False,
        rope_theta=arch.rope_base,
        hidden_act="silu",
    )
    config.rope_parameters = {"rope_type": "default", "rope_theta": arch.rope_base}
    config._attn_implementation = "eager"
    return LlamaForCausalLM(config)


def _copy_weights(ours: torch.nn.Module, llama) -> None:
    m = llama.model
    with torch.no_grad():
        m.embed_tokens.weight.copy_(ours.tok_emb.weight)
        for layer, theirs in zip(ours.layers, m.layers, strict=True):
            att = theirs.self_attn
            q, k, v = layer.attn.qkv.weight.split(layer.attn.widths, dim=0)
            att.q_proj.weight.copy_(q)
            att.k_proj.weight.copy_(k)
            att.v_proj.weight.copy_(v)
            att.o_proj.weight.copy_(layer.attn.out_proj.weight)
            theirs.input_layernorm.weight.copy_(layer.ln_attn.weight)
            theirs.post_attention_layernorm.weight.copy_(layer.ln_ffn.weight)
            gate, up = layer.ffn.fc_in.weight.chunk(2, dim=0)
            theirs.mlp.gate_proj.weight.copy_(gate)
            theirs.mlp.up_proj.weight.copy_(up)
            theirs.mlp.down_proj.weight.copy_(layer.ffn.fc_out.weight)
        m.norm.weight.copy_(ours.ln_f.weight)


@pytest.mark.parametrize("kv_heads", [0, 2, 1])  # one key/value head per query head, grouped, multi-query
def test_logits_equal_hugging_faces_llama_given_the_same_weights(kv_heads: int) -> None:
    torch.manual_seed(0)
    arch = _arch(kv_heads)
    ours = build_model(arch).double().eval()
    for p in ours.parameters():  # norms start at exactly 1: move them so that a missed weight shows
        if p.dim() == 1:
            p.data.uniform_(0.5, 1.5)
    llama = _llama(arch, kv_heads).double().eval()
    _copy_weights(ours, llama)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in llama.parameters())
    assert compute(arch).params == sum(p.numel() for p in llama.parameters())
    idx = torch.randint(0, arch.vocab_size, (3, arch.max_len))
    with torch.no_grad():
        want = llama(input_ids=idx).logits
        got = ours(idx)
    assert want.shape == got.shape
    assert (got - want).abs().max().item() < 1e-5


def test_rotary_positions_make_scores_depend_on_the_offset_only() -> None:
    cos, sin = rotary_tables(16, 8, 10000.0)
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    qs = rotate(q.expand(16, 8).clone(), cos.double(), sin.double())
    ks = rotate(k.expand(16, 8).clone(), cos.double(), sin.double())
    s = qs @ ks.T  # s[i, j] = q at position i . k at position j
    for offset in range(-3, 4):
        diag = torch.diagonal(s, offset)
        assert torch.allclose(diag, diag[0].expand_as(diag), atol=1e-12)
    # the loop reference turns the same pairs by the same angles
    x = torch.randn(16, 16, dtype=torch.float64)  # (T, 2 heads x dh 8)
    fast = (
        rotate(x.view(16, 2, 8).transpose(0, 1), cos.double(), sin.double()).transpose(0, 1).reshape(16, 16)
    )
    assert torch.allclose(fast, reference_rotate(x, 2, 10000.0), atol=1e-12)
    assert torch.allclose(qs[0], q)  # position 0 is not turned


def test_rmsnorm_is_llamas_formula() -> None:
    norm = RMSNorm(6)
    norm.weight.data = torch.arange(1.0, 7.0)
    x = torch.randn(2, 6)
    want = norm.weight * x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)
    assert torch.allclose(norm(x), want, atol=1e-6)


def test_a_gated_ffn_has_the_parameters_of_the_ungated_one_of_the_same_mult() -> None:
    from nas.models.ffn import FeedForward

    d = 128
    assert ffn_width(d, 4, "swiglu") == round(d * 4 * 2 / 3) == 341
    gated = sum(p.numel() for p in FeedForward(d, ffn_width(d, 4, "swiglu"), "swiglu").parameters())
    plain = sum(p.numel() for p in FeedForward(d, ffn_width(d, 4, "relu"), "relu").parameters())
    assert gated == 3 * 128 * 341 and plain == 2 * 128 * 512
    assert math.isclose(gated, plain, rel_tol=0.002)
    models = (
        compute(_arch(0, "swiglu")).non_embedding_params,
        compute(_arch(0, "relu")).non_embedding_params,
    )
    assert math.isclose(*models, rel_tol=0.01)


def test_the_shipped_transformer_pp_is_the_vanilla_shape_with_todays_components() -> None:
    pp = nas.load_arch(ROOT / "examples/archs/transformer_pp.yaml")
    vanilla = nas.load_arch(ROOT / "examples/archs/vanilla.yaml")
    assert (pp.d_model, pp.n_heads, pp.n_layers, pp.max_len) == (
        vanilla.d_model,
        vanilla.n_heads,
        vanilla.n_layers,
        vanilla.max_len,
    )
    assert (pp.pos_encoding, pp.norm, pp.layers[0].ffn.activation) == ("rope", "rmsnorm", "swiglu")
    raw = yaml.safe_load((ROOT / "examples/archs/transformer_pp.yaml").read_text())["arch"]
    assert ArchConfig.from_dict(pp.to_dict()) == pp and raw["rope_base"] == 10000.0


def test_fields_added_later_leave_older_architectures_unchanged() -> None:
    """An architecture without the new fields keeps its dict, so its arch_id (and the studies keyed on it)."""
    vanilla = nas.load_arch(ROOT / "examples/archs/vanilla.yaml")
    assert set(vanilla.to_dict()) == {"vocab_size", "d_model", "n_heads", "max_len", "pos_encoding",
                                      "tie_embeddings", "layers"}  # fmt: skip
    assert vanilla.to_dict()["layers"][0]["attention"] == {"type": "mha"}
    assert vanilla.arch_id == "eecb426b1c13"


def test_alibi_slopes_are_the_papers() -> None:
    """Press et al.'s ``get_slopes``: 2^(-8h/n) for a power of two; else the power of two below, then
    every other slope of twice as many heads (REFERENCES 2.5)."""
    from nas.models.rotary import alibi_bias, alibi_slopes

    assert alibi_slopes(8) == [2.0 ** -(h + 1) for h in range(8)]  # 1/2 ... 1/256
    assert alibi_slopes(4) == [2.0 ** -(2 * (h + 1)) for h in range(4)]
    assert alibi_slopes(6) == alibi_slopes(4) + [2.0**-1, 2.0**-3]  # slopes(8)[0::2][:2]
    bias = alibi_bias(2, 3)
    assert alibi_slopes(2) == [2.0**-4, 2.0**-8]
    assert bias[0].tolist() == [[0.0, -0.0625, -0.125], [-0.0625, 0.0, -0.0625], [-0.125, -0.0625, 0.0]]
