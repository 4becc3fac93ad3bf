"""YAML search spaces -> validated data (a ``SearchSpace``, see ``nas.search.space.sampling``).

A space file is data only (read by ``nas.files.yamlsafe.read_yaml``).  Any value is a
*parameter* (``nas.search.space.params``): a scalar is fixed, a list is a
categorical choice, and ``{low: L, high: H[, step: S][, log: true]}`` is a
numeric range.  See ``docs/search_spaces.md`` for the format.  Each attention
block reads its own entry under ``layers.attention`` (``option_choices`` on
the block class), so a block with structured options (``mixture``) needs no
code here.  Loading refuses a space in which any combination of choices
cannot be built, before a single trial runs.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Mapping
from typing import Any

from nas.errors import ConfigError
from nas.files.paths import in_file
from nas.files.yamlsafe import read_yaml
from nas.models import ACTIVATIONS, ATTENTION
from nas.models.config import TASKS
from nas.program import prog_name
from nas.search.space.combinations import check_combinations as _check_combinations
from nas.search.space.combinations import chosen_options, product
from nas.search.space.params import Param, label
from nas.search.space.sampling import (
    DEFAULT_SEED_ARCHS,
    SEED_ARCHS,
    BlockChoice,
    LayerChoices,
    Placement,
    SearchSpace,
)
from nas.search.space.where import parse_where, refuse_duplicates, refuse_unknown
from nas.spec import SPEC_KEYS, Spec
from nas.validate import MAX_DIM, MAX_LAYERS, check_number, short_repr, yaml_number

__all__ = [
    "SEED_ARCHS",
    "BlockChoice",
    "LayerChoices",
    "Param",
    "SearchSpace",
    "label",
    "load_space",
    "parse_space",
]

GLOBAL_KEYS = ("d_model", "n_heads", "n_layers", "n_encoder_layers", "max_len", "pos_encoding",
               "rope_base", "norm", "tie_embeddings", "vocab_size")  # fmt: skip
TOP_KEYS = ("name", "description", "task", "globals", "layers", "encoder", "constraints", "seed_archs",
            *SPEC_KEYS)  # fmt: skip
LAYER_KEYS = ("share", "attention", "ffn", "at")
AT_KEYS = ("layers", "attention", "ffn")
CONSTRAINT_KEYS = ("max_params", "max_flops_per_token")


#: the spec's fields that hold a path (a corpus's name aside): read relative to the spec file
#: (nas.files.paths)
PATH_FIELDS = ("data.corpus", "data.tokenizer")


def load_space(path: str | os.PathLike[str]) -> SearchSpace:
    """Read and validate a search-space YAML file; errors name the file and the YAML path."""
    return load_spec(path, replaced=PATH_FIELDS)[1]  # the space alone: its data is not read


def load_spec(path: str | os.PathLike[str], replaced: Collection[str] = ()) -> tuple[Spec, SearchSpace]:
    """The experiment spec in a space file and its validated space; errors name the file and the field.

    The data's paths are made absolute relative to the file's directory (:func:`nas.files.paths.in_file`),
    but for the fields in ``replaced`` (``data.corpus``): the command line replaces those, so the
    file's values are never read.
    """
    raw = read_yaml(path, "search space")
    spec, space = spec_of(raw, str(path))
    try:
        _refuse_in_files(space)
    except ConfigError as err:
        raise err.in_file(str(path)) from None
    # `data: books/` names the field `data`, as the file wrote it
    shown = {"data.corpus": "data"} if isinstance(raw.get("data"), str) else {}
    paths = {}
    for name in PATH_FIELDS:
        if name not in replaced:
            key = name.removeprefix("data.")
            paths[key] = in_file(getattr(spec.data, key), path, shown.get(name, name))
    return spec.replace(data=paths), space


def _refuse_in_files(space: SearchSpace) -> None:
    """What a space file may no longer say, though a study that recorded it still continues (its spec is
    read by :func:`spec_of`, not here): a value that changes no candidate, a seed no candidate can be."""
    g = space.globals
    if "vocab_size" in g:  # every candidate takes the corpus's vocabulary (ArchConfig.with_vocab)
        raise ConfigError(
            "has no effect: every candidate's vocabulary is the corpus's (its tokenizer's, or 256 bytes); "
            "leave it out",
            "globals.vocab_size",
        )
    positions = g["pos_encoding"].values() if "pos_encoding" in g else ["learned"]
    if "rope_base" in g and "rope" not in positions:
        # as in an architecture file: a value (here a gene) that changes no candidate is a mistake
        raise ConfigError(
            f"has no effect: no candidate has rotary positions (pos_encoding offers "
            f"{', '.join(map(str, positions))}); add rope to globals.pos_encoding, or leave rope_base out",
            "globals.rope_base",
        )
    if "seed_archs" in space.raw:  # named by the user: one the space cannot hold was dropped without a word
        _check_seeds(space)


def spec_of(raw: Any, source: str) -> tuple[Spec, SearchSpace]:
    """The spec and validated space in a spec file's plain data (``raw``), read from ``source``."""
    try:
        space = parse_space(raw, source=source)
    except ConfigError as err:
        raise err.in_file(source) from None
    return Spec.from_dict(raw, source), space


