"""The class-level block contract: what a block must write (abstract) and what it states (capabilities).

``AttentionBlock`` marks ``forward``, ``count_params`` and ``count_flops``
abstract (``ValueAttention`` also ``scores``), and every registered class
states ``bidirectional`` and ``has_dot_terms`` in its own body;
``ATTENTION.register`` refuses a class that misses either with one line.
The table below pins the shipped blocks' capabilities, so a change to one
is a decision made here, not a side effect of a class hierarchy.
"""

from __future__ import annotations

import pytest
from model_cases import Variant

import nas
from nas.models import Dims, Flops
from nas.models.attention.base import (
    DECLARED,
    AttentionBlock,
    BlockOptions,
    BlockRegistry,
    FFNSpec,
    ValueAttention,
)
from nas.models.attention.mha import MultiHeadAttention

#: name: (bidirectional, has_dot_terms, mixable, static_scores, replaces_ffn)
CAPABILITIES: dict[str, tuple[bool, bool, bool, bool, bool]] = {
    "additive": (True, False, True, False, False),
    "gated_linear": (False, False, False, False, False),
    "hyena": (False, False, False, False, False),
    "mdha": (True, True, True, False, False),
    "mha": (True, True, True, False, False),
    "mixture": (True, False, False, False, False),
    "multi_branch": (True, False, False, False, True),
    "sliding_window": (True, True, False, False, False),  # a mixture would drop its window
    "synth_dense": (True, True, True, False, False),
    "synth_factorized_dense": (True, False, True, False, False),
    "synth_factorized_random": (True, False, True, True, False),
    "synth_fixed_random": (True, False, True, True, False),
    "synth_random": (True, False, True, True, False),
}


def capabilities(cls: type[AttentionBlock]) -> tuple[bool, bool, bool, bool, bool]:
    return (cls.bidirectional, cls.has_dot_terms, cls.mixable, cls.static_scores, cls.replaces_ffn)


def test_shipped_blocks_have_the_capabilities_of_the_table() -> None:
    shipped = {name: capabilities(nas.ATTENTION.get(name)) for name in CAPABILITIES}
    assert shipped == CAPABILITIES


def test_every_registered_block_keeps_the_class_contract(variant: Variant) -> None:
    cls = variant.cls
    assert not cls.__abstractmethods__
    assert set(DECLARED) <= cls.__dict__.keys(), f"{cls.__qualname__} inherits a capability"
    assert not cls.has_dot_terms or cls.dot_terms is not AttentionBlock.dot_terms


class NoFlops(AttentionBlock):
    """Writes forward and count_params, forgets count_flops."""

    bidirectional = False
    has_dot_terms = False

    def forward(self, x, keep=None):  # type: ignore[no-untyped-def]
        return x

    @classmethod
    def count_params(cls, dims, opts, ffn, with_values=True):  # type: ignore[no-untyped-def]
        return 0


def test_a_block_missing_a_required_method_is_refused_at_registration() -> None:
    with pytest.raises(TypeError) as err:
        BlockRegistry("test block").register("no_flops")(NoFlops)
    message = str(err.value)
    assert "'no_flops' (NoFlops in " in message and "test_block_class.py" in message
    assert "does not implement count_flops, which every block must" in message
    with pytest.raises(TypeError, match="abstract"):  # nor can it be built unregistered
        NoFlops(Dims(32, 4, 16), BlockOptions(), ffn=FFNSpec())


def test_a_value_attention_without_scores_is_refused() -> None:
    class NoScores(ValueAttention):
        bidirectional = True
        has_dot_terms = False

        @classmethod
        def count_params(cls, dims, opts, ffn, with_values=True):  # type: ignore[no-untyped-def]
            return cls.value_params(dims)

        @classmethod
        def count_flops(cls, dims, opts, ffn, seq_len, with_values=True):  # type: ignore[no-untyped-def]
            return Flops()

    with pytest.raises(TypeError, match="does not implement scores"):
        BlockRegistry("test block").register("no_scores")(NoScores)


def test_capabilities_are_stated_not_inherited() -> None:
    class Quiet(MultiHeadAttention):  # says nothing: a parent's capabilities would carry over
        pass

    class HalfSaid(MultiHeadAttention):
        bidirectional = False

    registry = BlockRegistry("test block")
    with pytest.raises(TypeError, match="'quiet' .* does not state bidirectional and has_dot_terms in its"):
        registry.register("quiet")(Quiet)
    with pytest.raises(TypeError, match="does not state has_dot_terms in its own class body"):
        registry.register("half")(HalfSaid)
    assert "quiet" not in registry and "half" not in registry


def test_a_stated_capability_must_have_its_code() -> None:
    class Claims(NoFlops):
        has_dot_terms = True  # but no dot_terms
        bidirectional = False

        @classmethod
        def count_flops(cls, dims, opts, ffn, seq_len, with_values=True):  # type: ignore[no-untyped-def]
            return Flops()

    class Mixable(Claims):
        has_dot_terms = False
        bidirectional = False
        mixable = True  # but no scores

    with pytest.raises(TypeError, match="says has_dot_terms = True but writes no dot_terms"):
        BlockRegistry("test block").register("claims")(Claims)
    with pytest.raises(TypeError, match="says mixable = True but writes no scores"):
        BlockRegistry("test block").register("mixable")(Mixable)
