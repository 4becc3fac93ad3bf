"""Baselines rebuilt at a finalist's shape (``confirm --baseline-shape finalist``, the default)."""

from __future__ import annotations

from nas.confirm.plan import Entry, at_shape, shape_of
from nas.confirm.summary import matched
from nas.files.archfile import load_arch
from nas.models import ArchConfig
from nas.shipped import arch_path


def _arch(d: int, heads: int, layers: list[dict], max_len: int = 32, **extra) -> ArchConfig:
    return ArchConfig.from_dict(
        {"vocab_size": 256, "d_model": d, "n_heads": heads, "max_len": max_len, "layers": layers, **extra}
    )


MHA = {"attention": "mha", "ffn": {"activation": "relu", "mult": 4}}
MDHA = {"attention": {"type": "mdha", "kernel": 3}, "ffn": {"activation": "squared_relu", "mult": 2}}


def test_a_repeated_layer_takes_the_finalists_width_heads_depth_and_context() -> None:
    base = load_arch(arch_path("transformer_pp"))  # d128 h4 L4 T128, rope, rmsnorm, swiglu
    target = _arch(64, 2, [MDHA] * 3, max_len=64)
    moved = at_shape(base, target)
    assert moved is not None and shape_of(moved) == shape_of(target) == (64, 2, 3, 0, 64)
    assert moved.layers == (base.layers[0],) * 3  # its own blocks, not the finalist's
    assert (moved.pos_encoding, moved.norm, moved.rope_base, moved.tie_embeddings) == (
        base.pos_encoding,
        base.norm,
        base.rope_base,
        base.tie_embeddings,
    )
    assert at_shape(base, base) is base


def test_a_mixed_stack_keeps_its_depth_or_does_not_move() -> None:
    mixed = _arch(32, 4, [MHA, MDHA])
    assert at_shape(mixed, _arch(64, 4, [MHA, MHA])).layers == mixed.layers  # same depth: widened only
    assert at_shape(mixed, _arch(64, 4, [MHA] * 3)) is None  # no way to say which layer repeats


def test_options_the_new_sizes_refuse_do_not_move() -> None:
    grouped = _arch(
        64, 4, [{"attention": {"type": "mha", "kv_heads": 2}, "ffn": {"activation": "relu", "mult": 4}}]
    )
    assert at_shape(grouped, _arch(48, 6, [MHA])) is not None  # 2 key/value heads serve 6 query heads
    assert at_shape(grouped, _arch(60, 5, [MHA])) is None  # 2 does not divide 5


def test_an_encoder_decoder_takes_both_depths() -> None:
    base = load_arch(arch_path("seq2seq"))  # 2 encoder and 2 decoder layers
    raw = base.to_dict() | {"d_model": 32, "n_heads": 2}
    raw["encoder_layers"] = raw["encoder_layers"] * 2
    raw["layers"] = raw["layers"][:1]
    target = ArchConfig.from_dict(raw)
    moved = at_shape(base, target)
    assert moved is not None and shape_of(moved) == (32, 2, 1, 4, base.max_len)


def test_each_row_is_compared_with_the_baseline_of_its_shape() -> None:
    small, large = _arch(32, 4, [MDHA]), _arch(64, 4, [MDHA] * 2)
    vanilla_small, vanilla_large = _arch(32, 4, [MHA]), _arch(64, 4, [MHA] * 2)
    lonely = _arch(48, 4, [MHA] * 3)  # a baseline that kept its own shape
    bases = [
        Entry(2, vanilla_small, "vanilla (d32 h4 L1 T32)", "baseline", label="vanilla"),
        Entry(3, vanilla_large, "vanilla", "baseline", label="vanilla"),
        Entry(4, lonely, "mine", "baseline", label="mine"),
    ]
    got = matched(Entry(0, small, "trial 7", "finalist"), bases)
    assert {k: v.index for k, v in got.items()} == {"vanilla": 2, "mine": 4}
    got = matched(Entry(1, large, "trial 9", "finalist"), bases)
    assert {k: v.index for k, v in got.items()} == {"vanilla": 3, "mine": 4}