def parse_space(raw: Any, source: str = "<space>") -> SearchSpace:
    """Validate a space's plain data (as read from YAML); errors name the YAML path."""
    if not isinstance(raw, Mapping):
        raise ConfigError("a search space must be a mapping with 'globals' and 'layers'")
    if "arch" in raw or ("d_model" in raw and isinstance(raw.get("layers"), list)):
        raise ConfigError(
            f"is an architecture file, not a search space; train it with `{prog_name()} train --arch "
            f"{source}`, or give --space a search space (a shipped one's name such as default)"
        )
    refuse_unknown(raw, TOP_KEYS, "")
    task = raw.get("task", "lm")
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}; valid: {', '.join(TASKS)}", "task")
    params = _parse_globals(raw.get("globals"), task)
    if raw.get("layers") is None:
        raise ConfigError("is required: a mapping with attention and ffn choices", "layers")
    layers = _parse_layer_choices(raw["layers"], "layers")
    encoder = None
    if task == "seq2seq":  # the encoder offers what `encoder:` lists, else what the decoder's layers do
        where = "encoder" if "encoder" in raw else "layers"
        encoder = _parse_layer_choices(raw[where], where)
        if where == "layers":  # the decoder's menu, not its `at` entries: they place the decoder's layers
            encoder = dataclasses.replace(encoder, at=())
        _refuse_causal_only(encoder, where)
    elif "encoder" in raw:
        raise ConfigError("only a task: seq2seq space has an encoder", "encoder")
    constraints = _parse_constraints(_section(raw, "constraints") or {})
    recipe = _section(raw, "recipe") or {}
    budget = _section(raw, "budget")
    for key in ("search", "resources"):
        _section(raw, key)
    _check_recipe_and_budget(recipe, budget)
    seeds = raw.get("seed_archs", list(DEFAULT_SEED_ARCHS))
    if not isinstance(seeds, list) or any(s not in SEED_ARCHS for s in seeds):
        raise ConfigError(f"must be a list of known architectures: {', '.join(SEED_ARCHS)}", "seed_archs")
    refuse_duplicates(seeds, "seed_archs")
    name = raw.get("name", os.path.splitext(os.path.basename(source))[0])
    if not isinstance(name, str):
        raise ConfigError(f"must be a string, got {name!r}", "name")

    space = SearchSpace(
        name=name,
        source=source,
        globals=params,
        share=layers.share,
        attention=layers.attention,
        blocks=layers.blocks,
        activation=layers.activation,
        mult=layers.mult,
        constraints=constraints,
        recipe=dict(recipe),
        budget=dict(budget) if budget else None,
        seed_archs=tuple(seeds),
        raw=raw,
        task=task,
        encoder=encoder,
        at=layers.at,
    )
    _check_placements(space.layer_choices, space.depths("n_layers"), "layers")
    if encoder is not None and "encoder" in raw:
        _check_placements(encoder, space.depths("n_encoder_layers"), "encoder")
    _check_combinations(space, space.layer_choices, "layers")
    if encoder is not None and "encoder" in raw:
        _check_combinations(space, encoder, "encoder")
    return space


def _check_seeds(space: SearchSpace) -> None:
    """Refuse a seed architecture ``seed_archs`` names that no candidate of the space can be (the
    default seeds are queued where they fit, silently)."""
    from nas.search.space.sampling import SEED_GLOBALS, seed_arch

    for name in space.seed_archs:
        if space.seed_params(name) is None:
            arch = seed_arch(name)
            layer = arch.layers[0]
            parts = [f"{key} {getattr(arch, key)}" for key in SEED_GLOBALS]
            parts += [f"{layer.attention.text(short=True)} with {layer.ffn.activation} in every layer"]
            raise ConfigError(
                f"{name} ({', '.join(parts)}) is no candidate of this space, so it would never be queued; "
                "offer its components (in every layer's menu, at every depth), or leave it out",
                "seed_archs",
            )


