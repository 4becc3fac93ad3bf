"""A validated search space as an Optuna define-by-run function, and its seed architectures.

``SearchSpace.suggest(trial)`` asks an Optuna ``Trial`` (or ``FixedTrial``)
for every choice and builds the ArchConfig.  The parameter names are stable,
because a study stores them and must load again after any code change:
``d_model``, ``n_layers``, ``layers.3.attention``,
``layers.3.attention.mdha.kernel``, ``layers.3.ffn.activation`` (or
``layers.attention`` ... when every layer shares one choice).  Whatever a block
draws beyond its listed choices is named under its own prefix too
(``layers.3.attention.mixture.weight.0``).  A ``task: seq2seq`` space adds
``n_encoder_layers`` and the encoder's layers as ``encoder.2.attention``, ...
(``layers.*`` are then the decoder's).  The YAML side is ``nas.search.space.load``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from nas.errors import ConfigError
from nas.files.archfile import load_arch
from nas.models import ATTENTION, ArchConfig, AttentionSpec, FFNSpec, LayerConfig
from nas.search.space.params import Param, thaw
from nas.search.space.where import Position, covers
from nas.shipped import shipped_arch

#: The known architectures a space may seed its study with (``seed_archs``), by shipped file name.
SEED_ARCHS = ("vanilla", "primer_ez", "transformer_pp")
#: What a space seeds with when it does not say (``seed_archs``).
DEFAULT_SEED_ARCHS = ("vanilla", "primer_ez")
#: Global components a seed keeps (its positions and normalisation), not only its layer.
SEED_GLOBALS = ("pos_encoding", "norm")


@functools.cache
def seed_arch(name: str) -> ArchConfig:
    """The shipped architecture ``name`` (``examples/archs/NAME.yaml``), which must repeat one layer."""
    arch = load_arch(shipped_arch(name))
    if any(layer != arch.layers[0] for layer in arch.layers):
        raise ConfigError(f"a seed architecture must repeat one layer; {name}.yaml has several", "layers")
    return arch


@dataclasses.dataclass(frozen=True)
class BlockChoice:
    """An attention block the space offers, with a Param per option."""

    name: str
    options: Mapping[str, Param]


@dataclasses.dataclass(frozen=True)
class Placement:
    """An ``at`` entry: layer positions that draw from their own menu (or a pinned choice).

    ``positions`` lists indices; otherwise the range ``first`` .. ``last``, both included when they
    are indices (negative ones count from the end); a share ``"P%"`` cuts the stack at P/100 x n:
    ``first: "50%"`` is the top half, ``last: "50%"`` the layers below the cut.  The parts it gives
    (attention, ffn) replace the stack's menu there; its parameters are named ``stem.I.atJ.*``.
    """

    index: int
    positions: tuple[Position, ...] = ()
    first: Position = 0
    last: Position = -1
    attention: Param | None = None
    blocks: Mapping[str, BlockChoice] | None = None
    activation: Param | None = None
    mult: Param | None = None

    def covers(self, i: int, n: int) -> bool:
        return covers(self.positions, self.first, self.last, i, n)


@dataclasses.dataclass(frozen=True)
class LayerMenu:
    """What layer I of a stack draws from, and the prefixes its parameters are named under."""

    attention: Param
    blocks: Mapping[str, BlockChoice]
    activation: Param
    mult: Param
    attention_prefix: str
    ffn_prefix: str


@dataclasses.dataclass(frozen=True)
class LayerChoices:
    """What one stack's layers may be: a block (with option Params), an activation, an FFN width,
    and ``at``: positions with menus of their own."""

    share: bool
    attention: Param  # categorical (or fixed) over block names
    blocks: Mapping[str, BlockChoice]
    activation: Param
    mult: Param
    at: tuple[Placement, ...] = ()

    def menu(self, i: int, n: int, stem: str) -> LayerMenu:
        """Layer ``i`` of ``n``: the stack's menu, with the parts of every ``at`` entry covering it
        (a later entry over an earlier one)."""
        prefix = stem if self.share else f"{stem}.{i}"
        att = (self.attention, self.blocks, prefix)
        ffn = (self.activation, self.mult, prefix)
        for p in self.at:
            if p.covers(i, n):
                tagged = f"{stem}.{i}.at{p.index}"
                if p.attention is not None:
                    att = (p.attention, p.blocks or {}, tagged)
                if p.activation is not None:
                    ffn = (p.activation, p.mult or self.mult, tagged)
        return LayerMenu(att[0], att[1], ffn[0], ffn[1], att[2], ffn[2])

    def menus(self) -> list[LayerChoices]:
        """The stack's menu and each ``at`` entry's, as whole layer choices (for the load-time checks)."""
        out = [self]
        for p in self.at:
            out.append(
                dataclasses.replace(
                    self,
                    at=(),
                    attention=p.attention or self.attention,
                    blocks=p.blocks or self.blocks,
                    activation=p.activation or self.activation,
                    mult=p.mult or self.mult,
                )
            )
        return out


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """A validated search space; ``suggest(trial)`` turns an Optuna trial into an ArchConfig."""

    name: str
    source: str
    globals: Mapping[str, Param]
    share: bool
    attention: Param  # categorical (or fixed) over block names
    blocks: Mapping[str, BlockChoice]
    activation: Param
    mult: Param
    constraints: Mapping[str, float]
    recipe: Mapping[str, Any]
    budget: Mapping[str, Any] | None
    seed_archs: tuple[str, ...]
    raw: Mapping[str, Any]
    task: str = "lm"
    #: the encoder's choices (``task: seq2seq``); the flat fields above are the (decoder) layers'
    encoder: LayerChoices | None = None
    #: ``layers.at``: positions of the (decoder) layers with menus of their own
    at: tuple[Placement, ...] = ()

    @property
    def layer_choices(self) -> LayerChoices:
        """The choices of ``layers`` (the LM's, or the seq2seq decoder's)."""
        return LayerChoices(self.share, self.attention, self.blocks, self.activation, self.mult, self.at)

    # -- define-by-run ---------------------------------------------------------------------
    def suggest(self, trial: Any) -> ArchConfig:
        """Ask ``trial`` (an Optuna Trial or FixedTrial) for every choice; build the ArchConfig."""
        depths = ("n_layers", "n_encoder_layers")
        g = {key: p.suggest(trial, key) for key, p in self.globals.items() if key not in depths}
        n_layers = self.globals["n_layers"].suggest(trial, "n_layers")
        layers = _suggest_stack(trial, self.layer_choices, n_layers, "layers")
        if self.encoder is None:
            return ArchConfig(layers=layers, **g)
        n_encoder = self.globals["n_encoder_layers"].suggest(trial, "n_encoder_layers")
        encoder = _suggest_stack(trial, self.encoder, n_encoder, "encoder")
        return ArchConfig(layers=layers, task=self.task, encoder_layers=encoder, **g)

    # -- helpers --------------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """Hash of the space's content (not its file name): a study refuses a different space.

        The spec's data, search and resources sections are not the space (a study made
        before they existed hashed the same file without them).
        """
        raw = {k: v for k, v in self.raw.items() if k not in ("data", "search", "resources")}
        blob = json.dumps(thaw(raw), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def max_layers(self, key: str = "n_layers") -> int:
        return max(int(v) for v in self.globals[key].values())

    def depths(self, key: str = "n_layers") -> list[int]:
        """Every depth the space may sample for ``key`` (a range: every value between its ends)."""
        values = [int(v) for v in self.globals[key].values()]
        p = self.globals[key]
        if p.kind == "int":
            return list(range(min(values), max(values) + 1, int(p.step or 1)))
        return sorted(set(values))

    def seed_params(self, which: str) -> dict[str, Any] | None:
        """Fixed params that give every layer the layer of the known architecture ``which``, or None.

        The layer's choices (attention block, its options, activation) are fixed, and so are
        the seed's positions and normalisation (``SEED_GLOBALS``: vanilla's learned positions
        and LayerNorm, ``transformer_pp``'s rotary positions and RMSNorm); sizes and widths stay
        the sampler's, so a seed fits any space that offers its blocks and components (a seq2seq
        space: in both stacks).  A space that does not list a component has the default there.
        """
        arch = seed_arch(which)
        layer = arch.layers[0]
        params: dict[str, Any] = {}
        defaults = {f.name: f.default for f in dataclasses.fields(ArchConfig)}
        for key in SEED_GLOBALS:
            value, offered = getattr(arch, key), self.globals.get(key)
            if offered is None:
                if value != defaults[key]:
                    return None
            elif not offered.contains(value):
                return None
            elif offered.searched:
                params[key] = value
        stacks = [(self.layer_choices, "layers", self.depths("n_layers"))]
        if self.encoder is not None:
            stacks.append((self.encoder, "encoder", self.depths("n_encoder_layers")))
        for choices, stem, depths in stacks:
            fixed = _seed_stack(layer, choices, stem, depths if choices.at else [max(depths)])
            if fixed is None:
                return None
            params.update(fixed)
        return params

    def random_arch(self, rng: random.Random) -> ArchConfig:
        """A uniformly random architecture of the space (for tests and tools)."""
        return self.suggest(_RandomTrial(rng))


def _suggest_stack(trial: Any, choices: LayerChoices, n: int, stem: str) -> tuple[LayerConfig, ...]:
    """``n`` layers of one stack, named ``stem.I.*`` (``stem.*`` when the stack shares one choice)."""
    layers: list[LayerConfig] = []
    for i in range(n):
        if choices.share and layers:
            layers.append(layers[0])
        else:
            layers.append(_suggest_layer(trial, choices.menu(i, n, stem)))
    return tuple(layers)


def _suggest_layer(trial: Any, menu: LayerMenu) -> LayerConfig:
    name = menu.attention.suggest(trial, f"{menu.attention_prefix}.attention")
    where = f"{menu.attention_prefix}.attention.{name}"
    opts = {k: p.suggest(trial, f"{where}.{k}") for k, p in menu.blocks[name].options.items()}

    def draw(sub: str, low: float, high: float) -> float:
        return trial.suggest_float(f"{where}.{sub}", low, high)

    opts = ATTENTION.get(name).chosen_options(opts, draw)
    ffn = FFNSpec(
        menu.activation.suggest(trial, f"{menu.ffn_prefix}.ffn.activation"),
        float(menu.mult.suggest(trial, f"{menu.ffn_prefix}.ffn.mult")),
    )
    spec = AttentionSpec.from_raw({"type": name, **thaw(opts)})
    return LayerConfig(spec, ffn)


def _seed_stack(
    layer: LayerConfig, choices: LayerChoices, stem: str, depths: Sequence[int]
) -> dict[str, Any] | None:
    """The params that make every layer of one stack ``layer``'s choices at each of ``depths``, or None
    if some layer's menu cannot (an ``at`` entry that pins another block, say)."""
    params: dict[str, Any] = {}
    for n in depths:
        for i in range(1 if choices.share else n):
            fixed = _seed_layer(layer, choices.menu(i, n, stem))
            if fixed is None:
                return None
            params.update(fixed)
    return params


