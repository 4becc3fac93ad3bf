"""The encoder-decoder (``task: seq2seq``): configs, bidirectional blocks, the model, its compute."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from nas.errors import ConfigError
from nas.models import ATTENTION, ArchConfig, Seq2SeqTransformer, build_model, greedy_decode
from nas.models.attention import FFNSpec
from nas.models.cost import compute, layer_rows
from nas.models.dims import Dims
from nas.models.seq2seq import CrossAttention

V = 259  # bytes + pad, bos, eos
PAD, BOS, EOS = 256, 257, 258


def seq2seq(encoder: list[Any], decoder: list[Any], **kw: Any) -> ArchConfig:
    raw = {
        "task": "seq2seq",
        "d_model": 32,
        "n_heads": 4,
        "max_len": 16,
        "vocab_size": V,
        "encoder_layers": [{"attention": a} for a in encoder],
        "layers": [{"attention": a} for a in decoder],
        **kw,
    }
    return ArchConfig.from_dict(raw)


# -- configs ----------------------------------------------------------------------------------
def test_an_lm_dict_and_id_are_what_they_were_before_seq2seq() -> None:
    lm = ArchConfig.from_dict({"d_model": 32, "n_heads": 4, "max_len": 16, "layers": [{"attention": "mha"}]})
    assert "task" not in lm.to_dict() and "encoder_layers" not in lm.to_dict()
    # the id every existing study stored for this architecture (computed before seq2seq existed)
    assert lm.arch_id == ArchConfig.from_dict(lm.to_dict()).arch_id
    assert lm.to_dict() == {
        "vocab_size": 256,
        "d_model": 32,
        "n_heads": 4,
        "max_len": 16,
        "pos_encoding": "learned",
        "tie_embeddings": True,
        "layers": [{"attention": {"type": "mha"}, "ffn": {"activation": "relu", "mult": 4.0}}],
    }


def test_a_seq2seq_config_round_trips_and_names_both_stacks() -> None:
    arch = seq2seq(["mha", {"type": "mdha", "kernel": 3}], ["synth_dense"])
    again = ArchConfig.from_dict(arch.to_dict())
    assert again == arch and again.arch_id == arch.arch_id
    assert arch.summary() == "d32 h4 enc L2: [mha relux4] [mdha(k3) relux4] | dec L1: [synth_dense relux4]"
    repeated = ArchConfig.from_dict({**arch.to_dict(), "encoder_layers": {"repeat": 3, "attention": "mha"}})
    assert len(repeated.encoder_layers) == 3


@pytest.mark.parametrize(
    ("raw", "path", "words"),
    [
        ({"task": "seq2seq"}, "encoder_layers", "at least one encoder layer"),
        ({"encoder_layers": [{"attention": "mha"}]}, "encoder_layers", "only a task: seq2seq"),
        ({"task": "translate"}, "task", "valid: lm, seq2seq"),
        ({"task": "seq2seq", "encoder_layers": [{"attention": "x"}]}, "encoder_layers.0.attention", "valid"),
        ({"task": "seq2seq", "encoder_layers": {"repeat": 0}}, "encoder_layers.repeat", ""),
    ],
)
def test_bad_seq2seq_configs_say_where(raw: dict[str, Any], path: str, words: str) -> None:
    base = {"d_model": 32, "n_heads": 4, "max_len": 16, "layers": [{"attention": "mha"}]}
    with pytest.raises(ConfigError) as err:
        ArchConfig.from_dict({**base, **raw})
    assert err.value.path.startswith(path) and words in err.value.message


def test_a_block_that_only_runs_causally_is_refused_in_the_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ATTENTION.get("synth_dense"), "bidirectional", False)
    with pytest.raises(ConfigError) as err:
        seq2seq(["mha", "synth_dense"], ["mha"])
    assert err.value.path == "encoder_layers.1.attention"
    assert "synth_dense only runs causally" in err.value.message
    assert "valid in the encoder: " in err.value.message
    assert "mha" in err.value.message.split("valid in the encoder: ")[1]
    seq2seq(["mha"], ["synth_dense"])  # the decoder is causal: any block


# -- bidirectional blocks ---------------------------------------------------------------------
BLOCKS = [n for n in ATTENTION.names() if ATTENTION.get(n).bidirectional]


#: The linear-time mixers run a causal recurrence or a causal long convolution: no encoder form (yet).
CAUSAL_MIXERS = {"gated_linear", "hyena"}


def test_every_shipped_attention_block_can_be_an_encoder_layer() -> None:
    assert set(BLOCKS) == set(ATTENTION.names()) - CAUSAL_MIXERS


def test_a_subclass_is_not_bidirectional_unless_it_says_so() -> None:
    from nas.models.attention.base import BlockRegistry
    from nas.models.attention.mha import MultiHeadAttention

    class Rewritten(MultiHeadAttention):  # a new forward might apply the causal mask itself
        pass

    class Causal(MultiHeadAttention):
        bidirectional = False
        has_dot_terms = False

    registry = BlockRegistry("test block")
    with pytest.raises(TypeError, match="does not state bidirectional and has_dot_terms"):
        registry.register("rewritten")(Rewritten)
    registry.register("causal")(Causal)
    assert MultiHeadAttention.bidirectional and not Causal.bidirectional
    with pytest.raises(ConfigError, match="only runs causally"):
        Causal(Dims(32, 4, 16), Causal.Options(), ffn=FFNSpec()).make_bidirectional()


@pytest.mark.parametrize("name", BLOCKS)
def test_a_bidirectional_block_sees_the_future_and_agrees_with_its_causal_self_at_the_end(name: str) -> None:
    block_cls = ATTENTION.get(name)
    dims = Dims(32, 4, 16)
    opts = block_cls.Options.parse(block_cls.example_options())
    torch.manual_seed(0)
    causal = block_cls(dims, opts, ffn=FFNSpec()).double()
    both = block_cls(dims, opts, ffn=FFNSpec()).double()
    both.load_state_dict(causal.state_dict())
    both.make_bidirectional()
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    # the last position sees the whole sequence either way
    torch.testing.assert_close(both(x)[:, -1], causal(x)[:, -1])
    later = x.clone()
    later[:, -1] += 1.0
    assert not torch.allclose(both(later)[:, 0], both(x)[:, 0])  # position 0 now sees the last token
    torch.testing.assert_close(causal(later)[:, 0], causal(x)[:, 0])


# -- the model ----------------------------------------------------------------------------------
MDHA = {"type": "mdha", "kernel": 3}
CASES = [
    dict(encoder=["mha"], decoder=["mha"]),
    dict(
        encoder=["synth_random", MDHA, "multi_branch"],
        decoder=["mha", "synth_dense"],
        pos_encoding="sinusoidal",
    ),
    dict(
        encoder=["additive"], decoder=[{"type": "synth_factorized_random", "rank": 4}], tie_embeddings=False
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_parameters_match_the_analytic_count(case: dict[str, Any]) -> None:
    case = dict(case)
    arch = seq2seq(case.pop("encoder"), case.pop("decoder"), **case)
    model = build_model(arch)
    assert isinstance(model, Seq2SeqTransformer)
    assert sum(p.numel() for p in model.parameters()) == compute(arch).params
    assert sum(row[3] for row in layer_rows(arch, 16)) < compute(arch).params


def test_training_flops_match_the_counter_for_an_mha_model() -> None:
    arch = seq2seq(["mha", "mha"], ["mha"])
    model = build_model(arch)
    B, T = 2, 16
    x = torch.randint(0, 256, (B, 2 * T))
    counter = FlopCounterMode(display=False)
    with sdpa_kernel(SDPBackend.MATH), counter:  # CPU SDPA decomposes into counted matmuls
        model(x).sum().backward()
    counted = counter.get_total_flops()
    expected = compute(arch, T).train_flops_per_token * B * T
    assert counted == pytest.approx(expected, rel=0.02)


def test_the_decoder_is_causal_and_source_padding_is_not_attended() -> None:
    torch.manual_seed(0)
    model = build_model(seq2seq(["mha"], ["mha", "synth_dense"])).double().eval()
    src = torch.randint(0, 256, (2, 16))
    tgt = torch.randint(0, 256, (2, 16))
    out = model(src, tgt)
    later = tgt.clone()
    later[:, 10] = (later[:, 10] + 1) % 256
    torch.testing.assert_close(model(src, later)[:, :10], out[:, :10])
    assert not torch.allclose(model(src, later)[:, 10], out[:, 10])
    torch.testing.assert_close(model(torch.cat([src, tgt], dim=1)), out)  # the batch layout: side by side


def test_cross_attention_over_padded_memory_equals_attention_over_the_real_tokens() -> None:
    torch.manual_seed(0)
    cross = CrossAttention(Dims(32, 4, 16)).double()
    x, memory = torch.randn(1, 5, 32, dtype=torch.float64), torch.randn(1, 9, 32, dtype=torch.float64)
    keep = torch.tensor([[True] * 6 + [False] * 3])
    torch.testing.assert_close(cross(x, memory, keep), cross(x, memory[:, :6], None))


def test_greedy_decoding_is_the_models_own_argmax_and_stops_at_eos() -> None:
    torch.manual_seed(0)
    model = build_model(seq2seq(["mha"], ["mha"])).eval()
    src = torch.randint(0, 256, (3, 10))
    outputs = greedy_decode(model, src, BOS, EOS, max_new=8)
    # up to max_new tokens, as training teaches: a decoder of max_len positions predicts max_len tokens
    assert max(len(out) for out in outputs) == 8
    for row, out in zip(src, outputs, strict=True):
        assert EOS not in out and len(out) <= 8
        prefix = torch.tensor([[BOS, *out]])
        steps = model(row[None], prefix).argmax(-1)[0].tolist()
        assert steps[: len(out)] == out
    with torch.no_grad():  # a model that always says EOS decodes to nothing
        model.lm_head.weight = torch.nn.Parameter(torch.zeros_like(model.lm_head.weight))
        model.ln_f.weight.zero_()  # the final norm's output is (1, 0, 0, ...) whatever the input
        model.ln_f.bias.zero_()
        model.ln_f.bias[0] = 1.0
        model.lm_head.weight[EOS, 0] = 10.0
    assert greedy_decode(model, src, BOS, EOS) == [[], [], []]
