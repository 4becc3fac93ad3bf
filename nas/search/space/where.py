"""Where a ``layers.at`` entry applies: its positions, parsed and resolved at a depth.  Torch-free, so the
read-side commands (``best --by-layer``) can tell a position's own menu from the stack's without loading
the block registry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nas.errors import ConfigError
from nas.validate import MAX_LAYERS, check_number, short_repr

Position = int | str  # a layer index (negative: from the end) or a share of the depth, "50%"


def index_of(pos: Position, n: int) -> float:
    """Where ``pos`` lies in a stack of ``n`` layers: an index, or the cut P/100 x n of a share."""
    if isinstance(pos, str):
        return float(pos[:-1]) / 100.0 * n
    return pos if pos >= 0 else n + pos


def covers(positions: Sequence[Position], first: Position, last: Position, i: int, n: int) -> bool:
    """Whether layer ``i`` of ``n`` is one of ``positions`` or, without them, in ``first`` .. ``last`` (both
    included when they are indices; a share ``"P%"`` cuts the stack at P/100 x n: ``first: "50%"`` is the
    top half, ``last: "50%"`` the layers below the cut)."""
    if positions:
        return any(index_of(p, n) == i for p in positions)
    end = index_of(last, n)
    below = i < end if isinstance(last, str) else i <= end
    return index_of(first, n) <= i and below


def refuse_unknown(raw: Mapping[str, Any], valid: Sequence[str], path: str) -> None:
    """A key that is not one of ``valid`` is a typo, refused naming it."""
    unknown = sorted(str(k) for k in set(raw) - set(valid))
    if unknown:
        where = f"{path}.{unknown[0]}" if path else unknown[0]
        raise ConfigError(f"unknown key; valid keys: {', '.join(valid)}", where)


def refuse_duplicates(names: Sequence[Any], path: str) -> None:
    """A list of names is a set: a name given twice is a typo (numbers: ``Param.parse``)."""
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise ConfigError(f"lists {twice!r} twice", path)


def parse_where(raw: Any, path: str) -> tuple[tuple[Position, ...], Position, Position]:
    """(positions, first, last) of an ``at`` entry's ``layers``."""
    if isinstance(raw, Mapping):
        refuse_unknown(raw, ("from", "to"), path)
        first = _position(raw.get("from", 0), f"{path}.from")
        last = _position(raw.get("to", -1), f"{path}.to")
        return (), first, last
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise ConfigError("an empty list names no layer", path)
    positions = tuple(_position(p, path, share=False) for p in items)
    refuse_duplicates(list(positions), path)
    return positions, 0, -1


def _position(raw: Any, path: str, share: bool = True) -> Position:
    """A layer index (negative: from the end) or, in a range, a share of the depth ``"P%"``."""
    if isinstance(raw, str) and share and raw.endswith("%"):
        try:
            pct = float(raw[:-1])
        except ValueError:
            pct = -1.0
        if 0 <= pct <= 100:
            return raw
        raise ConfigError(f"must be a share between 0% and 100%, got {raw!r}", path)
    if isinstance(raw, bool) or not isinstance(raw, int):
        what = "an index (-1: the last layer)" + (" or a share of the depth such as '50%'" if share else "")
        raise ConfigError(f"must be {what}, got {short_repr(raw)}", path)
    check_number(raw, path, integer=True, low=-MAX_LAYERS, high=MAX_LAYERS - 1)
    return raw