def _seed_layer(layer: LayerConfig, menu: LayerMenu) -> dict[str, Any] | None:
    """The params that make one layer ``layer``'s block and activation under ``menu``, or None."""
    block, act = layer.attention.type, layer.ffn.activation
    if not menu.attention.contains(block) or not menu.activation.contains(act):
        return None
    options = menu.blocks[block].options
    block_opts = {}
    for f in dataclasses.fields(layer.attention.options):  # every option, those left at their default too
        value = getattr(layer.attention.options, f.name)
        if f.name in options:
            if not options[f.name].contains(value):
                return None
            block_opts[f.name] = value
        elif value != f.default:  # an option the space does not offer has its default there
            return None
    params: dict[str, Any] = {}
    if menu.attention.searched:
        params[f"{menu.attention_prefix}.attention"] = block
    if menu.activation.searched:
        params[f"{menu.ffn_prefix}.ffn.activation"] = act
    for key, value in block_opts.items():
        if options[key].searched:
            params[f"{menu.attention_prefix}.attention.{block}.{key}"] = value
    return params


class _RandomTrial:
    """Just enough of Optuna's Trial for ``SearchSpace.suggest`` to draw uniform samples."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.params: dict[str, Any] = {}

    def _memo(self, name: str, draw: Any) -> Any:
        if name not in self.params:
            self.params[name] = draw()
        return self.params[name]

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._memo(name, lambda: self.rng.choice(list(choices)))

    def suggest_int(self, name: str, low: int, high: int, step: int = 1, log: bool = False) -> int:
        return self._memo(name, lambda: self.rng.randrange(low, high + 1, step))

    def suggest_float(
        self, name: str, low: float, high: float, step: float | None = None, log: bool = False
    ) -> float:
        return self._memo(name, lambda: self.rng.uniform(low, high))
