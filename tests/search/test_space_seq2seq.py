"""``task: seq2seq`` search spaces: an encoder stack beside the (decoder) layers."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import optuna
import pytest

from nas.errors import ConfigError
from nas.models import ATTENTION
from nas.search.space.combinations import one_layer_archs
from nas.search.space.load import load_space, parse_space

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "search_spaces" / "seq2seq.yaml"


def space(**over: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "task": "seq2seq",
        "globals": {
            "d_model": 32,
            "n_heads": 4,
            "n_layers": [1, 2],
            "n_encoder_layers": [1, 3],
            "max_len": 16,
        },
        "layers": {"attention": {"mha": {}, "synth_random": {}}, "ffn": {"activation": ["relu", "gelu"]}},
        "encoder": {"attention": {"mha": {}, "mdha": {"kernel": [3, 5]}}},
    }
    raw.update(over)
    return raw


def test_the_shipped_space_samples_encoder_decoders_within_its_choices() -> None:
    s = load_space(SHIPPED)
    assert s.task == "seq2seq" and s.encoder is not None
    rng = random.Random(0)
    archs = [s.random_arch(rng) for _ in range(30)]
    assert all(a.is_seq2seq for a in archs)
    assert {len(a.encoder_layers) for a in archs} == {1, 2, 3} and {a.n_layers for a in archs} == {1, 2}
    assert {layer.attention.type for a in archs for layer in a.encoder_layers} <= set(s.encoder.blocks)
    assert {layer.attention.type for a in archs for layer in a.layers} <= set(s.blocks)


def test_each_stack_has_its_own_optuna_parameters() -> None:
    s = parse_space(space())
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    trial = study.ask()
    arch = s.suggest(trial)
    names = set(trial.params)
    assert {"n_layers", "n_encoder_layers", "encoder.0.attention", "layers.0.attention"} <= names
    assert all(f"encoder.{i}.attention" in names for i in range(len(arch.encoder_layers)))
    for i, layer in enumerate(arch.encoder_layers):
        if layer.attention.type == "mdha":
            assert trial.params[f"encoder.{i}.attention.mdha.kernel"] == layer.attention.options.kernel


def test_without_an_encoder_section_the_encoder_offers_the_layers_choices() -> None:
    raw = space()
    del raw["encoder"]
    s = parse_space(raw)
    assert s.encoder is not None and set(s.encoder.blocks) == {"mha", "synth_random"}


@pytest.mark.parametrize(
    ("over", "path", "words"),
    [
        ({"task": "lm", "encoder": {"attention": ["mha"]}}, "globals.n_encoder_layers", "only a task: seq"),
        ({"task": "mt"}, "task", "valid: lm, seq2seq"),
        (
            {"globals": {"d_model": 32, "n_heads": 4, "n_layers": 1, "max_len": 16}},
            "globals.n_encoder_layers",
            "is required",
        ),
        ({"encoder": {"attention": {"mha": {}}, "share": "yes"}}, "encoder.share", "true"),
        ({"encoder": {"attention": {"nope": {}}}}, "encoder.attention", "valid"),
        ({"encoder": {"attention": {"mdha": {"kernel": [3, 0]}}}}, "encoder.attention.mdha.kernel", ""),
    ],
)
def test_bad_seq2seq_spaces_name_the_field(over: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_space(space(**over))
    assert err.value.path.startswith(path), err.value
    assert words in err.value.message


def test_an_lm_space_refuses_an_encoder_section() -> None:
    raw = space(task="lm")
    del raw["globals"]["n_encoder_layers"]
    with pytest.raises(ConfigError) as err:
        parse_space(raw)
    assert err.value.path == "encoder" and "only a task: seq2seq space" in err.value.message


def test_a_causal_only_block_offered_to_the_encoder_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ATTENTION.get("mdha"), "bidirectional", False)
    with pytest.raises(ConfigError) as err:
        parse_space(space())
    assert err.value.path == "encoder.attention.mdha" and "only runs causally" in err.value.message
    raw = space(layers={"attention": {"mdha": {}}})
    del raw["encoder"]
    with pytest.raises(ConfigError) as err:  # the encoder would inherit it from the layers
        parse_space(raw)
    assert err.value.path == "layers.attention.mdha"
    assert "unless `encoder:` lists its own" in err.value.message


def test_seed_architectures_fix_both_stacks() -> None:
    s = parse_space(
        space(
            encoder={
                "attention": {"mha": {}, "mdha": {"kernel": [3, 5]}},
                "ffn": {"activation": ["relu", "squared_relu"]},
            },
            layers={
                "attention": {"mha": {}, "mdha": {"kernel": [3, 5]}},
                "ffn": {"activation": ["relu", "squared_relu"]},
            },
        )
    )
    params = s.seed_params("primer_ez")
    assert params is not None
    assert params["encoder.2.attention"] == "mdha" and params["encoder.2.attention.mdha.kernel"] == 3
    assert params["layers.1.ffn.activation"] == "squared_relu"
    assert parse_space(space()).seed_params("primer_ez") is None  # squared_relu is not offered


def test_stand_ins_bound_both_stacks() -> None:
    s = parse_space(space())
    largest = list(one_layer_archs(s, largest=True))
    assert largest and all(a.is_seq2seq and n == 2 and n_enc == 3 for a, n, n_enc in largest)
    smallest = list(one_layer_archs(s, largest=False))
    assert all(n == 1 and n_enc == 1 for _, n, n_enc in smallest)
    encoder_blocks = {a.encoder_layers[0].attention.type for a, _, _ in largest}
    assert encoder_blocks == {"mha", "mdha"}


def test_a_causal_only_block_on_an_encoder_at_entry_is_refused_at_load() -> None:
    """`at` entries are menus too: gated_linear (causal only) at an encoder position was accepted, and every
    trial that drew it failed."""
    encoder = {"attention": {"mha": {}}, "at": [{"layers": -1, "attention": {"gated_linear": {}}}]}
    with pytest.raises(ConfigError) as err:
        parse_space(space(encoder=encoder))
    assert err.value.path == "encoder.at.0.attention.gated_linear", err.value
    assert "only runs causally" in err.value.message and "valid in the encoder: " in err.value.message


@pytest.mark.parametrize("where", ["menu", "at"])
def test_an_encoders_centered_mdha_is_checked_as_an_encoder_layer(where: str) -> None:
    """A centered convolution sees later positions: valid in an encoder layer (``train`` takes it), so
    the load-time check must not refuse it as if the layer were causal; a decoder's still is."""
    block = {"mdha": {"kernel": 3, "centered": True}}
    encoder = (
        {"attention": block}
        if where == "menu"
        else {"attention": {"mha": {}}, "at": [{"layers": 0, "attention": block}]}
    )
    s = parse_space(space(encoder=encoder))
    rng = random.Random(0)
    archs = [s.random_arch(rng) for _ in range(12)]
    assert any(layer.attention.options.centered for a in archs for layer in a.encoder_layers)
    with pytest.raises(ConfigError) as err:
        parse_space(space(layers={"attention": block}))
    assert err.value.path == "layers.attention.mdha.centered" and "causal" in err.value.message


