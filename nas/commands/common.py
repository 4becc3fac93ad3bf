"""Flag types and helpers shared by several commands (the spec's own flags: ``nas.spec.flags``)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from nas.validate import finite_or_none


def data_or_default(data: str | None, task: str) -> str | None:
    """``--data`` as given, or the default corpus of ``task``: None (Shakespeare) for an LM,
    the built-in ``shakespeare-reversed`` pairs for seq2seq."""
    if data is not None or task != "seq2seq":
        return data
    from nas.data import DEFAULT_PARALLEL

    return DEFAULT_PARALLEL


def non_empty(text: str) -> str:
    """A flag's text, refused when empty: an empty value would otherwise read as "not given" (the default)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give a value, or leave the flag out for the default")
    return text


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def in_range(low: float, high: float) -> Any:
    """argparse's ``type=`` for a number in (``low``, ``high``]; a mistake quotes the text as typed."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (math.isfinite(value) and low < value <= high):
            raise argparse.ArgumentTypeError(f"must be a number in ({low:g}, {high:g}], got {text!r}")
        return value

    parse.__name__ = "number"
    return parse


def jsonable(value: Any) -> Any:
    """``value`` with non-finite floats as None and keys as strings, so ``json.dumps`` writes valid JSON."""
    return finite_or_none(value, str)
