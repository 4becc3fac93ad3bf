"""How a spec field is declared: its default, help, short flag and check, in the field's metadata.

Every section of the spec (``recipe``, ``data``, ``search``, ``resources``)
declares its fields with :func:`field`; the flags (``nas.spec.flags``), the
checks on creation and the messages that name a field read that metadata, so a
field is declared in one place.  The checks here are the shared kinds.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from nas.errors import ConfigError
from nas.validate import check_number


def field(
    default: Any, help: str, *, alias: str | None = None, check: Any = None, metavar: str | None = None
) -> Any:
    """A spec field: its default, help, the short flag that is an alias of it, and its check."""
    meta = {"help": help, "alias": alias, "check": check, "metavar": metavar}
    return dataclasses.field(default=default, metadata=meta)


def integer(low: int, high: int | None = None) -> Any:
    return lambda value, name: check_number(value, name, integer=True, low=low, high=high)


def number(positive: bool = True, high: float | None = None) -> Any:
    return lambda value, name: check_number(value, name, low=0, low_open=positive, high=high)


def one_of(valid: tuple[str, ...]) -> Any:
    def check(value: Any, name: str) -> None:
        if value not in valid:
            raise ConfigError(f"{value!r} is not valid; valid: {', '.join(valid)}", name)

    check.valid = valid  # type: ignore[attr-defined]  # the flag offers these as argparse choices
    return check


def text(value: Any, name: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"must be a non-empty string, got {value!r}", name)


def evaluator_name(examples: str) -> Any:
    """An evaluator's name: a non-empty string (the registry checks the name itself, with torch loaded)."""

    def check(value: Any, name: str) -> None:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"must be an evaluator name such as {examples}, got {value!r}", name)

    return check


def fractions(value: Any, name: str) -> None:
    """Hurdle fractions: each strictly between 0 and 1, increasing, none twice."""
    if not isinstance(value, tuple) or any(
        isinstance(v, bool) or not isinstance(v, (int, float)) for v in value
    ):
        raise ConfigError(f"must be a list of fractions like [0.25, 0.5], got {value!r}", name)
    if any(not (math.isfinite(v) and 0.0 < v < 1.0) for v in value):
        raise ConfigError(f"each fraction must be between 0 and 1 (exclusive), got {list(value)}", name)
    if list(value) != sorted(set(value)):
        raise ConfigError(f"fractions must be increasing and distinct, got {list(value)}", name)


def bounded(
    low: float | None,
    high: float | None,
    *,
    integer: bool = False,
    low_open: bool = False,
    high_open: bool = False,
) -> Any:
    """A number in [low, high] (``low_open``/``high_open``: the bound itself excluded), whole if
    ``integer``."""
    return lambda value, name: check_number(
        value, name, integer=integer, low=low, high=high, low_open=low_open, high_open=high_open
    )


def choice(valid: tuple[str, ...]) -> Any:
    """One of ``valid``, said as "must be one of ..." (unlike :func:`one_of`, the flag offers no choices)."""

    def check(value: Any, name: str) -> None:
        if value not in valid:
            raise ConfigError(f"must be one of {', '.join(valid)}, got {value!r}", name)

    return check