def test_the_encoder_does_not_copy_the_decoders_at_entries() -> None:
    """Without ``encoder:`` the encoder offers the decoder's menu; the decoder's ``at`` entries place the
    decoder's layers (a pinned last layer), so they are not applied to the encoder's."""
    raw = space(
        layers={"attention": {"mha": {}, "synth_random": {}}, "at": [{"layers": -1, "attention": "mha"}]}
    )
    del raw["encoder"]
    s = parse_space(raw)
    assert s.encoder is not None and s.encoder.at == () and s.layer_choices.at != ()
    rng = random.Random(0)
    archs = [s.random_arch(rng) for _ in range(40)]
    assert all(a.layers[-1].attention.type == "mha" for a in archs)
    assert any(a.encoder_layers[-1].attention.type == "synth_random" for a in archs)


def test_an_at_entrys_bad_option_is_named_at_that_entry() -> None:
    from nas.search.space.load import parse_space as parse

    raw = {
        "globals": {"d_model": 32, "n_heads": 2, "n_layers": 2, "max_len": 16},
        "layers": {"attention": {"mha": {}}, "at": [{"layers": -1, "attention": {"mha": {"kv_heads": 3}}}]},
    }
    with pytest.raises(ConfigError) as err:
        parse(raw)
    assert err.value.path == "layers.at.0.attention.mha.kv_heads", err.value
    enc = {"attention": {"mha": {}}, "at": [{"layers": 0, "attention": {"mha": {"kv_heads": 3}}}]}
    with pytest.raises(ConfigError) as err:
        parse(space(encoder=enc))
    assert err.value.path == "encoder.at.0.attention.mha.kv_heads", err.value
