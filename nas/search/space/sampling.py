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

from nas.archfile import load_arch
from nas.errors import ConfigError
from nas.models import ATTENTION, ArchConfig, AttentionSpec, FFNSpec, LayerConfig
from nas.search.space.params import Param, thaw
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
class LayerChoices:
    """What one stack's layers may be: a block (with option Params), an activation, an FFN width."""

    share: bool
    attention: Param  # categorical (or fixed) over block names
    blocks: Mapping[str, BlockChoice]
    activation: Param
    mult: Param


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

    @property
    def layer_choices(self) -> LayerChoices:
        """The choices of ``layers`` (the LM's, or the seq2seq decoder's)."""
        return LayerChoices(self.share, self.attention, self.blocks, self.activation, self.mult)

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
        stacks = [(self.layer_choices, "layers", self.max_layers())]
        if self.encoder is not None:
            stacks.append((self.encoder, "encoder", self.max_layers("n_encoder_layers")))
        for choices, stem, depth in stacks:
            fixed = _seed_stack(layer, choices, stem, depth)
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
            layers.append(_suggest_layer(trial, choices, stem if choices.share else f"{stem}.{i}"))
    return tuple(layers)


def _suggest_layer(trial: Any, choices: LayerChoices, prefix: str) -> LayerConfig:
    name = choices.attention.suggest(trial, f"{prefix}.attention")
    where = f"{prefix}.attention.{name}"
    opts = {k: p.suggest(trial, f"{where}.{k}") for k, p in choices.blocks[name].options.items()}

    def draw(sub: str, low: float, high: float) -> float:
        return trial.suggest_float(f"{where}.{sub}", low, high)

    opts = ATTENTION.get(name).chosen_options(opts, draw)
    ffn = FFNSpec(
        choices.activation.suggest(trial, f"{prefix}.ffn.activation"),
        float(choices.mult.suggest(trial, f"{prefix}.ffn.mult")),
    )
    spec = AttentionSpec.from_raw({"type": name, **thaw(opts)})
    return LayerConfig(spec, ffn)


def _seed_stack(layer: LayerConfig, choices: LayerChoices, stem: str, depth: int) -> dict[str, Any] | None:
    """The params that make every layer of one stack ``layer``'s choices, or None if it cannot."""
    block, act = layer.attention.type, layer.ffn.activation
    if not choices.attention.contains(block) or not choices.activation.contains(act):
        return None
    options = choices.blocks[block].options
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
    for prefix in [stem] if choices.share else [f"{stem}.{i}" for i in range(depth)]:
        if choices.attention.searched:
            params[f"{prefix}.attention"] = block
        if choices.activation.searched:
            params[f"{prefix}.ffn.activation"] = act
        for key, value in block_opts.items():
            if options[key].searched:
                params[f"{prefix}.attention.{block}.{key}"] = value
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
