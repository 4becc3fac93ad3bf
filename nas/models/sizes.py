"""Sizes of one architecture: the same per-layer pattern, grown or shrunk by a multiplier.

``resize(arch, size)`` makes the member of an architecture's family with about
``size`` times its non-embedding parameters (``size`` below 1 shrinks it).  The rule
(docs/training.md, "Sizes of one architecture"):

* width and depth each grow by ``size ** (1/3)``, so parameters (about layers x
  d_model^2) grow by ``size`` and the shape keeps its aspect ratio, as model ladders
  grow width and depth together;
* the head width ``d_model / n_heads`` is kept: the width grows in whole heads,
  ``n_heads' = round(n_heads * size ** (1/3))`` (at least one), in multiples of every
  grouped-key/value group (a layer with ``kv_heads`` G keeps ``n_heads / G`` query
  heads per key/value head);
* depth ``L' = round(L * size ** (1/3))`` (at least one), encoder and decoder alike;
  new layer ``i`` takes the layer of the original at the same relative depth,
  ``floor((i + 1/2) * L / L')``: its attention block with its options, its FFN
  activation and width multiplier;
* **every kind of layer stays**: where ``L'`` would drop one (fewer layers than the
  pattern's distinct layers, or a relative depth that skips one), the depth is the
  smallest above ``L'`` that keeps every kind, and the width alone shrinks for the
  rest, ``n_heads' = round(n_heads * sqrt(size * L / L'))``, so the parameters still
  follow ``size``: a two-layer ``[A] [B]`` at size 1/8 stays two layers (``A``, ``B``),
  narrower, never one ``B``;
* everything global stays: context, vocabulary, positions, normalisation, tied
  embeddings, the task.

``size == 1`` gives the architecture itself (the same arch_id).  Parameters and
FLOPs of a resized architecture come from the same formulas as any other
(``nas.compute``); the multiplier is a target for the non-embedding parameters,
met up to the rounding of heads and layers.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from nas.errors import ConfigError
from nas.models.config import ArchConfig, LayerConfig, layer_summary
from nas.plural import plural
from nas.validate import check_number

#: the largest multiplier: 64x the parameters is 4x the width and depth
MAX_SIZE = 64.0


def _kv_groups(raw: Any, n_heads: int) -> list[int]:
    """Query heads per key/value head of every grouped block in an attention dict (mixtures included)."""
    groups = []
    if isinstance(raw, dict):
        if raw.get("kv_heads"):
            groups.append(n_heads // int(raw["kv_heads"]))
        for value in raw.values():
            groups += _kv_groups(value, n_heads)
    elif isinstance(raw, (list, tuple)):
        for value in raw:
            groups += _kv_groups(value, n_heads)
    return groups


def _regroup(raw: Any, old_heads: int, new_heads: int) -> Any:
    """The attention dict with every ``kv_heads`` set for ``new_heads`` query heads, groups kept."""
    if isinstance(raw, dict):
        out = {k: _regroup(v, old_heads, new_heads) for k, v in raw.items()}
        if raw.get("kv_heads"):
            out["kv_heads"] = new_heads // (old_heads // int(raw["kv_heads"]))
        return out
    if isinstance(raw, (list, tuple)):
        return [_regroup(v, old_heads, new_heads) for v in raw]
    return raw


def _relayer(
    layers: tuple[LayerConfig, ...], depth: int, old_heads: int, new_heads: int
) -> list[LayerConfig]:
    """``depth`` layers, each the original's at the same relative depth, regrouped for ``new_heads``."""
    out = []
    for i in _sources(len(layers), depth):
        raw = layers[i].to_dict()
        if new_heads != old_heads:
            raw["attention"] = _regroup(raw["attention"], old_heads, new_heads)
        out.append(LayerConfig.from_dict(raw))
    return out


def _sources(n: int, depth: int) -> list[int]:
    """The layer of ``n`` each of ``depth`` new layers takes (the same relative depth)."""
    return [min(n - 1, math.floor((i + 0.5) * n / depth)) for i in range(depth)]


