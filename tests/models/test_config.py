"""ArchConfig: validation with errors that name the field and the valid values, round trips, ids."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from model_cases import VARIANTS, mixable_names

import nas
from nas import ArchConfig, ConfigError


def base(**over: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "d_model": 16,
        "n_heads": 2,
        "max_len": 8,
        "layers": [
            {"attention": {"type": "mdha", "kernel": 3}, "ffn": {"activation": "squared_relu", "mult": 4}},
            {"attention": "mha", "ffn": {"activation": "gelu", "mult": 2}},
        ],
    }
    raw.update(over)
    return raw


def layer(attention: Any, **ffn: Any) -> dict[str, Any]:
    return {"attention": attention, "ffn": {"activation": "relu", "mult": 4, **ffn}}


def rich_arch() -> ArchConfig:
    """One layer of every variant, so round trips see every option type."""
    return ArchConfig.from_dict(
        {
            "d_model": 32,
            "n_heads": 4,
            "max_len": 16,
            "vocab_size": 64,
            "pos_encoding": "sinusoidal",
            "tie_embeddings": False,
            "layers": [layer(v.raw) for v in VARIANTS.values()],
        }
    )


def error_of(raw: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        ArchConfig.from_dict(raw)
    err = info.value
    assert isinstance(err, ValueError)
    if err.path:  # one line that starts with where the mistake is
        assert str(err).startswith(f"{err.path}: ")
    assert "\n" not in str(err)
    return err


# -- round trips and ids ----------------------------------------------------------------------
def test_to_dict_from_dict_round_trip() -> None:
    arch = rich_arch()
    d = arch.to_dict()
    again = ArchConfig.from_dict(d)
    assert again == arch
    assert again.to_dict() == d
    assert again.arch_id == arch.arch_id


def test_to_dict_is_plain_data() -> None:
    def check(v: Any) -> None:
        if isinstance(v, dict):
            assert all(isinstance(k, str) for k in v)
            for x in v.values():
                check(x)
        elif isinstance(v, list):
            for x in v:
                check(x)
        else:
            assert v is None or isinstance(v, (str, int, float, bool)), v

    check(rich_arch().to_dict())


def test_defaults_are_filled_in() -> None:
    d = ArchConfig.from_dict(
        {"d_model": 16, "n_heads": 2, "max_len": 8, "layers": [{"attention": "mdha"}]}
    ).to_dict()
    assert d["vocab_size"] == 256 and d["pos_encoding"] == "learned" and d["tie_embeddings"] is True
    assert d["layers"][0] == {
        "attention": {"type": "mdha", "kernel": 3},
        "ffn": {"activation": "relu", "mult": 4.0},
    }


def test_arch_id_ignores_key_order_and_number_spelling() -> None:
    raw = base()
    reordered = {k: raw[k] for k in reversed(list(raw))}
    reordered["layers"] = [{k: v for k, v in reversed(list(item.items()))} for item in raw["layers"]]
    a, b = ArchConfig.from_dict(raw), ArchConfig.from_dict(reordered)
    assert a.arch_id == b.arch_id
    assert len(a.arch_id) == 12 and int(a.arch_id, 16) >= 0
    spelled = base(layers=[layer({"type": "mdha"}, mult=4.0), layer("mha", mult=4)])
    plain = base(layers=[layer("mdha", mult=4), layer({"type": "mha"}, mult=4.0)])
    assert ArchConfig.from_dict(spelled).arch_id == ArchConfig.from_dict(plain).arch_id


def test_arch_id_is_pinned() -> None:
    """A content hash (not Python's salted hash()): ids stored by earlier studies stay valid."""
    arch = ArchConfig.from_dict({"d_model": 16, "n_heads": 2, "max_len": 8, "layers": [{"attention": "mha"}]})
    assert arch.arch_id == "3026431cf748"


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(d_model=32),
        lambda d: d.update(n_heads=4),
        lambda d: d.update(max_len=9),
        lambda d: d.update(vocab_size=128),
        lambda d: d.update(pos_encoding="sinusoidal"),
        lambda d: d.update(tie_embeddings=False),
        lambda d: d["layers"].pop(),
        lambda d: d["layers"].reverse(),
        lambda d: d["layers"][0]["attention"].update(kernel=4),
        lambda d: d["layers"][0]["ffn"].update(mult=3),
        lambda d: d["layers"][0]["ffn"].update(activation="relu"),
        lambda d: d["layers"][1].update(attention="synth_random"),
    ],
)
def test_any_change_changes_arch_id(change: Any) -> None:
    raw = base()
    changed = copy.deepcopy(raw)
    change(changed)
    assert ArchConfig.from_dict(changed).arch_id != ArchConfig.from_dict(raw).arch_id


