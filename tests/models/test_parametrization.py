"""``recipe.parametrization``: completep's coordinate check, its rules per parameter kind, and standard
at the base shape.

The coordinate check is muP's (Yang et al. 2022, microsoft/mup's README; nanoGPT-mup's
``completep_examples``): train a few steps at a large rate, then measure the mean absolute value
of every layer's output and of the logits, at widths 1/4x to 4x of a base shape (depth kept) and
depths 1/2x to 4x (width kept).  Under completep they must stay within WIDTH_FACTOR across widths and
DEPTH_FACTOR across depths; under standard they must not (so the check can fail, and does below when a
block declares its matrices as vectors).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import nas
from evaluators.model import prepare_model
from evaluators.step import make_optimizer
from nas.models.attention.mha import MultiHeadAttention
from nas.models.ffn import FeedForward
from nas.models.parametrization import (
    Shape,
    UndeclaredParameter,
    apply,
    parameter_kinds,
    shape_of,
    with_base,
)
from nas.spec.training import TrainRecipe

BASE_WIDTH, BASE_DEPTH, D_HEAD, VOCAB, T, BATCH = 32, 4, 8, 64, 32, 4
WIDTHS = (8, 32, 128)  # 1/4x, 1x, 4x
DEPTHS = (2, 4, 16)  # 1/2x, 1x, 4x
STEPS, LR = 5, 1e-2  # a rate large enough that standard's growth shows after a few Adam steps
#: completep's largest max/min ratio of any measured coordinate across the widths (16x apart) and across
#: the depths (8x apart).  Measured (this test's seeds), the largest spread per architecture: completep
#: 2.7 to 4.2 across widths (4.2: Transformer++'s second layer), 1.3 to 2.1 across depths; standard 56 to
#: 168 across widths, 5.6 to 16.8 across depths.
WIDTH_FACTOR, DEPTH_FACTOR = 5.0, 3.0

MHA = {"attention": "mha", "ffn": {"activation": "relu", "mult": 4}}
ARCHS: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {  # globals, the repeated layer pattern
    "vanilla": ({"pos_encoding": "learned"}, [MHA]),
    "transformer_pp": (
        {"pos_encoding": "rope", "rope_base": 10000.0, "norm": "rmsnorm"},
        [{"attention": "mha", "ffn": {"activation": "swiglu", "mult": 4}}],
    ),
    "gla_hybrid": (
        {"pos_encoding": "learned"},
        [{"attention": {"type": "gated_linear", "gate": "data"}, "ffn": MHA["ffn"]}, MHA],
    ),
    "hyena_hybrid": ({"pos_encoding": "learned"}, [{"attention": {"type": "hyena"}, "ffn": MHA["ffn"]}, MHA]),
}


def arch(name: str, width: int, depth: int) -> nas.ArchConfig:
    top, pattern = ARCHS[name]
    layers = [pattern[i % len(pattern)] for i in range(depth)]
    raw = {"vocab_size": VOCAB, "d_model": width, "n_heads": width // D_HEAD, "max_len": T,
           "tie_embeddings": True, **top, "layers": layers}  # fmt: skip
    return nas.ArchConfig.from_dict(raw)


def recipe(parametrization: str, lr: float = LR) -> TrainRecipe:
    base = {"base_width": BASE_WIDTH, "base_depth": BASE_DEPTH} if parametrization == "completep" else {}
    return TrainRecipe(batch_size=BATCH, seq_len=T, lr=lr, parametrization=parametrization, **base)


def coordinates(a: nas.ArchConfig, r: TrainRecipe) -> tuple[list[float], float]:
    """Mean |output| of each layer and mean |logit| on a held batch after STEPS steps of the trainer's
    own step (its optimizer groups and multipliers)."""
    prep = prepare_model(a, r, torch.device("cpu"))
    data = torch.randint(0, VOCAB, (STEPS + 1, BATCH, T + 1), generator=torch.Generator().manual_seed(0))
    for s in range(STEPS):
        prep.step.set_lr(r.lr)
        prep.step(data[s, :, :-1], data[s, :, 1:])
    outs: list[float] = []
    hooks = [
        layer.register_forward_hook(lambda _m, _i, o: outs.append(o.abs().mean().item()))
        for layer in prep.model.layers
    ]
    with torch.no_grad():
        logits = prep.model(data[-1, :, :-1])
    for h in hooks:
        h.remove()
    return outs, logits.abs().mean().item()


def spread(values: list[float]) -> float:
    return max(values) / min(values)


def width_spreads(name: str, parametrization: str) -> list[float]:
    """max/min across WIDTHS of each layer's output and of the logits (depth BASE_DEPTH)."""
    runs = [coordinates(arch(name, w, BASE_DEPTH), recipe(parametrization)) for w in WIDTHS]
    per_layer = [spread([outs[i] for outs, _ in runs]) for i in range(BASE_DEPTH)]
    return [*per_layer, spread([logits for _, logits in runs])]


