"""Parametrizations: how initialisation, learning rates and multipliers follow a model's shape.

``standard`` is the model as built (GPT-2's init, one learning rate).  ``completep`` is
muP in width (Yang et al. 2022, "Tensor Programs V") with CompleteP's depth rule,
alpha = 1 (Dey et al. 2025, "Don't be lazy"), relative to a base shape (a width
``base_width`` and a depth ``base_depth``): with m = d_model / base_width and
r = layers / base_depth,

* every residual branch is multiplied by 1/r (``Layer.branch_mult``);
* the logits are multiplied by 1/m (``TransformerLM.logit_mult``);
* each parameter follows its **kind**, which the module that owns it declares
  (``param_kinds``, a class attribute mapping names, fnmatch patterns relative to the
  module, to a kind; part of the block contract):

  - ``hidden`` (both dimensions grow with the width): init std x m^-1/2, AdamW lr x 1/m,
    weight decay x m (lr x decay kept);
  - ``vector`` (one growing dimension, or none: biases, norm gains, filters, gates'
    small projections out of a fixed width, mixing logits): unchanged;
  - ``embedding`` (tokens, position tables): unchanged;
  - ``readout`` (width into a fixed size, like the logits): its output x 1/m.  The model
    applies it to its own head (``logit_mult``: tied or not); a readout-like parameter
    inside a block has it folded into the parameter, init x 1/m, lr x 1/m, decay x m,
    which AdamW makes equivalent (its update does not depend on the gradient's scale);

* Adam's epsilon x 1/(m r) (CompleteP's rule, every group);
* GPT-2's residual-output init 0.02/sqrt(2 L) is taken at the base depth (the branch
  multiplier does the depth scaling).

At the base shape every multiplier is exactly 1 and nothing is touched, so a ``completep``
run there is the ``standard`` run, bit for bit.  Why each block's kinds are what they are:
docs/parametrization.md.
"""

from __future__ import annotations

import dataclasses
import math
from fnmatch import fnmatchcase
from typing import Any

import torch
from torch import nn

from nas.errors import ConfigError

HIDDEN, VECTOR, EMBEDDING, READOUT = "hidden", "vector", "embedding", "readout"
KINDS = (HIDDEN, VECTOR, EMBEDDING, READOUT)

#: torch's own modules, whose parameters mean the same wherever they are (nn.Linear does not: its owner says)
NATIVE: dict[type, dict[str, str]] = {
    nn.LayerNorm: {"weight": VECTOR, "bias": VECTOR},
    nn.Embedding: {"weight": EMBEDDING},
}


class UndeclaredParameter(ValueError):
    """A parameter whose kind no module declares (or a declaration of an unknown kind)."""


def _declared(module: nn.Module) -> dict[str, str] | None:
    """The kinds ``module``'s class declares, its bases' first (a subclass adds to or overrides them)."""
    merged: dict[str, str] = {}
    found = False
    for cls in reversed(type(module).__mro__):
        own = cls.__dict__.get("param_kinds")
        if own is not None:
            merged.update(own)
            found = True
    if found:
        return merged
    return NATIVE.get(type(module))


def parameter_kinds(model: nn.Module) -> dict[str, str]:
    """Every parameter's kind, by its name in ``model``; raises :class:`UndeclaredParameter` naming the
    first parameter no module declares.

    The deepest declaring module decides (a block's FFN or norm declares its own, the block what
    is left); a parameter shared by two names (tied embeddings) is declared once.
    """
    named = dict(model.named_modules())
    kinds: dict[int, str] = {}
    for prefix in sorted(named, key=lambda n: -(n.count(".") + (n != ""))):
        decl = _declared(named[prefix])
        if not decl:
            continue
        for rel, p in named[prefix].named_parameters():
            if id(p) in kinds:
                continue
            kind = next((k for pattern, k in decl.items() if fnmatchcase(rel, pattern)), None)
            if kind is None:
                continue
            if kind not in KINDS:
                owner = type(named[prefix]).__name__
                valid = ", ".join(KINDS)
                raise UndeclaredParameter(f"{owner} declares {rel!r} as {kind!r}; valid kinds: {valid}")
            kinds[id(p)] = kind
    out = {}
    for name, p in model.named_parameters():
        if id(p) not in kinds:
            raise UndeclaredParameter(
                f"parameter {name!r} ({_owner(model, name)}) has no declared kind; its block must name it in "
                f"param_kinds as one of {', '.join(KINDS)} (docs/parametrization.md)"
            )
        out[name] = kinds[id(p)]
    return out


def _owner(model: nn.Module, name: str) -> str:
    """The class of the deepest module above ``name`` that declares kinds, or of its direct parent."""
    parts = name.split(".")[:-1]
    owner = type(model.get_submodule(".".join(parts))).__name__ if parts else type(model).__name__
    for i in range(len(parts), 0, -1):
        mod = model.get_submodule(".".join(parts[:i]))
        if _declared(mod) is not None:
            return type(mod).__name__
    return owner


@dataclasses.dataclass(frozen=True)
class Shape:
    """The multipliers of a model against its base shape: ``width`` m and ``depth`` r (1 and 1: none)."""

    width: float = 1.0
    depth: float = 1.0

    @property
    def is_base(self) -> bool:
        return self.width == 1.0 and self.depth == 1.0