def test_repeat_shorthand() -> None:
    short = ArchConfig.from_dict(base(layers={"repeat": 3, "attention": "mha", "ffn": "gelu"}))
    long = ArchConfig.from_dict(
        base(layers=[{"attention": {"type": "mha"}, "ffn": {"activation": "gelu"}}] * 3)
    )
    assert short == long
    assert short.n_layers == 3
    assert (
        short.to_dict()["layers"]
        == [{"attention": {"type": "mha"}, "ffn": {"activation": "gelu", "mult": 4.0}}] * 3
    )


def test_attention_and_ffn_shorthand_strings() -> None:
    short = ArchConfig.from_dict(base(layers=[{"attention": "synth_factorized_random", "ffn": "silu"}]))
    long = ArchConfig.from_dict(
        base(
            layers=[
                {"attention": {"type": "synth_factorized_random", "rank": 8}, "ffn": {"activation": "silu"}}
            ]
        )
    )
    assert short == long


def test_mixture_weights_are_normalised_and_round_trip_exactly() -> None:
    raw = base(
        layers=[layer({"type": "mixture", "components": ["mha"] * 3, "weights": [1.3635, 0.8, 2.5025]})]
    )
    arch = ArchConfig.from_dict(raw)
    w = arch.to_dict()["layers"][0]["attention"]["weights"]
    assert sum(w) == pytest.approx(1.0)
    for _ in range(3):  # the normalised weights must not drift when read back
        again = ArchConfig.from_dict(arch.to_dict())
        assert again == arch and again.arch_id == arch.arch_id
        arch = again


def test_config_is_frozen() -> None:
    arch = rich_arch()
    with pytest.raises(dataclasses.FrozenInstanceError):
        arch.d_model = 64  # type: ignore[misc]


def test_summary_names_every_layer() -> None:
    arch = ArchConfig.from_dict(
        base(layers={"repeat": 2, "attention": {"type": "mdha", "kernel": 3}, "ffn": "squared_relu"})
    )
    assert arch.summary().endswith("2x[mdha(k3) squared_relux4]")


# -- YAML files -----------------------------------------------------------------------------------
def test_save_and_load_yaml(tmp_path: Path) -> None:
    arch = rich_arch()
    path = tmp_path / "sub" / "arch.yaml"
    nas.save_arch(path, arch, metrics={"val_loss": 1.5})
    loaded = nas.load_arch(path)
    assert loaded == arch and loaded.arch_id == arch.arch_id


def test_load_bare_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bare.yaml"
    path.write_text(
        "d_model: 16\nn_heads: 2\nmax_len: 8\nlayers: {repeat: 2, attention: mdha, ffn: squared_relu}\n"
    )
    assert nas.load_arch(path) == ArchConfig.from_dict(
        base(layers={"repeat": 2, "attention": "mdha", "ffn": "squared_relu"})
    )


def test_yaml_error_names_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("arch:\n  d_model: 16\n  n_heads: 2\n  max_len: 8\n  layers: [{attention: nope}]\n")
    with pytest.raises(ConfigError) as info:
        nas.load_arch(path)
    msg = str(info.value)
    assert str(path) in msg and "arch.layers.0.attention.type" in msg and "synth_dense" in msg