def _parse_layer_choices(l_raw: Any, path: str) -> LayerChoices:
    """One stack's choices (``layers`` or ``encoder``): share, attention blocks, FFN."""
    if not isinstance(l_raw, Mapping):
        raise ConfigError("must be a mapping with attention and ffn choices", path)
    refuse_unknown(l_raw, LAYER_KEYS, path)
    share = l_raw.get("share", False)
    if not isinstance(share, bool):
        raise ConfigError(
            f"must be true (one choice for every layer) or false, got {share!r}", f"{path}.share"
        )
    attention, blocks = _parse_attention(l_raw.get("attention"), f"{path}.attention")
    activation, mult = _parse_ffn(l_raw.get("ffn", {}), f"{path}.ffn")
    at = _parse_at(l_raw.get("at"), f"{path}.at", share)
    return LayerChoices(share, attention, blocks, activation, mult, at)


def _parse_at(raw: Any, path: str, share: bool) -> tuple[Placement, ...]:
    """``at``: a list of {layers: WHERE, attention: ..., ffn: ...}, each part parsed as the stack's own."""
    if raw is None:
        return ()
    if share:
        raise ConfigError(
            "gives positions menus of their own; share: true gives every layer one choice "
            "(use one or the other)",
            path,
        )
    if not isinstance(raw, list) or not raw:
        raise ConfigError("must be a list of {layers: WHERE, attention: ..., ffn: ...} entries", path)
    out = []
    for j, entry in enumerate(raw):
        where = f"{path}.{j}"
        if not isinstance(entry, Mapping):
            raise ConfigError("must be a mapping with layers and attention and/or ffn", where)
        refuse_unknown(entry, AT_KEYS, where)
        if "layers" not in entry:
            raise ConfigError(
                "is required: an index (-1: the last), a list of indices, or {from: .., to: ..} "
                "(indices, or shares of the depth such as '50%')",
                f"{where}.layers",
            )
        if "attention" not in entry and "ffn" not in entry:
            raise ConfigError("gives nothing: name attention and/or ffn choices for these layers", where)
        positions, first, last = parse_where(entry["layers"], f"{where}.layers")
        attention = blocks = activation = mult = None
        if "attention" in entry:
            attention, blocks = _parse_attention(entry["attention"], f"{where}.attention")
        if "ffn" in entry:
            activation, mult = _parse_ffn(entry["ffn"], f"{where}.ffn")
        out.append(Placement(j, positions, first, last, attention, blocks, activation, mult))
    return tuple(out)


def _check_placements(choices: LayerChoices, depths: list[int], stem: str) -> None:
    """Refuse an ``at`` entry that covers no layer at any depth the space samples (a typo'd index)."""
    for p in choices.at:
        if not any(p.covers(i, n) for n in depths for i in range(n)):
            raise ConfigError(
                f"names no layer of a stack of {_depths_text(depths)} "
                f"{'layer' if depths == [1] else 'layers'} "
                "(indices count from 0; -1 is the last)",
                f"{stem}.at.{p.index}.layers",
            )


def _depths_text(depths: list[int]) -> str:
    return str(depths[0]) if len(depths) == 1 else f"{depths[0]} to {depths[-1]}"


def _refuse_causal_only(choices: LayerChoices, path: str) -> None:
    """An encoder attends over the whole source: a block that only runs causally cannot be offered, on the
    stack's menu or on an ``at`` entry's."""
    menus = [(name, f"{path}.attention.{name}") for name in choices.blocks]
    menus += [
        (name, f"{path}.at.{p.index}.attention.{name}") for p in choices.at for name in (p.blocks or {})
    ]
    for name, where in menus:
        if not ATTENTION.get(name).bidirectional:
            valid = ", ".join(n for n in ATTENTION.names() if ATTENTION.get(n).bidirectional)
            hint = (
                ""
                if path == "encoder"
                else (" (the encoder offers the layers' blocks unless `encoder:` lists its own)")
            )
            raise ConfigError(
                f"{name} only runs causally and cannot be an encoder layer{hint}; "
                f"valid in the encoder: {valid}",
                where,
            )


