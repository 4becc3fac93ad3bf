"""Flags shared by several commands."""

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


def positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


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


def add_budget_args(parser: argparse.ArgumentParser) -> None:
    """--steps / --tokens / --budget-flops / --seconds, at most one; see ``budget_from_args``."""
    group = parser.add_argument_group("training budget (at most one)").add_mutually_exclusive_group()
    group.add_argument("--steps", type=positive_int, help="optimizer steps")
    group.add_argument("--tokens", type=positive_number, help="training tokens (e.g. 2e6)")
    group.add_argument(
        "--budget-flops", type=positive_number, help="training FLOPs (e.g. 1e13); bigger models see fewer tokens"
    )
    group.add_argument("--seconds", type=positive_number, help="wall-clock seconds of training")


def budget_from_args(args: argparse.Namespace) -> dict[str, float] | None:
    """The budget the user gave as ``{kind: value}``, or None when no budget flag was given."""
    for kind, attr in (("steps", "steps"), ("tokens", "tokens"), ("flops", "budget_flops"), ("seconds", "seconds")):
        value = getattr(args, attr, None)
        if value is not None:
            return {kind: value}
    return None


def add_device_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="where to train (auto: CUDA if present)"
    )


def jsonable(value: Any) -> Any:
    """``value`` with non-finite floats as None and keys as strings, so ``json.dumps`` writes valid JSON."""
    return finite_or_none(value, str)