def test_malformed_yaml(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("arch: {d_model: 16, n_heads: [\n")
    with pytest.raises(nas.UserError, match="malformed YAML") as info:
        nas.load_arch(path)
    assert isinstance(info.value, ValueError) and str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(nas.UserError, match="not found") as info:
        nas.load_arch(path)
    assert isinstance(info.value, ValueError) and str(path) in str(info.value)


def test_yaml_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        nas.load_arch(path)


# -- validation errors ---------------------------------------------------------------------------
def test_unknown_block_lists_registered_blocks() -> None:
    for attention in ("nope", {"type": "nope"}):
        err = error_of(base(layers=[layer(attention)]))
        assert err.path == "layers.0.attention.type"
        assert "'nope'" in str(err)
        assert all(name in str(err) for name in nas.ATTENTION.names())


def test_attention_mapping_without_type() -> None:
    err = error_of(base(layers=[layer({"kernel": 3})]))
    assert err.path == "layers.0.attention"
    assert all(name in str(err) for name in nas.ATTENTION.names())


def test_unknown_activation_lists_activations() -> None:
    for ffn in ({"activation": "tanh"}, "tanh"):
        err = error_of(base(layers=[{"attention": "mha", "ffn": ffn}]))
        assert err.path == "layers.0.ffn.activation"
        assert "'tanh'" in str(err) and all(name in str(err) for name in nas.ACTIVATIONS.names())


@pytest.mark.parametrize("mult", [0, -1, "4", True])
def test_bad_ffn_mult(mult: Any) -> None:
    assert error_of(base(layers=[layer("mha", mult=mult)])).path == "layers.0.ffn.mult"


def test_d_model_not_divisible_by_heads() -> None:
    err = error_of(base(d_model=16, n_heads=3))
    assert err.path == "n_heads" and "16" in str(err) and "3" in str(err)


@pytest.mark.parametrize("key", ["d_model", "n_heads", "max_len", "vocab_size"])
@pytest.mark.parametrize("value", [0, -2, 1.5, "16", True])
def test_sizes_must_be_positive_integers(key: str, value: Any) -> None:
    assert error_of(base(**{key: value})).path == key


def test_missing_required_key() -> None:
    raw = base()
    del raw["max_len"]
    assert error_of(raw).path == "max_len"


def test_bad_positional_encoding_lists_valid() -> None:
    err = error_of(base(pos_encoding="rotary"))
    assert err.path == "pos_encoding" and all(name in str(err) for name in ("learned", "sinusoidal", "rope"))


def test_sinusoidal_needs_even_d_model() -> None:
    assert error_of(base(d_model=15, n_heads=3, pos_encoding="sinusoidal")).path == "d_model"


def test_unknown_block_option_lists_valid_options() -> None:
    err = error_of(base(layers=[layer({"type": "mdha", "kernal": 3})]))
    assert err.path == "layers.0.attention.kernal" and "kernel" in str(err)
    err = error_of(base(layers=[layer({"type": "mha", "kernel": 3})]))
    assert err.path == "layers.0.attention.kernel" and "valid options: kv_heads" in str(err)
    err = error_of(base(layers=[layer({"type": "synth_dense", "kernel": 3})]))
    assert err.path == "layers.0.attention.kernel" and "(none)" in str(err)


@pytest.mark.parametrize(
    "attention, path",
    [
        ({"type": "mdha", "kernel": "3"}, "kernel"),
        ({"type": "mdha", "kernel": 2.5}, "kernel"),
        ({"type": "mdha", "kernel": True}, "kernel"),
        ({"type": "mdha", "kernel": 0}, "kernel"),
        ({"type": "synth_factorized_random", "rank": "8"}, "rank"),
        ({"type": "synth_factorized_random", "rank": 0}, "rank"),
        ({"type": "synth_factorized_dense", "a": None, "b": 8}, "a"),
    ],
)
def test_wrong_option_type_or_value(attention: Any, path: str) -> None:
    assert error_of(base(layers=[layer(attention)])).path == f"layers.0.attention.{path}"


def test_factorized_dense_needs_a_times_b_at_least_max_len() -> None:
    err = error_of(base(max_len=8, layers=[layer({"type": "synth_factorized_dense", "a": 2, "b": 3})]))
    assert err.path.startswith("layers.0.attention.") and "max_len" in str(err) and "6" in str(err)
    ArchConfig.from_dict(base(max_len=8, layers=[layer({"type": "synth_factorized_dense", "a": 2, "b": 4})]))
    ArchConfig.from_dict(base(max_len=8, layers=[layer({"type": "synth_factorized_dense", "a": 3, "b": 5})]))


@pytest.mark.parametrize("components", [["mha"], [], "mha", None])
def test_mixture_needs_two_components(components: Any) -> None:
    raw = {"type": "mixture"} if components is None else {"type": "mixture", "components": components}
    err = error_of(base(layers=[layer(raw)]))
    assert err.path == "layers.0.attention.components"
    assert all(name in str(err) for name in mixable_names())


@pytest.mark.parametrize("bad", ["multi_branch", "mixture"])
def test_mixture_refuses_non_mixable_component(bad: str) -> None:
    err = error_of(base(layers=[layer({"type": "mixture", "components": ["mha", bad]})]))
    assert err.path == "layers.0.attention.components.1.type"
    assert repr(bad) in str(err) and all(name in str(err) for name in mixable_names())


def test_mixture_component_options_are_checked() -> None:
    raw = {"type": "mixture", "components": ["mha", {"type": "mdha", "kernel": 0}]}
    assert error_of(base(layers=[layer(raw)])).path == "layers.0.attention.components.1.kernel"
    raw = {"type": "mixture", "components": ["mha", {"type": "synth_factorized_dense", "a": 1, "b": 1}]}
    assert error_of(base(layers=[layer(raw)])).path.startswith("layers.0.attention.components.1.")
    raw = {"type": "mixture", "components": ["mha", "nope"]}
    assert error_of(base(layers=[layer(raw)])).path == "layers.0.attention.components.1.type"


@pytest.mark.parametrize("weights", [[1], [1, 2, 3], [1, -1], [0, 0], "fixed", [True, 1], ["a", 1], 0.5])
def test_bad_mixture_weights(weights: Any) -> None:
    raw = {"type": "mixture", "components": ["mha", "synth_random"], "weights": weights}
    err = error_of(base(layers=[layer(raw)]))
    assert err.path == "layers.0.attention.weights"


def test_unknown_mixture_option() -> None:
    raw = {"type": "mixture", "components": ["mha", "synth_random"], "temperature": 2}
    err = error_of(base(layers=[layer(raw)]))
    assert err.path == "layers.0.attention.temperature" and "components" in str(err)


def test_multi_branch_needs_ffn_width_divisible_by_heads() -> None:
    raw = base(d_model=16, n_heads=2, layers=[layer("mha"), layer("multi_branch", mult=1.5625)])  # 25 / 2
    err = error_of(raw)
    assert err.path == "layers.1.ffn.mult" and "25" in str(err)
    ArchConfig.from_dict(base(d_model=16, n_heads=2, layers=[layer("multi_branch", mult=1.5)]))  # 24 / 2


def test_ffn_width_below_one() -> None:
    assert error_of(base(layers=[layer("mha", mult=0.01)])).path == "layers.0.ffn.mult"


@pytest.mark.parametrize(
    "layers", [[], {"repeat": 0, "attention": "mha"}, {"repeat": "2", "attention": "mha"}, "mha"]
)
def test_empty_or_malformed_layers(layers: Any) -> None:
    assert error_of(base(layers=layers)).path.startswith("layers")


def test_unknown_top_level_key_lists_valid_keys() -> None:
    err = error_of(base(dmodel=16))
    assert err.path == "dmodel"
    assert all(k in str(err) for k in ("d_model", "n_heads", "max_len", "layers", "vocab_size"))


def test_unknown_layer_key() -> None:
    err = error_of(base(layers=[{"attention": "mha", "norm": "rms"}]))
    assert err.path == "layers.0.norm" and "attention" in str(err) and "ffn" in str(err)


def test_layer_without_attention() -> None:
    err = error_of(base(layers=[{"ffn": "relu"}]))
    assert err.path == "layers.0.attention"


@pytest.mark.parametrize("raw", [None, [], "mha", 3])
def test_arch_must_be_a_mapping(raw: Any) -> None:
    error_of(raw)


def test_tie_embeddings_must_be_bool() -> None:
    assert error_of(base(tie_embeddings="yes")).path == "tie_embeddings"


def test_error_path_in_a_later_layer() -> None:
    raw = base(layers=[layer("mha"), layer("mha"), layer({"type": "mdha", "kernel": -1})])
    assert error_of(raw).path == "layers.2.attention.kernel"
