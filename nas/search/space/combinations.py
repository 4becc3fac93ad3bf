"""Checking every combination of a space's choices, and the stand-ins that bound its candidates.

``nas.search.space.load`` calls :func:`check_combinations` when it loads a space;
``nas.preflight`` asks :func:`one_layer_archs` for the largest and cheapest
candidates.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from nas.errors import ConfigError
from nas.models import ATTENTION, ArchConfig, AttentionBlock
from nas.search.space.params import Param, label, thaw
from nas.search.space.sampling import LayerChoices, SearchSpace

#: cap on combinations checked exhaustively when a space is loaded
_MAX_CHECKS = 20000


def chosen_options(block: type[AttentionBlock], combo: dict[str, Any]) -> dict[str, Any]:
    """A block's options for one combination of its choices, as a layer would get them.

    Values the block would draw during a search (``chosen_options``) take the top of
    their range here: the checks need a valid value, not a sample.
    """
    return thaw(block.chosen_options(dict(combo), lambda name, low, high: high))


def product(params: Mapping[str, Param]) -> Iterator[dict[str, Any]]:
    keys = list(params)
    for combo in itertools.product(*(params[k].values() for k in keys)):
        yield dict(zip(keys, combo, strict=True))


def _layer_picks(choices: LayerChoices) -> Iterator[tuple[str, dict[str, Any], Any, Any]]:
    """Every (block, its option choices, activation, mult) one stack's choices can make."""
    for name, choice in choices.blocks.items():
        for combo in product(choice.options):
            for act in choices.activation.values():
                for mult in choices.mult.values():
                    yield name, combo, act, mult


def _layer(name: str, combo: dict[str, Any], act: Any, mult: Any) -> dict[str, Any]:
    """One layer as plain data (ranges at the end the combination holds)."""
    opts = chosen_options(ATTENTION.get(name), combo)
    return {"attention": {"type": name, **opts}, "ffn": {"activation": act, "mult": mult}}


def _layer_combos(choices: LayerChoices) -> Iterator[dict[str, Any]]:
    """Every layer (as plain data) one stack's choices can make, ranges at both ends."""
    for pick in _layer_picks(choices):
        yield _layer(*pick)


def check_combinations(space: SearchSpace, choices: LayerChoices, stem: str) -> None:
    """Refuse a space in which some combination of choices cannot be built.

    Every combination of global sizes is tried with every block option and FFN
    choice of one stack (``layers`` or ``encoder``) on a one-layer model (ranges at
    both ends), so a sampled trial never fails for a reason the space could have caught.
    """
    sizes = {k: p for k, p in space.globals.items() if k not in ("n_layers", "n_encoder_layers")}
    # each menu under its own name: an `at` entry's error points at that entry, not the main menu
    named = list(zip([stem] + [f"{stem}.at.{p.index}" for p in choices.at], choices.menus(), strict=True))
    # an encoder layer is checked as one (bidirectional: a centered convolution is valid there), beside
    # the decoder's first layer
    decoder = next(_layer_combos(space.layer_choices)) if stem == "encoder" else None

    def fails(g: dict[str, Any], pick: tuple[str, dict[str, Any], Any, Any]) -> ConfigError | None:
        raw_layer = _layer(*pick)
        raw = {**g, "layers": [raw_layer]}
        if decoder is not None:
            raw = {**g, "task": space.task, "encoder_layers": [raw_layer], "layers": [decoder]}
        try:
            ArchConfig.from_dict(raw)
        except ConfigError as err:
            return err
        return None

    checked = 0
    for g in product(sizes):
        for where, menu in named:
            for pick in _layer_picks(menu):
                checked += 1
                if checked > _MAX_CHECKS:
                    return
                err = fails(g, pick)
                if err is not None:
                    causes = _causes(space, menu, g, pick, fails)
                    raise _combination_error(err, _layer(*pick), where, causes) from None


def _causes(
    space: SearchSpace,
    menu: LayerChoices,
    g: dict[str, Any],
    pick: tuple[str, dict[str, Any], Any, Any],
    fails: Any,
) -> list[str]:
    """The choices a failing combination's failure depends on, as ``key=value``: those for which
    another value of the same choice (the rest held) builds.  A choice that fails whatever its value
    is not named, so an option's own mistake is not blamed on ``d_model=64`` beside it."""
    name, combo, act, mult = pick
    out = []
    for k, p in space.globals.items():
        if k in g and p.searched and any(fails({**g, k: v}, pick) is None for v in p.values() if v != g[k]):
            out.append(f"{k}={g[k]}")
    if any(fails(g, (other, next(product(menu.blocks[other].options)), act, mult)) is None
           for other in menu.blocks if other != name):  # fmt: skip
        out.append(f"attention={name}")
    options = menu.blocks[name].options
    for k, v in combo.items():
        alternatives = [x for x in options[k].values() if x != v]
        if any(fails(g, (name, {**combo, k: x}, act, mult)) is None for x in alternatives):
            out.append(f"{k}={label(v)}")
    if any(fails(g, (name, combo, x, mult)) is None for x in menu.activation.values() if x != act):
        out.append(f"activation={act}")
    if any(fails(g, (name, combo, act, x)) is None for x in menu.mult.values() if x != mult):
        out.append(f"mult={mult:g}")
    return out