def depth_spreads(name: str, parametrization: str) -> list[float]:
    """max/min across DEPTHS of the last layer's output, the mean layer output and the logits."""
    runs = [coordinates(arch(name, BASE_WIDTH, d), recipe(parametrization)) for d in DEPTHS]
    return [
        spread([outs[-1] for outs, _ in runs]),
        spread([sum(outs) / len(outs) for outs, _ in runs]),
        spread([logits for _, logits in runs]),
    ]


@pytest.mark.parametrize("name", list(ARCHS))
def test_coordinates_stay_put_under_completep_and_grow_under_standard(name: str) -> None:
    complete_w, standard_w = width_spreads(name, "completep"), width_spreads(name, "standard")
    assert max(complete_w) < WIDTH_FACTOR, complete_w
    assert max(standard_w) > WIDTH_FACTOR, standard_w
    complete_d, standard_d = depth_spreads(name, "completep"), depth_spreads(name, "standard")
    assert max(complete_d) < DEPTH_FACTOR, complete_d
    assert max(standard_d) > DEPTH_FACTOR, standard_d  # the residual stream grows without 1/L branches


def test_wrongly_declared_kinds_fail_the_coordinate_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # an FFN that called its matrices vectors would train them at the base rate at every width
    monkeypatch.setattr(FeedForward, "param_kinds", {"fc_in.weight": "vector", "fc_out.weight": "vector"})
    assert max(width_spreads("vanilla", "completep")) > WIDTH_FACTOR


# -- standard at the base shape, and the rules away from it ----------------------------------------
def test_completep_at_its_base_shape_trains_exactly_as_standard() -> None:
    a = arch("gla_hybrid", BASE_WIDTH, BASE_DEPTH)
    own = TrainRecipe(batch_size=BATCH, seq_len=T, lr=LR, parametrization="completep")
    for r in (own, recipe("completep")):
        assert coordinates(a, r) == coordinates(a, recipe("standard"))


def test_completep_away_from_its_base_differs_from_standard() -> None:
    a = arch("vanilla", 2 * BASE_WIDTH, BASE_DEPTH)
    assert coordinates(a, recipe("completep")) != coordinates(a, recipe("standard"))


def test_rules_per_kind_at_twice_the_width_and_depth() -> None:
    a = arch("vanilla", 2 * BASE_WIDTH, 2 * BASE_DEPTH)
    torch.manual_seed(0)
    standard = nas.build_model(a)
    torch.manual_seed(0)
    model = nas.build_model(a)
    apply(model, Shape(2.0, 2.0))
    # init: hidden / sqrt(m); GPT-2's residual 1/sqrt(2L) taken at the base depth; embeddings, norms kept
    layer, ref = model.layers[0], standard.layers[0]
    torch.testing.assert_close(layer.attn.qkv.weight, ref.attn.qkv.weight / 2**0.5)
    torch.testing.assert_close(layer.ffn.fc_out.weight, ref.ffn.fc_out.weight / 2**0.5 * 2**0.5)
    torch.testing.assert_close(model.tok_emb.weight, standard.tok_emb.weight)
    assert layer.branch_mult == 0.5 and model.logit_mult == 0.5
    opt = make_optimizer(model, recipe("completep"), torch.device("cpu"))
    group_of = {id(p): g for g in opt.param_groups for p in g["params"]}
    hidden, emb = group_of[id(layer.attn.qkv.weight)], group_of[id(model.tok_emb.weight)]
    norm = group_of[id(layer.ln_attn.weight)]
    assert hidden["lr_scale"] == 0.5 and hidden["weight_decay"] == pytest.approx(0.2)
    assert emb["lr_scale"] == 1.0 and emb["weight_decay"] == pytest.approx(0.1)
    assert norm["lr_scale"] == 1.0 and norm["weight_decay"] == 0.0
    assert {g["eps"] for g in opt.param_groups} == {1e-8 / 4}