def _parse_globals(g_raw: Any, task: str) -> dict[str, Param]:
    if not isinstance(g_raw, Mapping):
        raise ConfigError("is required: a mapping of d_model, n_heads, n_layers, max_len, ...", "globals")
    refuse_unknown(g_raw, GLOBAL_KEYS, "globals")
    required = ["d_model", "n_heads", "n_layers", "max_len"]
    if task == "seq2seq":
        required.append("n_encoder_layers")
    for key in required:
        if key not in g_raw:
            raise ConfigError(
                "is required" + (" (the encoder's depth)" if key == "n_encoder_layers" else ""),
                f"globals.{key}",
            )
    if task != "seq2seq" and "n_encoder_layers" in g_raw:
        raise ConfigError("only a task: seq2seq space has an encoder", "globals.n_encoder_layers")
    params = {key: Param.parse(g_raw[key], f"globals.{key}") for key in GLOBAL_KEYS if key in g_raw}
    depths = ("n_layers", "n_encoder_layers")
    for key in ("d_model", "n_heads", "n_layers", "n_encoder_layers", "max_len", "vocab_size"):
        if key in params:
            p = params[key]
            for v in p.values():  # a range's both ends: every value between is as valid
                check_number(
                    v, f"globals.{key}", integer=True, low=1, high=MAX_LAYERS if key in depths else MAX_DIM
                )
            if p.kind == "float":
                raise ConfigError("must be an integer range (integer low and high)", f"globals.{key}")
    return params


def _parse_ffn(ffn_raw: Any, path: str) -> tuple[Param, Param]:
    if not isinstance(ffn_raw, Mapping):
        raise ConfigError("must be a mapping with activation and mult", path)
    refuse_unknown(ffn_raw, ("activation", "mult"), path)
    activation = Param.parse(ffn_raw.get("activation", "relu"), f"{path}.activation")
    for v in activation.values():
        ACTIVATIONS.get(v, f"{path}.activation")
    mult = Param.parse(ffn_raw.get("mult", 4), f"{path}.mult")
    for v in mult.values():
        check_number(v, f"{path}.mult", low=0, low_open=True)
    return activation, mult


def _parse_constraints(constraints: Any) -> dict[str, float]:
    if not isinstance(constraints, Mapping):
        raise ConfigError("must be a mapping of max_params and/or max_flops_per_token", "constraints")
    refuse_unknown(constraints, CONSTRAINT_KEYS, "constraints")
    out = {}
    for key, v in constraints.items():
        out[key] = float(check_number(yaml_number(v), f"constraints.{key}", low=0, low_open=True))
    return out


def _parse_attention(raw: Any, path: str) -> tuple[Param, dict[str, BlockChoice]]:
    if raw is None:
        raise ConfigError(f"is required; valid blocks: {', '.join(ATTENTION.names())}", path)
    if isinstance(raw, str):
        raw = [raw]
    if isinstance(raw, list):
        if all(isinstance(n, str) for n in raw):
            refuse_duplicates(raw, path)
            raw = {name: {} for name in raw}
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
        where = f"{path}.{name}"
        if not isinstance(opt_raw, Mapping):
            raise ConfigError("must map option names to choices", where)
        try:
            choices = block.option_choices(opt_raw)
        except ConfigError as err:
            raise err.at(where) from None
        opts = {k: Param.parse(v, f"{where}.{k}") for k, v in choices.items()}
        for combo in product(opts):
            try:
                block.Options.parse(chosen_options(block, combo))
            except ConfigError as err:
                raise err.at(where) from None
        blocks[name] = BlockChoice(name, opts)
    names = list(blocks)
    if len(names) == 1:
        return Param("fixed", value=names[0]), blocks
    return Param("categorical", choices=tuple(names)), blocks


def _check_recipe_and_budget(recipe: Any, budget: Any) -> None:
    """The recipe and budget a space may carry, checked as ``train`` would check them."""
    from nas.spec.training import Budget, TrainRecipe

    TrainRecipe.from_dict(recipe)
    if budget is not None:
        Budget.from_dict(budget)


def _section(raw: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    """The mapping under ``key``, None when absent; ``recipe:`` left empty is refused, as in an
    architecture file."""
    if key not in raw:
        return None
    if not isinstance(raw[key], Mapping):
        raise ConfigError(f"must be a mapping, got {short_repr(raw[key])}", key)
    return raw[key]
