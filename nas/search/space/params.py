"""Parameters of a search space: one value, a choice, or a numeric range, and how Optuna draws it.

A YAML value is a *parameter*: a scalar is fixed, a list is a categorical
choice, and ``{low: L, high: H[, step: S][, log: true]}`` is a numeric range.
Choices that are not plain scalars (a list of mixture components) are offered
to Optuna by their ``label``, which is what an existing study has stored, so
labels must never change.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from nas.errors import ConfigError
from nas.validate import check_number, non_finite_path


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
    def parse(cls, raw: Any, path: str) -> Param:
        """A parameter from its YAML at ``path`` (named in errors)."""
        if isinstance(raw, Mapping) and ("low" in raw or "high" in raw):
            unknown = sorted(set(raw) - {"low", "high", "step", "log"})
            if unknown:
                raise ConfigError(f"unknown key {unknown[0]!r} in a range; valid: low, high, step, log", path)
            low, high = raw.get("low"), raw.get("high")
            step, log = raw.get("step"), raw.get("log", False)
            try:
                check_number(low, "low")
                check_number(high, "high")
                if step is not None:
                    check_number(step, "step", low=0, low_open=True)
            except ConfigError as err:
                raise err.at(path) from None
            if low > high:
                raise ConfigError(f"range low {low} is above high {high}", path)
            if not isinstance(log, bool):
                raise ConfigError(f"log must be true or false, got {log!r}", path)
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
            _refuse_non_finite(raw, path)
            return cls("categorical", choices=tuple(freeze(c) for c in raw))
        if isinstance(raw, Mapping):
            raise ConfigError("must be a value, a list of choices, or a range {low: .., high: ..}", path)
        _refuse_non_finite(raw, path)
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
            step = int(self.step or 1)
            return trial.suggest_int(name, int(self.low), int(self.high), step=step, log=self.log)
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


def label(choice: Any) -> str:
    """The string Optuna stores for a categorical choice."""
    if isinstance(choice, str):
        return choice
    if isinstance(choice, (list, tuple)):
        return "+".join(label(c) for c in choice)
    if isinstance(choice, Mapping):
        return json.dumps(thaw(choice), sort_keys=True)
    return json.dumps(choice)


def freeze(value: Any) -> Any:
    """Lists as tuples, so a choice is hashable and immutable inside a frozen Param."""
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The plain lists and dicts of ``freeze``d data, as configs and JSON expect."""
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    return value


def _refuse_non_finite(raw: Any, path: str) -> None:
    """A choice or a fixed value holding NaN or infinity (a space built in Python, not read from YAML)."""
    where = non_finite_path(raw, path)
    if where is not None:
        raise ConfigError("a non-finite number (nan or inf) is not a valid value", where)
