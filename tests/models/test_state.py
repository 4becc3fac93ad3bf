"""Inference state (``nas.compute``'s ``state_elements``): what one sequence keeps per layer while
generating."""

from __future__ import annotations

import pytest

import nas
from nas.models import ATTENTION


def _state(attention: object, T: int, d_model: int = 64, n_heads: int = 4) -> int:
    arch = nas.ArchConfig.from_dict(
        {
            "d_model": d_model,
            "n_heads": n_heads,
            "max_len": T,
            "layers": {"repeat": 1, "attention": attention},
        }
    )
    return nas.compute(arch, T).state_elements


def test_a_kv_cache_is_a_key_and_a_value_per_past_token_and_grouped_heads_shrink_it() -> None:
    assert _state("mha", 256) == 2 * 64 * 256
    assert _state({"type": "mha", "kv_heads": 1}, 256) == 2 * 16 * 256  # multi-query: one head's width
    assert _state({"type": "mdha", "kernel": 3}, 256) == 2 * 64 * 256 + 2 * (3 * 64)  # plus the taps


def test_a_window_bounds_the_cache_and_a_recurrence_keeps_a_fixed_state() -> None:
    window = {"type": "sliding_window", "window": 32}
    assert _state(window, 32) == _state(window, 1024) == 2 * 64 * 32
    assert _state("gated_linear", 64) == _state("gated_linear", 4096) == 4 * 16 * 16  # H x d_head^2
    assert _state("hyena", 2048) - _state("hyena", 1024) == 64 * 1024  # its convolution's input history


def test_blocks_without_keys_keep_the_values_and_a_mixture_shares_them() -> None:
    assert _state("synth_random", 128) == _state("synth_dense", 128) == 64 * 128
    mixture = {"type": "mixture", "components": ["mha", "synth_random"]}
    assert _state(mixture, 128) == 2 * 64 * 128  # mha's keys + the shared values


@pytest.mark.parametrize("block", ATTENTION.names())
def test_every_block_states_a_whole_non_negative_size(block: str) -> None:
    n = _state({"type": block, **ATTENTION.get(block).example_options()}, 128)
    assert isinstance(n, int) and n >= 0


def test_a_decoder_layer_keeps_the_source_keys_and_values() -> None:
    arch = nas.load_arch("examples/archs/seq2seq.yaml")
    c = nas.compute(arch)
    own = sum(
        ATTENTION.get(layer.attention.type).state_elements(arch.dims, layer.attention.options, c.seq_len)
        for layer in arch.layers
    )
    assert c.state_elements == own + arch.n_layers * 2 * arch.d_model * c.seq_len
    assert c.state_bytes == 4 * c.state_elements