#: the sizes whose largest (smallest) values make a space's largest (cheapest) candidates
SIZE_KEYS = ("d_model", "max_len", "vocab_size")


def one_layer_archs(space: SearchSpace, largest: bool) -> Iterator[tuple[ArchConfig, int, int]]:
    """One-layer-per-stack stand-ins of the space's largest (or smallest) candidates, with the
    layer counts they stand for (decoder or LM layers, encoder layers: 0 for an LM).

    Sizes (:data:`SIZE_KEYS` and the depths) are at the top (bottom) of their choices; every
    other global, block option and FFN choice is enumerated (for a seq2seq space, each encoder
    layer with the first decoder layer and each decoder layer with the first encoder layer).
    Costs grow with each size, so these bound every candidate's (``nas.models.cost.training_bytes``
    scales a layer by the count).
    """
    pick = max if largest else min
    fixed = {k: pick(p.values()) for k, p in space.globals.items() if k in SIZE_KEYS}
    depths = ("n_layers", "n_encoder_layers")
    others = {k: p for k, p in space.globals.items() if k not in SIZE_KEYS and k not in depths}
    n_layers = pick(int(v) for v in space.globals["n_layers"].values())
    decoder = [layer for menu in space.layer_choices.menus() for layer in _layer_combos(menu)]
    if space.encoder is None:
        pairs: list[tuple[dict[str, Any], dict[str, Any] | None]] = [(layer, None) for layer in decoder]
        n_encoder = 0
    else:
        encoder = [layer for menu in space.encoder.menus() for layer in _layer_combos(menu)]
        pairs = [(layer, encoder[0]) for layer in decoder] + [(decoder[0], layer) for layer in encoder[1:]]
        n_encoder = pick(int(v) for v in space.globals["n_encoder_layers"].values())
    for g in product(others):
        for layer, enc in pairs:
            raw: dict[str, Any] = {**fixed, **g, "layers": [layer]}
            if enc is not None:
                raw.update(task=space.task, encoder_layers=[enc])
            try:
                yield ArchConfig.from_dict(raw), n_layers, n_encoder
            except ConfigError:  # a combination check_combinations had no time to try
                continue


def cheapest_lm_archs(
    space: SearchSpace, vocab_size: int, cost: Callable[[ArchConfig], tuple[float, ...]]
) -> Iterator[ArchConfig]:
    """A language-model space's cheapest candidates, whole: for each combination of the non-size globals
    and each depth, the candidate whose every layer is the cheapest its position offers, once by each
    measure ``cost(arch) -> tuple`` returns (parameters, FLOPs: the cheapest by one need not be by the
    other).  A position an ``layers.at`` entry covers draws from that entry's menu, so a per-position menu
    whose every choice breaks the caps is seen (:func:`one_layer_archs` stands every layer in for the
    cheapest layer of any menu, and missed it)."""
    fixed = {k: min(p.values()) for k, p in space.globals.items() if k in SIZE_KEYS}
    others = {k: p for k, p in space.globals.items() if k not in SIZE_KEYS and k != "n_layers"}
    choices = space.layer_choices
    for g in product(others):
        base = {**fixed, **g, "vocab_size": vocab_size}
        memo: dict[str, tuple[float, ...] | None] = {}

        def one(
            layer: dict[str, Any], base: dict[str, Any] = base, memo: Any = memo
        ) -> tuple[float, ...] | None:
            key = repr(layer)
            if key not in memo:
                try:
                    memo[key] = tuple(cost(ArchConfig.from_dict({**base, "layers": [layer]})))
                except ConfigError:  # a combination check_combinations had no time to try
                    memo[key] = None
            return memo[key]

        for n in sorted({int(v) for v in space.globals["n_layers"].values()}):
            options = []
            for i in range(n):
                menu = choices.menu(i, n, "layers")
                menu_choices = LayerChoices(False, menu.attention, menu.blocks, menu.activation, menu.mult)
                options.append([layer for layer in _layer_combos(menu_choices) if one(layer) is not None])
            if any(not o for o in options):
                continue
            for k in range(len(one(options[0][0]) or ())):  # each measure cost() gives
                chosen = [min(o, key=lambda layer, k=k: one(layer)[k]) for o in options]  # type: ignore[index]
                try:
                    yield ArchConfig.from_dict({**base, "layers": chosen})
                except ConfigError:
                    continue


def _combination_error(
    err: ConfigError, raw_layer: dict[str, Any], stem: str, causes: list[str]
) -> ConfigError:
    """Point at the space's own YAML path and name the choices the failure depends on."""
    block = raw_layer["attention"]["type"]
    inner = err.path.replace("encoder_layers.0", "layers.0", 1)  # an encoder layer's: the same parts
    if inner.startswith("layers.0.attention."):
        path = f"{stem}.attention.{block}.{inner[len('layers.0.attention.') :]}"
    elif inner.startswith("layers.0.ffn"):
        path = f"{stem}.ffn" + inner[len("layers.0.ffn") :]
    elif inner.startswith("layers.0"):
        path = f"{stem}.attention.{block}"
    else:
        path = f"globals.{inner}" if inner else "globals"
    return ConfigError(f"{err.message} (with {', '.join(causes)})" if causes else err.message, path)
