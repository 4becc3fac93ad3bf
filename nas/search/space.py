"""YAML search spaces -> validated data -> an Optuna define-by-run function.

A space file is data only (loaded with ``yaml.safe_load``).  Any value is a
*parameter*: a scalar is fixed, a list is a categorical choice, and
``{low: L, high: H[, step: S][, log: true]}`` is a numeric range.  See
``docs/search_spaces.md`` for the format.  Parameter names are stable and
readable: ``d_model``, ``n_layers``, ``layers.3.attention``,
``layers.3.attention.mdha.kernel``, ``layers.3.ffn.activation`` (or
``layers.attention`` ... when every layer shares one choice).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import os
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from nas.archfile import read_yaml
from nas.errors import ConfigError
from nas.models import ACTIVATIONS, ATTENTION, ArchConfig, AttentionSpec, FFNSpec, LayerConfig

GLOBAL_KEYS = ("d_model", "n_heads", "n_layers", "max_len", "pos_encoding", "tie_embeddings", "vocab_size")
TOP_KEYS = ("name", "description", "globals", "layers", "constraints", "recipe", "budget", "seed_archs")
LAYER_KEYS = ("share", "attention", "ffn")
CONSTRAINT_KEYS = ("max_params", "max_flops_per_token")
SEED_ARCHS = ("vanilla", "primer_ez")
#: cap on combinations checked exhaustively when a space is loaded
_MAX_CHECKS = 20000


# ---------------------------------------------------------------------------------------------
# Parameters
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Param:
    """One searchable (or fixed) value.

    kind: "fixed" (``value``), "categorical" (``choices``), "int" or "float" (``low``, ``high``,
    ``step``, ``log``).  Categorical choices that are not plain scalars (a list of mixture
    components) are offered to Optuna by their label, ``label(choice)``.
    """

    kind: str
    value: Any = None
    choices: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0
    step: float | None = None
    log: bool = False

    @classmethod
    def parse(cls, raw: Any, path: str, scalar_types: tuple[type, ...] = (int, float, str, bool)) -> Param:
        if isinstance(raw, Mapping) and ("low" in raw or "high" in raw):
            unknown = sorted(set(raw) - {"low", "high", "step", "log"})
            if unknown:
                raise ConfigError(f"unknown key {unknown[0]!r} in a range; valid: low, high, step, log", path)
            low, high = raw.get("low"), raw.get("high")
            for key, v in (("low", low), ("high", high)):
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise ConfigError(f"a range needs numeric low and high, got {key}={v!r}", path)
            if low > high:
                raise ConfigError(f"range low {low} is above high {high}", path)
            step, log = raw.get("step"), raw.get("log", False)
            if not isinstance(log, bool):
                raise ConfigError(f"log must be true or false, got {log!r}", path)
            if step is not None and (isinstance(step, bool) or not isinstance(step, (int, float)) or step <= 0):
                raise ConfigError(f"step must be a positive number, got {step!r}", path)
            if log and low <= 0:
                raise ConfigError("a log range needs low > 0", path)
            if log and step is not None:
                raise ConfigError("a range cannot have both step and log", path)
            is_int = all(isinstance(v, int) for v in (low, high)) and (step is None or isinstance(step, int))
            return cls("int" if is_int else "float", low=low, high=high, step=step, log=log)
        if isinstance(raw, list):
            if not raw:
                raise ConfigError("an empty list offers nothing to choose", path)
            labels = [label(c) for c in raw]
            if len(set(labels)) != len(labels):
                raise ConfigError(f"lists the same choice twice: {raw!r}", path)
            return cls("categorical", choices=tuple(_freeze(c) for c in raw))
        if isinstance(raw, Mapping):
            raise ConfigError(
                "must be a value, a list of choices, or a range {low: .., high: ..}", path
            )
        return cls("fixed", value=raw)

    def values(self) -> list[Any]:
        """Every value (ranges: both ends and, when small, every step) for validation."""
        if self.kind == "fixed":
            return [self.value]
        if self.kind == "categorical":
            return list(self.choices)
        if self.kind == "int":
            step = int(self.step or 1)
            n = (int(self.high) - int(self.low)) // step + 1
            if n <= 64 and not self.log:
                return list(range(int(self.low), int(self.high) + 1, step))
            return [int(self.low), int(self.high)]
        return [self.low, self.high]

    def suggest(self, trial: Any, name: str) -> Any:
        if self.kind == "fixed":
            return self.value
        if self.kind == "categorical":
            if all(isinstance(c, (int, float, str, bool)) or c is None for c in self.choices):
                return trial.suggest_categorical(name, list(self.choices))
            by_label = {label(c): c for c in self.choices}
            return by_label[trial.suggest_categorical(name, list(by_label))]
        if self.kind == "int":
            return trial.suggest_int(name, int(self.low), int(self.high), step=int(self.step or 1), log=self.log)
        return trial.suggest_float(name, float(self.low), float(self.high), step=self.step, log=self.log)

    @property
    def searched(self) -> bool:
        return self.kind != "fixed" and not (self.kind == "categorical" and len(self.choices) == 1)

    def contains(self, value: Any) -> bool:
        if self.kind == "fixed":
            return self.value == value
        if self.kind == "categorical":
            return label(value) in {label(c) for c in self.choices}
        return self.low <= value <= self.high

    def sample(self, rng: random.Random) -> Any:
        """A uniform random value (used by space-wide sampling tests and tools)."""
        if self.kind == "fixed":
            return self.value
        if self.kind == "categorical":
            return rng.choice(self.choices)
        if self.kind == "int":
            step = int(self.step or 1)
            return rng.randrange(int(self.low), int(self.high) + 1, step)
        if self.log:
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return rng.uniform(self.low, self.high)


def label(choice: Any) -> str:
    """The string Optuna stores for a categorical choice."""
    if isinstance(choice, str):
        return choice
    if isinstance(choice, (list, tuple)):
        return "+".join(label(c) for c in choice)
    if isinstance(choice, Mapping):
        return json.dumps(_thaw(choice), sort_keys=True)
    return json.dumps(choice)


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------------------------------
# The space
# ---------------------------------------------------------------------------------------------
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
        block = self.blocks[name]
        opts = {k: p.suggest(trial, f"{prefix}.attention.{name}.{k}") for k, p in block.options.items()}
        if name == "mixture":
            opts = self._mixture_options(trial, f"{prefix}.attention.mixture", opts)
        ffn = FFNSpec(
            self.activation.suggest(trial, f"{prefix}.ffn.activation"),
            float(self.mult.suggest(trial, f"{prefix}.ffn.mult")),
        )
        spec = AttentionSpec.from_raw({"type": name, **_thaw(opts)})
        return LayerConfig(spec, ffn)

    @staticmethod
    def _mixture_options(trial: Any, prefix: str, opts: dict[str, Any]) -> dict[str, Any]:
        components = list(opts.get("components") or ())
        weights = opts.get("weights", "learned")
        if weights == "search":
            # One weight per component, searched, normalised to sum 1 by MixtureOptions.
            weights = [trial.suggest_float(f"{prefix}.weight.{j}", 0.05, 1.0) for j in range(len(components))]
        return {**opts, "components": components, "weights": weights}

    # -- helpers --------------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        """Hash of the space's content (not its file name): a study refuses a different space."""
        blob = json.dumps(_thaw(dict(self.raw)), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def max_layers(self) -> int:
        return max(int(v) for v in self.globals["n_layers"].values())

    def seed_params(self, which: str) -> dict[str, Any] | None:
        """Fixed params that make the known architecture ``which`` in this space, or None."""
        want = {"vanilla": ("mha", {}, "relu"), "primer_ez": ("mdha", {"kernel": 3}, "squared_relu")}[which]
        block, block_opts, act = want
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

    def suggest_float(self, name: str, low: float, high: float, step: float | None = None, log: bool = False) -> float:
        return self._memo(name, lambda: self.rng.uniform(low, high))


# ---------------------------------------------------------------------------------------------
# Loading and validation
# ---------------------------------------------------------------------------------------------
def load_space(path: str | os.PathLike[str]) -> SearchSpace:
    """Read and validate a search-space YAML file; errors name the file and the YAML path."""
    raw = read_yaml(path, "search space")
    try:
        return parse_space(raw, source=str(path))
    except ConfigError as err:
        raise err.in_file(str(path)) from None


def parse_space(raw: Any, source: str = "<space>") -> SearchSpace:
    if not isinstance(raw, Mapping):
        raise ConfigError("a search space must be a mapping with 'globals' and 'layers'")
    _refuse_unknown(raw, TOP_KEYS, "")
    g_raw = raw.get("globals")
    if not isinstance(g_raw, Mapping):
        raise ConfigError("is required: a mapping of d_model, n_heads, n_layers, max_len, ...", "globals")
    _refuse_unknown(g_raw, GLOBAL_KEYS, "globals")
    for key in ("d_model", "n_heads", "n_layers", "max_len"):
        if key not in g_raw:
            raise ConfigError("is required", f"globals.{key}")
    params = {key: Param.parse(g_raw[key], f"globals.{key}") for key in GLOBAL_KEYS if key in g_raw}
    for key in ("d_model", "n_heads", "n_layers", "max_len", "vocab_size"):
        if key in params:
            p = params[key]
            for v in p.values():
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise ConfigError(f"must be positive integers, got {v!r}", f"globals.{key}")
            if p.kind == "float":
                raise ConfigError("must be an integer range (integer low and high)", f"globals.{key}")

    l_raw = raw.get("layers")
    if not isinstance(l_raw, Mapping):
        raise ConfigError("is required: a mapping with attention and ffn choices", "layers")
    _refuse_unknown(l_raw, LAYER_KEYS, "layers")
    share = l_raw.get("share", False)
    if not isinstance(share, bool):
        raise ConfigError(f"must be true (one choice for every layer) or false, got {share!r}", "layers.share")
    attention, blocks = _parse_attention(l_raw.get("attention"))
    ffn_raw = l_raw.get("ffn", {})
    if not isinstance(ffn_raw, Mapping):
        raise ConfigError("must be a mapping with activation and mult", "layers.ffn")
    _refuse_unknown(ffn_raw, ("activation", "mult"), "layers.ffn")
    activation = Param.parse(ffn_raw.get("activation", "relu"), "layers.ffn.activation")
    for v in activation.values():
        ACTIVATIONS.get(v, "layers.ffn.activation")
    mult = Param.parse(ffn_raw.get("mult", 4), "layers.ffn.mult")
    for v in mult.values():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise ConfigError(f"must be positive numbers, got {v!r}", "layers.ffn.mult")

    constraints = raw.get("constraints") or {}
    if not isinstance(constraints, Mapping):
        raise ConfigError("must be a mapping of max_params and/or max_flops_per_token", "constraints")
    _refuse_unknown(constraints, CONSTRAINT_KEYS, "constraints")
    for key, v in constraints.items():
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                pass
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise ConfigError(f"must be a positive number, got {v!r}", f"constraints.{key}")
    constraints = {k: float(v) for k, v in constraints.items()}

    recipe = raw.get("recipe") or {}
    budget = raw.get("budget")
    _check_recipe_and_budget(recipe, budget)
    seeds = raw.get("seed_archs", list(SEED_ARCHS))
    if not isinstance(seeds, list) or any(s not in SEED_ARCHS for s in seeds):
        raise ConfigError(f"must be a list of known architectures: {', '.join(SEED_ARCHS)}", "seed_archs")
    name = raw.get("name", os.path.splitext(os.path.basename(source))[0])
    if not isinstance(name, str):
        raise ConfigError(f"must be a string, got {name!r}", "name")

    space = SearchSpace(
        name=name,
        source=source,
        globals=params,
        share=share,
        attention=attention,
        blocks=blocks,
        activation=activation,
        mult=mult,
        constraints=constraints,
        recipe=dict(recipe),
        budget=dict(budget) if budget else None,
        seed_archs=tuple(seeds),
        raw=raw,
    )
    _check_combinations(space)
    return space


def _parse_attention(raw: Any) -> tuple[Param, dict[str, BlockChoice]]:
    path = "layers.attention"
    if raw is None:
        raise ConfigError(f"is required; valid blocks: {', '.join(ATTENTION.names())}", path)
    if isinstance(raw, str):
        raw = [raw]
    if isinstance(raw, list):
        raw = {name: {} for name in raw} if all(isinstance(n, str) for n in raw) else raw
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(
            "must list blocks, or map each block to its option choices; "
            f"valid blocks: {', '.join(ATTENTION.names())}",
            path,
        )
    blocks: dict[str, BlockChoice] = {}
    for name, opt_raw in raw.items():
        block = ATTENTION.get(name, path)
        opt_raw = opt_raw or {}
        if not isinstance(opt_raw, Mapping):
            raise ConfigError("must map option names to choices", f"{path}.{name}")
        valid = [f.name for f in dataclasses.fields(block.Options)]
        if name == "mixture":
            opts = _parse_mixture(opt_raw, f"{path}.mixture")
        else:
            unknown = sorted(set(opt_raw) - set(valid))
            if unknown:
                raise ConfigError(
                    f"unknown option {unknown[0]!r} of {name}; valid options: {', '.join(valid) or '(none)'}",
                    f"{path}.{name}",
                )
            opts = {k: Param.parse(v, f"{path}.{name}.{k}") for k, v in opt_raw.items()}
            for k, p in opts.items():
                for v in p.values():
                    try:
                        block.Options.parse({k: v})
                    except ConfigError as err:
                        raise ConfigError(err.message, f"{path}.{name}.{k}") from None
        blocks[name] = BlockChoice(name, opts)
    names = list(blocks)
    return (Param("fixed", value=names[0]) if len(names) == 1 else Param("categorical", choices=tuple(names))), blocks


def _parse_mixture(raw: Mapping[str, Any], path: str) -> dict[str, Param]:
    _refuse_unknown(raw, ("components", "weights"), path)
    if "components" not in raw:
        raise ConfigError("is required: a list of component lists, e.g. [[mha, synth_random]]", f"{path}.components")
    comps = raw["components"]
    if isinstance(comps, list) and comps and all(isinstance(c, (str, Mapping)) for c in comps):
        comps = [comps]  # one fixed component list
    comp_param = Param.parse(comps, f"{path}.components")
    weights = raw.get("weights", "learned")
    if weights in ("learned", "search") or (isinstance(weights, list) and weights and not isinstance(weights[0], (list, str))):
        weights = [weights]
    weight_param = Param.parse(weights, f"{path}.weights")
    from nas.models.attention.mixture import MixtureOptions

    for comp in comp_param.values():
        for w in weight_param.values():
            wv = w if w in ("learned",) else ([1.0] * len(comp) if w == "search" else _thaw(w))
            try:
                MixtureOptions.parse({"components": _thaw(comp), "weights": wv})
            except ConfigError as err:
                raise err.at(path) from None
    return {"components": comp_param, "weights": weight_param}


def _check_recipe_and_budget(recipe: Any, budget: Any) -> None:
    from evaluators.base import Budget, TrainRecipe

    TrainRecipe.from_dict(recipe)
    if budget is not None:
        Budget.from_dict(budget)


def _product(params: Mapping[str, Param]) -> Iterator[dict[str, Any]]:
    keys = list(params)
    for combo in itertools.product(*(params[k].values() for k in keys)):
        yield dict(zip(keys, combo, strict=True))


def _check_combinations(space: SearchSpace) -> None:
    """Refuse a space in which some combination of choices cannot be built.

    Every combination of global sizes is tried with every block option and FFN
    choice on a one-layer model (ranges at both ends), so a sampled trial never
    fails for a reason the space could have caught.
    """
    sizes = {k: p for k, p in space.globals.items() if k not in ("n_layers",)}
    checked = 0
    for g in _product(sizes):
        for name, block in space.blocks.items():
            for opts in _product(block.options):
                if name == "mixture" and opts.get("weights") == "search":
                    opts = {**opts, "weights": [1.0] * len(opts["components"])}
                for act in space.activation.values():
                    for mult in space.mult.values():
                        checked += 1
                        if checked > _MAX_CHECKS:
                            return
                        raw_layer = {"attention": {"type": name, **_thaw(opts)}, "ffn": {"activation": act, "mult": mult}}
                        try:
                            ArchConfig.from_dict({**g, "layers": [raw_layer]})
                        except ConfigError as err:
                            raise _combination_error(space, err, g, name, opts, act, mult) from None


def _combination_error(
    space: SearchSpace, err: ConfigError, g: dict[str, Any], block: str, opts: dict[str, Any], act: str, mult: float
) -> ConfigError:
    """Point at the space's own YAML path and name the combination that fails."""
    inner = err.path
    if inner.startswith("layers.0.attention."):
        path = f"layers.attention.{block}.{inner[len('layers.0.attention.'):]}"
    elif inner.startswith("layers.0.ffn"):
        path = "layers.ffn" + inner[len("layers.0.ffn"):]
    elif inner.startswith("layers.0"):
        path = f"layers.attention.{block}"
    else:
        path = f"globals.{inner}" if inner else "globals"
    combo = [f"{k}={v}" for k, v in g.items() if space.globals[k].searched]
    combo += [f"attention={block}"] + [f"{k}={label(v)}" for k, v in opts.items()]
    combo += [f"activation={act}", f"mult={mult:g}"]
    return ConfigError(f"{err.message} (with {', '.join(combo)})", path)


def _refuse_unknown(raw: Mapping[str, Any], valid: Sequence[str], path: str) -> None:
    unknown = sorted(str(k) for k in set(raw) - set(valid))
    if unknown:
        where = f"{path}.{unknown[0]}" if path else unknown[0]
        raise ConfigError(f"unknown key; valid keys: {', '.join(valid)}", where)
