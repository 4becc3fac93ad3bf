"""nas.models.sizes.resize: one architecture's family of sizes, its per-layer pattern kept."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

import nas
from nas.errors import ConfigError
from nas.models.sizes import resize

ROOT = Path(__file__).resolve().parents[2]
ARCHS = sorted((ROOT / "examples" / "archs").glob("*.yaml"))


def _pattern(layers: tuple) -> list[tuple]:
    return [(layer.attention.to_dict()["type"], layer.ffn.activation, layer.ffn.mult) for layer in layers]


@pytest.mark.parametrize("path", ARCHS, ids=lambda p: p.stem)
def test_a_size_of_one_is_the_architecture_itself(path: Path) -> None:
    arch = nas.load_arch(path)
    assert resize(arch, 1).arch_id == arch.arch_id


@pytest.mark.parametrize("path", ARCHS, ids=lambda p: p.stem)
@pytest.mark.parametrize("size", [0.5, 2.0, 8.0])
def test_every_shipped_architecture_resizes_with_its_pattern_and_globals_kept(
    path: Path, size: float
) -> None:
    arch = nas.load_arch(path)
    big = resize(arch, size)
    k = size ** (1 / 3)
    assert big.d_model // big.n_heads == arch.d_model // arch.n_heads  # head width kept
    depth = max(1, round(len(arch.layers) * k))
    # the depth rounds, or (shrinking) stops at the fewest layers that keep every kind of the pattern
    assert len(big.layers) == depth or (size < 1 and len(big.layers) > depth)
    for key in ("max_len", "vocab_size", "pos_encoding", "norm", "tie_embeddings", "task", "rope_base"):
        assert getattr(big, key) == getattr(arch, key), key
    # the pattern at each relative depth: new layer i is the original's at floor((i + 1/2) L / L')
    old, new = _pattern(arch.layers), _pattern(big.layers)
    assert new == [
        old[min(len(old) - 1, math.floor((i + 0.5) * len(old) / len(new)))] for i in range(len(new))
    ]
    assert set(new) == set(old)  # no size loses a kind of layer
    # parameters and FLOPs follow the formulas: the built model has the counted parameters
    model = nas.build_model(big)
    assert sum(p.numel() for p in model.parameters()) == nas.compute(big).params


def test_the_size_is_a_target_for_the_non_embedding_parameters() -> None:
    arch = nas.ArchConfig.from_dict(
        {"d_model": 256, "n_heads": 4, "max_len": 64, "layers": {"repeat": 8, "attention": "mha"}}
    )
    base = nas.compute(arch).non_embedding_params
    for size in (0.125, 0.5, 2.0, 8.0):
        ratio = nas.compute(resize(arch, size)).non_embedding_params / base
        assert size / 1.6 < ratio < size * 1.6, (size, ratio)  # whole heads and whole layers round it
    # 2x heads and 2x layers: 8x the matrices (the norms' vectors grow by 4x only)
    assert nas.compute(resize(arch, 8.0)).non_embedding_params == pytest.approx(8 * base, rel=1e-2)


def test_grouped_heads_keep_their_group_size() -> None:
    layers = [{"attention": {"type": "mha", "kv_heads": 2}, "ffn": "swiglu"}, {"attention": "mha"}] * 2
    arch = nas.ArchConfig.from_dict({"d_model": 256, "n_heads": 8, "max_len": 64, "layers": layers})
    for size in (0.5, 3.0, 8.0):
        big = resize(arch, size)
        grouped = [
            layer.attention.options.kv_heads for layer in big.layers if layer.attention.options.kv_heads
        ]
        assert grouped and all(big.n_heads // g == 4 for g in grouped)  # 4 query heads per key/value head


def test_a_grouped_block_at_other_heads_is_the_same_kind_and_a_lost_kind_is_named() -> None:
    """``mdha(kv2)`` of 4 heads is ``mdha(kv1)`` of 2 heads and ``mdha(kv5)`` of 10 (two query heads per
    key/value head at every size): the ladder refused every size of a grouped winner as 'losing' it."""
    from nas.models.sizes import dropped

    layers = [{"attention": {"type": "mdha", "kv_heads": 2, "kernel": 5}}, {"attention": "synth_dense"}]
    arch = nas.ArchConfig.from_dict({"d_model": 64, "n_heads": 4, "max_len": 32, "layers": layers})
    for size in (0.25, 16.0):
        out = resize(arch, size)
        assert out.n_heads != arch.n_heads and dropped(arch, out) == []
    one_kind = dataclasses.replace(arch, layers=(arch.layers[1],) * 2)
    assert dropped(arch, one_kind) == ["mdha(kv2,k5) relux4"]


def test_a_bad_size_is_refused_naming_what_is_valid() -> None:
    arch = nas.load_arch(ROOT / "examples" / "archs" / "vanilla.yaml")
    for bad in (0, -1, float("nan"), 1000):
        with pytest.raises(ConfigError, match="size"):
            resize(arch, bad)


def test_a_small_size_keeps_every_kind_of_layer_and_shrinks_the_width_instead() -> None:
    """The size rule turned a two-layer winner ``[synth_factorized_random] [synth_dense]`` into one
    synth_dense layer at small sizes: its ladder fitted one curve through two architectures.  A size that
    would drop a kind keeps the depth that holds every kind and takes the rest from the width."""
    layers = [{"attention": {"type": "synth_factorized_random", "rank": 4}}, {"attention": "synth_dense"}]
    arch = nas.ArchConfig.from_dict({"d_model": 128, "n_heads": 8, "max_len": 32, "layers": layers})
    base = nas.compute(arch).non_embedding_params
    for size in (0.125, 0.35):
        small = resize(arch, size)
        assert [layer.attention.type for layer in small.layers] == ["synth_factorized_random", "synth_dense"]
        assert small.n_heads < round(8 * size ** (1 / 3))  # narrower than the cube-root rule's width
        ratio = nas.compute(small).non_embedding_params / base
        assert size / 1.6 < ratio < size * 1.6, (size, ratio)  # the parameters still follow the size
    # a kind that only the relative depth would skip: one A then five B, at three layers (all B)
    skewed = [{"attention": "mha"}] + [{"attention": "synth_dense"}] * 5
    arch = nas.ArchConfig.from_dict({"d_model": 128, "n_heads": 8, "max_len": 32, "layers": skewed})
    small = resize(arch, 0.125)  # the cube-root rule: 3 layers, sources 1, 3, 5
    assert [layer.attention.type for layer in small.layers][0] == "mha" and len(small.layers) == 4
