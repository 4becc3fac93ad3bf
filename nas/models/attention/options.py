"""Options of the blocks: the plain, frozen, validated data a block is built from.

``BlockOptions.parse`` turns a mapping from an architecture file into a block's
options; a block with options subclasses it with one typed field per option.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from nas.errors import ConfigError
from nas.models.dims import Dims
from nas.validate import check_number


@dataclasses.dataclass(frozen=True)
class FFNSpec:
    """Feed-forward choice of one layer: activation name and width multiplier (d_ff = mult * d_model)."""

    activation: str = "relu"
    mult: float = 4.0


@dataclasses.dataclass(frozen=True)
class BlockOptions:
    """Options of a block; subclasses add fields with defaults and override ``check``."""

    def check(self, dims: Dims, ffn: FFNSpec) -> None:
        """Raise ConfigError(message, field) if the options cannot work with these sizes."""

    def check_causal(self) -> None:
        """Raise ConfigError(message, field) if these options cannot run causally (an LM or decoder layer)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> BlockOptions:
        """Build from a plain mapping, refusing unknown keys and wrong types."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        hints = typing.get_type_hints(cls)
        unknown = sorted(set(raw) - set(fields))
        if unknown:
            valid = ", ".join(sorted(fields)) or "(none)"
            raise ConfigError(f"unknown option {unknown[0]!r}; valid options: {valid}", str(unknown[0]))
        values = {}
        for key, value in raw.items():
            values[key] = _coerce(value, hints[key], key)
        return cls(**values)


def _coerce(value: Any, hint: Any, key: str) -> Any:
    if hint is int:
        return check_number(value, key, integer=True)
    if hint is float:
        return float(check_number(value, key))
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"must be a string, got {value!r}", key)
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"must be true or false, got {value!r}", key)
        return value
    return value


def positive_int(value: int, key: str, minimum: int = 1) -> None:
    if value < minimum:
        raise ConfigError(f"must be an integer >= {minimum}, got {value}", key)