def _keeping(layers: tuple[LayerConfig, ...], depth: int) -> int:
    """The smallest depth from ``depth`` up whose layers keep every distinct layer of ``layers`` (depth
    ``len(layers)`` and above keep them all: each original layer is some new layer's source)."""
    kinds = set(layers)
    while depth < len(layers) and {layers[i] for i in _sources(len(layers), depth)} != kinds:
        depth += 1
    return depth


def kinds(layers: tuple[LayerConfig, ...]) -> list[str]:
    """The distinct layers of a stack, as the summary writes them (first appearance first)."""
    return list(dict.fromkeys(layer_summary(layer) for layer in layers))


def dropped(arch: ArchConfig, out: ArchConfig) -> list[str]:
    """The layer kinds of ``arch`` that its resize ``out`` lacks (none under :func:`resize`'s rule).

    A grouped block is compared at ``out``'s heads: ``mdha(kv2)`` of 4 heads is ``mdha(kv1)`` of 2
    and ``mdha(kv5)`` of 10 (the same two query heads per key/value head), not a lost kind."""
    have = set(kinds(out.layers)) | set(kinds(out.encoder_layers))
    want = [*_relayer(arch.layers, len(arch.layers), arch.n_heads, out.n_heads)]
    want += _relayer(arch.encoder_layers, len(arch.encoder_layers), arch.n_heads, out.n_heads)
    return [k for k in kinds(tuple(want)) if k not in have]


def reached(arch: ArchConfig, out: ArchConfig) -> float:
    """The multiplier ``out`` (a resize of ``arch``) reaches: its non-embedding parameters over ``arch``'s."""
    from nas.models.cost import compute

    return compute(out).non_embedding_params / compute(arch).non_embedding_params


def missed(size: float, got: float) -> str | None:
    """A note when a resize's parameters are off its target by more than 1.5x (whole heads and layers:
    below one head and one layer, or a kv-head group, nothing smaller exists), else None."""
    if max(got / size, size / got) <= 1.5:
        return None
    return (
        f"size {size:g} is not reachable: the nearest member of this architecture's family has {got:.3g}x "
        "its non-embedding parameters (heads and layers are whole numbers)"
    )


def resize(arch: ArchConfig, size: float) -> ArchConfig:
    """``arch`` with about ``size`` times its non-embedding parameters, its per-layer pattern kept."""
    check_number(size, "size", low=0, low_open=True, high=MAX_SIZE)
    k = float(size) ** (1.0 / 3.0)
    d_head = arch.d_model // arch.n_heads
    step = math.lcm(1, *_kv_groups([layer.to_dict() for layer in (*arch.layers, *arch.encoder_layers)],
                                   arch.n_heads))  # fmt: skip
    n, n_enc = len(arch.layers), len(arch.encoder_layers)
    depth = _keeping(arch.layers, max(1, round(n * k)))
    enc_depth = _keeping(arch.encoder_layers, max(1, round(n_enc * k))) if n_enc else 0
    # the width follows the depth the pattern allows: parameters ~ layers x width^2 still grow by size
    kept = depth == max(1, round(n * k)) and (not n_enc or enc_depth == max(1, round(n_enc * k)))
    width = k if kept else math.sqrt(size * (n + n_enc) / (depth + enc_depth))
    heads = max(step, round(arch.n_heads * width / step) * step)
    changes: dict[str, Any] = {"d_model": heads * d_head, "n_heads": heads}
    changes["layers"] = tuple(_relayer(arch.layers, depth, arch.n_heads, heads))
    if arch.encoder_layers:
        changes["encoder_layers"] = tuple(_relayer(arch.encoder_layers, enc_depth, arch.n_heads, heads))
    try:
        return dataclasses.replace(arch, **changes)
    except ConfigError as err:
        raise ConfigError(
            f"{size:g} gives d_model {heads * d_head}, {plural(heads, 'head')}, {plural(depth, 'layer')}, "
            "which the architecture "
            f"refuses: {err}",
            "size",
        ) from None