def test_a_blocks_readout_has_its_multiplier_folded_in() -> None:
    a = arch("gla_hybrid", 2 * BASE_WIDTH, BASE_DEPTH)
    torch.manual_seed(0)
    standard = nas.build_model(a)
    torch.manual_seed(0)
    model = nas.build_model(a)
    apply(model, Shape(2.0, 1.0))
    down, ref = model.layers[0].attn.gate_down.weight, standard.layers[0].attn.gate_down.weight
    torch.testing.assert_close(down, ref / 2)  # init x 1/m ...
    opt = make_optimizer(model, recipe("completep"), torch.device("cpu"))
    group = next(g for g in opt.param_groups if any(p is down for p in g["params"]))
    assert group["lr_scale"] == 0.5  # ... and lr x 1/m: its output scaled by 1/m, under AdamW
    up = model.layers[0].attn.gate_up.weight  # out of the fixed rank: a vector
    assert next(g for g in opt.param_groups if any(p is up for p in g["params"]))["lr_scale"] == 1.0


def test_the_schedule_scales_each_group_relatively() -> None:
    grown = arch("vanilla", 2 * BASE_WIDTH, BASE_DEPTH)
    prep = prepare_model(grown, recipe("completep"), torch.device("cpu"))
    prep.step.set_lr(0.04)
    assert sorted({g["lr"] for g in prep.step.optimizer.param_groups}) == [0.02, 0.04]


def test_an_undeclared_parameter_is_named() -> None:
    class Extra(MultiHeadAttention):
        bidirectional = False
        has_dot_terms = False

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.gain = nn.Parameter(torch.ones(4))

    block = Extra(nas.models.Dims(32, 4, 16), nas.ATTENTION.get("mha").Options(), ffn=nas.models.FFNSpec())
    with pytest.raises(UndeclaredParameter, match="'gain' .Extra. has no declared kind"):
        parameter_kinds(block)


def test_an_unknown_kind_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FeedForward, "param_kinds", {"fc_in.weight": "matrix", "fc_out.weight": "hidden"})
    valid = "'matrix'; valid kinds: hidden, vector, embedding, readout"
    with pytest.raises(UndeclaredParameter, match=valid):
        parameter_kinds(nas.build_model(arch("vanilla", BASE_WIDTH, 1)))


def test_the_base_shape_defaults_to_the_architecture_and_is_kept_when_stated() -> None:
    a = arch("vanilla", 64, 8)
    assert with_base(TrainRecipe(parametrization="completep"), a).base_width == 64
    assert with_base(recipe("completep"), a).base_width == BASE_WIDTH
    assert with_base(TrainRecipe(), a) == TrainRecipe()
    assert shape_of(a, recipe("completep")) == Shape(2.0, 2.0)
    assert shape_of(a, TrainRecipe()) == Shape()


def test_a_saved_completep_model_reloads_with_its_multipliers(tmp_path: Any) -> None:
    from nas.files.checkpoint import load_model, save_checkpoint

    a = arch("vanilla", 2 * BASE_WIDTH, BASE_DEPTH)
    r = recipe("completep")
    prep = prepare_model(a, r, torch.device("cpu"))
    path = tmp_path / "m.safetensors"
    save_checkpoint(path, prep.model, recipe=r.to_dict())
    idx = torch.randint(0, VOCAB, (2, T))
    prep.model.eval()
    loaded = load_model(path)
    assert loaded.logit_mult == 0.5
    torch.testing.assert_close(loaded(idx), prep.model(idx))


def test_a_search_worker_scales_every_candidate_against_the_stated_base(corpus_dir: Any) -> None:
    """A search's spec states one base shape in its recipe; the worker's evaluator (built from the spec's
    plain data, as on a Ray worker) trains each candidate relative to it, whatever its own shape."""
    from evaluators.lm import LMEvaluator
    from nas.data import load_corpus
    from nas.spec.training import Budget

    settings = {"recipe": {**recipe("completep").to_dict(), "eval_batches": 1}, "device": "cpu", "threads": 1}
    ev = LMEvaluator.from_settings({**settings, "data": load_corpus(str(corpus_dir))})
    wide = ev.evaluate(arch("vanilla", 2 * BASE_WIDTH, BASE_DEPTH).with_vocab(256), Budget("steps", 1))
    deep = ev.evaluate(arch("vanilla", BASE_WIDTH, 2 * BASE_DEPTH).with_vocab(256), Budget("steps", 1))
    assert (wide.parametrization["width_mult"], wide.parametrization["depth_mult"]) == (2.0, 1.0)
    assert (deep.parametrization["width_mult"], deep.parametrization["depth_mult"]) == (1.0, 2.0)
    assert wide.parametrization["base_width"] == deep.parametrization["base_width"] == BASE_WIDTH
