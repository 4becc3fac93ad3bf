"""A validated search space as an Optuna define-by-run function, and its seed architectures.

``SearchSpace.suggest(trial)`` asks an Optuna ``Trial`` (or ``FixedTrial``)
for every choice and builds the ArchConfig.  The parameter names are stable,
because a study stores them and must load again after any code change:
``d_model``, ``n_layers``, ``layers.3.attention``,
``layers.3.attention.mdha.kernel``, ``layers.3.ffn.activation`` (or
``layers.attention`` ... when every layer shares one choice).  Whatever a block
draws beyond its listed choices is named under its own prefix too
(``layers.3.attention.mixture.weight.0``).  The YAML side is ``nas.search.space``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nas.archfile import load_arch
from nas.errors import ConfigError
from nas.models import ATTENTION, ArchConfig, AttentionSpec, FFNSpec, LayerConfig
from nas.search.params import Param, thaw

#: The known architectures a space may seed its study with (``seed_archs``), by file name.
SEED_ARCHS = ("vanilla", "primer_ez")
SEED_DIR = Path(__file__).resolve().parents[2] / "examples" / "archs"


@functools.cache
def seed_layer(name: str) -> LayerConfig:
    """The one layer that the known architecture ``name`` (``examples/archs/NAME.yaml``) repeats."""
    arch = load_arch(SEED_DIR / f"{name}.yaml")
    first = arch.layers[0]
    if any(layer != first for layer in arch.layers):
        raise ConfigError(f"a seed architecture must repeat one layer; {name}.yaml has several", "layers")
    return first


@dataclasses.dataclass(frozen=True)
class BlockChoice:
    """An attention block the space offers, with a Param per option."""

    name: str
    options: Mapping[str, Param]


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

    # -- define-by-run ---------------------------------------------------------------------
    def suggest(self, trial: Any) -> ArchConfig:
        """Ask ``trial`` (an Optuna Trial or FixedTrial) for every choice; build the ArchConfig."""
        g = {key: p.suggest(trial, key) for key, p in self.globals.items() if key != "n_layers"}
        n_layers = self.globals["n_layers"].suggest(trial, "n_layers")
        layers = []
        shared: LayerConfig | None = None
        for i in range(n_layers):
            if self.share and shared is not None:
                layers.append(shared)
                continue
            layer = self._suggest_layer(trial, "layers" if self.share else f"layers.{i}")
            shared = layer
            layers.append(layer)
        return ArchConfig(layers=tuple(layers), **g)

    def _suggest_layer(self, trial: Any, prefix: str) -> LayerConfig:
        name = self.attention.suggest(trial, f"{prefix}.attention")
        where = f"{prefix}.attention.{name}"
        opts = {k: p.suggest(trial, f"{where}.{k}") for k, p in self.blocks[name].options.items()}

        def draw(sub: str, low: float, high: float) -> float:
            return trial.suggest_float(f"{where}.{sub}", low, high)

        opts = ATTENTION.get(name).chosen_options(opts, draw)
        ffn = FFNSpec(
            self.activation.suggest(trial, f"{prefix}.ffn.activation"),
            float(self.mult.suggest(trial, f"{prefix}.ffn.mult")),
        )
        spec = AttentionSpec.from_raw({"type": name, **thaw(opts)})
        return LayerConfig(spec, ffn)

    # -- helpers --------------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """Hash of the space's content (not its file name): a study refuses a different space."""
        blob = json.dumps(thaw(dict(self.raw)), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def max_layers(self) -> int:
        return max(int(v) for v in self.globals["n_layers"].values())

    def seed_params(self, which: str) -> dict[str, Any] | None:
        """Fixed params that give every layer the layer of the known architecture ``which``, or None.

        Only the layer's choices (attention block, its options, activation) are fixed;
        sizes and widths stay the sampler's, so a seed fits any space that offers its blocks.
        """
        layer = seed_layer(which)
        block, block_opts, act = layer.attention.type, layer.attention.options.to_dict(), layer.ffn.activation
        if not self.attention.contains(block) or not self.activation.contains(act):
            return None
        options = self.blocks[block].options
        for key, value in block_opts.items():
            if key not in options or not options[key].contains(value):
                return None
        prefixes = ["layers"] if self.share else [f"layers.{i}" for i in range(self.max_layers())]
        params: dict[str, Any] = {}
        for prefix in prefixes:
            if self.attention.searched:
                params[f"{prefix}.attention"] = block
            if self.activation.searched:
                params[f"{prefix}.ffn.activation"] = act
            for key, value in block_opts.items():
                if options[key].searched:
                    params[f"{prefix}.attention.{block}.{key}"] = value
        return params

    def random_arch(self, rng: random.Random) -> ArchConfig:
        """A uniformly random architecture of the space (for tests and tools)."""
        return self.suggest(_RandomTrial(rng))


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
