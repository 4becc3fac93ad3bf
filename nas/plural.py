"""Counts as a reader says them: ``1 step``, ``2 steps``, ``1 head``, ``0 runs``."""

from __future__ import annotations


def plural(n: float, noun: str, many: str | None = None, fmt: str = "") -> str:
    """``n`` then ``noun``, or ``many`` (``noun + "s"`` unless given) when ``n`` is not exactly one;
    ``fmt`` formats the number (``","``: ``1,200 steps``)."""
    return f"{n:{fmt}} {noun if n == 1 else (many or noun + 's')}"