def base_shape(arch: Any) -> tuple[int, int]:
    """(d_model, layers) of ``arch``: what ``recipe.base_width``/``base_depth`` default to."""
    return int(arch.d_model), len(arch.layers)


def with_base(recipe: Any, arch: Any) -> Any:
    """``recipe`` with its base shape filled in from ``arch`` (the architecture at size 1) where
    completep leaves it unset; standard, or a base already stated, as it is."""
    if recipe.parametrization != "completep":
        return recipe
    width, depth = base_shape(arch)
    return dataclasses.replace(
        recipe,
        base_width=width if recipe.base_width is None else recipe.base_width,
        base_depth=depth if recipe.base_depth is None else recipe.base_depth,
    )


def shape_of(arch: Any, recipe: Any) -> Shape:
    """The multipliers ``recipe`` gives ``arch`` (standard: none; completep without a base: its own)."""
    if recipe is None or getattr(recipe, "parametrization", "standard") != "completep":
        return Shape()
    if arch.is_seq2seq:
        raise ConfigError(
            "completep is for decoder-only models (the encoder-decoder has two depths and cross-attention, "
            "with no rule here yet); use --recipe.parametrization standard",
            "recipe.parametrization",
        )
    width, depth = base_shape(arch)
    based = with_base(recipe, arch)
    return Shape(width / based.base_width, depth / based.base_depth)


def parametrization_record(arch: Any, recipe: Any) -> dict[str, Any]:
    """What a run's result records: the parametrization, and under completep its base shape and the
    multipliers ``arch`` gets against it."""
    name = getattr(recipe, "parametrization", "standard")
    if name != "completep":
        return {"name": name}
    shape, based = shape_of(arch, recipe), with_base(recipe, arch)
    return {
        "name": name,
        "base_width": based.base_width,
        "base_depth": based.base_depth,
        "width_mult": shape.width,
        "depth_mult": shape.depth,
    }


def set_multipliers(model: nn.Module, shape: Shape) -> None:
    """The forward multipliers of ``shape``: 1/r on every residual branch, 1/m on the logits.  Kept on
    the model (``model.shape``); a checkpoint's recipe restores them (nas.files.checkpoint)."""
    model.shape = shape  # type: ignore[assignment]
    if shape.is_base:
        return
    for layer in getattr(model, "layers", ()):
        layer.branch_mult = 1.0 / shape.depth
    model.logit_mult = 1.0 / shape.width  # type: ignore[assignment]


@torch.no_grad()
def apply(model: nn.Module, shape: Shape) -> None:
    """Rescale ``model``'s fresh standard initialisation to ``shape`` and set its multipliers.

    The draws are standard's (same RNG, same order), scaled in place: hidden x m^-1/2, a block's readout
    x 1/m, residual output projections by sqrt(r) (GPT-2's 1/sqrt(2 L) at the base depth).  Nothing
    changes at the base shape.
    """
    kinds = parameter_kinds(model)  # also the check that every parameter is declared
    set_multipliers(model, shape)
    if shape.is_base:
        return
    head = {id(p) for p in _head_params(model)}
    params = dict(model.named_parameters())
    for name, kind in kinds.items():
        p = params[name]
        if kind == HIDDEN:
            p.mul_(shape.width**-0.5)
        elif kind == READOUT and id(p) not in head:
            p.mul_(1.0 / shape.width)
    for module in model.modules():
        if isinstance(module, nn.Linear) and getattr(module, "residual_out", False):
            module.weight.mul_(math.sqrt(shape.depth))


def _head_params(model: nn.Module) -> list[nn.Parameter]:
    head = getattr(model, "lm_head", None)
    return [head.weight] if isinstance(head, nn.Linear) else []


def optimizer_groups(
    model: nn.Module, decayed: set[int], weight_decay: float, eps: float = 1e-8
) -> list[dict[str, Any]]:
    """AdamW's parameter groups under the model's ``shape``: ``lr_scale`` (the schedule's lr times it),
    ``weight_decay`` (on ``decayed``, ids of parameters) and ``eps`` per group.  One group per distinct
    setting, parameters in the model's order; standard (or the base shape) gives the usual two."""
    shape: Shape = getattr(model, "shape", None) or Shape()
    params = [p for p in model.parameters() if p.requires_grad]
    if shape.is_base:
        scale_of = {id(p): 1.0 for p in params}
    else:
        kinds = parameter_kinds(model)
        named = dict(model.named_parameters())
        head = {id(p) for p in _head_params(model)}
        scale_of = {}
        for name, kind in kinds.items():
            p = named[name]
            folded = kind == READOUT and id(p) not in head
            scale_of[id(p)] = 1.0 / shape.width if kind == HIDDEN or folded else 1.0
    group_eps = eps / (shape.width * shape.depth)
    groups: dict[tuple[float, float], dict[str, Any]] = {}
    for decay_it in (True, False):  # standard's order: the decayed group first
        for p in params:
            if (id(p) in decayed) != decay_it:
                continue
            lr_scale = scale_of[id(p)]
            wd = weight_decay / lr_scale if decay_it else 0.0  # lr x decay kept (1.0 x wd is wd exactly)
            key = (lr_scale, wd)
            if key not in groups:
                groups[key] = {"params": [], "weight_decay": wd, "lr_scale": lr_scale, "eps": group_eps}
            groups[key]["params"].append(p)
    return list(groups.values())
